"""HTTP conformance through a running modelgated: the reproducers of each hole a review found (raw
bytes in, what the client gets, what reached the host, whether the connection goes on). The parser's
full table of cases is tests/unit/test-http-conformance.c; these are the ones that need the whole
path: the host behind, the pool of host connections, the access check, the socket's half-close."""

import hashlib
import io
import json
import os
import select
import socket
import subprocess
import threading
import time

import pytest

from boxes import box_skip_reason, engine_unit, gate_env, local_host
from conftest import free_port, host_conf, post, read_response, read_sse, wait_for

H = b"Host: gate\r\n"


def exchange(gate, data, n_responses=1, shut=False, timeout=10, check_close=True):
    """sends raw bytes, reads n responses; returns ([(status, headers, body)], whether modelgate closed the
    connection after them: None unless check_close)"""
    s = gate.sock()
    s.settimeout(timeout)
    s.sendall(data)
    if shut:
        s.shutdown(socket.SHUT_WR)
    f = s.makefile("rb")
    out = [read_response(f) for _ in range(n_responses)]
    closed = None
    if check_close:
        try:
            closed = f.read(1) == b""
        except socket.timeout:
            closed = False
    s.close()
    return out, closed


def still_open(gate, data):
    """sends data, reads one response, then checks that a second request on the connection is answered"""
    s = gate.sock()
    s.settimeout(10)
    s.sendall(data)
    f = s.makefile("rb")
    first = read_response(f)
    s.sendall(b"GET /health HTTP/1.1\r\n" + H + b"\r\n")
    second = read_response(f)
    s.close()
    return first, second


@pytest.mark.parametrize("line", [b"Authorization : Bearer S", b"X-Api-Key  : S", b"Cookie : S",
                                  b"Host : evil", b"Authorization\t: Bearer S"])
def test_whitespace_before_colon_is_refused(gate, double, line):
    double.clear()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\n" + H + line + b"\r\nContent-Type: application/json\r\n"
           b"Content-Length: 27\r\n\r\n{\"model\":\"3090-laguna-xs\"}")
    [(status, headers, body)], closed = exchange(gate, req)
    assert status == 400 and b"header" in body.lower()
    assert closed and headers.get("connection") == "close"
    assert double.forwarded() == []  # nothing reached the host


