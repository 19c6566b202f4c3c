"""rule:prompt-cache against the llama.cpp double: the save and the restore are steps of the switch of their
own, shown as such (the waiting stream's keepalive words, /activity's host events, the log line), and its
faults (a host that stops answering mid-save, a connection that dies, a reload during a save) never delay
a switch past PromptCacheSaveSec= nor fail the client's request. test_prompt_cache.py has the real
llama-server; test_engines.py the save that takes longer than its budget and the restore that fails."""

import json
import os
import re
import signal
import threading

import pytest

import conftest
from boxes import box_skip_reason, gate_env, host_prop, local_host, two_engines
from conftest import double_requests, free_port, wait_for
from test_activity import Activity

CHAT = "/v1/chat/completions"
FAST = "[Proxy]\nHoldDownSec=1s\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n"

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def gate(box, make_gate, double_args, budget, host_extra="", extra_args=()):
    port = free_port()
    conf = two_engines(box, port, double_args=double_args) % {"host": "3090",
                                                               "extra": "PromptCacheSaveSec=%s\n" % budget}
    g = make_gate(FAST + local_host("3090", port, host_extra) + conf, env=gate_env(box), extra_args=extra_args)
    g.wait_log("host 3090 up")
    return g, port


def ask(g, model, stream=False):
    """one request; (its status, the engine that answered, its keepalive comments, seconds it took); a
    stream's early 200 has no X-Double header: the engine is the one whose model is in its chunks"""
    a = conftest.ask(g, model, "[[tokens:3]]", stream, timeout=90)
    if stream:
        lines = a.lines
        assert lines and lines[-2] == "data: [DONE]\n", lines
        # the keepalive chunks name the model as the client did, the engine's as the engine does
        models = {json.loads(l[6:]).get("model") for l in lines if l.startswith("data: {")} - {model}
        by = {"laguna-xs": "mainline", "flint-40b": "fork"}.get(models.pop()) if len(models) == 1 else models
        return a.status, by, [l for l in lines if l.startswith(":")], a.took
    else:
        lines = a.text().splitlines()
    return a.status, a.getheader("X-Double"), [l for l in lines if l.startswith(":")], a.took


def saves(port):
    """the save POSTs the double took: /slots/0?action=save&autoload=false"""
    return [q for q in double_requests(port) if q["path"].startswith("/slots/0?action=save")]


def cache_events(feed, step, engine):
    return [d["prompt_cache"] for t, d in feed.events if t == "host" and d.get("prompt_cache")
            and d["prompt_cache"]["step"] == step and d["prompt_cache"]["engine"] == engine]


def test_the_save_and_the_restore_are_steps_of_the_switch_shown_as_such(box, make_gate):
    # each save and each restore takes 2 s on the double: long enough for a keepalive a second to say it
    g, port = gate(box, make_gate, "--slot-save-delay 2 --slot-restore-delay 2", "20s")
    feed = Activity(g)
    wait_for(lambda: feed.of("snapshot"), what="the activity snapshot")
    for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork")):
        status, by, _, _ = ask(g, model)
        assert (status, by) == (200, engine)
    # the third turn switches back: fork's slot is saved, then mainline's (saved by the second) restored
    status, by, comments, took = ask(g, "3090-laguna-xs", stream=True)
    assert (status, by) == (200, "mainline")
    print("\nthe switch back with a 2 s save and a 2 s restore took %.1fs; its keepalives:\n%s" %
          (took, "".join(comments)))
    assert ": waiting for engine mainline on 3090: saving fork's prompt caches (1 slot) before the switch to " \
           "mainline\n" in comments, comments
    assert ": waiting for engine mainline on 3090: restoring mainline's prompt caches (1 slot)\n" in comments, \
        comments
    # /activity: each step under way (no end), then ended with its duration, slots and bytes
    for step, engine in (("save", "fork"), ("restore", "mainline")):
        seen = wait_for(lambda: [e for e in cache_events(feed, step, engine) if e["ended"]] and
                        cache_events(feed, step, engine), what="the %s step's host events" % step)
        assert seen[0]["ended"] is None and seen[0]["started"] > 0, seen
        done = seen[-1]
        assert done["ended"] >= done["started"] and 1900 <= done["duration_ms"] < 10000, done
        assert (done["slots"], done["tokens"], done["bytes"]) == (1, 1000, 4096000), done
    # a new subscriber's snapshot has the last step too
    later = Activity(g)
    snap = wait_for(lambda: later.of("snapshot"), what="a second snapshot")[0]
    assert snap["hosts"][0]["prompt_cache"]["step"] == "restore", snap
    # the log line says what the save was before
    line = g.wait_log("host 3090: engine fork: saved the prompt caches of 1 slot (1000 tokens, 4000 KiB) in ")
    assert re.search(r" in 2\.?\d*s[^,]*, before the switch to mainline$", line), line
    line = g.wait_log("host 3090: engine mainline: restored the prompt caches of 1 slot")
    assert "before" not in line, line


