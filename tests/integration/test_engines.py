"""Engines as systemd user units in boxed managers: started, switched, refused, failed, crashed, and
reached through ssh and systemd-stdio-bridge (rule:switch-steps, rule:ready-is-health,
rule:busy-gpu, rule:engine-died, rule:adopt-engine, rule:engine-unit-checks, rule:job-done-is-not-running;
rule:ssh-bridge, rule:bus-backoff)."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from boxes import (Sshd, box_skip_reason, chat, children, engine_unit, engines_conf, gate_env, local_host,
                   two_engines)
from conftest import (DOUBLE, MODELGATED, PYTHON, Double, double_requests, free_port, metric_samples, post, read_sse,
                      wait_for)
from test_errors import RETRY_WORDS

CHAT = "/v1/chat/completions"
# these tests are about the mechanics; test_scheduler.py is about hold-downs
FAST = "[Proxy]\nHoldDownSec=1s\n"

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def test_request_for_stopped_engine_starts_it_and_waits_for_health(box, make_gate):
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port, startup_delay=3),
                  env=gate_env(box))
    g.wait_log("host 3090 up")
    assert box.active_state("llama-mainline.service") == "inactive"
    c = g.conn(timeout=60)
    t0 = time.monotonic()
    r = post(c, CHAT, chat("3090-laguna-xs"))
    body = r.read()
    took = time.monotonic() - t0
    # the double answers 503 "Loading model" to everything for 3 s: a request sent early would show it
    assert r.status == 200, body
    assert r.getheader("X-Double") == "mainline"
    assert json.loads(body)["model"] == "laguna-xs"
    assert took >= 3.0
    assert box.active_state("llama-mainline.service") == "active"
    g.wait_log("host 3090: switching to engine mainline for 3090-laguna-xs")
    g.wait_log("host 3090: engine mainline up after")
    # rule:queued-and-switch: its wait was the engine's start, not a queue
    line = g.wait_log('model="3090-laguna-xs" host=3090 status=200')
    m = re.search(r" switch=(\d+\.\d+)s", line)
    assert m and 3.0 <= float(m.group(1)) <= took, line
    assert " queued=" not in line or float(re.search(r" queued=(\d+\.\d+)s", line).group(1)) < 1.0, line
    samples = metric_samples(g)
    assert samples[("modelgate_switch_seconds_count", (("engine", "mainline"), ("host", "3090")))] == 1
    assert samples[("modelgate_switch_seconds_sum", (("engine", "mainline"), ("host", "3090")))] >= 3.0
    assert samples[("modelgate_queued_seconds_count", (("host", "3090"),))] == 1
    assert samples[("modelgate_queued_seconds_sum", (("host", "3090"),))] < 1.0
    # rule:usage-metrics: the model label is the Models= glob that matched, not the client's name
    usage = json.loads(body)["usage"]
    assert samples[("modelgate_tokens_total", (("engine", "mainline"), ("host", "3090"), ("kind", "prompt"),
                                               ("model", "laguna-*")))] == usage["prompt_tokens"]
    assert samples[("modelgate_tokens_total", (("engine", "mainline"), ("host", "3090"), ("kind", "completion"),
                                               ("model", "laguna-*")))] == usage["completion_tokens"]


def test_other_engine_of_the_host_replaces_the_running_one(box, make_gate):
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn(timeout=60)
    for model, engine, unit, other in (("3090-laguna-xs", "mainline", "llama-mainline.service", "llama-fork.service"),
                                       ("3090-flint-40b", "fork", "llama-fork.service", "llama-mainline.service"),
                                       ("3090-laguna-xs", "mainline", "llama-mainline.service", "llama-fork.service")):
        r = post(c, CHAT, chat(model))
        assert r.status == 200, r.read()
        assert r.getheader("X-Double") == engine
        r.read()
        assert box.active_state(unit) == "active"
        assert box.active_state(other) == "inactive"
    # the third answer's access line: every switch logged before it is in the log file too
    g.wait_log('model="3090-laguna-xs" host=3090 status=200', count=2)
    assert g.logtext().count("switching to engine") == 3


def test_a_prompt_cache_save_that_hangs_is_abandoned_at_its_budget(box, make_gate):
    """rule:prompt-cache's faults: the engine's save takes 30 s, PromptCacheSaveSec=1s: the switch goes on
    after 1 s, said, and nothing is restored"""
    port = free_port()
    conf = two_engines(box, port, double_args="--slot-save-delay 30 --slot-restore-fails") % {
        "host": "3090", "extra": "PromptCacheSaveSec=1s\n"}
    g = make_gate(FAST + local_host("3090", port) + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn(timeout=60)
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200, r.read()
    r.read()
    t0 = time.monotonic()
    r = post(c, CHAT, chat("3090-flint-40b"))
    assert r.status == 200 and r.getheader("X-Double") == "fork", r.read()
    r.read()
    took = time.monotonic() - t0
    line = g.wait_log("host 3090: engine mainline: saved the prompt caches of 0 slots")
    assert "the rest was abandoned at PromptCacheSaveSec=" in line, line
    assert took < 10, took  # 1 s of budget, not the save's 30
    # nothing was saved, so nothing is restored; fork's save is abandoned the same way, and the switch back
    # asks nothing of mainline's restore
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline", r.read()
    r.read()
    g.log_mark("abandoned")
    assert "restored the prompt caches" not in g.logtext() and "was not restored" not in g.logtext()


def test_a_restore_that_fails_is_a_cache_miss_never_the_clients_error(box, make_gate):
    port = free_port()
    conf = two_engines(box, port, double_args="--slot-save-delay 0 --slot-restore-fails") % {
        "host": "3090", "extra": ""}
    g = make_gate(FAST + local_host("3090", port) + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn(timeout=60)
    for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork"), ("3090-laguna-xs", "mainline")):
        r = post(c, CHAT, chat(model))
        assert r.status == 200 and r.getheader("X-Double") == engine, r.read()
        r.read()
    g.wait_log("host 3090: engine mainline: saved the prompt caches of 1 slot (1000 tokens, 4000 KiB)")
    g.wait_log("host 3090: engine mainline: the prompt cache of slot 0 was not restored (400): a cache miss")
    # the file saved by the mainline that stopped, asked of the one that started: one name per (engine, model,
    # slot), the model named for the router
    asked = [json.loads(q["body"]) for q in double_requests(port) if q["path"] == "/slots/0?action=restore"]
    assert len(asked) == 1 and asked[0]["model"] == "laguna-xs", asked
    assert re.fullmatch(r"modelgate-mainline-[0-9a-f]{16}-0\.slot", asked[0]["filename"]), asked


def test_running_engine_is_adopted_at_start(box, make_gate):
    port = free_port()
    conf = local_host("3090", port) + engines_conf(box, "3090", port)
    box.systemctl("start", "llama-fork.service")
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090: engine fork adopted")
    r = post(g.conn(), CHAT, chat("3090-flint-40b"))
    assert r.status == 200 and r.getheader("X-Double") == "fork"
    g.wait_log('model="3090-flint-40b" host=3090 status=200')  # a switch for it would be logged before this
    assert "switching to engine" not in g.logtext()


def test_engine_killed_mid_stream_ends_the_answer_and_starts_again(box, make_gate):
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn(timeout=30)
    r = post(c, CHAT, chat("3090-laguna-xs", "[[tokens:100000]]", stream=True))
    assert r.status == 200
    wait_for(lambda: r.readline().startswith(b"data: "), what="the first token")
    box.systemctl("kill", "--signal=KILL", "llama-mainline.service")
    killed = time.monotonic()
    lines = read_sse(r)
    assert lines[-1][0] - killed < 5, "the answer did not end promptly"
    errors = [l for _, l in lines if l.startswith('data: {"error"')]
    assert errors and "stopped the stream before it ended" in errors[0]
    assert not any("[DONE]" in l for _, l in lines)
    g.wait_log("host 3090: engine mainline stopped on its own")
    c = g.conn(timeout=60)
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline"
    assert box.active_state("llama-mainline.service") == "active"


def test_busy_unit_foreign_server_and_exec_condition_refuse_with_423(box, make_gate, tmp):
    port = free_port()
    owner = os.path.join(tmp, "gpu-owner")
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    conf = local_host("3090", port, "BusyUnits=gpu-bench.service bench-*.service\n") + engines_conf(box, "3090", port)
    # a third engine whose ExecCondition= refuses while the owner file names someone else
    box.add_unit("llama-guarded.service", engine_unit(
        "guarded", port, "qwen3-8b", ["llama-mainline.service", "llama-fork.service"],
        extra_service="ExecCondition=/bin/sh -c '! test -s %s'\n" % owner))
    box.reload()
    conf += "[Engine]\nHost=3090\nName=guarded\nUnit=llama-guarded.service\nModels=qwen3-*\n"
    box.systemctl("start", "gpu-bench.service")
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn()

    def refused(model, reason):
        r = post(c, CHAT, chat(model))
        body = r.read()
        assert r.status == 423, body
        assert r.getheader("x-should-retry") == "false"
        msg = json.loads(body)["error"]["message"]
        assert reason in msg, msg
        # the reason may carry a port, and a random port may read "...503..."
        rest = msg.replace(reason, "").lower()
        for word in ("timeout", "overloaded", "503", "server error", "rate limit"):
            assert word not in rest, msg
        return msg

    refused("3090-laguna-xs", "gpu-bench.service is active")
    g.wait_log("host 3090: GPU busy (gpu-bench.service is active), switch to mainline refused")
    assert box.active_state("gpu-bench.service") == "active"
    box.systemctl("stop", "gpu-bench.service")

    # a server nobody started through an engine unit answers on the engine's port
    foreign = subprocess.Popen([PYTHON, DOUBLE, "--port", str(port), "--models", "x"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: subprocess.run(["curl", "-sf", "http://127.0.0.1:%d/health" % port],
                                        capture_output=True).returncode == 0, what="the foreign server")
        refused("3090-flint-40b", "a server answers on http://127.0.0.1:%d" % port)
    finally:
        foreign.kill()
        foreign.wait()

    open(owner, "w").write("someone else\n")
    refused("3090-qwen3-8b", "llama-guarded.service refused to start: its ExecCondition= failed")
    for unit in ("llama-mainline.service", "llama-fork.service", "llama-guarded.service"):
        assert box.active_state(unit) == "inactive", unit
    os.unlink(owner)
    r = post(c, CHAT, chat("3090-qwen3-8b"))
    assert r.status == 200 and r.getheader("X-Double") == "guarded"


def test_engine_that_cannot_start_gets_502_with_the_unit_result(box, make_gate):
    port = free_port()
    box.add_unit("llama-broken.service", "[Service]\nType=exec\nExecStart=/bin/sh -c 'exit 3'\n")
    box.add_unit("llama-missing.service", "[Service]\nType=exec\nExecStart=/nonexistent/llama-server\n")
    box.reload()
    conf = local_host("3090", port) + "".join(
        "[Engine]\nHost=3090\nName=%s\nUnit=llama-%s.service\nModels=%s-*\nStartTimeoutSec=10s\n" % (n, n, n)
        for n in ("broken", "missing"))
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn()
    r = post(c, CHAT, chat("3090-broken-1"))
    body = json.loads(r.read())
    assert r.status == 502
    # Type=exec: the exec succeeded, the process then exited 3; the unit says so
    assert "llama-broken.service" in body["error"]["message"]
    assert "exit-code" in body["error"]["message"], body
    # and how its process ended, as systemctl status says it
    assert "exit status 3" in body["error"]["message"], body
    # and where the engine's own words are (rule:engine-logs)
    assert "its log: 'modelgatectl logs 3090 broken'" in body["error"]["message"], body
    r = post(c, CHAT, chat("3090-missing-1"))
    body = json.loads(r.read())
    assert r.status == 502
    assert "llama-missing.service" in body["error"]["message"] and "exit-code" in body["error"]["message"]
    # systemd's EXIT_EXEC, in words (rule:exit-status-words)
    assert "exit status 203/EXEC: the engine's ExecStart= binary was not found or not executable" in \
        body["error"]["message"], body


MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))


def test_a_failed_start_is_held_and_its_requests_get_the_same_502_at_once(box, make_gate, tmp):
    """rule:failed-start-hold: the re-sends of a failed turn do not start the broken unit again; the hold
    ends with reset-failed, and by itself after FailedStartHoldSec="""
    port = free_port()
    starts = os.path.join(tmp, "starts")
    box.add_unit("llama-broken.service",
                 "[Service]\nType=exec\nExecStart=/bin/sh -c 'echo start >> %s; exit 3'\n" % starts)
    box.reload()
    conf = local_host("3090", port) + "FailedStartHoldSec=3s\n" + \
        "[Engine]\nHost=3090\nName=broken\nUnit=llama-broken.service\nModels=broken-*\nStartTimeoutSec=10s\n"
    g = make_gate(FAST + conf, extra_args=["--user"], env=gate_env(box))  # --user: on the bus, for modelgatectl
    g.wait_log("host 3090 up")
    n_starts = lambda: len(open(starts).read().splitlines()) if os.path.exists(starts) else 0

    def ask():
        t0 = time.monotonic()
        r = post(g.conn(), CHAT, chat("3090-broken-1"))
        return r.status, json.loads(r.read())["error"]["message"], time.monotonic() - t0

    status, first, _ = ask()
    assert status == 502 and "llama-broken.service" in first and "exit-code" in first, first
    assert "does not start it again for 3s (FailedStartHoldSec=)" in first
    assert "modelgatectl reset-failed 3090" in first
    g.wait_log("host 3090: engine broken held after its failed start")
    assert n_starts() == 1
    # a re-send, as Codex does: the same status and words, at once, and no second start
    status, again, took = ask()
    assert status == 502 and again == first
    assert took < 0.5, took
    assert n_starts() == 1
    ctl = lambda *a: subprocess.run([MODELGATECTL, "--user"] + list(a), env=box.env, capture_output=True,
                                    text=True, timeout=60)
    hosts = ctl("hosts").stdout.splitlines()
    assert hosts[0].split()[-1] == "HELD" and hosts[1].split()[-1] == "broken", hosts
    assert "held:       broken after a failed start" in ctl("status").stdout

    out = ctl("reset-failed", "3090")
    assert out.returncode == 0, out.stderr
    g.wait_log("host 3090: engine broken no longer held: reset-failed, the next request starts it")
    assert ctl("hosts").stdout.splitlines()[1].split()[-1] == "-"
    status, third, _ = ask()
    # a start of its own: the unit may be seen dying at the job's end or just after it, in other words
    assert status == 502 and "llama-broken.service" in third and "(FailedStartHoldSec=)" in third, third
    assert n_starts() == 2
    status, again, _ = ask()
    assert status == 502 and again == third and n_starts() == 2
    # and the hold ends by itself after FailedStartHoldSec=
    g.wait_log("host 3090: engine broken held after its failed start", count=2)
    g.wait_log("host 3090: engine broken no longer held: FailedStartHoldSec= is over", timeout=10)
    status, _, _ = ask()
    assert status == 502
    assert n_starts() == 3


def test_switch_engine_on_a_held_engine_fails_at_once_and_starts_it_after_reset_failed(box, make_gate, tmp):
    """rule:failed-start-hold: SwitchEngine() (modelgatectl switch) is one more request for the engine: while it
    is held it gets the hold's words at once and the unit is not started; after reset-failed it starts it"""
    port = free_port()
    starts, flag = os.path.join(tmp, "starts"), os.path.join(tmp, "fail")
    open(flag, "w").close()
    # fails while the flag is there, as a unit does until its operator mends it
    box.add_unit("llama-flaky.service", "[Service]\nType=exec\nExecStart=/bin/sh -c 'echo start >> %s; "
                 "test -e %s && exit 3; exec %s %s --port %d --name flaky --models flaky-1 --loaded flaky-1'\n"
                 % (starts, flag, PYTHON, os.path.abspath(DOUBLE), port))
    box.reload()
    conf = local_host("3090", port) + "FailedStartHoldSec=1h\n" + \
        "[Engine]\nHost=3090\nName=flaky\nUnit=llama-flaky.service\nModels=flaky-*\nStartTimeoutSec=30s\n"
    g = make_gate(FAST + conf, extra_args=["--user"], env=gate_env(box))
    g.wait_log("host 3090 up")
    n_starts = lambda: len(open(starts).read().splitlines()) if os.path.exists(starts) else 0
    ctl = lambda *a: subprocess.run([MODELGATECTL, "--user"] + list(a), env=box.env, capture_output=True,
                                    text=True, timeout=60)

    r = post(g.conn(), CHAT, chat("3090-flaky-1"))
    first = json.loads(r.read())["error"]["message"]
    assert r.status == 502 and "llama-flaky.service" in first and "modelgatectl reset-failed 3090" in first, first
    g.wait_log("host 3090: engine flaky held after its failed start")
    assert n_starts() == 1

    t0 = time.monotonic()
    out = ctl("switch", "3090", "flaky")
    took = time.monotonic() - t0
    assert out.returncode != 0 and out.stdout == "", out
    assert "Switch failed: " + first in out.stderr, out.stderr
    assert took < 2, took  # a start would take the unit's exit and its job's end at least
    # busctl, as any D-Bus client: the same error, named as a 502 is on the bus
    out = subprocess.run(["busctl", "--user", "call", "org.modelgate1", "/org/modelgate1/host/3090",
                          "org.modelgate1.Host", "SwitchEngine", "s", "flaky"], env=box.env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and first in out.stderr, out
    g.log_mark("after the switches")
    assert n_starts() == 1
    assert "switching to engine flaky for SwitchEngine()" not in g.logtext()
    assert box.active_state("llama-flaky.service") != "active"

    os.unlink(flag)  # mended
    out = ctl("reset-failed", "3090")
    assert out.returncode == 0, out.stderr
    g.wait_log("host 3090: engine flaky no longer held: reset-failed, the next request starts it")
    out = ctl("switch", "3090", "flaky")
    assert out.returncode == 0 and out.stdout == "host 3090: engine flaky is up\n", out
    assert n_starts() == 2
    assert box.active_state("llama-flaky.service") == "active"
    g.wait_log("host 3090: switching to engine flaky for SwitchEngine()")


def test_engine_that_never_gets_healthy_is_stopped_after_start_timeout(box, make_gate):
    port = free_port()
    box.add_unit("llama-slow.service", engine_unit("slow", port, "slow-1", double_args="--startup-delay 3600"))
    box.reload()
    conf = local_host("3090", port) + "[Engine]\nHost=3090\nName=slow\nUnit=llama-slow.service\nModels=slow-*\n" \
        "StartTimeoutSec=2s\n"
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    r = post(g.conn(), CHAT, chat("3090-slow-1"))
    body = json.loads(r.read())
    assert r.status == 502
    assert "did not answer /health with 200 within 2s (result: timeout)" in body["error"]["message"]
    wait_for(lambda: box.active_state("llama-slow.service") == "inactive", what="the engine to be stopped")


def test_unit_checks_warn_about_enabled_restarting_and_unconflicted_engines(box, make_gate):
    port = free_port()
    box.add_unit("llama-a.service", engine_unit("a", port, "a", ["llama-b.service", "llama-c.service"],
                                                extra_service="[Install]\nWantedBy=default.target\n"))
    box.add_unit("llama-b.service", engine_unit("b", port, "b", ["llama-a.service", "llama-c.service"])
                 .replace("Restart=no", "Restart=always"))
    box.add_unit("llama-c.service", engine_unit("c", port, "c", ["llama-a.service"]))
    box.reload()
    box.enable("llama-a.service")
    conf = local_host("3090", port) + "".join(
        "[Engine]\nHost=3090\nName=%s\nUnit=llama-%s.service\nModels=%s\n" % (n, n, n) for n in "abc")
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    log = g.logtext()
    assert "host 3090: engine unit llama-a.service is enabled;" in log
    assert "host 3090: engine unit llama-b.service has Restart=always;" in log
    assert "host 3090: engine unit llama-c.service lacks Conflicts=llama-b.service" in log
    assert log.count("lacks Conflicts=") == 1
    assert log.count("is enabled") == 1 and log.count("has Restart=") == 1


def remote_conf(box2, sshd, port, bus_path=None, startup_delay=0.0):
    return ("[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
            "BusPath=unix:path=%s\n" % (port, sshd.port, sshd.ssh_command, bus_path or box2.bus)) + \
        two_engines(box2, port, startup_delay=startup_delay) % {"host": "a9", "extra": ""}


def test_engines_of_a_host_reached_through_ssh(make_box, sshd, make_gate):
    local, remote = make_box(), make_box()
    lport, rport = free_port(), free_port()
    conf = local_host("3090", lport) + engines_conf(local, "3090", lport) + remote_conf(remote, sshd, rport)
    # a host whose ssh cannot connect at all: it is down, and nobody else waits for it
    conf += "[Host]\nName=gone\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n" \
        "[Engine]\nHost=gone\nName=x\nUnit=x.service\nModels=*\n" % (free_port(), free_port(), sshd.ssh_command)
    g = make_gate(FAST + conf, env=gate_env(local))
    g.wait_log("host a9 up")
    g.wait_log("host 3090 up")
    g.wait_log("host gone down: ssh: connection closed before the bus came up")
    c = g.conn(timeout=60)
    r = post(c, CHAT, chat("gone-x"))
    assert r.status == 503 and "host 'gone' is down: ssh:" in json.loads(r.read())["error"]["message"]
    for model, engine in (("a9-laguna-xs", "mainline"), ("a9-flint-40b", "fork"), ("3090-flint-40b", "fork")):
        r = post(c, CHAT, chat(model))
        assert r.status == 200, r.read()
        assert r.getheader("X-Double") == engine
        r.read()
    # the remote box's manager runs a9's engine; the local one knows nothing of it
    assert remote.active_state("llama-fork.service") == "active"
    assert remote.active_state("llama-mainline.service") == "inactive"
    assert local.active_state("llama-fork.service") == "active"
    assert local.active_state("llama-mainline.service") == "inactive"
    # one ssh child of modelgated for a9, running the bridge with the explicit bus path ('gone' keeps trying
    # its own ssh, which may be alive at this moment too)
    def proc_file(pid, name):  # '' for a child that ended meanwhile ('gone''s ssh, retried with backoff)
        try:
            return open("/proc/%d/%s" % (pid, name)).read()
        except OSError:
            return ""
    ssh = [p for p in children(g.proc.pid) if proc_file(p, "comm").strip() == "ssh"
           and "--bus-path='unix:path=%s'" % remote.bus in proc_file(p, "cmdline")]
    assert len(ssh) == 1
    argv = open("/proc/%d/cmdline" % ssh[0]).read().split("\0")
    assert "-oBatchMode=yes" in argv and "systemd-stdio-bridge" in argv
    assert "--bus-path='unix:path=%s'" % remote.bus in argv


def test_killed_ssh_takes_the_host_down_and_it_comes_back(make_box, sshd, make_gate):
    """with no engine serving: an engine that serves goes on serving without its bus (rule:bus-gone,
    test_data_plane.py)"""
    remote = make_box()
    rport = free_port()
    g = make_gate(FAST + remote_conf(remote, sshd, rport))
    g.wait_log("host a9 up")
    # no new ssh session can be made while we look at the down host
    sshd.stop()
    ssh = [p for p in children(g.proc.pid) if open("/proc/%d/comm" % p).read().strip() == "ssh"]
    assert len(ssh) == 1
    os.kill(ssh[0], signal.SIGKILL)
    g.wait_log("host a9 down: ssh:")
    r = post(g.conn(), CHAT, chat("a9-laguna-xs"))
    message = json.loads(r.read())["error"]["message"]
    assert r.status == 503
    assert "host 'a9' is down: ssh: " in message, message
    # rule:bus-backoff: the words and Retry-After both say when the bus is tried again
    m = re.search(r"starting engine 'mainline' needs the bus; reconnecting in (\d+) s", message)
    assert m and r.getheader("Retry-After") == m.group(1), (r.getheader("Retry-After"), message)
    # started over there meanwhile, by someone else
    remote.systemctl("start", "llama-mainline.service")
    sshd.start()
    g.wait_log("host a9 up", timeout=90, count=2)
    r = post(g.conn(timeout=60), CHAT, chat("a9-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline"
    # the engine kept running on the remote host while the bus was away: adopted, not restarted
    g.wait_log("engine mainline adopted")


def test_ssh_killed_during_a_switch_answers_the_waiting_request_at_once(make_box, sshd, make_gate):
    remote = make_box()
    rport = free_port()
    g = make_gate(FAST + remote_conf(remote, sshd, rport, startup_delay=4))
    g.wait_log("host a9 up")
    result = {}

    def ask():
        r = post(g.conn(timeout=60), CHAT, chat("a9-flint-40b"))
        result["status"], result["body"], result["at"] = r.status, r.read(), time.monotonic()

    t = threading.Thread(target=ask)
    t.start()
    g.wait_log("host a9: switching to engine fork")
    sshd.stop()
    ssh = [p for p in children(g.proc.pid) if open("/proc/%d/comm" % p).read().strip() == "ssh"]
    assert len(ssh) == 1
    killed = time.monotonic()
    os.kill(ssh[0], signal.SIGKILL)
    t.join(timeout=30)
    assert not t.is_alive(), "the waiting request hangs"
    assert result["status"] == 503 and b"host 'a9' is down: ssh:" in result["body"], result
    assert result["at"] - killed < 2, "the answer waited for something other than the lost bus"
    # the engine went on starting over there; once the bus is back it is adopted, not started again
    sshd.start()
    g.wait_log("host a9 up", timeout=90, count=2)
    r = post(g.conn(timeout=60), CHAT, chat("a9-flint-40b"))
    assert r.status == 200 and r.getheader("X-Double") == "fork"
    r.read()
    g.wait_log("engine fork adopted")
    g.wait_log('model="a9-flint-40b" host=a9 status=200')  # the answer's line: a second switch would be before it
    assert g.logtext().count("switching to engine fork") == 1


EXAMPLES = os.path.join(os.path.dirname(__file__), "../../units/examples")


def test_example_units_pass_the_checks_and_refuse_while_someone_owns_the_gpu(box, make_gate):
    port = free_port()
    for name, models in (("mainline", "laguna-xs"), ("fork", "flint-40b"), ("podman", "gemma-3")):
        text = open(os.path.join(EXAMPLES, "llama-%s.service" % name)).read()
        # the double stands in for llama-server and podman; everything else is the example as shipped
        text = re.sub(r"ExecStart=.*?[^\\]\n", "ExecStart=%s %s --port %d --name %s --models %s --loaded %s\n"
                      % (PYTHON, os.path.abspath(DOUBLE), port, name, models, models), text, flags=re.S)
        text = re.sub(r"ExecStop=.*\n", "", text)
        box.add_unit("llama-%s.service" % name, text)
    box.reload()
    conf = open(os.path.join(EXAMPLES, "modelgate.conf")).read()
    conf = conf.replace("URL=http://192.0.2.20:8081", "URL=http://127.0.0.1:%d" % port)
    conf = conf.replace("Bus=ssh:gpu@192.0.2.20", "Bus=local")
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    assert "engine unit" not in g.logtext(), "the examples should raise no unit warning"
    c = g.conn(timeout=60)
    r = post(c, CHAT, chat("3090-gemma-3"))
    assert r.status == 200 and r.getheader("X-Double") == "podman"
    r.read()
    # %t/gpu.owner naming someone else: the next engine refuses to start, and says so as a 423
    # rule:gpu-owner: and names whom the GPU is for, as the host's file says it (its first line)
    open(os.path.join(box.dir, "xdg", "gpu.owner"), "w").write("alice's training run\nuntil 18:00\n")
    r = post(c, CHAT, chat("3090-laguna-xs"))
    body = r.read()
    assert r.status == 423, body
    msg = json.loads(body)["error"]["message"]
    assert "llama-mainline.service refused to start: its ExecCondition= failed; gpu.owner names " \
           "'alice's training run')" in msg, msg
    line = g.wait_log("host 3090: GPU busy (")
    assert "gpu.owner names 'alice's training run'" in line, line
    # a long line is cut to 200 bytes where a character begins (a cut inside one would make the host's
    # manager drop the whole status, and the client's JSON invalid)
    open(os.path.join(box.dir, "xdg", "gpu.owner"), "w").write("x" + "é" * 150 + "\n")
    r = post(c, CHAT, chat("3090-laguna-xs"))
    body = r.read()
    assert r.status == 423, body
    msg = json.loads(body.decode("utf-8", errors="strict"))["error"]["message"]
    assert "gpu.owner names 'x" + "é" * 99 + "')" in msg, msg
    # the owner's words that make agents retry a refusal are left out (rule:refusal-words), in the log too
    open(os.path.join(box.dir, "xdg", "gpu.owner"), "w").write(
        "bob: server error hunt, rate-limit 503 tests (Overloaded; TIMEOUT at 18:00)\n")
    r = post(c, CHAT, chat("3090-laguna-xs"))
    body = r.read()
    assert r.status == 423, body
    msg = json.loads(body)["error"]["message"]
    assert "gpu.owner names 'bob: … hunt, … … tests (…; … at 18:00)'" in msg, msg
    assert not RETRY_WORDS.search(msg), msg
    line = g.wait_log("gpu.owner names 'bob: ")
    assert "gpu.owner names 'bob: … hunt, … … tests (…; … at 18:00)'" in line, line
    # the units that read it go (stopped after the read, collected once inactive)
    wait_for(lambda: "modelgate-gpu-owner" not in box.systemctl("list-units", "--all", "--no-legend", "modelgate-*"),
             what="the owner's unit to go", interval=0.1)
    open(os.path.join(box.dir, "xdg", "gpu.owner"), "w").write("modelgate\n")
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline"
    assert box.active_state("llama-podman.service") == "inactive"


def test_only_the_service_manager_can_say_what_a_unit_did(box, make_gate):
    """A client of the same bus sends a PropertiesChanged 'from systemd' straight to modelgated's connection
    (a signal with a destination passes the bus whatever the match rules; sd-bus does not check a
    well-known sender): it is ignored. The manager's own signal is not."""
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    r = post(g.conn(timeout=60), CHAT, chat("3090-laguna-xs"))
    assert r.status == 200, r.read()
    r.read()
    # modelgated runs outside the box's PID namespace, so the bus cannot tell which connection is its:
    # every connection gets the fake (the others ignore it)
    names = [l.split()[0] for l in box.run("busctl", "--user", "list", "--no-legend", "--unique").splitlines()
             if l.startswith(":")]
    assert len(names) >= 2, names
    for name in names:
        box.run("busctl", "--user", "emit", "--destination=" + name,
                "/org/freedesktop/systemd1/unit/llama_2dmainline_2eservice", "org.freedesktop.DBus.Properties",
                "PropertiesChanged", "sa{sv}as", "org.freedesktop.systemd1.Unit", "2", "ActiveState", "s", "failed",
                "SubState", "s", "failed", "0")
    # the real one, sent after the fakes on the same bus, shows they were read and dropped
    box.systemctl("stop", "llama-mainline.service")
    line = g.wait_log("host 3090: engine mainline stopped")
    assert "state: inactive" in line, line
    assert "state: failed" not in g.logtext()


def test_a_job_end_from_another_sender_does_not_end_the_engines_start(box, make_gate, tmp):
    """As above for JobRemoved: a client of the bus announces the end of the engine's start job, which is
    still waiting (for a unit it comes after). Believed, the unit would be read (inactive, never run) and the
    request refused at once; ignored, the start goes on and the request is answered when the real job ends."""
    port = free_port()
    fifo = os.path.join(tmp, "release")
    os.mkfifo(fifo)
    box.add_unit("gpu-prepare.service", "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'read x < %s'\n" % fifo)
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs",
                                                       extra_unit="Requires=gpu-prepare.service\n"
                                                                  "After=gpu-prepare.service\n"))
    box.reload()
    conf = FAST + local_host("3090", port) + "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\n" \
        "Models=laguna-*\nStartTimeoutSec=60s\n"
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    answer = {}

    def ask():
        r = post(g.conn(timeout=120), CHAT, chat("3090-laguna-xs"))
        answer.update(status=r.status, by=r.getheader("X-Double"), body=r.read())
    t = threading.Thread(target=ask)
    t.start()

    def start_job():
        for line in box.systemctl("list-jobs", "--no-legend").splitlines():
            job, unit, kind, state = line.split()[:4]
            if unit == "llama-mainline.service" and kind == "start":
                return job, state
    job, state = wait_for(start_job, timeout=30, interval=0.2, what="the engine's start job")
    assert state == "waiting" and box.active_state("llama-mainline.service") == "inactive"
    names = [l.split()[0] for l in box.run("busctl", "--user", "list", "--no-legend", "--unique").splitlines()
             if l.startswith(":")]
    for name in names:
        box.run("busctl", "--user", "emit", "--destination=" + name, "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager", "JobRemoved", "uoss", job, "/org/freedesktop/systemd1/job/" + job,
                "llama-mainline.service", "done")
    assert not answer, answer
    # the real end, after the fakes: the unit it waits for finishes, and the engine starts
    release = wait_for(lambda: _open_writer(fifo), timeout=30, what="gpu-prepare.service to read its fifo")
    os.write(release, b"go\n")
    os.close(release)
    t.join(90)
    assert answer.get("status") == 200 and answer.get("by") == "mainline", answer
    g.wait_log('model="3090-laguna-xs" host=3090 status=200')  # a failed start would be logged before this
    assert "failed to start" not in g.logtext()


def _open_writer(fifo):
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None  # no reader yet


def test_probes_never_move_the_gpu_and_start_an_engine_only_on_an_idle_one(box, make_gate):
    """rule:probe: 50 count_tokens in about a second for the stopped engine's model, while the other one
    streams: no switch, each answered at once, the stream whole; then a probe on an idle GPU starts its
    engine"""
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    stream = post(g.conn(timeout=60), CHAT, chat("3090-laguna-xs", "[[tokens:150]]", stream=True))
    assert stream.status == 200
    wait_for(lambda: stream.readline().startswith(b"data: "), what="the first token")
    took, answers = [], []

    def probe():
        c = g.conn(timeout=10)
        t0 = time.monotonic()
        r = post(c, "/v1/messages/count_tokens", {"model": "3090-flint-40b",
                                                  "messages": [{"role": "user", "content": "hi"}]})
        body = json.loads(r.read())
        took.append(time.monotonic() - t0)
        answers.append((r.status, r.getheader("x-should-retry"), body))

    threads = []
    for _ in range(50):
        threads.append(threading.Thread(target=probe))
        threads[-1].start()
        time.sleep(0.02)  # pacing: 50 in about a second, as the VS Code extension sends them
    for t in threads:
        t.join(30)
    print("50 count_tokens probes: slowest %.1f ms" % (max(took) * 1000))
    assert len(answers) == 50
    for status, retry, body in answers:
        assert status == 423 and retry == "false", body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        assert "engine 'fork' of host '3090' is not running" in body["error"]["message"]
        assert "engine 'mainline' runs there" in body["error"]["message"]
    assert max(took) < 0.1, took
    rest = read_sse(stream)
    data = [l for _, l in rest if l.startswith("data: ")]
    assert data[-1].strip() == "data: [DONE]" and not any('"error"' in l for l in data)
    assert len(data) >= 150  # every token after the first, the last chunk and [DONE]
    g.log_mark("after the probes")
    assert "switching to engine fork" not in g.logtext()
    assert box.active_state("llama-fork.service") == "inactive"
    assert box.active_state("llama-mainline.service") == "active"

    # the line: on a GPU nobody uses, a probe starts its engine like any request
    box.systemctl("stop", "llama-mainline.service")
    g.wait_log("host 3090: engine mainline stopped on its own")
    r = post(g.conn(timeout=60), "/tokenize", {"model": "3090-flint-40b", "content": "a b c"})
    assert r.status == 200 and json.loads(r.read())["tokens"] == [0, 1, 2]
    g.wait_log("host 3090: switching to engine fork for 3090-flint-40b")
    assert box.active_state("llama-fork.service") == "active"


def test_a_name_its_engine_never_listed_is_404_without_moving_the_gpu(box, make_gate):
    """rule:never-listed-404: a typo that Models= matches starts an engine never seen running (only its start
    can say what it has), but once its list was read it moves no GPU for a name not in it"""
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    c = g.conn()
    # nothing is known of mainline yet: it is started, and answers for itself
    r = post(c, CHAT, chat("3090-laguna-ghost"))
    body = r.read()
    assert r.status == 400 and b"not found" in body, body
    assert box.active_state("llama-mainline.service") == "active"

    def listed():
        c2 = g.conn()
        c2.request("GET", "/v1/models")
        return "3090-laguna-xs" in c2.getresponse().read().decode()
    wait_for(listed, what="mainline's list read")
    r = post(c, CHAT, chat("3090-flint-40b"))
    assert r.status == 200, r.read()
    r.read()
    assert box.active_state("llama-fork.service") == "active"
    # now mainline's list is known: the typo is refused at once, and fork keeps the GPU
    r = post(c, CHAT, chat("3090-laguna-ghost"))
    msg = json.loads(r.read())["error"]["message"]
    assert r.status == 404, msg
    assert "engine 'mainline' did not list a model 'laguna-ghost'" in msg and "modelgatectl switch 3090 " \
        "mainline" in msg, msg
    assert box.active_state("llama-fork.service") == "active"
    assert box.active_state("llama-mainline.service") == "inactive"
    # a name it listed still switches
    r = post(c, CHAT, chat("3090-laguna-xs"))
    assert r.status == 200, r.read()
    r.read()
    assert box.active_state("llama-mainline.service") == "active"
