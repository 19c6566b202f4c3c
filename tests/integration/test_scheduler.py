"""The switch scheduler against a boxed user manager and the double (rule:switch-waits,
rule:hold-down, rule:no-starvation, rule:arrival-order, rule:wait-budget, rule:keepalive, rule:abandon-switch,
rule:idle-stop, rule:error-event after an
early 200): streams are never cut, agents take turns, a trickle cannot starve a switch, waits get
keepalives, budgets and abandonments are honoured, idle engines stop."""

import json
import os
import re
import socket
import threading
import time

import pytest

from boxes import box_skip_reason, chat, engines_conf, gate_env, local_host
from conftest import free_port, keepalive_chunk, post, read_sse, wait_for

CHAT = "/v1/chat/completions"

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def proxy(**keys):
    return "[Proxy]\n" + "".join("%s=%s\n" % kv for kv in keys.items())


def start_gate(box, make_gate, token_delay="0.01", **keys):
    port = free_port()
    conf = proxy(**keys) + local_host("3090", port) + engines_conf(
        box, "3090", port, double_args="--token-delay %s" % token_delay)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    return g


def stream_lines(g, model, tokens, timeout=120):
    c = g.conn(timeout=timeout)
    r = post(c, CHAT, chat(model, "[[tokens:%d]]" % tokens, stream=True))
    return r, read_sse(r)


def test_waiting_stream_gets_an_early_200_and_keepalives_and_the_running_stream_is_never_cut(box, make_gate):
    # SPEC defaults: KeepaliveAfterSec=10s, KeepaliveIntervalSec=15s; mainline streams for ~40 s
    g = start_gate(box, make_gate, token_delay="0.1", HoldDownSec="1s")
    a_result = {}
    streaming = threading.Event()

    def client_a():
        t0 = time.monotonic()
        c = g.conn(timeout=120)
        r = post(c, CHAT, chat("3090-laguna-xs", "[[tokens:400]]", stream=True))
        first = r.readline()
        streaming.set()
        lines = [(time.monotonic(), first.decode())] + read_sse(r)
        a_result.update(status=r.status, lines=lines, t0=t0)

    ta = threading.Thread(target=client_a)
    ta.start()
    assert streaming.wait(60), "mainline did not start streaming"
    c = g.conn(timeout=120)
    t0 = time.monotonic()
    r = post(c, CHAT, chat("3090-flint-40b", "[[tokens:5]]", stream=True))
    head_at = time.monotonic()
    lines = read_sse(r)
    ta.join()

    assert a_result["status"] == 200
    assert a_result["lines"][-2][1] == "data: [DONE]\n", "the running stream was cut"
    a_end = a_result["lines"][-1][0]
    assert a_end - a_result["t0"] > 35

    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert 9 <= head_at - t0 <= 13, "the early 200 came after %.1f s" % (head_at - t0)
    comments = [(t, l) for t, l in lines if l.startswith(":")]
    # rule:wait-reason: what it waits for, as it is: mainline's one stream (the 1 s hold-down is over)
    assert comments and comments[0][1] == ": waiting for engine fork on 3090: waiting for 1 running stream on mainline\n", comments
    gaps = [b[0] - a[0] for a, b in zip([(t0 + 10, "")] + comments, comments)]
    assert max(gaps) < 16.5, gaps
    data = [l for _, l in lines if l.startswith("data: ")]
    assert data[-1] == "data: [DONE]\n" and len(data) >= 6
    first_token = next(t for t, l in lines if l.startswith("data: ") and not keepalive_chunk(l))
    assert first_token >= a_end - 0.5, "fork answered while mainline still streamed"
    # logged when it came, inside mainline's 1 s hold-down, or just after it
    wait_for(lambda: re.search(r"host 3090: 3090-flint-40b id=\S+ waits before switching to fork: (held by engine "
                               r"mainline's hold-down, 1 s left|waiting for 1 running stream on mainline)\n",
                               g.logtext()), what="the wait's log line")
    line = g.wait_log('POST /v1/chat/completions model="3090-flint-40b" host=3090 status=200 ')
    assert " early=200" in line, line
    # rule:queued-and-switch: it waited behind mainline's stream, then for fork's switch
    queued = float(re.search(r" queued=(\d+\.\d+)s", line).group(1))
    switch = float(re.search(r" switch=(\d+\.\d+)s", line).group(1))
    assert queued >= a_end - t0 - 1.5, (line, a_end - t0)
    assert 0 < switch < first_token - a_end + 1, (line, first_token - a_end)


