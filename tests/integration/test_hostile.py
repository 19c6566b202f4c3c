"""Hostile and faulty hosts (tests/hostile/hostile-host.py), reloads and clients that leave: a host's answer
is input, one request's failure is not the host's, a host found down fails its requests at once, and
nothing of it reaches another connection."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from boxes import chat
from conftest import PYTHON, host_conf, post, read_response, wait_for
from test_faults import blackhole

HOSTILE = os.path.join(os.path.dirname(__file__), "../hostile/hostile-host.py")
CHAT = "/v1/chat/completions"


class Hostile:
    def __init__(self, tmp, scenario, *args):
        portfile = os.path.join(tmp, "hostile-%d.port" % id(self))
        self.log = open(os.path.join(tmp, "hostile-%d.log" % id(self)), "w")
        self.proc = subprocess.Popen([PYTHON, HOSTILE, "--scenario", scenario, "--port-file", portfile] +
                                     list(args), stdout=self.log, stderr=self.log)
        wait_for(lambda: os.path.exists(portfile) or self.proc.poll() is not None, what="the hostile host")
        assert self.proc.poll() is None, "the hostile host did not start"
        self.port = int(open(portfile).read())
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def make_hostile(tmp):
    made = []

    def make(scenario, *args):
        h = Hostile(tmp, scenario, *args)
        made.append(h)
        return h
    yield make
    for h in made:
        h.stop()


def request_bytes(method, path, body=b"", extra=b""):
    head = b"%s %s HTTP/1.1\r\nHost: x\r\n%s" % (method, path, extra)
    if body:
        head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + b"\r\n" + body


def read_all_responses(s):
    """every response on the connection up to its end: the last request asked for Connection: close"""
    f = s.makefile("rb")
    out = []
    while True:
        line = f.peek(1)
        if not line:
            return out
        out.append(read_response(f))


@pytest.mark.parametrize("scenario,status", [("interim-with-forged-response", 200), ("interim-chunked", 502),
                                             ("continue-with-body", 502)])
def test_an_interim_response_ends_at_its_empty_line(make_hostile, make_gate, scenario, status):
    """RFC 9112 §6.3 rule 1: a 1xx has no content, whatever its headers say. What a host puts after it is
    its final response (the 79 bytes of a forged 200: the host's own answer, as any other) or a malformed
    one (502); either way the client's connection carries exactly one response per request."""
    h = make_hostile(scenario)
    g = make_gate(host_conf("evil", h.url))
    s = g.sock()
    body = json.dumps(chat("evil-x")).encode()
    s.sendall(request_bytes(b"POST", CHAT.encode(), body) + request_bytes(b"GET", b"/health") +
              request_bytes(b"GET", b"/health", extra=b"Connection: close\r\n"))
    got = read_all_responses(s)
    assert [r[0] for r in got] == [status, 200, 200], got
    if status == 200:
        assert got[0][2] == b"INJECTED", got[0]
    else:
        assert "host 'evil' failed this request: malformed response" in json.loads(got[0][2])["error"]["message"]
    assert all(json.loads(r[2])["status"] == "ok" for r in got[1:]), got
    s.close()
    # a malformed answer is the request's failure: the host is not down
    assert "host evil down" not in g.logtext()


def test_a_reload_that_removes_the_host_of_a_request_still_reading_its_body_answers_503(make_double, make_gate,
                                                                                     tmp):
    """[Access] on: the request keeps the configuration it was admitted under, whose host a reload removes
    and drains while the body still comes"""
    ok = make_double("--models", "ok", "--loaded", "ok")
    other = make_double("--models", "ok", "--loaded", "ok")
    access = "[Access]\nAnonymousDailyRequests=100\n"
    g = make_gate(access + host_conf("evil", ok.url) + host_conf("other", other.url))
    body = json.dumps(chat("other-ok")).encode()
    s = g.sock()
    f = s.makefile("rb")
    s.sendall(request_bytes(b"POST", CHAT.encode(), body, extra=b"Expect: 100-continue\r\n")[:-len(body)])
    # the 100 Continue comes once the head is admitted: the request holds its configuration now
    assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
    s.sendall(body[:10])
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n" % g.port + access + host_conf("evil", ok.url))
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("host other: drained")
    s.sendall(body[10:])
    status, headers, answer = read_response(s.makefile("rb"))
    assert status == 503, answer
    msg = json.loads(answer)["error"]["message"]
    assert "host 'other' was removed from modelgate's configuration by a reload" in msg, msg
    assert headers["retry-after"] == "30"
    assert g.proc.poll() is None
    s.close()


def test_a_reload_that_removes_an_aliass_next_target_answers_503_and_never_crashes(make_hostile, make_double,
                                                                                 make_gate):
    """the review's reproducer: the first target holds the request and closes; its alias's next target's
    host leaves the configuration meanwhile, and the move there finds no host"""
    evil = make_hostile("hold-then-close", "--hold", "3")
    other = make_double("--models", "ok", "--loaded", "ok")
    g = make_gate(host_conf("evil", evil.url) + host_conf("other", other.url) +
                  "[Alias]\nName=pick\nPolicy=ordered\nTargets=evil-x other-ok\n")
    c = g.conn()
    c.request("POST", CHAT, json.dumps(chat("pick")), {"Content-Type": "application/json"})
    # the request is with evil, which holds it: other leaves the configuration meanwhile
    wait_for(lambda: any("POST" in l for l in json.loads(raw_get(evil.port, "/_hostile/requests"))), 10,
             "the request at the first target")
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n" % g.port + host_conf("evil", evil.url) +
                "[Alias]\nName=pick\nPolicy=ordered\nTargets=evil-x\n")
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("host other: drained")
    r = c.getresponse()
    body = r.read()
    assert r.status == 503, body
    assert "host 'other' was removed from modelgate's configuration by a reload" in body.decode(), body
    # logged before the answer was queued, but a notice waits in the log's buffer until the loop is idle,
    # which may be after the answer reached us (under valgrind, often enough): waited for, not read once
    g.wait_log("alias pick: target evil-x refused (connection reset); trying other-ok")
    assert g.proc.poll() is None


