"""What a host's state says, in a boxed user manager: a host not probed yet is connecting, not down, and
/health waits (bounded) for the first probes (rule:host-connecting, rule:health, rule:first-wait)."""

import http.client
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from boxes import (box_skip_reason, ctl, host_prop, chat, engine_unit, engines_conf, gate_env, installed_units,
                   local_host)
from conftest import DOUBLE, PYTHON, double_requests, free_port, host_conf, metric_samples, post, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


class At:
    """modelgate on a port (socket-activated: no Gate of its own), as metric_samples() asks for one"""

    def __init__(self, port):
        self.port = port

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path):
        c = self.conn()
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body


def health(at, strict=False):
    status, body = at.get("/health?strict=1" if strict else "/health")
    return status, json.loads(body)


def test_the_first_health_after_a_socket_activation_shows_the_host_probed_not_down(box, tmp):
    engine_port, port = free_port(), free_port()
    installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1h\n" + local_host("3090", engine_port) +
                    engines_conf(box, "3090", engine_port))
    at = At(port)
    # this connection starts modelgate.service: its request is the daemon's first
    status, body = health(at, strict=True)
    assert status == 200, body
    assert body["status"] == "ok" and body["hosts_up"] == 1, body
    assert body["host_states"] == {"3090": "idle"}, body
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


def test_a_host_whose_probe_does_not_answer_is_connecting_then_down(box, tmp):
    engine_port, port = free_port(), free_port()
    # accepts connections (the kernel does, from the backlog) and never answers: the first read takes 5 s
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1h\n" + local_host("3090", engine_port) +
                        engines_conf(box, "3090", engine_port) +
                        host_conf("silent", "http://127.0.0.1:%d" % silent.getsockname()[1]))
        at = At(port)
        t0 = time.monotonic()
        status, body = health(at, strict=True)
        took = time.monotonic() - t0
        # it waited for the first probes, and no longer than its bound: the silent host is still unknown
        assert status == 200 and body["status"] == "ok", body
        assert body["host_states"] == {"3090": "idle", "silent": "connecting"}, body
        assert took >= 1.9, "/health did not wait for the first probes (%.2f s)" % took
        # the bus, /metrics and modelgatectl say the same
        assert host_prop(box, "silent", "State") == "connecting"
        samples = metric_samples(at)
        assert samples[("modelgate_host_state", (("host", "silent"), ("state", "connecting")))] == 1
        assert samples[("modelgate_host_state", (("host", "silent"), ("state", "down")))] == 0
        hosts = ctl(box, "hosts")
        assert any(line.split()[:2] == ["silent", "connecting"] for line in hosts.stdout.splitlines()), hosts
        # its first read gives up after 5 s: now it is down, and /health answers at once
        wait_for(lambda: health(at)[1]["host_states"]["silent"] == "down", 15, "the silent host down",
                 interval=0.1)
        t0 = time.monotonic()
        status, body = health(at, strict=True)
        assert status == 200 and body["host_states"] == {"3090": "idle", "silent": "down"}, body
        assert time.monotonic() - t0 < 1.0
        assert host_prop(box, "silent", "State") == "down"
        box.systemctl("stop", "modelgate.socket", "modelgate.service")
    finally:
        silent.close()


def host_states(gate):
    """the host's state as /health, /metrics and modelgatectl hosts show it: one value when they agree"""
    c = gate.conn()
    c.request("GET", "/health")
    by_health = json.loads(c.getresponse().read())["host_states"]["3090"]
    c.close()
    samples = metric_samples(gate)
    by_metrics = [k[1][1][1] for k, v in samples.items()
                  if k[0] == "modelgate_host_state" and k[1][0] == ("host", "3090") and v == 1]
    lines = [line.split() for line in ctl(gate.box, "hosts").stdout.splitlines()]
    by_ctl = [words[1] for words in lines if words and words[0] == "3090"]
    return {by_health} | set(by_metrics) | set(by_ctl)


