"""The data plane outlives the control plane, and no wait ends in a refusal that could have been given at once
(rule:bus-gone, rule:bus-backoff, rule:busy-followed, rule:hold-down-from-host): a host whose ssh bus is lost
goes on serving with the engine that runs, while a switch is refused with words that say the bus is gone and
a Retry-After that is the reconnect's time; a BusyUnits= unit that becomes active makes the host busy and a
request that needs a switch gets 423 at once; an engine adopted after a restart is past its hold-down when
its unit has been active that long."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

import conftest
from boxes import box_skip_reason, ctl, host_prop, children, gate_env, local_host, two_engines
from conftest import free_port, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

CHAT = "/v1/chat/completions"


def ask(g, model, timeout=60):
    """(status, engine that answered, Retry-After, the error's message or the body, seconds taken)"""
    a = conftest.ask(g, model, timeout=timeout)
    try:
        message = json.loads(a.body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = a.text()
    return a.status, a.getheader("X-Double"), a.getheader("Retry-After"), message, a.took


def test_a_lost_ssh_bus_leaves_the_engine_serving_and_refuses_a_switch_with_the_reconnect_time(box, sshd,
                                                                                              make_gate):
    port = free_port()
    conf = ("[Proxy]\nHoldDownSec=1s\n[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\n"
            "SSHCommand=%s\nBusPath=unix:path=%s\n" % (port, sshd.port, sshd.ssh_command, box.bus))
    conf += two_engines(box, port) % {"host": "a9", "extra": ""}
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    g.wait_log("host a9 up")
    status, engine, _, body, _ = ask(g, "a9-laguna-xs")
    assert (status, engine) == (200, "mainline"), body

    # the bus goes, and no new ssh session can be had: the engine's HTTP is still there
    sshd.stop()
    (ssh,) = [p for p in children(g.proc.pid) if open("/proc/%d/comm" % p).read().strip() == "ssh"]
    os.kill(ssh, signal.SIGKILL)
    # the loss is seen (a build before rule:bus-gone said "host a9 down: ssh: ...")
    wait_for(lambda: "host a9: bus gone (ssh: " in g.logtext() or "host a9 down: ssh: " in g.logtext(), 30,
             "the lost bus in the log", interval=0.1)

    # the data plane: the running engine's models are served, again and again
    for _ in range(3):
        status, engine, _, body, _ = ask(g, "a9-laguna-xs")
        assert (status, engine) == (200, "mainline"), body
    g.wait_log("host a9: bus gone (ssh: ")
    assert "host a9 down" not in g.logtext()

    # the control plane: a switch needs the bus, and says so at once, with the reconnect's time twice
    status, engine, retry, message, took = ask(g, "a9-flint-40b")
    assert status == 503, message
    assert took < 5, took
    m = re.search(r"the bus of host 'a9' is gone \(ssh: [^)]*\): engine 'mainline' serves on, but switching to "
                  r"engine 'fork' needs the bus; reconnecting in (\d+) s, retry then", message)
    assert m, message
    assert retry == m.group(1), (retry, message)
    assert 1 <= int(retry) <= 30, retry

    # the state says it: serving, with the bus gone
    assert host_prop(box, "a9", "State") == "serving"
    assert host_prop(box, "a9", "BusState") == "gone"
    assert host_prop(box, "a9", "BusError").startswith("ssh: ")
    hosts = ctl(box, "hosts")
    assert re.search(r"^a9 +serving, bus gone ", hosts.stdout, re.M), hosts.stdout + hosts.stderr
    status_out = ctl(box, "status").stdout
    assert "a9 (http://127.0.0.1:%d): serving, bus gone, engine mainline" % port in status_out, status_out
    assert "  bus:        gone (ssh: " in status_out, status_out

    # each reconnect that fails (ssh says so in the log) leaves the loss said once
    g.wait_log("host a9: ssh: connect to host 127.0.0.1 port %d: Connection refused" % sshd.port, count=2,
               timeout=60)
    assert g.logtext().count("host a9: bus gone (") == 1, g.logtext()

    # the bus comes back: the engine stays as it was, and the switch is made
    sshd.start()
    g.wait_log("host a9: bus back; engine mainline served on meanwhile", timeout=60)
    assert host_prop(box, "a9", "BusState") == "up"
    status, engine, _, body, _ = ask(g, "a9-flint-40b")
    assert (status, engine) == (200, "fork"), body


def test_a_busy_unit_makes_the_host_busy_and_a_switch_is_refused_at_once(box, make_gate):
    """rule:busy-followed: the BusyUnits= unit starts while mainline serves in a long hold-down: the host is
    busy at once, a request for fork gets 423 without waiting for the hold-down, mainline serves on"""
    port = free_port()
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    conf = "[Proxy]\nHoldDownSec=60s\n" + local_host("3090", port, "BusyUnits=gpu-bench.service\n") + \
        two_engines(box, port) % {"host": "3090", "extra": ""}
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    g.wait_log("host 3090 up")
    status, engine, _, body, _ = ask(g, "3090-laguna-xs")
    assert (status, engine) == (200, "mainline"), body
    assert host_prop(box, "3090", "State") == "serving"

    box.systemctl("start", "gpu-bench.service")
    wait_for(lambda: host_prop(box, "3090", "State") == "busy", 10, "host 3090 busy", interval=0.1)
    g.wait_log("host 3090: GPU busy: gpu-bench.service is active (BusyUnits=)")
    hosts = ctl(box, "hosts")
    assert re.search(r"^3090 +busy ", hosts.stdout, re.M), hosts.stdout + hosts.stderr

    status, engine, retry, message, took = ask(g, "3090-flint-40b")
    assert status == 423, message
    assert took < 5, took  # not after the 60 s hold-down
    assert "gpu-bench.service is active" in message and "engine 'fork'" in message, message
    status, engine, _, body, _ = ask(g, "3090-laguna-xs")
    assert (status, engine) == (200, "mainline"), body

    box.systemctl("stop", "gpu-bench.service")
    wait_for(lambda: host_prop(box, "3090", "State") == "serving", 10, "host 3090 serving again", interval=0.1)
    g.wait_log("host 3090: GPU no longer busy (no BusyUnits= unit is active any more)")


def test_an_adopted_engine_counts_its_hold_down_from_when_its_unit_became_active(box, make_gate):
    """rule:hold-down-from-host, without Shared=: mainline has run longer than HoldDownSec= when modelgated
    starts and adopts it: no hold-down is left, and a request for fork switches without waiting for one"""
    port = free_port()
    conf = "[Proxy]\nHoldDownSec=5s\n" + local_host("3090", port) + \
        two_engines(box, port) % {"host": "3090", "extra": ""}
    box.systemctl("start", "llama-mainline.service")
    since = time.monotonic()
    wait_for(lambda: subprocess.run(["curl", "-sf", "http://127.0.0.1:%d/health" % port],
                                    capture_output=True).returncode == 0, what="mainline to answer")
    # the unit has been active longer than the hold-down: what the host's clock says, not ours
    wait_for(lambda: time.monotonic() - since > 6, 10, "mainline active for 6 s", interval=0.2)
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    g.wait_log("host 3090: engine mainline adopted, it was already running")
    assert host_prop(box, "3090", "HoldDownUntilUSec") == 0
    status, engine, _, body, _ = ask(g, "3090-flint-40b")
    assert (status, engine) == (200, "fork"), body
    assert "hold-down" not in "\n".join(l for l in g.logtext().splitlines() if "waits before switching" in l)
