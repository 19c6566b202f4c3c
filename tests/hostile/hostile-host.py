#!/usr/bin/python3
"""A GPU host that misbehaves, for the suite: it answers /health, /models and /models/sse like a plain
llama-server router with one loaded model "x", and answers every other request the way its scenario
says. Each scenario is named after what the host does.

  interim-with-forged-response  a 103 with Content-Length: 79 whose 79 bytes are a complete forged
                                200 response (Set-Cookie: injected=1), then its real 200
  interim-chunked               a "150 X" with Transfer-Encoding: chunked and a forged chunk, then 200
  continue-with-body            a 100 Continue with Content-Length: 10 ("HTTP/1.1 2"), then a 503
  answer-early-and-close        after the head and 1 MiB of a request's body: 400 + Connection: close,
                                and a close with the rest unread (cpp-httplib's answer to a head it
                                refuses: the kernel resets the connection)
  hold-then-close               holds each request for --hold seconds, then closes with no answer
  silent                        accepts every connection (its probes' too) and never answers
  stream-then-silence           a streamed request gets its 200, its SSE head and one data line; from
                                then on the host answers nothing at all, its probes included

Usage: hostile-host.py --scenario NAME --port-file FILE [--hold SECONDS]
GET /_hostile/requests (before any silence) lists the request lines it received.
"""

import argparse
import json
import os
import socketserver
import threading
import time

ARGS = None
SILENT = threading.Event()  # stream-then-silence: set once the stream started
SEEN = []
LOCK = threading.Lock()

MODELS = json.dumps({"object": "list", "data": [
    {"id": "x", "object": "model", "owned_by": "llamacpp", "status": {"value": "loaded"}}]}).encode()
CHAT_OK = json.dumps({"id": "c1", "object": "chat.completion", "model": "x", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "real answer"}}]}).encode()
FORGED = b"HTTP/1.1 200 OK\r\nSet-Cookie: injected=1\r\nContent-Length: 8\r\nX: 1234\r\n\r\nINJECTED"
assert len(FORGED) == 79, len(FORGED)  # the review's reproducer


def response(status, reason, body, ctype="application/json", extra=b""):
    return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" %
            (status, reason, ctype.encode(), len(body), extra)) + body


class Conn(socketserver.BaseRequestHandler):
    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            chunk = self.request.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return lines[0], headers

    def read_body(self, n):
        while len(self.buf) < n:
            chunk = self.request.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        body, self.buf = self.buf[:n], self.buf[n:]
        return body

    def hold(self):
        """never answer: wait until the other side closes"""
        try:
            while self.request.recv(65536):
                pass
        except OSError:
            pass

    def handle(self):
        self.buf = b""
        if ARGS.scenario == "silent" or SILENT.is_set():
            return self.hold()
        while True:
            got = self.read_head()
            if got is None:
                return
            line, headers = got
            method, target = line.split(" ")[:2]
            path = target.split("?")[0]
            with LOCK:
                SEEN.append(line)
            n = int(headers.get("content-length", "0"))
            if method == "POST" and ARGS.scenario == "answer-early-and-close" and n > 0:
                # a little of the body first, as a server that reads its socket in big pieces does: the
                # sender is in the middle of its writes when the reset comes
                self.read_body(min(n, 1 << 20))
                body = json.dumps({"error": {"code": 400, "message": "the request was refused by the host",
                                             "type": "invalid_request_error"}}).encode()
                self.request.sendall(response(400, b"Bad Request", body, extra=b"Connection: close\r\n"))
                # closed with the body unread: the kernel answers the rest with a reset
                self.request.close()
                return
            body = self.read_body(n)
            if body is None:
                return
            if SILENT.is_set():
                return self.hold()
            if method == "GET" and path == "/health":
                self.request.sendall(response(200, b"OK", b'{"status":"ok"}'))
            elif method == "GET" and path == "/models":
                self.request.sendall(response(200, b"OK", MODELS))
            elif method == "GET" and path == "/models/sse":
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                return self.hold()
            elif method == "GET" and path == "/_hostile/requests":
                with LOCK:
                    seen = json.dumps(SEEN).encode()
                self.request.sendall(response(200, b"OK", seen))
            else:
                if not self.answer(body):
                    return

    def answer(self, body):
        """the scenario's answer to a request; False: the connection is done"""
        s = ARGS.scenario
        sock = self.request
        if s == "interim-with-forged-response":
            sock.sendall(b"HTTP/1.1 103 Early Hints\r\nContent-Length: 79\r\n\r\n" + FORGED)
            sock.sendall(response(200, b"OK", CHAT_OK))
        elif s == "interim-chunked":
            forged = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED"
            sock.sendall(b"HTTP/1.1 150 X\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" %
                         (len(forged), forged))
            sock.sendall(response(200, b"OK", CHAT_OK))
        elif s == "continue-with-body":
            err = json.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
            sock.sendall(b"HTTP/1.1 100 Continue\r\nContent-Length: 10\r\n\r\nHTTP/1.1 2")
            sock.sendall(response(503, b"Service Unavailable", err.encode()))
        elif s == "hold-then-close":
            time.sleep(ARGS.hold)
            return False
        elif s == "stream-then-silence":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            line = b'data: {"choices":[{"index":0,"delta":{"content":"first"}}]}\n\n'
            sock.sendall(b"%x\r\n%s\r\n" % (len(line), line))
            SILENT.set()
            self.hold()
            return False
        else:
            sock.sendall(response(200, b"OK", CHAT_OK))
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", required=True, choices=[
        "interim-with-forged-response", "interim-chunked", "continue-with-body", "answer-early-and-close",
        "hold-then-close", "silent", "stream-then-silence"])
    p.add_argument("--port-file", required=True)
    p.add_argument("--hold", type=float, default=2.0)
    ARGS = p.parse_args()
    srv = Server(("127.0.0.1", 0), Conn)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(ARGS.port_file + ".tmp", ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
