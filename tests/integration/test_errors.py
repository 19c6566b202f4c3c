"""Statuses, shapes and wording of every error modelgate makes or rewords (rule:error-status, rule:error-shape,
rule:busy-423, rule:retry-after, rule:refusal-words, rule:reword-context, rule:reword-anthropic)."""

import json
import re
import select
import socket
import time

import pytest

from conftest import host_conf, post, read_response, read_sse

CHAT = "/v1/chat/completions"
MSGS = "/v1/messages"
# words that make coding agents retry a refusal anyway (rule:refusal-words)
RETRY_WORDS = re.compile(r"429|500|502|503|504|overloaded|rate limit|too many requests|service unavailable|"
                         r"server error|internal error|connection (error|refused)|fetch failed|terminated|"
                         r"other side closed|timeout|x-api-key|prompt is too long", re.I)


def shape(path, status, body):
    obj = json.loads(body)
    if path == MSGS:
        assert obj["type"] == "error" and set(obj) >= {"type", "error"}
        assert isinstance(obj["error"]["message"], str) and obj["error"]["type"]
        return obj["error"]
    assert set(obj) == {"error"}
    assert isinstance(obj["error"]["message"], str) and obj["error"]["type"]
    return obj["error"]


def raw(gate, data, read_timeout=10):
    s = gate.sock()
    s.sendall(data)
    s.settimeout(read_timeout)
    out = b""
    while True:
        try:
            k = s.recv(65536)
        except socket.timeout:
            break
        if not k:
            break
        out += k
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.decode(), body