def raw_get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(request_bytes(b"GET", path.encode(), extra=b"Connection: close\r\n"))
    return read_response(s.makefile("rb"))[2]


def test_an_early_answer_and_close_is_the_requests_answer_and_the_host_stays_up(make_hostile, make_gate):
    """RFC 9112 §9.5: the host answers 400 after the head and closes with 16 MiB of body unread; the client
    gets that answer, and the host is not down for anybody"""
    h = make_hostile("answer-early-and-close")
    g = make_gate("[Proxy]\nMaxBodySize=32M\n" + host_conf("evil", h.url))
    headers = {"X-Filler-%d" % i: "v" * 20 for i in range(150)}
    body = {"model": "evil-x", "messages": [{"role": "user", "content": "a" * (16 << 20)}]}
    r = post(g.conn(timeout=60), CHAT, body, headers)
    answer = r.read()
    assert r.status == 400, answer
    assert "the request was refused by the host" in answer.decode(), answer
    # the host is not down: it is listed, /health says so, and nothing logged it down
    c = g.conn()
    c.request("GET", "/v1/models")
    ids = [m["id"] for m in json.loads(c.getresponse().read())["data"]]
    assert "evil-x" in ids, ids
    c.request("GET", "/health?strict=1")
    r = c.getresponse()
    assert r.status == 200, r.read()
    r.read()
    assert "host evil down" not in g.logtext()


def test_a_host_found_down_by_its_probe_refuses_new_requests_and_fails_those_in_flight(make_hostile, make_gate):
    """a host that accepts connections and never answers: the request in flight fails when the probe says
    the host is down, not after UpstreamIdleTimeoutSec= (10 min); later ones are refused at once"""
    h = make_hostile("silent")
    g = make_gate("[Proxy]\nPollIntervalSec=1s\n" + host_conf("evil", h.url))
    # a client timeout far below UpstreamIdleTimeoutSec= and far above the probe's 5 s
    r = post(g.conn(timeout=60), CHAT, chat("evil-x"))
    assert r.status == 503, r.read()
    msg = json.loads(r.read())["error"]["message"]
    assert msg.startswith("host 'evil' is down: no answer in time"), msg
    g.wait_log("host evil down: no answer in time")
    r = post(g.conn(timeout=5), CHAT, chat("evil-y", stream=True))
    assert r.status == 503
    assert "host 'evil' is down: no answer in time" in json.loads(r.read())["error"]["message"]