def test_query_cannot_name_a_second_model(gate, double):
    double.clear()
    for target, body in [(b"/props?mod%65l=3090-qwen3-8b&model=3090-laguna-xs", b""),
                         (b"/props?mo%u0064el=3090-qwen3-8b&model=3090-laguna-xs", b""),
                         (b"/props?model=3090-laguna-xs&mod%65l=3090-qwen3-8b", b""),
                         (b"/slots?model=3090-qwen3-8b", b'{"model":"3090-laguna-xs"}')]:
        method = b"POST" if body else b"GET"
        req = (method + b" " + target + b" HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        first, second = still_open(gate, req)
        assert first[0] == 400, (target, first)
        assert b"more than once" in first[2] or b"another in its query" in first[2] or b"%-escape" in first[2], first
        assert second[0] == 200
    assert double.forwarded() == []
    # one model, spelled with an escape in its name: rewritten like any other
    first, _ = still_open(gate, b"GET /props?mod%65l=3090-qwen3-8b HTTP/1.1\r\n" + H + b"\r\n")
    assert first[0] == 200
    assert [r["path"] for r in double.forwarded()] == ["/props?mod%65l=qwen3-8b"]
    # the same model in the body and the query: both rewritten
    double.clear()
    body = b'{"model":"3090-laguna-xs"}'
    first, _ = still_open(gate, b"POST /slots?model=3090-laguna-xs HTTP/1.1\r\n" + H +
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert first[0] == 200
    [fwd] = double.forwarded()
    assert fwd["path"] == "/slots?model=laguna-xs" and json.loads(fwd["body"])["model"] == "laguna-xs"


def test_tier_models_cannot_be_escaped_through_the_query(make_gate, double, tmp):
    key = "mg-test-key-conformance"
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("%s narrow\n" % hashlib.sha256(key.encode()).hexdigest())
    g = make_gate("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=narrow\nModels=3090-laguna-xs\n"
                  % keys + host_conf("3090", double.url))
    double.clear()
    auth = b"Authorization: Bearer " + key.encode() + b"\r\n"
    for target in [b"/props?mod%65l=3090-qwen3-8b&model=3090-laguna-xs", b"/props?mod%65l=3090-qwen3-8b"]:
        [(status, _, body)], _ = exchange(g, b"GET " + target + b" HTTP/1.1\r\n" + H + auth + b"\r\n",
                                          check_close=False)
        assert status in (400, 403), body
    assert double.forwarded() == []


def test_upgrade_is_never_honoured(gate, double):
    # curl --http2 on http:// asks for h2c on each request of a reused connection
    urls = ["http://127.0.0.1:%d/health" % gate.port] * 2
    out = subprocess.run(["curl", "-sS", "--http2", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{http_code} %{num_connects}\\n"]
                         + urls, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    assert out.stdout.split("\n")[:2] == ["200 1", "200 0"], out.stdout  # both answered, on one connection
    # pipelined after an Upgrade: websocket request, the next request is answered
    req = (b"GET /health HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
           b"GET /health HTTP/1.1\r\n" + H + b"\r\n")
    responses, _ = exchange(gate, req, 2, check_close=False)
    assert [r[0] for r in responses] == [200, 200]
    # and what goes on to a host carries no Upgrade
    double.clear()
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
    first, second = still_open(gate, b"POST /v1/chat/completions HTTP/1.1\r\n" + H +
                               b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\n"
                               b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert first[0] == 200 and second[0] == 200
    [fwd] = double.forwarded()
    names = {k.lower() for k, _ in fwd["headers"]}
    assert "upgrade" not in names and "http2-settings" not in names


WEBSOCKET = (b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
             b"Sec-WebSocket-Key: LYJBgKgGtM3OKSKFbNdeQw==\r\n")


def test_a_websocket_to_the_responses_api_gets_426_and_every_other_upgrade_plain_http(make_gate, double, tmp):
    # rule:websocket-426: Codex's built-in provider opens a WebSocket to /v1/responses first; a 426 is what
    # makes it POST at once. Before admission: an unknown key gets it too, and it counts against nothing
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("%s t\n" % hashlib.sha256(b"k").hexdigest())
    g = make_gate("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=t\n" % keys +
                  host_conf("3090", double.url))
    double.clear()
    for path in [b"/v1/responses", b"/responses"]:
        # pipelined: the connection goes on after the 426, as after any answer without a body
        [(status, headers, body), after], closed = exchange(
            g, b"GET " + path + b" HTTP/1.1\r\n" + H + WEBSOCKET + b"\r\nGET /health HTTP/1.1\r\n" + H + b"\r\n", 2)
        assert status == 426 and after[0] == 200 and not closed, (status, body)
        assert headers["upgrade"] == "HTTP/1.1" and "upgrade" in headers["connection"].lower(), headers
        err = json.loads(body)["error"]
        assert err["code"] == "websocket_not_supported" and err["type"] == "invalid_request_error", err
        assert "plain HTTP" in err["message"] and "POST" in err["message"] and "without an Upgrade" in err["message"]
    g.log_mark("websocket-mark")
    lines = [line for line in g.logtext().splitlines() if "GET /v1/responses " in line or "GET /responses " in line]
    assert len(lines) == 2 and all(" status=426" in line and " key=" not in line for line in lines), lines
    # everywhere else, and what is no WebSocket handshake there, is answered as plain HTTP (rule:no-upgrade)
    auth = b"Authorization: Bearer k\r\n"
    for req in [b"GET /v1/models HTTP/1.1\r\n" + H + auth + WEBSOCKET + b"\r\n",
                b"GET /v1/responses/input_tokens HTTP/1.1\r\n" + H + auth + WEBSOCKET + b"\r\n",
                b"GET /v1/responses HTTP/1.1\r\n" + H + auth + b"Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
                b"GET /v1/responses HTTP/1.1\r\n" + H + auth + b"Upgrade: websocket\r\n\r\n"]:
        [(status, headers, _)], _ = exchange(g, req, check_close=False)
        assert status != 426 and "upgrade" not in headers, (req, status)
    body = b'{"model":"3090-laguna-xs","input":"hi"}'
    [(status, _, _)], _ = exchange(g, b"POST /v1/responses HTTP/1.1\r\n" + H + auth + WEBSOCKET +
                                   b"Content-Length: %d\r\n\r\n" % len(body) + body, check_close=False)
    assert status == 200
    [fwd] = double.forwarded()
    assert "upgrade" not in {k.lower() for k, _ in fwd["headers"]}


def test_request_trailers_are_dropped(gate, double):
    double.clear()
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
    req = (b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" +
           b"%x\r\n" % len(body) + body + b"\r\n0\r\nX-Injected: yes\r\nAuthorization: Bearer S\r\n\r\n")
    first, second = still_open(gate, req)
    assert first[0] == 200 and second[0] == 200
    [fwd] = double.forwarded()
    names = {k.lower() for k, _ in fwd["headers"]}
    assert "x-injected" not in names and "authorization" not in names


def test_a_trailer_never_authenticates(make_gate, double, tmp):
    key = "mg-test-key-trailer"
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("%s pro\n" % hashlib.sha256(key.encode()).hexdigest())
    g = make_gate("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=pro\n" % keys +
                  host_conf("3090", double.url))
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
    chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\nAuthorization: Bearer " + key.encode() + b"\r\n\r\n"
    [(status, _, _)], _ = exchange(g, b"POST /v1/chat/completions HTTP/1.1\r\n" + H +
                                   b"Transfer-Encoding: chunked\r\n\r\n" + chunked, check_close=False)
    assert status == 401
    # the same key in the head is admitted
    [(status, _, _)], _ = exchange(g, b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"Authorization: Bearer " +
                                   key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body,
                                   check_close=False)
    assert status == 200


@pytest.mark.parametrize("chunks", [b"3\r\nabcXY0\r\n\r\n", b"3\r\nabc\n0\r\n\r\n", b"3\r\nabc\r\n0\r\n\n",
                                    b"3\r\nabc\r\n0\r\nX-A: a\r\n folded\r\n\r\n"])
def test_bad_chunk_framing_is_refused(gate, double, chunks):
    double.clear()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n" + chunks +
           b"GET /health HTTP/1.1\r\n" + H + b"\r\n")
    [(status, headers, _)], closed = exchange(gate, req)
    assert status == 400 and closed and headers.get("connection") == "close"
    assert double.forwarded() == []


def test_half_close_after_a_complete_request_is_answered(gate):
    [(status, _, body)], closed = exchange(gate, b"GET /health HTTP/1.1\r\n" + H + b"User-Agent: half-close\r\n\r\n",
                                           shut=True)
    assert status == 200 and json.loads(body)["status"] == "ok" and closed
    # and it leaves its access line, as any answered request does
    line = gate.wait_log('ua="half-close"')
    assert line.startswith("<6>GET /health ") and " status=200 " in line, line
    # pipelined requests before the half-close: each answered, in order
    responses, closed = exchange(gate, b"GET /health HTTP/1.1\r\n" + H + b"\r\nGET / HTTP/1.1\r\n" + H + b"\r\n",
                                 2, shut=True)
    assert [r[0] for r in responses] == [200, 200] and json.loads(responses[1][2])["name"] == "modelgate"
    assert closed
    # a request that goes to a host, then a half-close: answered too (an interim 100 tells a half-closed
    # client from a gone one, which answers it with a reset)
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
    responses, closed = exchange(gate, b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"User-Agent: half-close-2\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body) + body, 2, shut=True)
    assert responses[0][0] == 100 and responses[1][0] == 200 and closed, responses
    assert json.loads(responses[1][2])["model"] == "laguna-xs"
    # logged too, though the end of the input was read before its answer (the 100 says so)
    line = gate.wait_log('ua="half-close-2"')
    assert 'POST /v1/chat/completions model="3090-laguna-xs" host=3090 status=200 ' in line, line



def cpu_seconds(gate):
    f = open("/proc/%d/stat" % gate.proc.pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_a_half_closed_client_waiting_for_its_answer_costs_no_cpu(gate):
    """the end of a client's input, once read, is not announced again: the loop sleeps while the host works
    (it used to spin, each turn raising the readable socket's edge anew)"""
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"%s hi"}]}'
    post = lambda text: b"POST /v1/chat/completions HTTP/1.1\r\n" + H + \
        b"Content-Length: %d\r\n\r\n" % len(body % text) + body % text
    # the same path once before, so that a daemon under valgrind has translated its code
    [(status, _, _)], _ = exchange(gate, post(b""), check_close=False)
    assert status == 200
    s = gate.sock()
    s.settimeout(10)
    s.sendall(post(b"[[delay:3]]"))
    s.shutdown(socket.SHUT_WR)
    f = s.makefile("rb")
    assert read_response(f)[0] == 100  # the end of the input was read
    before = cpu_seconds(gate)
    status, _, reply = read_response(f)
    while status == 100:  # the probe again, after each half second of silence (rule:client-gone)
        status, _, reply = read_response(f)
    spent = cpu_seconds(gate) - before
    s.close()
    assert status == 200 and json.loads(reply)["model"] == "laguna-xs"
    assert spent < 0.5, "%.2f s of CPU while the host took 3 s" % spent

def test_a_client_gone_while_its_answer_is_produced_cancels_it(gate, double):
    """the other side of the half-close: a client that closed (not half-closed) while its answer was on
    the way is found out by the probe, and the host's work is cut"""
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"[[hang]]"}]}'
    s = gate.sock()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    wait_for(lambda: any(r["path"] == "/v1/chat/completions" for r in double.forwarded()), what="the request")
    s.close()
    gate.wait_log("cut=client")


