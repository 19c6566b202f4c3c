"""rule:keepalive-events: what a waiting stream gets on the wire, per API, checked against the table of
what each client counts (tests/integration/clients.json, found by running the clients: docs/clients-waiting.md).
An engine that takes 4 s to start, keepalives every second: each API's stream is read raw, event by event."""

import json
import os
import re

import pytest

from boxes import box_skip_reason, engines_conf, gate_env, local_host
from conftest import free_port, post

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

CLIENTS = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients.json")))


def events_of(resp):
    """the stream's events in order: (comments, event name or None, data or None), one per blank line"""
    out, comments, name, data = [], [], None, None
    while True:
        line = resp.readline()
        if not line:
            return out
        line = line.decode().rstrip("\r\n")
        if line == "":
            if comments or name or data is not None:
                out.append((comments, name, data))
            comments, name, data = [], None, None
        elif line.startswith(":"):
            comments.append(line[1:].strip())
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()


@pytest.fixture
def slow_start_gate(box, make_gate):
    port = free_port()
    conf = "[Proxy]\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("3090", port) + \
        engines_conf(box, "3090", port, startup_delay=4.0)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    return g


REQUESTS = {
    "/v1/messages": lambda m: {"model": m, "stream": True, "max_tokens": 16,
                               "messages": [{"role": "user", "content": "[[tokens:5]]"}]},
    "/v1/responses": lambda m: {"model": m, "stream": True, "input": "[[tokens:5]]"},
    "/v1/chat/completions": lambda m: {"model": m, "stream": True,
                                       "messages": [{"role": "user", "content": "[[tokens:5]]"}]},
}


@pytest.mark.parametrize("api", sorted(CLIENTS["apis"]))
def test_a_waiting_stream_gets_the_keepalive_its_clients_count(slow_start_gate, api):
    g = slow_start_gate
    want = CLIENTS["apis"][api]
    path = want["path"]
    r = post(g.conn(timeout=60), path, REQUESTS[path]("3090-laguna-xs"), {"X-Request-Id": "req-ka-1"})
    assert r.status == 200, r.status
    evs = events_of(r)
    names = [n for _, n, d in evs if d is not None]
    # the keepalives: before the engine's first event, every one with the words of what it waits for
    ours = [x for x in (want.get("begin"), want.get("event")) if x]

    def keepalive_chunk(d):
        return want.get("chunk") and json.loads(d).get("choices") == []
    first_engine = next(i for i, (c, n, d) in enumerate(evs)
                        if d is not None and n not in ours and not keepalive_chunk(d))
    waits = evs[:first_engine]
    # (a bare ":" is modelgate's probe of a client that may have gone, rule:client-gone)
    kept = [e for e in waits if any(e[0])]
    assert len(kept) >= 2, evs[:6]  # 4 s start, a keepalive each second after the first
    for comments, name, data in kept:
        assert any(re.search(r"starting mainline|waiting for engine mainline", c) for c in comments), comments
        if want.get("chunk"):
            # chat: a chunk with no choices (Qwen Code counts no comment), of the model the client named
            assert name is None and data is not None, (name, data)
            chunk = json.loads(data)
            assert chunk["object"] == "chat.completion.chunk" and chunk["choices"] == [], chunk
            assert chunk["model"] == "3090-laguna-xs" and chunk["id"].endswith("req-ka-1"), chunk
        elif want.get("event"):
            # an event the client's idle timer counts (a data line), of the answer begun
            assert name == want["event"] and data is not None, (name, data)
            assert json.loads(data)["type"] == want["event"]
        else:
            assert data is None and name is None, (name, data)  # the comment alone
    if want.get("begin"):
        comments, name, data = waits[0]
        assert name == want["begin"], waits[0]
        # once: the engine's own beginning is spliced, never sent a second time
        assert names.count(want["begin"]) == 1, names
        body = json.loads(data)
        obj = body.get("message") or body.get("response")
        assert obj["id"].endswith("req-ka-1") and obj["model"] == "3090-laguna-xs", obj
    # the engine's answer, whole, after them
    assert names[-1] == want["last"], names
    if api == "messages":
        # the engine's message_start became a message_delta with its usage: its prompt tokens
        spliced = [json.loads(d) for _, n, d in evs[first_engine - 1:] if n == "message_delta"]
        assert spliced and spliced[0]["usage"]["input_tokens"] > 0, spliced
    line = g.wait_log("POST %s model=\"3090-laguna-xs\"" % path)
    assert " early=200" in line and " status=200" in line and " error=" not in line, line