@pytest.mark.parametrize("fault", ["hang", "cut"])
def test_a_host_that_stops_answering_mid_save_delays_the_switch_by_the_budget_at_most(box, make_gate, fault):
    """the double takes the save's POST and never answers (hang), or closes its connection (cut)"""
    g, port = gate(box, make_gate, "--slot-save-delay 0 --slot-save-fault " + fault, "2s")
    assert ask(g, "3090-laguna-xs")[:2] == (200, "mainline")
    status, by, comments, took = ask(g, "3090-flint-40b", stream=True)
    print("\nthe switch with a save that %ss took %.1fs" % (fault, took))
    assert (status, by) == (200, "fork")
    assert took < 2 + 6, took  # the budget, and the double's start and answer
    assert any("saving mainline's prompt caches" in c for c in comments) or fault == "cut", comments
    if fault == "hang":
        line = g.wait_log("host 3090: engine mainline: saved the prompt caches of 0 slots")
        assert "the rest was abandoned at PromptCacheSaveSec=" in line, line
        # the connection modelgate gave up on was closed, so the engine's handler ended
        assert box.active_state("llama-mainline.service") == "inactive"
    else:
        g.wait_log("host 3090: engine mainline: prompt cache save: ")
    # nothing was saved, so the switch back restores nothing; the daemon is alive and serves
    assert ask(g, "3090-laguna-xs")[:2] == (200, "mainline")
    g.log_mark("after")
    assert "restored the prompt caches" not in g.logtext() and "was not restored" not in g.logtext()
    assert g.proc.poll() is None


@pytest.mark.parametrize("reload", ["same", "new-host"])
def test_a_reload_during_a_save_lets_the_switch_end_within_its_budget(box, make_gate, reload):
    """SIGHUP while the engine saves (30 s on the double; PromptCacheSaveSec=3s): with the same file the host
    carries on; with a new host URL text the old host drains, its switch and its request first"""
    g, port = gate(box, make_gate, "--slot-save-delay 30", "3s")
    assert ask(g, "3090-laguna-xs")[:2] == (200, "mainline")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=ask(g, "3090-flint-40b", stream=True)))
    t.start()
    wait_for(lambda: saves(port), what="the save under way", interval=0.1)
    if reload == "new-host":
        # another engine on the host: not the same host any more (host_can_take())
        with open(g.conf, "a") as f:
            f.write("\n[Engine]\nHost=3090\nName=third\nUnit=llama-third.service\nModels=third-*\n")
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded ")
    t.join(60)
    assert not t.is_alive()
    status, by, comments, took = result["r"]
    print("\nthe switch with a reload (%s) during its save took %.1fs" % (reload, took))
    assert (status, by) == (200, "fork"), result
    assert took < 3 + 6, took
    line = g.wait_log("host 3090: engine mainline: saved the prompt caches of 0 slots")
    assert "the rest was abandoned at PromptCacheSaveSec=" in line, line
    # and the host serves after it, whichever it is now
    assert ask(g, "3090-flint-40b")[:2] == (200, "fork")
    assert g.proc.poll() is None


def test_the_ui_timeline_draws_the_save_and_the_restore(box, make_gate, tmp):
    import browser
    if browser.skip_reason():
        pytest.skip(browser.skip_reason())
    g, port = gate(box, make_gate, "--slot-save-delay 1 --slot-restore-delay 1", "20s")
    b = browser.Chromium(tmp, tmp)
    try:
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork"),
                              ("3090-laguna-xs", "mainline")):
            assert ask(g, model)[:2] == (200, engine)
        # a band each, with its engine and how long it took (the double takes 1 s for each)
        steps = b.wait_js("(() => { const s = [...document.querySelectorAll('#timeline g.host[data-host=\"3090\"]"
                          " g.cache')].map(g => [g.dataset.step, g.dataset.engine, g.dataset.ms]);"
                          " return s.filter(x => x[2]).length >= 3 ? s : null; })()",
                          what="the saves and the restore in the timeline")
        print("\nthe timeline's prompt cache steps:", steps)
        assert ["save", "mainline"] in [s[:2] for s in steps] and ["save", "fork"] in [s[:2] for s in steps]
        assert any(s[0] == "restore" and s[1] == "mainline" and int(s[2]) >= 900 for s in steps), steps
        labels = b.evaluate("[...document.querySelectorAll('#timeline g.cache text')].map(t => t.textContent)")
        assert all(re.match(r"(saving|restoring) (fork|mainline)'s caches [0-9.]+ m?s$", l) for l in labels), labels
        assert b.failures() == []
    finally:
        b.stop()


