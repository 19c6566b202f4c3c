#!/usr/bin/python3
"""A host that takes more than its share, for the fairness tests (test_faults.py, test_catalog.py): it
floods its /models/sse feed with status_change events as fast as the socket takes them, and streams a
chat completion at full speed until the client goes away. A process of its own, so that the flood is not
slowed by the test's own threads (one interpreter lock).

  GET  /health                 {"status":"ok"}
  GET  /models                 --models N models m0..m{N-1}, unloaded (padded to --entry-size bytes each)
  GET  /models/sse             an event stream; while the flood is on, status_change events naming
                               m0..m{K-1} in turn (loading, loaded), written in 64 KiB chunks without pause
  POST /v1/chat/completions    "stream":true: SSE chunks of 16 KiB without pause, until the client closes;
                               else a small JSON answer
  POST /_flood/on, /_flood/off the flood of every open feed starts or stops
  POST /_flood/events?n=N      N status_change events once on every open feed (loading, loaded, in turn)
  GET  /_flood/stats           {"feeds": open feeds, "feed_bytes": written to feeds, "stream_bytes": ...}
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ARGS = None
LOCK = threading.Lock()
FLOOD = threading.Event()
STATS = {"feeds": 0, "feed_bytes": 0, "stream_bytes": 0, "models_reads": 0}
ONCE = []  # per open feed: a list of event blocks to send once
STATUS = {}  # model → status, as /_flood/events left it (the flood's events change no list)


def event(i, k):
    status = "loading" if (i // k) % 2 == 0 else "loaded"
    data = {"status": status}
    if status == "loading":
        data["progress"] = {"stages": ["text_model"], "current": "text_model", "value": 0.5}
    return "data: " + json.dumps({"model": "m%d" % (i % k), "event": "status_change", "data": data},
                                 separators=(",", ":")) + "\n\n"


def events(n, k, start=0):
    return "".join(event(start + i, k) for i in range(n)).encode()


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def model_list():
    pad = max(0, ARGS.entry_size - 120)
    data = [{"id": "m%d" % i, "object": "model", "owned_by": "llamacpp", "aliases": [],
             "status": {"value": STATUS.get("m%d" % i, "unloaded"), "args": ["llama-server", "x" * pad]}}
            for i in range(ARGS.models)]
    return json.dumps({"data": data, "object": "list"}, separators=(",", ":")).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, obj, raw=None):
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == "/health":
            self.send_json({"status": "ok"})
        elif path == "/models":
            with LOCK:
                STATS["models_reads"] += 1
                body = LIST[0]
            self.send_json(None, body)
        elif path == "/models/sse":
            self.feed()
        elif path == "/_flood/stats":
            with LOCK:
                self.send_json(dict(STATS))
        else:
            self.send_error(404)

    def do_POST(self):
        u = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if u.path == "/_flood/on":
            FLOOD.set()
            self.send_json({"flood": True})
        elif u.path == "/_flood/off":
            FLOOD.clear()
            self.send_json({"flood": False})
        elif u.path == "/_flood/events":
            n = int(parse_qs(u.query).get("n", ["1"])[0])
            with LOCK:
                # the list says what the events said, as a real host's does
                for i in range(n):
                    STATUS["m%d" % (i % ARGS.flood_models)] = json.loads(event(i, ARGS.flood_models)[6:])["data"]["status"]
                LIST[0] = model_list()
                for q in ONCE:
                    q.append(events(n, ARGS.flood_models))
            self.send_json({"sent": n})
        elif u.path == "/v1/chat/completions" and (b'"stream": true' in body or b'"stream":true' in body):
            self.stream()
        else:
            self.send_json({"id": "x", "object": "chat.completion", "model": "m0",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                         "finish_reason": "stop"}]})

    def start_chunked(self, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def feed(self):
        self.start_chunked("text/event-stream")
        once = []
        with LOCK:
            STATS["feeds"] += 1
            ONCE.append(once)
        block = chunk(events(600, ARGS.flood_models))  # about 64 KiB
        try:
            while True:
                if once:
                    with LOCK:
                        blocks, once[:] = list(once), []
                    for b in blocks:
                        self.wfile.write(chunk(b))
                    self.wfile.flush()
                if FLOOD.is_set():
                    self.wfile.write(block)
                    with LOCK:
                        STATS["feed_bytes"] += len(block)
                else:
                    time.sleep(0.01)
        except OSError:
            pass
        finally:
            with LOCK:
                STATS["feeds"] -= 1
                ONCE.remove(once)
            self.close_connection = True

    def stream(self):
        self.start_chunked("text/event-stream")
        data = ("data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "x" * 16000}}]}) +
                "\n\n").encode()
        block = chunk(data)
        try:
            while True:
                self.wfile.write(block)
                with LOCK:
                    STATS["stream_bytes"] += len(block)
        except OSError:
            pass
        self.close_connection = True


class FloodHost:
    """For the tests: the host as a process of its own, started and stopped by pid"""

    def __init__(self, tmp, *args):
        import subprocess
        portfile = os.path.join(tmp, "flood-%d.port" % id(self))
        self.log = open(os.path.join(tmp, "flood-%d.log" % id(self)), "w")
        self.proc = subprocess.Popen(["/usr/bin/python3", os.path.abspath(__file__), "--port-file", portfile] +
                                     [str(a) for a in args], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 10
        while not os.path.exists(portfile):
            assert self.proc.poll() is None and time.monotonic() < deadline, "the flooding host did not start"
            time.sleep(0.01)
        self.port = int(open(portfile).read())
        self.url = "http://127.0.0.1:%d" % self.port

    def call(self, method, path):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request(method, path)
        r = json.loads(c.getresponse().read())
        c.close()
        return r

    def on(self):
        self.call("POST", "/_flood/on")

    def off(self):
        self.call("POST", "/_flood/off")

    def events(self, n):
        self.call("POST", "/_flood/events?n=%d" % n)

    def stats(self):
        return self.call("GET", "/_flood/stats")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def main():
    global ARGS, LIST
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--entry-size", type=int, default=0, help="bytes of each /models entry, about")
    p.add_argument("--flood-models", type=int, default=4, help="the events name m0..m{K-1} in turn")
    ARGS = p.parse_args()
    LIST = [model_list()]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
