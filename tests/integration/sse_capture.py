#!/usr/bin/python3
"""A capture server for agents' streamed requests: it records what a client sends (method, path, headers,
body) and answers each route with a plan — a status, headers, then a schedule of writes and waits — so that
a test can see what a real client does while it waits (docs/clients-waiting.md): how many POSTs it sends,
whether it takes a given keepalive as activity, how it reads an error inside a stream.

A plan maps "METHOD /path" (the query left out; "*" for any method) to a list of answers: the Nth request
to that route gets the Nth answer, the last one repeated. An answer is a dict:
  {"status": 200, "headers": {...}, "json": {...}}          a plain JSON answer
  {"status": 200, "headers": {...}, "steps": [step, ...]}   a streamed answer (chunked, text/event-stream)
A step is one of:
  {"send": "text"}                       written as one chunk ("{n}" is the request's number on its route)
  {"sleep": S}                           a pause
  {"every": S, "for": T, "send": "text"} the text every S seconds for T seconds (the first after S)
  {"close": true}                        the connection closed without the chunked end (a cut stream)
Without a plan entry a route gets 404 with a JSON error.

In a test: srv = Capture(plan).start(); ... srv.requests("POST", "/v1/responses"); srv.stop().
From a shell: sse_capture.py --plan plan.json --port-file F --log requests.jsonl (one line per request,
written when its body is read, with "t" seconds since the start; a line {"end": t, "disconnected": T, ...}
follows when the client closed the connection before the answer ended, noticed at T)."""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Capture:
    def __init__(self, plan, host="127.0.0.1", port=0, log=None):
        self.plan = plan
        self.log = log
        self.lock = threading.Lock()
        self.seen = []  # one dict per request, in arrival order
        self.counts = {}  # route -> requests so far
        self.t0 = time.monotonic()
        self.server = ThreadingHTTPServer((host, port), self.handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def requests(self, method=None, path=None):
        with self.lock:
            return [r for r in self.seen if (method is None or r["method"] == method)
                    and (path is None or r["path"] == path)]

    def record(self, entry):
        with self.lock:
            self.seen.append(entry)
            if self.log:
                with open(self.log, "a") as f:
                    f.write(json.dumps(entry) + "\n")

    def disconnected(self, entry):
        """the client closed the connection before the answer ended (noticed at the next write)"""
        with self.lock:
            entry["disconnected"] = round(time.monotonic() - self.t0, 3)
            if self.log:
                with open(self.log, "a") as f:
                    f.write(json.dumps({"end": entry["t"], "method": entry["method"], "path": entry["path"],
                                        "n": entry["n"], "disconnected": entry["disconnected"]}) + "\n")

    def answer_for(self, method, path):
        for key in ("%s %s" % (method, path), "* %s" % path):
            if key in self.plan:
                with self.lock:
                    n = self.counts.get(key, 0)
                    self.counts[key] = n + 1
                answers = self.plan[key]
                return n + 1, answers[min(n, len(answers) - 1)]
        return 0, None

    def handler(self):
        cap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                u = urlsplit(self.path)
                entry = {"t": round(time.monotonic() - cap.t0, 3), "method": self.command, "path": u.path,
                         "query": u.query, "headers": [[k, v] for k, v in self.headers.items()],
                         "body": body.decode("utf-8", "replace")}
                num, ans = cap.answer_for(self.command, u.path)
                entry["n"] = num
                cap.record(entry)
                if ans is None:
                    return self.send_json(404, {}, {"error": {"message": "no plan for %s %s" % (self.command,
                                                                                          u.path)}})
                if "json" in ans:
                    return self.send_json(ans.get("status", 200), ans.get("headers", {}), ans["json"])
                try:
                    self.stream(ans, num)
                except (BrokenPipeError, ConnectionResetError):
                    cap.disconnected(entry)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = handle_any

            def send_json(self, status, headers, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def chunk(self, text):
                data = text.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def stream(self, ans, num):
                self.send_response(ans.get("status", 200))
                hdrs = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
                hdrs.update(ans.get("headers", {}))
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                for step in ans.get("steps", []):
                    if "sleep" in step:
                        time.sleep(step["sleep"])
                    elif "every" in step:
                        end = time.monotonic() + step["for"]
                        while time.monotonic() + step["every"] <= end + 1e-3:
                            time.sleep(step["every"])
                            self.chunk(step["send"].replace("{n}", str(num)))
                    elif step.get("close"):
                        self.close_connection = True
                        return
                    else:
                        self.chunk(step["send"].replace("{n}", str(num)))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="the plan, a JSON file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="written with the port once listening")
    ap.add_argument("--log", help="requests appended here, one JSON line each")
    a = ap.parse_args()
    with open(a.plan) as f:
        plan = json.load(f)
    srv = Capture(plan, a.host, a.port, a.log).start()
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(srv.port))
        os.rename(a.port_file + ".tmp", a.port_file)
    print("listening on %s" % srv.url, file=sys.stderr, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
