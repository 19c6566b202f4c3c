"""WarmupRequest= and PrimeAfterIdleSec=: ready means answers at once. The warm-up reaches the engine after
/health is 200 and before the engine counts as up (so before any client's request), and again after the
engine has been idle that long, once per idle period."""

import json
import os
import time

import pytest

from boxes import box_skip_reason, chat, engine_unit, gate_env, local_host
from conftest import double_requests, free_port, post, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def test_warmup_before_up_and_prime_after_idle(box, make_gate, tmp):
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs"))
    box.reload()
    warm = os.path.join(tmp, "warmup.json")
    with open(warm, "w") as f:
        json.dump(chat("laguna-xs", "warm-up please"), f)
    conf = local_host("h", port) + "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\n" \
        "WarmupRequest=%s\nPrimeAfterIdleSec=2s\n" % warm
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host h up")

    r = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs", "the client"))
    assert r.status == 200
    r.read()
    bodies = [json.loads(q["body"])["messages"][0]["content"] for q in double_requests(port, "/v1/chat/completions")]
    assert bodies == ["warm-up please", "the client"], bodies
    g.wait_log("engine main warmed up in")
    g.wait_log("engine main up after")
    log = g.logtext()
    assert log.index("engine main warmed up in") < log.index("engine main up after"), log
    agents = [dict(q["headers"]).get("User-Agent") for q in double_requests(port, "/v1/chat/completions")]
    assert agents[0] == "modelgate (warm-up)"

    # idle for PrimeAfterIdleSec: primed once, not again while nothing else happens
    g.wait_log("engine main primed after 2s idle (PrimeAfterIdleSec=)", timeout=10)
    time.sleep(3)  # a second idle period would have primed again by now; none may
    bodies = [json.loads(q["body"])["messages"][0]["content"] for q in double_requests(port, "/v1/chat/completions")]
    assert bodies == ["warm-up please", "the client", "warm-up please"], bodies
    # traffic starts a new idle period, and with it a new prime
    r = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs", "again"))
    r.read()
    g.wait_log("primed after 2s idle", count=2, timeout=10)