def test_with_shared_the_lease_holder_saves_and_the_instance_that_starts_the_engine_restores_once(
        box, sshd, make_gate, tmp):
    """two instances (A on the box's bus, B through ssh), each agent on its own: B's agent's turn switches
    to fork (B saves mainline), A's switches back (A saves fork, and restores mainline from the file B's
    save wrote, which A never saved itself); the instance that adopts the engine restores nothing"""
    from test_shared import remote_host, shared_conf

    port = free_port()
    files = os.path.join(tmp, "slot-saves")
    os.makedirs(files)
    engines = two_engines(box, port, double_args="--slot-save-delay 0.2 --slot-save-dir " + files) % {
        "host": "3090", "extra": ""}
    keys = {"HoldDownSec": "1s"}
    a = make_gate(shared_conf(local_host("3090", port), engines, keys), env=gate_env(box))
    b = make_gate(shared_conf(remote_host(box, sshd, port), engines, keys))
    a.wait_log("host 3090 up")
    b.wait_log("host 3090 up")
    for g, model, engine in ((a, "3090-laguna-xs", "mainline"), (b, "3090-flint-40b", "fork"),
                             (a, "3090-laguna-xs", "mainline")):
        assert ask(g, model)[:2] == (200, engine)
    restored = a.wait_log("host 3090: engine mainline: restored the prompt caches of 1 slot")
    line = b.wait_log("host 3090: engine mainline: saved the prompt caches of 1 slot")
    assert line.endswith(", before the switch to fork"), line
    a.wait_log("host 3090: engine fork: saved the prompt caches of 1 slot")
    print("\nB saved: %s\nA restored: %s" % (line, restored))
    asked = [json.loads(q["body"]) for q in double_requests(port) if q["path"].startswith("/slots/0?action=restore")]
    assert len(asked) == 1 and asked[0]["model"] == "laguna-xs", asked
    # the file B's save wrote: one per (engine, model, slot), whichever instance saved
    assert asked[0]["filename"] in os.listdir(files) and len(os.listdir(files)) == 2, os.listdir(files)
    assert re.fullmatch(r"modelgate-mainline-[0-9a-f]{16}-0\.slot", asked[0]["filename"]), asked
    # whoever holds no lease saves nothing, and the instance that adopted the engine restores nothing
    for g, mark in ((a, "a"), (b, "b")):
        g.log_mark(mark)
    assert "engine mainline: saved" not in a.logtext() and "engine fork: saved" not in b.logtext()
    # restored once, by the instance that started the engine: the first starts found no file (a miss)
    assert a.logtext().count("engine mainline: restored") == 1 and "engine mainline: restored" not in b.logtext()
    assert "restored the prompt caches" not in b.logtext(), b.logtext()
    assert "engine mainline: the prompt cache of slot 0 was not restored (400): a cache miss" in a.logtext()


def unsupported(box):
    return host_prop(box, "3090", "PromptCacheUnsupported")


def test_an_engine_that_answered_501_is_asked_again_after_a_reload(box, make_gate):
    """rule:prompt-cache: a 501 (no --slot-save-path) ends the asking until a reload; the operator who adds
    the option reloads, and the host (kept by the reload) asks again"""
    # --user: on the box's bus, where its host object is read
    g, port = gate(box, make_gate, "--slot-save-delay 0 --slot-save-fault 501", "5s", extra_args=["--user"])
    said = "host 3090: engine mainline does not save prompt caches (it answered 501"
    for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork"),
                          ("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork")):
        assert ask(g, model)[:2] == (200, engine)
    g.log_mark("before")
    assert g.logtext().count(said) == 1  # said once, not asked again
    # and on the host's bus object, until the reload
    assert sorted(unsupported(box)) == ["fork", "mainline"]
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded ")
    assert "1 kept" in g.wait_log("Reloaded "), g.wait_log("Reloaded ")
    assert unsupported(box) == []  # the reload forgot it: asked again
    for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork")):
        assert ask(g, model)[:2] == (200, engine)
    g.wait_log(said, count=2)
    assert "mainline" in unsupported(box)