def test_two_agents_on_two_engines_take_turns(box, make_gate):
    seconds = float(os.environ.get("MODELGATE_AGENTS_SECONDS", "120"))
    hold = 10
    g = start_gate(box, make_gate, token_delay="0.05", HoldDownSec="%ds" % hold, KeepaliveAfterSec="2s",
                   KeepaliveIntervalSec="2s")
    stop_at = time.monotonic() + seconds
    results = {"3090-laguna-xs": [], "3090-flint-40b": []}

    def agent(model):
        c = None
        while time.monotonic() < stop_at:
            try:
                c = c or g.conn(timeout=120)
                r = post(c, CHAT, chat(model, "[[tokens:20]]", stream=True))
                lines = read_sse(r)
                ok = r.status == 200 and lines and lines[-2][1] == "data: [DONE]\n"
                results[model].append("ok" if ok else "error %d %s" % (r.status, lines[-3:]))
            except Exception as e:  # an opencode-style agent re-sends at once on anything
                results[model].append("error %r" % e)
                c = None

    threads = [threading.Thread(target=agent, args=(m,)) for m in results]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0

    for model, turns in results.items():
        assert turns, model
        assert all(t == "ok" for t in turns), (model, [t for t in turns if t != "ok"][:3])
        assert len(turns) >= 3, (model, len(turns))
    g.wait_log("host 3090: switching to engine", count=2)
    switches = g.logtext().count("host 3090: switching to engine")
    assert switches <= elapsed / hold + 1 + 1, (switches, elapsed)  # +1 for the very first start


def test_a_trickle_for_the_running_engine_cannot_starve_a_waiting_switch(box, make_gate):
    g = start_gate(box, make_gate, token_delay="0.05", HoldDownSec="3s")
    c = g.conn(timeout=60)
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200
    r.read()
    up_at = time.monotonic()
    stop = threading.Event()
    started = threading.Event()
    served = []

    def one():
        c = g.conn(timeout=120)
        r = post(c, CHAT, chat("3090-laguna-xs", "[[tokens:20]]", stream=True))
        r.readline()
        started.set()
        read_sse(r)
        served.append(r.status)

    def trickle():
        # one request for mainline every 0.3 s, each streaming ~1 s: never zero in flight on its own
        while not stop.is_set():
            threading.Thread(target=one).start()
            stop.wait(0.3)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        assert started.wait(30), "the trickle did not start"
        t0 = time.monotonic()
        r = post(g.conn(timeout=120), CHAT, chat("3090-flint-40b"))
        waited = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    assert r.status == 200 and r.getheader("X-Double") == "fork"
    # the hold-down (3 s from mainline's start), the requests in flight then (~1 s), and fork's start
    assert time.monotonic() - up_at < 3 + 1 + 5, "fork waited %.1f s behind the trickle" % waited
    wait_for(lambda: len(served) > 5, 60, "the trickle's answers")
    assert all(s == 200 for s in served)