def test_busy_ends_when_the_owner_stops(box, make_gate):
    """rule:busy-recheck: the BusyUnits= unit stops, or the foreign server goes: the host is idle again"""
    port = free_port()
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    conf = "[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port, "BusyUnits=gpu-bench.service\n") + \
        engines_conf(box, "3090", port)
    box.systemctl("start", "gpu-bench.service")
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    g.box = box
    # rule:busy-followed: known before any request asks
    wait_for(lambda: host_prop(box, "3090", "State") == "busy", what="host 3090 busy", interval=0.1)
    r = post(g.conn(), "/v1/chat/completions", chat("3090-laguna-xs"))
    assert r.status == 423, r.read()
    r.read()
    assert host_states(g) == {"busy"}
    box.systemctl("stop", "gpu-bench.service")
    wait_for(lambda: host_states(g) == {"idle"}, 10, "host 3090 idle after gpu-bench.service stopped",
             interval=0.2)
    g.wait_log("host 3090: GPU no longer busy (no BusyUnits= unit is active any more)")
    assert host_prop(box, "3090", "State") == "idle"

    # a server nobody started through an engine unit holds the engine's port: busy until it goes
    foreign = subprocess.Popen([PYTHON, DOUBLE, "--port", str(port), "--models", "x"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: subprocess.run(["curl", "-sf", "http://127.0.0.1:%d/health" % port],
                                        capture_output=True).returncode == 0, what="the foreign server")
        r = post(g.conn(), "/v1/chat/completions", chat("3090-flint-40b"))
        assert r.status == 423, r.read()
        r.read()
        assert host_states(g) == {"busy"}
        # it stays busy while the server answers: the refusal's probe and two rechecks (2 s apart) found it
        wait_for(lambda: len(double_requests(port, "/health")) >= 3, 15, "two rechecks", interval=0.2)
        assert host_states(g) == {"busy"}
    finally:
        foreign.kill()
        foreign.wait()
    wait_for(lambda: host_states(g) == {"idle"}, 10, "host 3090 idle after the foreign server went",
             interval=0.2)
    g.wait_log("host 3090: GPU no longer busy (nothing answers on http://127.0.0.1:%d any more)" % port)
    # and the next request starts its engine
    r = post(g.conn(timeout=60), "/v1/chat/completions", chat("3090-laguna-xs"))
    assert r.status == 200 and r.getheader("X-Double") == "mainline"


def test_an_active_engine_whose_url_answers_nothing_is_said_after_a_few_seconds(box, make_gate):
    """rule:engine-unanswered: the unit runs the engine on one port, URL= points at another, closed one"""
    listens, closed = free_port(), free_port()
    box.add_unit("llama-mainline.service", engine_unit("mainline", listens, "laguna-xs"))
    box.reload()
    url = "http://127.0.0.1:%d" % closed
    conf = ("[Proxy]\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("3090", closed) +
            "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\n"
            "StartTimeoutSec=9s\n")
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    g.box = box
    wait_for(lambda: host_prop(box, "3090", "State") == "idle", what="host 3090 idle", interval=0.1)
    c = g.conn(timeout=60)
    t0 = time.monotonic()
    r = post(c, "/v1/chat/completions", chat("3090-laguna-xs", stream=True))
    assert r.status == 200  # modelgate's early 200 (KeepaliveAfterSec=1s)
    told = None
    comments = []
    while True:
        line = r.readline().decode()
        assert line, "the stream ended before it said anything: %r" % comments
        if line.startswith(":"):
            comments.append((time.monotonic() - t0, line))
            if "nothing answers at %s" % url in line:
                told = time.monotonic() - t0
                break
    assert box.active_state("llama-mainline.service") == "active"
    # a few seconds after the unit is active, not at once and not at StartTimeoutSec=
    assert 4 < told < 8.5, comments
    assert "engine mainline (llama-mainline.service) is active but nothing answers at %s (connection refused): " \
        "is the engine listening where URL= points?" % url in line, line
    g.wait_log("host 3090: engine mainline (llama-mainline.service) is active but nothing answers at %s "
               "(connection refused): is the engine listening where URL= points?" % url)
    assert "nothing answers at %s" % url in host_prop(box, "3090", "LastError")
    # the final error, at StartTimeoutSec=, names the URL too
    rest = [l.decode() for l in r.read().splitlines()]
    errors = [l for l in rest if l.startswith('data: {"error"')]
    assert errors, rest
    message = json.loads(errors[0][len("data: "):])["error"]["message"]
    assert "result: timeout" in message and "nothing answered at %s while its unit was active" % url in message, \
        message
    # and its re-send gets the same 502 at once (rule:failed-start-hold), naming the URL
    r = post(g.conn(), "/v1/chat/completions", chat("3090-laguna-xs"))
    body = json.loads(r.read())
    assert r.status == 502, body
    assert "nothing answered at %s" % url in body["error"]["message"], body
    assert len(g.logtext().split("is active but nothing answers at")) == 2, "said more than once"


def test_a_reload_that_empties_busy_units_ends_busy(box, make_gate):
    """rule:busy-recheck: with no BusyUnits= left, nothing can hold the GPU for someone else (an empty list
    asked of the manager would match every unit)"""
    port = free_port()
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    engines = engines_conf(box, "3090", port)
    g = make_gate("[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port, "BusyUnits=gpu-bench.service\n") + engines,
                  extra_args=["--user"], env=gate_env(box))
    g.box = box
    box.systemctl("start", "gpu-bench.service")
    wait_for(lambda: host_prop(box, "3090", "State") == "busy", what="host 3090 busy", interval=0.1)
    r = post(g.conn(), "/v1/chat/completions", chat("3090-laguna-xs"))
    assert r.status == 423, r.read()
    r.read()
    assert host_states(g) == {"busy"}
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\nHoldDownSec=1s\n" % g.port + local_host("3090", port) + engines)
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("1 kept, 0 new, 0 draining")
    wait_for(lambda: host_states(g) == {"idle"}, 10, "host 3090 idle after the reload", interval=0.2)
    g.wait_log("host 3090: GPU no longer busy (a reload emptied BusyUnits=)")
    assert box.active_state("gpu-bench.service") == "active"
