"""rule:idle-stop-on-host: the host's own manager holds each engine's idle stop as a transient timer unit, so
that an engine stops at its idle time when modelgated does not: stopped, killed, or no longer in front of the
host after a reload; renewed while the engine is used, stopped by a switch; through ssh the same."""

import json
import signal
import threading
import time
import urllib.request

import pytest

from boxes import (box_skip_reason, chat, engine_unit, engines_conf, gate_env, installed_units, local_host,
                   two_engines)
from conftest import free_port, post, read_sse, wait_for

CHAT = "/v1/chat/completions"
IDLE = 3.0  # IdleStopSec=; the host's timer may come up to 1 s (its slack) and its accuracy later
LATE = IDLE + 1.0 + 3.0  # the latest a host-side stop may come after the last request, with room for load

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def conf_for(box, port, idle=IDLE):
    return "[Proxy]\nHoldDownSec=1s\nIdleStopSec=%gs\n" % idle + local_host("3090", port) + \
        engines_conf(box, "3090", port, double_args="--token-delay 0.1")


def idle_units(box, kind=".timer"):
    """the modelgate units of a kind ("": any) the box's manager holds, loaded at all"""
    out = box.systemctl("list-units", "--all", "--plain", "--no-legend", "modelgate-*")
    return sorted(n for n in (line.split()[0] for line in out.splitlines() if line.strip()) if n.endswith(kind))


def kill(g):
    g.proc.send_signal(signal.SIGKILL)
    g.proc.wait()
    g.stopped = True  # no clean stop to check


def one_request(g, model="3090-laguna-xs", tokens=1):
    r = post(g.conn(timeout=60), CHAT, chat(model, "[[tokens:%d]]" % tokens))
    assert r.status == 200, r.read()
    r.read()
    return time.monotonic()


def wait_stopped(box, unit, since):
    wait_for(lambda: box.active_state(unit) == "inactive", timeout=LATE + 10, what="%s to stop" % unit)
    took = time.monotonic() - since
    assert IDLE - 0.5 <= took <= LATE, "%s stopped %.1f s after its last request" % (unit, took)
    # the timer and its service went with it
    wait_for(lambda: idle_units(box, "") == [], timeout=10, what="no modelgate unit left")


def test_engine_stops_at_its_idle_time_after_modelgate_is_stopped(box, tmp):
    port, sock = free_port(), free_port()
    installed_units(box, tmp, sock, "[Proxy]\nExitIdleSec=0\n" + conf_for(box, port))
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (sock, CHAT),
                                 data=json.dumps(chat("3090-laguna-xs")).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        r.read()
    done = time.monotonic()
    assert box.active_state("llama-mainline.service") == "active"
    # what an operator sees: the timer, and the service it starts
    timers = box.systemctl("list-timers", "--all", "--no-legend", "modelgate-*")
    assert "modelgate-idle-llama-mainline.timer" in timers and "modelgate-idle-llama-mainline.service" in timers, \
        timers
    box.systemctl("stop", "modelgate.socket", "modelgate.service")
    wait_stopped(box, "llama-mainline.service", done)


def test_engine_stops_at_its_idle_time_after_modelgated_is_killed(box, make_gate):
    port = free_port()
    g = make_gate(conf_for(box, port), env=gate_env(box))
    g.wait_log("host 3090 up")
    done = one_request(g)
    wait_for(lambda: idle_units(box) == ["modelgate-idle-llama-mainline.timer"], what="the idle timer")
    kill(g)
    wait_stopped(box, "llama-mainline.service", done)


def test_a_used_engine_is_not_stopped_early_and_its_timer_is_renewed(box, make_gate):
    port = free_port()
    g = make_gate(conf_for(box, port), env=gate_env(box))
    g.wait_log("host 3090 up")
    # a stream of ~6 s, twice IdleStopSec=: the timer made when the engine came up would elapse in it
    r = post(g.conn(timeout=60), CHAT, chat("3090-laguna-xs", "[[tokens:60]]", stream=True))
    lines = [l for _, l in read_sse(r)]
    assert r.status == 200 and "data: [DONE]\n" in lines, lines[-3:]
    done = one_request(g)  # and a request just after it
    assert box.active_state("llama-mainline.service") == "active"
    kill(g)
    # not stopped before its idle time from the last request, stopped by the host's timer after it
    wait_stopped(box, "llama-mainline.service", done)