@pytest.mark.parametrize("path", [CHAT, MSGS])
@pytest.mark.parametrize("body,status,words", [
    (b'{"model": "3090-laguna-xs", ', 400, "not valid JSON"),
    (b'[1,2]', 400, "not valid JSON"),
    (b'{"messages": []}', 400, "no \"model\""),
    (b'{"model": 42}', 400, "must be a string"),
    (b'{"model": "3090-a", "model": "3090-b"}', 400, "more than once"),
    (b'{"model": "nohost-laguna"}', 404, "GET /v1/models"),
    (b'{"model": "laguna-xs"}', 404, "GET /v1/models"),
])
def test_bad_requests(gate, path, body, status, words):
    c = gate.conn()
    r = post(c, path, body)
    assert r.status == status
    err = shape(path, status, r.read())
    assert words in err["message"]
    assert not RETRY_WORDS.search(err["message"]), err["message"]
    if path == MSGS:
        assert err["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    # the connection survives a refusal of a well-framed request
    c.request("GET", "/health")
    assert c.getresponse().status == 200


def test_get_without_model_is_400(gate):
    c = gate.conn()
    c.request("GET", "/slots")
    r = c.getresponse()
    assert r.status == 400
    assert "?model=<host>-<key>" in shape("/slots", 400, r.read())["message"]


def test_body_too_large_is_413(make_gate, double):
    g = make_gate(host_conf("3090", double.url) + "[Proxy]\nMaxBodySize=1K\n")
    c = g.conn()
    r = post(c, CHAT, {"model": "3090-laguna-xs", "pad": "x" * 2000})
    assert r.status == 413
    assert "MaxBodySize" in shape(CHAT, 413, r.read())["message"]
    # chunked bodies are counted as they arrive
    status, _, body = raw(g, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n")
    assert status == 413


def test_headers_too_large_is_431(make_gate, double):
    g = make_gate(host_conf("3090", double.url) + "[Proxy]\nMaxHeaderSize=2K\n")
    status, head, body = raw(g, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
    assert status == 431
    assert "MaxHeaderSize" in shape("/", 431, body)["message"]
    assert "Connection: close" in head


def test_slow_headers_get_408(make_gate, double):
    g = make_gate(host_conf("3090", double.url) + "[Proxy]\nHeaderTimeoutSec=1s\n")
    s = g.sock()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    s.settimeout(10)
    t0 = time.monotonic()
    data = s.recv(4096)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - t0 < 5
    assert b"request headers in time" in data


def test_a_trickled_body_gets_408_at_body_timeout(make_gate, double):
    """IdleTimeoutSec= bounds each stall of a body, BodyTimeoutSec= the whole of it. A byte every 0.25 s never
    stalls for 1 s: without the total, the 600 bytes announced would hold the slot for 2.5 min."""
    g = make_gate(host_conf("3090", double.url) + "[Proxy]\nIdleTimeoutSec=1s\nBodyTimeoutSec=2s\n")
    s = g.sock()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 600\r\n\r\n")
    t0 = time.monotonic()
    answered = None
    while answered is None and time.monotonic() - t0 < 30:
        s.sendall(b" ")
        # the pace of the trickle, and the wait for the answer
        if select.select([s], [], [], 0.25)[0]:
            answered = time.monotonic() - t0
    assert answered is not None, "no answer to a body trickled for 30 s"
    s.settimeout(10)
    data = b""
    while True:
        k = s.recv(65536)  # the 408, then the close
        if not k:
            break
        data += k
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), data
    assert b"Connection: close" in head, head
    assert "BodyTimeoutSec=2s" in shape(CHAT, 408, body)["message"], body
    # 2 s from the head's end, far from the 2.5 min the announced length would take
    assert 1.5 < answered < 10, answered

    # a body sent at once is answered, and so is one whose pieces each come within IdleTimeoutSec= and all
    # within BodyTimeoutSec= (1.2 s in all, longer than IdleTimeoutSec=)
    c = g.conn()
    r = post(c, CHAT, {"model": "3090-laguna-xs", "messages": [], "pad": "x" * (4 << 20)})
    assert r.status == 200, r.read()
    r.read()
    body = json.dumps({"model": "3090-laguna-xs", "messages": []}).encode()
    s = g.sock()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    for i in range(4):
        s.sendall(body[i * len(body) // 4:(i + 1) * len(body) // 4])
        if i < 3:
            assert not select.select([s], [], [], 0.4)[0], s.recv(4096)
    f = s.makefile("rb")
    status, _, answer = read_response(f)
    assert status == 200, answer
    s.close()


@pytest.mark.parametrize("path", [CHAT, MSGS])
def test_host_unreachable_is_503_with_retry_after(make_gate, path):
    g = make_gate(host_conf("3090", "http://127.0.0.1:9"))
    c = g.conn()
    r = post(c, path, {"model": "3090-laguna-xs", "messages": []})
    assert r.status == 503
    assert r.getheader("Retry-After") == "30" and r.getheader("retry-after-ms") == "30000"
    err = shape(path, 503, r.read())
    assert "host '3090' is down" in err["message"] and "connection refused" in err["message"]
    if path == MSGS:
        assert err["type"] == "api_error"
    g.wait_log("host 3090 down: connection refused")


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_reworded_openai(gate, stream):
    r = post(gate.conn(), CHAT, {"model": "3090-laguna-xs", "stream": stream,
                                 "messages": [{"role": "user", "content": "a b c [[overflow]]"}]})
    assert r.status == 400
    err = shape(CHAT, 400, r.read())
    assert err["message"] == "prompt is too long: 4100 tokens > 4096 maximum"
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_reworded_anthropic(gate, stream):
    r = post(gate.conn(), MSGS, {"model": "3090-laguna-xs", "stream": stream, "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "a b c [[overflow]]"}]})
    assert r.status == 400
    err = shape(MSGS, 400, r.read())
    assert err == {"type": "invalid_request_error", "message": "prompt is too long: 4100 tokens > 4096 maximum"}


def test_bare_anthropic_stream_error_is_rewrapped(gate):
    r = post(gate.conn(), MSGS, {"model": "3090-laguna-xs", "stream": True, "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "[[error:1]]"}]})
    assert r.status == 200
    lines = [l for (_, l) in read_sse(r)]
    i = lines.index("event: error\n")
    assert json.loads(lines[i + 1][6:]) == {"type": "error",
                                            "error": {"type": "api_error", "message": "generation failed"}}


def test_openai_stream_error_passes_through(gate):
    r = post(gate.conn(), CHAT, {"model": "3090-laguna-xs", "stream": True,
                                 "messages": [{"role": "user", "content": "[[error:1]]"}]},
             headers={"X-Request-Id": "mid-stream-error"})
    data = [l for (_, l) in read_sse(r) if l.startswith("data: ")]
    assert json.loads(data[-1][6:]) == {"error": {"code": 500, "message": "generation failed", "type": "server_error"}}
    assert "data: [DONE]\n" not in data
    # rule:upstream-error: the access line and /activity carry the engine's own status and words, not only
    # "200 … (cut)"
    gate.wait_log('upstream_error=500 upstream_message="generation failed"')
    from test_activity import Activity
    from conftest import wait_for
    feed = Activity(gate)
    try:
        wait_for(lambda: feed.of("snapshot"), what="the snapshot")
        done = [r for r in feed.of("snapshot")[0]["recent"] if r["id"] == "mid-stream-error"]
        assert done and done[0]["status"] == 200, feed.of("snapshot")
        assert done[0]["upstream_status"] == 500 and done[0]["upstream_error"] == "generation failed", done
    finally:
        feed.close()


def test_anthropic_stream_error_is_logged_with_the_engines_words(gate):
    r = post(gate.conn(), MSGS, {"model": "3090-laguna-xs", "stream": True, "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "[[error:2]]"}]})
    assert r.status == 200
    read_sse(r)
    gate.wait_log('upstream_error=500 upstream_message="generation failed"')


def test_unknown_model_of_a_known_host_is_404_and_host_errors_pass_through(gate):
    # the 404 needs the host's list: the first /v1/models after a start waits for its first read
    c = gate.conn()
    c.request("GET", "/v1/models")
    assert "3090-laguna-xs" in c.getresponse().read().decode()
    r = post(gate.conn(), CHAT, {"model": "3090-unknown-model"})
    assert r.status == 404
    msg = json.loads(r.read())["error"]["message"]
    assert "host '3090' does not list a model 'unknown-model'" in msg and "GET /v1/models" in msg
    r = post(gate.conn(), "/models/unload", {"model": "3090-qwen3-8b"})
    assert r.status == 400
    assert json.loads(r.read()) == {"error": {"code": 400, "message": "model is not running",
                                              "type": "invalid_request_error"}}


def test_stream_cut_by_host_ends_with_an_error_event(gate):
    r = post(gate.conn(), CHAT, {"model": "3090-laguna-xs", "stream": True,
                                 "messages": [{"role": "user", "content": "[[cut:2]]"}]})
    assert r.status == 200
    data = [l for (_, l) in read_sse(r) if l.startswith("data: ")]
    err = json.loads(data[-1][6:])["error"]
    assert "stopped the stream before it ended" in err["message"]
    assert "data: [DONE]\n" not in data


@pytest.mark.parametrize("request_bytes", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
    b"GET /health HTTP/1.1\nHost: x\n\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
], ids=["cl+te", "dup-cl", "obs-fold", "bare-lf", "bad-chunk", "te-gzip"])
def test_smuggling_attempts_are_400_and_close(gate, double, request_bytes):
    double.clear()
    status, head, body = raw(gate, request_bytes)
    assert status == 400
    assert "Connection: close" in head
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    assert double.forwarded() == []


def test_after_a_refusal_the_rest_of_the_request_is_drained_not_reset(gate):
    """a client still sending when it is refused reads the 400, and its sends do not fail: modelgated
    shuts its side and drains for a moment instead of closing with unread input (which sends RST)"""
    s = gate.sock()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Folded: a\r\n b\r\n\r\n{}")
    head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 400 "), head
    # what a client that had more to send does: keep sending for a while
    for _ in range(64):
        s.sendall(b"x" * 16384)
    s.shutdown(socket.SHUT_WR)
    rest = b""
    while True:
        k = s.recv(65536)
        if not k:
            break
        rest += k
    s.close()
    assert b"obsolete line folding" in head + rest