def test_a_waiting_stream_is_told_what_it_waits_for_and_for_how_long(box, make_gate):
    # rule:wait-reason: a model change inside the hold-down, then the engine's start (3 s), a comment a second
    port = free_port()
    conf = proxy(HoldDownSec="6s", KeepaliveAfterSec="1s", KeepaliveIntervalSec="1s") + local_host(
        "3090", port) + engines_conf(box, "3090", port, startup_delay=3)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    r, _ = stream_lines(g, "3090-laguna-xs", 2)
    assert r.status == 200
    r, lines = stream_lines(g, "3090-flint-40b", 2)
    assert r.status == 200
    comments = [l for _, l in lines if l.startswith(":")]
    held = [int(m.group(1)) for m in (re.fullmatch(
        r": waiting for engine fork on 3090: held by engine mainline's hold-down, (\d+) s left\n", l) for l in comments) if m]
    assert len(set(held)) > 1 and held == sorted(held, reverse=True) and max(held) <= 6, comments
    starting = [float(m.group(1)) for m in (re.fullmatch(
        r": waiting for engine fork on 3090: starting fork \((\d+\.\d) s\)\n", l) for l in comments) if m]
    assert len(starting) >= 2 and starting == sorted(starting) and starting[-1] < 30, comments
    # nothing else, and never the old "0 ahead"
    assert "ahead" not in "".join(comments), comments


def test_a_client_that_leaves_while_waiting_causes_no_switch(box, make_gate):
    g = start_gate(box, make_gate, token_delay="0.05", HoldDownSec="1s")
    result = {}
    t = threading.Thread(target=lambda: result.update(lines=stream_lines(g, "3090-laguna-xs", 60)[1]))
    t.start()
    wait_for(lambda: "engine mainline up" in g.logtext(), 30, "mainline up")
    s = g.sock()
    body = json.dumps(chat("3090-flint-40b")).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    g.wait_log("waits before switching to fork: ")
    s.close()
    t.join()
    assert result["lines"][-2][1] == "data: [DONE]\n"
    g.wait_log("host 3090: switch to fork abandoned, no client is waiting")
    assert "switching to engine fork" not in g.logtext()
    assert box.active_state("llama-fork.service") == "inactive"
    assert box.active_state("llama-mainline.service") == "active"


def test_wait_budget_ends_a_wait_with_504_or_an_error_event(box, make_gate):
    g = start_gate(box, make_gate, token_delay="0.1", HoldDownSec="1s", WaitBudgetSec="2s",
                   KeepaliveAfterSec="1s", KeepaliveIntervalSec="1s")
    t = threading.Thread(target=lambda: stream_lines(g, "3090-laguna-xs", 60))
    t.start()
    wait_for(lambda: "engine mainline up" in g.logtext(), 30, "mainline up")
    c = g.conn(timeout=30)
    t0 = time.monotonic()
    r = post(c, CHAT, chat("3090-flint-40b"))
    body = json.loads(r.read())
    assert r.status == 504 and 1.5 < time.monotonic() - t0 < 6
    assert "waited 2s for engine 'fork' of host '3090'" in body["error"]["message"]
    # a streaming client has its early 200 by then: the 504 is an error event, with no [DONE]
    r = post(g.conn(timeout=30), "/v1/messages", {"model": "3090-flint-40b", "max_tokens": 8, "stream": True,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    lines = [l for _, l in read_sse(r)]
    assert r.status == 200
    # rule:keepalive-events: the message begun, then keepalives with the words, then the error inside it
    assert lines[0] == "event: message_start\n", lines[:4]
    assert any(l.startswith(": waiting for engine fork on 3090") for l in lines), lines
    i = lines.index("event: error\n")
    err = json.loads(lines[i + 1][len("data: "):])
    assert err["type"] == "error" and "waited 2s" in err["error"]["message"]
    t.join()
    g.wait_log("early=200 error=504")


def test_idle_engine_is_stopped_after_idle_stop_sec(box, make_gate):
    g = start_gate(box, make_gate, IdleStopSec="2s")
    r = post(g.conn(), CHAT, chat("3090-laguna-xs"))
    assert r.status == 200
    r.read()
    t0 = time.monotonic()
    g.wait_log("host 3090: idle 2s, engine mainline stopped", timeout=30)
    assert time.monotonic() - t0 >= 1.5
    assert box.active_state("llama-mainline.service") == "inactive"
    # and the next request starts it again
    r = post(g.conn(timeout=60), CHAT, chat("3090-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline"
