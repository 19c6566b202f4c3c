"""A TCP relay in front of a real server that records the HTTP requests going through it: what modelgate
sent to a host, byte for byte, where the host itself (the real llama-server) keeps no copy. Each accepted
connection gets its own connection to the server and both directions are copied as they come (SSE streams,
keep-alive, the /models/sse feed), so the relay changes nothing; only the client's side is parsed, for the
requests' heads and Content-Length bodies (modelgate always sends one: rule:attribution-line recomputes it).

In a test: tap = Tap(server_port).start(); point the [Host] URL at tap.port; tap.requests("POST", path) ->
[{"method", "path", "headers", "body"}] in arrival order; tap.stop()."""

import socket
import threading


class Tap:
    def __init__(self, upstream_port, host="127.0.0.1"):
        self.upstream = (host, upstream_port)
        self.lock = threading.Lock()
        self.seen = []
        self.conns = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.stopped = False

    def start(self):
        threading.Thread(target=self.accept, daemon=True).start()
        return self

    def stop(self):
        self.stopped = True
        self.listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.close()
            except OSError:
                pass

    def requests(self, method=None, path=None):
        with self.lock:
            return [r for r in self.seen if (method is None or r["method"] == method)
                    and (path is None or r["path"].split("?")[0] == path)]

    def accept(self):
        while not self.stopped:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                down.close()  # the server is down: the client sees its refusal as a close
                continue
            up.settimeout(None)
            with self.lock:
                self.conns += [down, up]
            threading.Thread(target=self.copy, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self.copy, args=(up, down, False), daemon=True).start()

    def copy(self, src, dst, parse):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if parse:
                    buf = self.parse(buf + data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def parse(self, buf):
        """records each whole request in buf; returns what is left (a request not yet whole)"""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return buf
            lines = buf[:end].decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:] if ":" in l]
            length = int(dict((k.lower(), v) for k, v in headers).get("content-length", "0"))
            if len(buf) < end + 4 + length:
                return buf
            body = buf[end + 4:end + 4 + length].decode("utf-8", "replace")
            with self.lock:
                self.seen.append({"method": method, "path": path, "headers": headers, "body": body})
            buf = buf[end + 4 + length:]
