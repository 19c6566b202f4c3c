"""Load, bounded in time: 2 hosts (boxed user managers) with 2 engines each, 200 clients mixing streaming
and non-streaming requests across all 4 engines, re-sending at once on any error as opencode does.
Every turn must end answered, no stream may be cut by a switch, switches stay within what the hold-down
allows, and memory stays flat. MODELGATE_LOAD_SECONDS shortens or lengthens the run (default 120)."""

import json
import os
import random
import threading
import time

import pytest

from boxes import box_skip_reason, chat, gate_env, local_host, two_engines
from conftest import SANITIZED, free_port, keepalive_chunk, post, read_sse

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

SECONDS = float(os.environ.get("MODELGATE_LOAD_SECONDS", "120"))
CLIENTS = 200
HOLD_DOWN = 5
MODELS = ["g1-laguna-xs", "g1-flint-40b", "g2-laguna-xs", "g2-flint-40b"]


def turn(g, model, stream, stats, lock):
    """one agent turn, re-sent at once until it is answered whole"""
    attempts = 0
    while True:
        attempts += 1
        try:
            c = g.conn(timeout=120)
            r = post(c, "/v1/chat/completions", chat(model, "[[tokens:6]]", stream=stream))
            if stream:
                lines = read_sse(r)
                text = "".join(l for _, l in lines)
                tokens = [l for _, l in lines if l.startswith("data: {") and '"choices"' in l and not keepalive_chunk(l)]
                whole = r.status == 200 and lines and lines[-2][1] == "data: [DONE]\n"
                if tokens and not whole:
                    with lock:
                        stats["cut"] += 1  # a stream that started and did not end: what must never happen
                if not whole:
                    with lock:
                        stats["errors"].append("stream %d %s" % (r.status, text[-200:]))
            else:
                body = r.read()
                whole = r.status == 200 and json.loads(body)["choices"][0]["message"]["content"] == \
                    "tok0 tok1 tok2 tok3 tok4 tok5 "
                if not whole:
                    with lock:
                        stats["errors"].append("answer %d %s" % (r.status, body[:200]))
            c.close()
            if whole:
                with lock:
                    stats["turns"] += 1
                    stats["attempts"] += attempts
                return
        except Exception as e:  # a reset or a timeout: the agent sends the turn again
            with lock:
                stats["errors"].append(repr(e))


def agent(g, seed, deadline, stats, lock):
    rnd = random.Random(seed)
    while time.monotonic() < deadline:
        turn(g, rnd.choice(MODELS), rnd.random() < 0.6, stats, lock)


def test_200_clients_on_4_engines_of_2_hosts(make_box, make_gate):
    b1, b2 = make_box(), make_box()
    p1, p2 = free_port(), free_port()
    conf = "[Proxy]\nHoldDownSec=%ds\nKeepaliveAfterSec=2s\nKeepaliveIntervalSec=2s\nIdleStopSec=0\n" % HOLD_DOWN
    conf += local_host("g1", p1) + two_engines(b1, p1) % {"host": "g1", "extra": ""}
    # the second host's manager is the second box's, reached as Bus=system: sd-bus takes the system bus
    # from $DBUS_SYSTEM_BUS_ADDRESS, which points at that box's bus here
    conf += "[Host]\nName=g2\nURL=http://127.0.0.1:%d\nBus=system\n" % p2
    conf += two_engines(b2, p2) % {"host": "g2", "extra": ""}
    g = make_gate(conf, env=dict(gate_env(b1), DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + b2.bus))
    g.wait_log("host g1 up")
    g.wait_log("host g2 up")

    stats, lock = {"turns": 0, "attempts": 0, "cut": 0, "errors": []}, threading.Lock()
    start = time.monotonic()
    deadline = start + SECONDS
    threads = [threading.Thread(target=agent, args=(g, i, deadline, stats, lock)) for i in range(CLIENTS)]
    rss = []
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        rss.append(g.rss_kb())
        assert g.proc.poll() is None, g.logtext()[-3000:]
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start

    log = g.logtext()
    assert stats["cut"] == 0, "%d streams were cut: %s" % (stats["cut"], stats["errors"][:3])
    assert stats["turns"] >= CLIENTS, stats["turns"]
    for host in ("g1", "g2"):
        switches = log.count("host %s: switching to engine" % host)
        assert 1 <= switches <= elapsed / HOLD_DOWN + 2, (host, switches, elapsed)
    print("\n%d turns in %.0f s, %d re-sends, %d errors re-sent (%s); switches g1=%d g2=%d; RSS %d→%d KiB"
          % (stats["turns"], elapsed, stats["attempts"] - stats["turns"], len(stats["errors"]),
             stats["errors"][:3], log.count("host g1: switching"), log.count("host g2: switching"),
             rss[len(rss) // 4], rss[-1]))
    assert stats["errors"] == [], stats["errors"][:5]
    if not SANITIZED:
        # flat: the second half of the run does not grow beyond the first quarter's level by much
        assert rss[-1] < rss[len(rss) // 4] * 1.3 + 2048, rss
    else:
        print("RSS not compared: ASan's quarantine grows by design")