def test_a_client_that_half_closed_then_left_during_a_silent_prefill_is_noticed(make_double, make_gate):
    """rule:client-gone: a client half-closes after its request (the probe, a 100, is read), reads the 200 and
    the head of its stream, and closes while the host prefills in silence. Its side sends nothing then: only
    bytes written to it find out, and the host's request is cancelled within a second, whatever the
    keepalive interval (an hour here)"""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate("[Proxy]\nKeepaliveAfterSec=1h\nKeepaliveIntervalSec=1h\n" + host_conf("3090", d.url))
    body = b'{"model":"3090-laguna-xs","stream":true,"messages":[{"role":"user","content":"[[hang]]"}]}'
    s = g.sock()
    s.settimeout(10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    s.shutdown(socket.SHUT_WR)
    f = s.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 100 ")  # the end of the input was read
    assert f.readline() == b"\r\n"
    assert f.readline().startswith(b"HTTP/1.1 200 ")
    while f.readline() != b"\r\n":
        pass
    assert f.readline() == b"3\r\n" and f.read(5) == b":\n\n\r\n"  # the host's first comment: none left unread
    wait_for(lambda: [q for q in d.forwarded() if q["path"] == "/v1/chat/completions"], what="the host's request")
    f.close()
    s.close()
    left = time.monotonic()
    wait_for(lambda: d.forwarded()[-1].get("disconnected"), timeout=3,
             what="the host's connection to close after the client left")
    took = time.monotonic() - left
    assert took < 3, took
    g.wait_log("cut=client")


def test_http10_with_transfer_encoding_closes(gate):
    body = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
    req = (b"POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
           b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    s = gate.sock()
    s.settimeout(10)
    s.sendall(req)
    data = b""
    while True:
        k = s.recv(65536)
        if not k:
            break
        data += k
    s.close()
    assert data.startswith(b"HTTP/1.1 200") and b"\r\nConnection: close\r\n" in data


def test_what_modelgate_answers_itself_takes_no_body(gate):
    s = gate.sock()
    s.settimeout(10)
    # 40 MB announced, a little sent: refused on the head, nothing of it held
    s.sendall(b"GET /health HTTP/1.1\r\n" + H + b"Content-Length: 40000000\r\n\r\n" + b"x" * 1024)
    status, headers, _ = read_response(s.makefile("rb"))
    assert status == 413 and headers.get("connection") == "close"
    s.close()


def test_root_versions_and_fragments(gate):
    for method in (b"GET", b"HEAD"):
        s = gate.sock()
        s.sendall(method + b" / HTTP/1.1\r\n" + H + b"\r\n")
        f = s.makefile("rb")
        status, headers, body = read_response(f) if method == b"GET" else (None, None, None)
        if method == b"HEAD":
            line = f.readline()
            assert line.startswith(b"HTTP/1.1 200")
        else:
            assert status == 200 and headers["content-type"] == "application/json"
            j = json.loads(body)
            assert j["name"] == "modelgate" and j["models"] == "/v1/models" and j["health"] == "/health"
        s.close()
    [(status, _, _)], closed = exchange(gate, b"GET /health HTTP/2.0\r\n" + H + b"\r\n")
    assert status == 505 and closed
    [(status, _, _)], closed = exchange(gate, b"GET /health\r\n\r\n")
    assert status == 400 and closed
    [(status, _, body)], closed = exchange(gate, b"GET /health#x HTTP/1.1\r\n" + H + b"\r\n")
    assert status == 400 and b"fragment" in body


class RawHost:
    """A host written for faults the double cannot make: it answers a request for 'early' with 413 before
    reading its body (keep-alive, as a server that refuses a big upload does), and on 'drop' reads the
    request, then closes without an answer. Everything else gets 200 after its body is read."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.seen = []  # (connection number, first line)
        self.lock = threading.Lock()
        self.conns = 0
        self.stopping = False
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self.serve, args=(c, self.conns), daemon=True).start()

    def serve(self, c, n):
        f = c.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                length = 0
                while True:
                    h = f.readline()
                    if h in (b"\r\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":")[1])
                parts = line.split()
                if len(parts) != 3:
                    return  # not a request line: the rest of a body that was never read
                with self.lock:
                    self.seen.append((n, line.decode().strip()))
                path = parts[1].decode()
                if path.startswith("/models"):
                    f.read(length)
                    body = b'{"data":[{"id":"m","status":{"value":"loaded"}}],"object":"list"}' \
                        if path == "/models" else b"{}"
                    code = b"200 OK" if path == "/models" else b"404 Not Found"
                    c.sendall(b"HTTP/1.1 " + code + b"\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    continue
                if "early" in path:
                    body = b'{"error":{"message":"too big","type":"invalid_request_error","code":413}}'
                    c.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    # then the body is skipped, as a server that keeps the connection must: whatever
                    # comes next on it (a pooled request's bytes) would be swallowed as the body's rest
                    if len(f.read(length)) < length:
                        return
                    continue
                f.read(length)
                if "drop" in path:
                    c.close()
                    return
                body = b'{"ok":true}'
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body)
        except OSError:
            return
        finally:
            c.close()

    def stop(self):
        self.stopping = True
        self.sock.close()


@pytest.fixture
def rawhost():
    h = RawHost()
    yield h
    h.stop()


def test_a_connection_whose_request_was_not_all_sent_is_not_pooled(make_gate, rawhost):
    g = make_gate("[Proxy]\nMaxBodySize=64M\n" + host_conf("h", rawhost.url))
    big = b'{"model":"h-m","pad":"' + b"x" * (24 << 20) + b'"}'
    s = g.sock()
    s.settimeout(30)
    s.sendall(b"POST /v1/early HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % len(big) + big)
    status, _, _ = read_response(s.makefile("rb"))
    s.close()
    assert status == 413
    # the next request goes on a connection of its own and is answered
    for _ in range(3):
        s = g.sock()
        s.settimeout(10)
        body = b'{"model":"h-m"}'
        s.sendall(b"POST /v1/next HTTP/1.1\r\n" + H + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        status, _, reply = read_response(s.makefile("rb"))
        s.close()
        assert status == 200 and reply == b'{"ok":true}'


def test_a_post_is_not_sent_twice_after_a_pooled_connection_fails(make_gate, rawhost):
    g = make_gate(host_conf("h", rawhost.url))
    c = g.conn()
    body = json.dumps({"model": "h-m"})
    c.request("POST", "/v1/first", body, {"Content-Type": "application/json"})
    assert c.getresponse().read() == b'{"ok":true}'
    # the pooled connection reads this POST and closes without an answer: it may have been acted on
    c.request("POST", "/v1/drop", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status in (502, 503)
    with rawhost.lock:
        drops = [x for x in rawhost.seen if "/v1/drop" in x[1]]
    assert len(drops) == 1, rawhost.seen


def test_log_lines_cannot_be_forged(gate, double):
    double.clear()
    forged = "3090-laguna-xs\nFAKE <3>modelgated: forged\u001b[2J"
    for body in [json.dumps({"model": forged}).encode(),
                 b'{"model":"3090-laguna-xs\\u0000x"}', b'{"model":"3090-laguna-xs\\u007f"}']:
        first, second = still_open(gate, b"POST /v1/chat/completions HTTP/1.1\r\n" + H +
                                   b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert first[0] == 400 and (b"control character" in first[2] or b"\\u0000" in body), first
        assert second[0] == 200
    first, _ = still_open(gate, b"GET /props?model=3090-laguna-xs%0AFAKE%1B HTTP/1.1\r\n" + H + b"\r\n")
    assert first[0] == 400
    # a TAB or a byte above 0x7E in the path never reaches a host or the log
    [(status, _, _)], _ = exchange(gate, b"GET /props\t?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\n")
    assert status == 400
    [(status, _, _)], _ = exchange(gate, b"GET /pr\xffops?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\n")
    assert status == 400
    assert double.forwarded() == []
    gate.wait_log("status=400", count=6)
    log = gate.logtext()
    assert "\x1b" not in log and "\t" not in log and "\xff" not in log
    assert not any(line.startswith("FAKE") for line in log.splitlines()), log


def test_a_gpu_host_cannot_write_log_lines_of_its_own(make_gate, tmp):
    """What ssh (and the remote systemd-stdio-bridge) print on stderr is logged prefixed and escaped."""
    fake = os.path.join(tmp, "fake-ssh")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\nprintf '<3>modelgated: forged\\033[2J\\nsecond line\\n' >&2\n"
                "echo 'ssh: connect to host a9 port 22: Connection refused' >&2\nexit 255\n")
    os.chmod(fake, 0o755)
    g = make_gate("[Host]\nName=a9\nURL=http://127.0.0.1:1\nBus=ssh:gpu@a9\nSSHCommand=%s\n" % fake +
                  "[Engine]\nHost=a9\nName=main\nUnit=llama-main.service\nModels=*\n")
    g.wait_log("host a9: ssh: second line")
    lines = g.logtext().splitlines()
    assert any(l.startswith("<4>host a9: ssh: <3>modelgated: forged\\x1b[2J") for l in lines), lines
    assert not any(l.startswith("<3>modelgated: forged") for l in lines)
    # ssh's own lines name ssh already: the prefix is not doubled
    g.wait_log("host a9: ssh: connect to host a9 port 22: Connection refused")
    assert "ssh: ssh:" not in g.logtext()


def unix_sock(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def test_each_listener_answers(make_gate, double, tmp):
    """Listen= repeated: each listener accepts (the first one's source used to keep a pointer into the array of
    listeners that the second one's realloc() had moved, and its first connection crashed the daemon)"""
    path = os.path.join(tmp, "gate.sock")
    g = make_gate("[Proxy]\nListen=%s\n" % path + host_conf("3090", double.url))  # ready: TCP, the first
    for s in (g.sock(), unix_sock(path), g.sock()):
        s.sendall(b"GET /health HTTP/1.1\r\n" + H + b"\r\n")
        status, _, body = read_response(s.makefile("rb"))
        s.close()
        assert status == 200 and json.loads(body)["status"] == "ok"


def read_until_end(s, timeout=10):
    """every byte the peer sent, up to its close (an EOF, or the reset a close with input unread gives)"""
    s.settimeout(timeout)
    data = b""
    while True:
        try:
            k = s.recv(65536)
        except ConnectionResetError:
            return data
        if not k:
            return data
        data += k


def responses_in(data):
    """the statuses of the complete responses in data (modelgate's own: each with a Content-Length)"""
    f = io.BytesIO(data)
    out = []
    while True:
        pos = f.tell()
        if not f.readline().startswith(b"HTTP/1.1 "):
            return out
        f.seek(pos)
        status, _, body = read_response(f)
        out.append(status)


def closed_by_peer(s):
    """whether the other end closed the socket: told by poll, without reading (a read would make room)"""
    p = select.poll()
    p.register(s, select.POLLHUP | select.POLLRDHUP)
    return any(ev & (select.POLLHUP | select.POLLRDHUP) for _, ev in p.poll(0))


def test_a_last_answer_that_finds_the_socket_full_has_a_deadline(make_gate, double, tmp):
    """The 408 after a head that came too slowly is the last answer of its connection. Written to a socket the
    client does not read, it meets EAGAIN: the connection must still end after IdleTimeoutSec=, as every
    state has a deadline (the 408's own timer has fired; nothing else would end it).

    A unix socket takes a small write whole or not at all (TCP adds it to its last segment, so that "full"
    falls between two answers only by luck): the answers to one connection's pipelined GET / show how many
    fit, and a second connection sends that many, then the start of a head."""
    path = os.path.join(tmp, "gate.sock")
    g = make_gate("[Proxy]\nListen=%s\nHeaderTimeoutSec=1s\nIdleTimeoutSec=2s\n" % path +
                  host_conf("3090", double.url))
    get = b"GET / HTTP/1.1\r\n" + H + b"\r\n"

    # far more than fit: modelgate stops on a full socket, and drops the client that does not read
    s = unix_sock(path)
    s.sendall(get * 4000)
    wait_for(lambda: closed_by_peer(s), 20, "modelgate to drop a client that does not read")
    fit = responses_in(read_until_end(s))
    s.close()
    assert 0 < len(fit) < 4000 and set(fit) == {200}, fit

    # HeaderTimeoutSec= (the 408), then IdleTimeoutSec= without progress: about 3 s
    s = unix_sock(path)
    s.sendall(get * len(fit) + b"GET /health HTTP/1.1\r\n" + H)
    wait_for(lambda: closed_by_peer(s), 20, "modelgate to close the connection whose 408 found no room")
    answers = responses_in(read_until_end(s))
    s.close()
    # the answers filled the socket, and the 408 never got in: it was the write that met EAGAIN
    assert answers == fit, (len(answers), len(fit))


CHAT_BODY = b'{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}'
CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\n" + H


@pytest.mark.parametrize("request_bytes,status", [
    (CHAT_HEAD + b"Authorization : Bearer S\r\nContent-Length: %d\r\n\r\n" % len(CHAT_BODY) + CHAT_BODY, 400),
    (CHAT_HEAD + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (len(CHAT_BODY), len(CHAT_BODY)) +
     CHAT_BODY + b"\r\n0\r\n\r\n", 400),
    (b"GET /props?model=3090-laguna-xs HTTP/2.0\r\n" + H + b"\r\n", 505),
    (b"GET /props?model=3090-laguna-xs#x HTTP/1.1\r\n" + H + b"\r\n", 400),
    (CHAT_HEAD + b"Expect: something-else\r\nContent-Length: %d\r\n\r\n" % len(CHAT_BODY) + CHAT_BODY, 417),
    (b"FOO /props?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\n", 400),
    (b"TRACE /props?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\n", 405),
    (CHAT_HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(CHAT_BODY) + CHAT_BODY + b"XY0\r\n\r\n", 400),
], ids=["space-before-colon", "cl-and-te", "http-2.0", "fragment", "expect", "bad-method", "trace", "chunk-crlf"])
def test_nothing_pipelined_after_a_refusal_is_read(gate, double, request_bytes, status):
    """A refused request's framing cannot be trusted: what follows it on the connection (here a request for
    the host and a /health) is never taken for requests. One answer, Connection: close, the end."""
    double.clear()
    pipelined = b"GET /props?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\nGET /health HTTP/1.1\r\n" + H + b"\r\n"
    [(got, headers, body)], closed = exchange(gate, request_bytes + pipelined)
    assert got == status, body
    assert headers.get("connection") == "close" and closed  # closed: no second answer came
    assert double.forwarded() == []


def read_head(f):
    """the status and headers of one answer, and nothing after them"""
    status = int(f.readline().split()[1])
    headers = {}
    for line in iter(f.readline, b"\r\n"):
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


def test_head_of_the_root_has_a_length_and_no_body(gate):
    s = gate.sock()
    s.settimeout(10)
    s.sendall(b"HEAD / HTTP/1.1\r\n" + H + b"\r\nGET /health HTTP/1.1\r\n" + H + b"\r\n")
    f = s.makefile("rb")
    status, headers = read_head(f)
    assert status == 200 and headers["content-type"] == "application/json"
    assert int(headers["content-length"]) > 0  # the length GET / has, as RFC 9110 §9.3.2 allows
    # the next answer starts right after the head: no body bytes came between
    line = f.readline()
    assert line.startswith(b"HTTP/1.1 200 "), line
    s.close()


def test_the_root_is_open_when_access_needs_a_key(make_gate, double, tmp):
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("%s pro\n" % hashlib.sha256(b"mg-test-key-root").hexdigest())
    g = make_gate("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=pro\n" % keys +
                  host_conf("3090", double.url))
    # a model request without a key is refused: [Access] is on ...
    [(status, _, _)], _ = exchange(g, b"GET /props?model=3090-laguna-xs HTTP/1.1\r\n" + H + b"\r\n",
                                   check_close=False)
    assert status == 401
    # ... and the root answers anyone, as clients probe it before their first request
    [(status, _, body)], _ = exchange(g, b"GET / HTTP/1.1\r\n" + H + b"\r\n", check_close=False)
    assert status == 200 and json.loads(body)["name"] == "modelgate"
    s = g.sock()
    s.settimeout(10)
    s.sendall(b"HEAD / HTTP/1.1\r\n" + H + b"\r\n")
    assert read_head(s.makefile("rb"))[0] == 200
    s.close()


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_an_escaped_stream_flag_is_a_stream_to_modelgate_too(box, make_gate):
    """An escaped "str\\u0065am":true is "stream":true to the host's JSON parser: it streams. So it must be
    a stream to modelgate, which gets a streaming client waiting for an engine an early 200 and keepalive
    comments (a request that does not stream waits in silence for its whole answer)."""
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs", double_args="--startup-delay 4"))
    box.reload()
    g = make_gate("[Proxy]\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("h", port) +
                  "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\nStartTimeoutSec=30s\n",
                  env=gate_env(box))
    g.wait_log("host h up")
    body = b'{"model":"h-laguna-xs","str\\u0065am":true,"messages":[{"role":"user","content":"[[tokens:3]]"}]}'
    t0 = time.monotonic()
    r = post(g.conn(timeout=60), "/v1/chat/completions", body, headers={"User-Agent": "escaped-stream"})
    head_after = time.monotonic() - t0
    lines = [l for _, l in read_sse(r)]
    # the engine answers /health 200 only 4 s after its start: the head came before, from modelgate
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert head_after < 3, "the head came after %.1f s" % head_after
    assert lines[0].startswith(": waiting for engine main on h"), lines
    assert lines[-2] == "data: [DONE]\n", lines
    assert " early=200" in g.wait_log('ua="escaped-stream"')