def test_a_switch_stops_the_old_engines_timer(box, make_gate):
    port = free_port()
    g = make_gate(conf_for(box, port, idle=60), env=gate_env(box))
    g.wait_log("host 3090 up")
    one_request(g)
    wait_for(lambda: idle_units(box) == ["modelgate-idle-llama-mainline.timer"], what="mainline's idle timer")
    one_request(g, "3090-flint-40b")
    wait_for(lambda: idle_units(box) == ["modelgate-idle-llama-fork.timer"], timeout=15,
             what="only fork's idle timer: %s" % idle_units(box))


def test_a_reload_that_removes_the_host_leaves_the_idle_stop_to_the_host(box, make_gate, make_double):
    port = free_port()
    d = make_double("--models", "other", "--loaded", "other")
    g = make_gate(conf_for(box, port) + "[Host]\nName=other\nURL=%s\n" % d.url, env=gate_env(box))
    g.wait_log("host 3090 up")
    done = one_request(g)
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n[Host]\nName=other\nURL=%s\n" % (g.port, d.url))
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("1 kept, 0 new, 1 draining")
    wait_stopped(box, "llama-mainline.service", done)
    assert "engine mainline stopped" not in g.logtext()


def test_a_host_through_ssh_holds_the_idle_stop_too(make_box, sshd, make_gate):
    remote = make_box()
    rport = free_port()
    conf = ("[Proxy]\nHoldDownSec=1s\nIdleStopSec=%gs\n[Host]\nName=a9\nURL=http://127.0.0.1:%d\n"
            "Bus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\nBusPath=unix:path=%s\n"
            % (IDLE, rport, sshd.port, sshd.ssh_command, remote.bus)) + \
        two_engines(remote, rport) % {"host": "a9", "extra": ""}
    g = make_gate(conf)
    g.wait_log("host a9 up")
    done = one_request(g, "a9-laguna-xs")
    wait_for(lambda: idle_units(remote) == ["modelgate-idle-llama-mainline.timer"], what="the idle timer on a9")
    kill(g)
    wait_stopped(remote, "llama-mainline.service", done)


def test_a_restarted_modelgated_takes_the_timer_over(box, make_gate):
    port = free_port()
    conf = conf_for(box, port, idle=5)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    one_request(g)
    wait_for(lambda: idle_units(box) == ["modelgate-idle-llama-mainline.timer"], what="the idle timer")
    kill(g)
    # the next one adopts the engine and makes the timer anew over the old one's (same name, unknown length)
    g2 = make_gate(conf, env=gate_env(box))
    g2.wait_log("host 3090: engine mainline adopted, it was already running")
    done = one_request(g2)
    assert idle_units(box) == ["modelgate-idle-llama-mainline.timer"]
    assert "cannot hold the idle stop" not in g2.logtext()
    g2.wait_log("host 3090: idle 5s, engine mainline stopped", timeout=20)
    assert time.monotonic() - done >= 4.5
    wait_for(lambda: idle_units(box, "") == [], timeout=10, what="no modelgate unit left")


def test_a_manager_that_refuses_the_timer_is_warned_about_once_and_the_daemons_own_stop_remains(box, make_gate):
    # an engine unit whose name is valid, but too long for modelgate-idle-<unit>.timer (256 bytes at most):
    # the host's manager refuses the timer, as a system manager without the polkit right would
    port = free_port()
    unit = "llama-" + "x" * 240 + ".service"
    box.add_unit(unit, engine_unit("long", port, "laguna-xs"))
    box.reload()
    conf = "[Proxy]\nIdleStopSec=%gs\n" % IDLE + local_host("3090", port) + \
        "[Engine]\nHost=3090\nName=long\nUnit=%s\nModels=laguna-*\nStartTimeoutSec=30s\n" % unit
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    one_request(g)
    g.wait_log("host 3090: cannot hold the idle stop of engine long on the host: ")
    assert "modelgated's own still applies while it runs" in g.logtext()
    g.wait_log("host 3090: idle 3s, engine long stopped", timeout=20)
    assert box.active_state(unit) == "inactive"
    assert g.logtext().count("cannot hold the idle stop") == 1