def test_a_stream_whose_host_goes_silent_is_cut_when_its_probe_finds_it_down(make_hostile, make_gate):
    h = make_hostile("stream-then-silence")
    g = make_gate("[Proxy]\nPollIntervalSec=1s\n" + host_conf("evil", h.url))
    r = post(g.conn(timeout=60), CHAT, chat("evil-x", stream=True))
    assert r.status == 200
    text = r.read().decode()  # the stream ends (its last chunk) once the probe found the host down
    assert '"first"' in text, text
    assert "host 'evil' stopped the stream before it ended (no answer in time)" in text, text
    assert "data: [DONE]" not in text


def test_a_streaming_client_that_leaves_a_silent_host_cancels_its_request(make_double, make_gate):
    """the host sent its SSE head and prefills in silence; the client closes: modelgate finds out at once
    (a comment line) and closes the host's connection, so the GPU does not work for nobody"""
    d = make_double("--models", "x", "--loaded", "x")
    g = make_gate(host_conf("h", d.url))
    s = g.sock()
    body = json.dumps(chat("h-x", "[[hang]]", stream=True)).encode()
    s.sendall(request_bytes(b"POST", CHAT.encode(), body))
    f = s.makefile("rb")
    assert f.readline().startswith(b"HTTP/1.1 200 ")
    wait_for(lambda: any(x["path"] == CHAT for x in d.requests()), 10, "the request at the host")
    f.close()
    s.close()
    wait_for(lambda: [x.get("disconnected") for x in d.requests() if x["path"] == CHAT] == [True], 10,
             "the host's connection closed")
    g.wait_log("cut=client")


def test_a_half_closing_client_still_gets_its_whole_stream(make_double, make_gate):
    d = make_double("--models", "x", "--loaded", "x", "--token-delay", "0.05")
    g = make_gate(host_conf("h", d.url))
    s = g.sock()
    body = json.dumps(chat("h-x", "[[tokens:20]]", stream=True)).encode()
    s.sendall(request_bytes(b"POST", CHAT.encode(), body, extra=b"Connection: close\r\n"))
    s.shutdown(socket.SHUT_WR)
    f = s.makefile("rb")
    status, _, text = read_response(f)
    while status == 100:  # the probe of a half-close before the head (a client takes a 1xx at any time)
        status, _, text = read_response(f)
    assert status == 200
    assert text.count(b'"delta":{"content"') == 20 and text.endswith(b"data: [DONE]\n\n"), text


def test_a_host_whose_first_read_hangs_costs_one_listing_its_wait_not_each(make_double, make_gate):
    """the first /v1/models after a start waits (2 s at most) for every host's first read; a blackholed
    host takes its 10 s connect timeout to fail that read, and the listings after the first answer at
    once, without it"""
    hole, held = blackhole()
    d = make_double("--models", "ok", "--loaded", "ok")
    g = make_gate(host_conf("evil", "http://127.0.0.1:%d" % hole.getsockname()[1]) + host_conf("good", d.url))

    def listing():
        t = time.monotonic()
        c = g.conn()
        c.request("GET", "/v1/models")
        r = c.getresponse()
        ids = [m["id"] for m in json.loads(r.read())["data"]]
        return ids, time.monotonic() - t

    ids, first = listing()
    assert ids == ["good-ok"] and first > 1.5, (ids, first)
    assert "host evil down" not in g.logtext()  # still within the first read
    for _ in range(3):
        ids, took = listing()
        assert ids == ["good-ok"] and took < first / 2, (ids, took, first)
    assert "host evil down" not in g.logtext(), "the window closed before the test was done"
    hole.close()
    for c in held:
        c.close()
