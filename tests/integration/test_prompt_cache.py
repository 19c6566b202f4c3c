"""rule:prompt-cache against the real llama-server (router mode, CPU, the suite's tiny model): two agents on
two engines of one GPU host take turns, and the agent whose engine was stopped by the other's turn gets its
prompt cache back, so its next turn prefills only its new tokens; an engine started without
--slot-save-path is stopped without a save, said once. Prefilled and reused tokens, and the save and
restore times, are printed in the test log (run with -s)."""

import json
import os
import re
import time

import pytest

from boxes import gate_env, local_host
from conftest import free_port, metric_samples, post, wait_for
from test_activity import Activity
from test_real import FAST, model_files, router_unit, skip_reason  # noqa: F401 (model_files: a fixture)

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))

CHAT = "/v1/chat/completions"


def agent_prompt(name, words=180):
    """a coding agent's context of a couple of thousand tokens: the same on each of its turns"""
    return "You are agent %s. " % name + " ".join("file%d line%d says %s%d;" % (i % 37, i, name, i * 7)
                                                  for i in range(words))


def turn(g, model, system, user):
    """one greedy turn; its (prompt tokens, reused from the cache, prefilled) as the engine said them"""
    body = {"model": model, "temperature": 0, "max_tokens": 4,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    r = post(g.conn(timeout=300), CHAT, body)
    b = json.loads(r.read())
    assert r.status == 200, b
    return (b["usage"]["prompt_tokens"], b["timings"]["cache_n"], b["timings"]["prompt_n"])


def cache_lines(g, what):
    return [l for l in g.logtext().splitlines() if ": %s the prompt caches of" % what in l]


def two_engines(box, tmp, model_files, fork_saves=True):
    """mainline (laguna-xs) and fork (flint-xs) on one port, conflicting both ways, -c 8192; mainline with
    --slot-save-path, fork too unless fork_saves is False"""
    tiny, _ = model_files
    port = free_port()
    a, b = os.path.join(tmp, "models-mainline"), os.path.join(tmp, "models-fork")
    saves = os.path.join(tmp, "slot-saves") + "/"
    for d in (a, b, saves):
        os.makedirs(d)
    os.link(tiny, os.path.join(a, "laguna-xs.gguf"))
    os.link(tiny, os.path.join(b, "flint-xs.gguf"))
    args = "-c 8192 --parallel 1 --slot-save-path " + saves
    box.add_unit("llama-mainline.service", router_unit("mainline", port, a, args, "llama-fork.service"))
    box.add_unit("llama-fork.service", router_unit("fork", port, b, args if fork_saves else "-c 8192 --parallel 1",
                                                   "llama-mainline.service"))
    box.reload()
    conf = local_host("3090", port) + """
[Engine]
Host=3090
Name=mainline
Unit=llama-mainline.service
Models=laguna-*
StartTimeoutSec=60s
PromptCacheSaveSec=30s

[Engine]
Host=3090
Name=fork
Unit=llama-fork.service
Models=flint-*
StartTimeoutSec=60s
PromptCacheSaveSec=30s
"""
    return conf, saves


def test_an_agents_turn_after_a_switch_back_prefills_only_its_new_tokens(box, tmp, model_files, make_gate):
    conf, saves = two_engines(box, tmp, model_files)
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    feed = Activity(g)
    wait_for(lambda: feed.of("snapshot"), what="the activity snapshot")
    a, b = agent_prompt("A"), agent_prompt("B")

    n, reused, prefilled = turn(g, "3090-laguna-xs", a, "first turn")
    print("\nA's first turn: %d prompt tokens, %d reused, %d prefilled" % (n, reused, prefilled))
    assert n > 1500 and prefilled > 0.9 * n, (n, reused, prefilled)
    # B's turn switches the GPU: mainline's slot is saved before it stops
    n_b, _, _ = turn(g, "3090-flint-xs", b, "first turn")
    assert box.active_state("llama-mainline.service") == "inactive"
    saved = g.wait_log("engine mainline: saved the prompt caches of")
    print("B's turn (%d tokens) switched to fork; %s" % (n_b, saved))
    files = [f for f in os.listdir(saves) if f.startswith("modelgate-mainline-")]
    assert len(files) == 1 and os.path.getsize(os.path.join(saves, files[0])) > 0, os.listdir(saves)
    m = re.search(r"of 1 slot \((\d+) tokens", saved)
    assert m and int(m.group(1)) >= n, saved

    # A's next turn switches back: restored before the request reaches the engine, so only its new tokens
    t0 = time.monotonic()
    n2, reused2, prefilled2 = turn(g, "3090-laguna-xs", a, "second turn")
    took = time.monotonic() - t0
    restored = g.wait_log("engine mainline: restored the prompt caches of")
    print("A's second turn after switching back (%.1fs): %d prompt tokens, %d reused, %d prefilled; %s" %
          (took, n2, reused2, prefilled2, restored))
    assert prefilled2 <= 0.1 * n2, (n2, reused2, prefilled2)
    g.wait_log("engine fork: saved the prompt caches of")
    # the access line and the activity record say the same
    g.log_mark("after-a")
    line = [l for l in g.logtext().splitlines() if 'model="3090-laguna-xs"' in l and " status=200 " in l][-1]
    assert " tokens=in:%d,cached:%d," % (n2, reused2) in line, line
    done = wait_for(lambda: [d for d in feed.of("request") if d["phase"] == "done" and d["model"] == "3090-laguna-xs"][1:],
                    what="A's second turn's activity record")[0]
    assert (done["tokens_in"], done["tokens_cached"], done["tokens_prefilled"]) == (n2, reused2, prefilled2), done
    m = metric_samples(g)
    restored = m[("modelgate_prompt_cache_restored_slots_total", (("engine", "mainline"), ("host", "3090")))]
    assert restored == 1, restored
    assert m[("modelgate_tokens_total", (("engine", "mainline"), ("host", "3090"), ("kind", "prefilled"),
                                         ("model", "laguna-*")))] == prefilled + prefilled2

    # the same files once more: B back on fork, its slot restored; no file more than one per slot
    n3, reused3, prefilled3 = turn(g, "3090-flint-xs", b, "second turn")
    print("B's second turn: %d prompt tokens, %d reused, %d prefilled" % (n3, reused3, prefilled3))
    assert prefilled3 <= 0.1 * n3, (n3, reused3, prefilled3)
    assert len([f for f in os.listdir(saves) if f.startswith("modelgate-mainline-")]) == 1, os.listdir(saves)


def test_an_engine_without_slot_save_path_is_stopped_at_once_said_once(box, tmp, model_files, make_gate):
    conf, saves = two_engines(box, tmp, model_files, fork_saves=False)
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    b = agent_prompt("B")
    turn(g, "3090-flint-xs", b, "first turn")
    for i in range(2):
        t0 = time.monotonic()
        turn(g, "3090-laguna-xs", "hi", "turn %d" % i)
        took = time.monotonic() - t0
        print("switch away from fork (no --slot-save-path), turn %d: %.1fs" % (i, took))
        # the 501 comes at once: nothing waits for PromptCacheSaveSec=30s
        assert took < 20, took
        turn(g, "3090-flint-xs", b, "turn %d" % i)
    g.log_mark("done")
    said = [l for l in g.logtext().splitlines() if "engine fork does not save prompt caches" in l]
    assert len(said) == 1, said
    assert not cache_lines(g, "saved") or all("engine fork" not in l for l in cache_lines(g, "saved"))
    assert not [f for f in os.listdir(saves) if f.startswith("modelgate-fork-")]


def test_an_idle_stop_saves_and_the_next_start_restores(box, tmp, model_files, make_gate):
    conf, saves = two_engines(box, tmp, model_files)
    g = make_gate("[Proxy]\nHoldDownSec=1s\nIdleStopSec=3s\n" + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    a = agent_prompt("A")
    n, reused, prefilled = turn(g, "3090-laguna-xs", a, "first turn")
    saved = g.wait_log("engine mainline: saved the prompt caches of", timeout=30)
    g.wait_log("host 3090: idle 3s, engine mainline stopped", timeout=30)
    assert box.active_state("llama-mainline.service") == "inactive"
    n2, reused2, prefilled2 = turn(g, "3090-laguna-xs", a, "second turn")
    restored = g.wait_log("engine mainline: restored the prompt caches of")
    print("\nidle stop: %s\nnext start: %s\nA's turn after it: %d prompt tokens, %d reused, %d prefilled" %
          (saved, restored, n2, reused2, prefilled2))
    assert prefilled2 <= 0.1 * n2, (n2, reused2, prefilled2)
