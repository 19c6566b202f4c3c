"""Two modelgated instances in front of one boxed host, one on its local bus and one through ssh
(rule:several-instances, rule:switch-lease, rule:foreign-switch, rule:hold-down-from-host), and a request
that bypasses modelgate altogether (rule:slots-in-flight): streams are never cut, whoever sent them, the
agents of two instances take turns, and a killed lease holder's switch is done by the other."""

import http.client
import os
import re
import signal
import threading
import time

import pytest

from boxes import box_skip_reason, chat, engine_unit, engines_conf, gate_env, installed_units, local_host
from conftest import free_port, keepalive_chunk, post, read_sse, wait_for

CHAT = "/v1/chat/completions"

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def shared_conf(host_line, engines, keys):
    return "[Proxy]\n" + "".join("%s=%s\n" % kv for kv in keys.items()) + host_line + "Shared=yes\n" + engines


def shared_engines(box, port, token_delay="0.05", startup_delay=0.0, start_timeout="30s"):
    """engine units mainline (laguna-*) and fork (flint-*) on one port in the box, and their [Engine]s"""
    args = "--token-delay %s" % token_delay
    # fork is the slow one to come up (its /health answers 503 for startup_delay)
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs", ["llama-fork.service"],
                                                       extra_service="TimeoutStopSec=5s", double_args=args))
    box.add_unit("llama-fork.service", engine_unit("fork", port, "flint-40b", ["llama-mainline.service"],
                                                   extra_service="TimeoutStopSec=5s",
                                                   double_args=args + " --startup-delay %g" % startup_delay))
    box.reload()
    return "".join("[Engine]\nHost=3090\nName=%s\nUnit=llama-%s.service\nModels=%s\nStartTimeoutSec=%s\n"
                   % (n, n, m, start_timeout) for n, m in (("mainline", "laguna-*"), ("fork", "flint-*")))


def remote_host(box, sshd, port):
    return ("[Host]\nName=3090\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
            "BusPath=unix:path=%s\n" % (port, sshd.port, sshd.ssh_command, box.bus))


def two_gates(box, sshd, make_gate, token_delay="0.05", startup_delay=0.0, start_timeout="30s", **keys):
    """gate A on the box's bus, gate B through ssh to the same bus; both Shared=yes"""
    port = free_port()
    engines = shared_engines(box, port, token_delay, startup_delay, start_timeout)
    a = make_gate(shared_conf(local_host("3090", port), engines, keys), env=gate_env(box))
    b = make_gate(shared_conf(remote_host(box, sshd, port), engines, keys))
    a.wait_log("host 3090 up")
    b.wait_log("host 3090 up")
    return a, b, port


def one_gate(box, make_gate, start_timeout="30s"):
    """one modelgated, no Shared=, in front of the box's two engines: what every host does"""
    port = free_port()
    conf = "[Proxy]\nHoldDownSec=0\n" + local_host("3090", port) + engines_conf(
        box, "3090", port, double_args="--token-delay 0.05").replace("StartTimeoutSec=30s",
                                                                     "StartTimeoutSec=" + start_timeout)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    return g, port


def stream(g, model, tokens, started=None, timeout=180):
    c = g.conn(timeout=timeout)
    r = post(c, CHAT, chat(model, "[[tokens:%d]]" % tokens, stream=True))
    if started:
        first = r.readline()
        started.set()
        return r, [(time.monotonic(), first.decode())] + read_sse(r)
    return r, read_sse(r)


def done(lines):
    return [l for _, l in lines if l.startswith("data: ")][-1:] == ["data: [DONE]\n"]


def test_the_lease_is_a_unit_on_the_host_and_a_stream_on_one_instance_holds_off_the_others_switch(
        box, sshd, make_gate):
    a, b, _ = two_gates(box, sshd, make_gate, HoldDownSec="1s")
    # A brings mainline up for itself (and holds the lease only while it switches)
    r, lines = stream(a, "3090-laguna-xs", 2)
    assert r.status == 200 and done(lines)
    wait_for(lambda: box.active_state("modelgate-switch-3090.service") in ("inactive", ""),
             what="A's lease to end with its switch")
    # B adopted mainline from the host: it serves laguna at once, with no switch of its own
    r, lines = stream(b, "3090-laguna-xs", 2)
    assert r.status == 200 and done(lines)
    assert "host 3090: switching to engine" not in b.logtext()

    # a long stream on A, then B wants fork: B must wait for A's stream, which B cannot count itself
    result, started = {}, threading.Event()
    t = threading.Thread(target=lambda: result.update(zip(("r", "lines"), stream(a, "3090-laguna-xs", 200,
                                                                                  started))))
    t.start()
    assert started.wait(60)
    t0 = time.monotonic()
    r, lines = stream(b, "3090-flint-40b", 3)
    t.join()
    assert result["r"].status == 200 and done(result["lines"]), "A's stream was cut: %r" % result["lines"][-3:]
    assert r.status == 200 and done(lines), (lines[-3:], b.logtext())
    a_end = result["lines"][-1][0]
    first = next(t for t, l in lines if l.startswith("data: ") and not keepalive_chunk(l))
    assert first >= a_end - 0.2, "fork answered %.2f s before A's stream ended" % (a_end - first)
    assert a_end - t0 > 5
    b.wait_log("host 3090: switch to fork waits: engine mainline is working on a request that did not come "
               "through this modelgate (its /slots)")
    # A saw B's lease while B waited, and said so
    a.wait_log("host 3090: another modelgate is switching it")
    a.wait_log("host 3090: the other modelgate's switch ended")


def test_a_request_straight_to_llama_server_holds_off_a_switch(box, make_gate):
    g, port = one_gate(box, make_gate)
    c = g.conn()
    r = post(c, CHAT, chat("3090-laguna-xs", "[[tokens:1]]"))
    r.read()
    assert r.status == 200
    # a client that knows the engine's own address: modelgate counts nothing in flight
    result, started = {}, threading.Event()

    def direct():
        d = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        rr = post(d, CHAT, chat("laguna-xs", "[[tokens:120]]", stream=True))
        started.set()
        result["lines"] = read_sse(rr)
    t = threading.Thread(target=direct)
    t.start()
    assert started.wait(30)
    r, lines = stream(g, "3090-flint-40b", 3)
    t.join()
    assert done(result["lines"]), "the direct stream was cut: %r" % result["lines"][-3:]
    assert r.status == 200 and done(lines)
    first = next(t for t, l in lines if l.startswith("data: ") and not keepalive_chunk(l))
    assert first >= result["lines"][-1][0] - 0.2
    g.wait_log("host 3090: switch to fork waits: engine mainline is working on a request that did not come "
               "through this modelgate (its /slots)")


def test_two_agents_on_two_instances_take_turns(box, sshd, make_gate):
    seconds = float(os.environ.get("MODELGATE_AGENTS_SECONDS", "120"))
    hold = 10
    a, b, _ = two_gates(box, sshd, make_gate, HoldDownSec="%ds" % hold, KeepaliveAfterSec="2s",
                        KeepaliveIntervalSec="2s")
    stop_at = time.monotonic() + seconds
    results = {(a, "3090-laguna-xs"): [], (b, "3090-flint-40b"): []}

    def agent(g, model):
        c = None
        while time.monotonic() < stop_at:
            try:
                c = c or g.conn(timeout=180)
                r = post(c, CHAT, chat(model, "[[tokens:20]]", stream=True))
                lines = read_sse(r)
                results[(g, model)].append("ok" if r.status == 200 and done(lines)
                                           else "error %d %r" % (r.status, lines[-3:]))
            except Exception as e:  # an agent re-sends at once on anything
                results[(g, model)].append("error %r" % e)
                c = None

    threads = [threading.Thread(target=agent, args=k) for k in results]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    for (g, model), turns in results.items():
        assert all(t == "ok" for t in turns), (model, [t for t in turns if t != "ok"][:3])
        assert len(turns) >= 3, (model, len(turns))
    # each switch of the GPU is done by one instance ("engine X up after"); the other adopts it
    switched = [l for g in (a, b) for l in g.logtext().splitlines() if re.search(r"host 3090: engine \w+ up after", l)]
    # what an agent lives with, for the record (rule:several-instances): its turns, and the GPU's switches
    print("%.0f s: %s; %d switches (HoldDownSec=%ds)" % (elapsed, ", ".join(
        "%s on %s: %d turns" % (model, "A" if g is a else "B", len(turns)) for (g, model), turns in results.items()),
        len(switched), hold))
    assert 2 <= len(switched) <= elapsed / hold + 1 + 1, (switched, elapsed)  # +1 for the very first start


def test_a_lease_holder_killed_mid_switch_is_taken_over_by_the_other(box, sshd, make_gate):
    # fork takes 4 s to answer /health: A is killed while it waits for it, holding the lease
    a, b, _ = two_gates(box, sshd, make_gate, startup_delay=4.0, start_timeout="10s", HoldDownSec="0")
    def doomed():  # its gateway is killed under it
        try:
            stream(a, "3090-flint-40b", 2)
        except OSError:
            pass
    t = threading.Thread(target=doomed)
    t.start()
    a.wait_log("host 3090: switching to engine fork")
    wait_for(lambda: box.active_state("modelgate-switch-3090.service") == "active", what="A's lease")
    wait_for(lambda: box.active_state("llama-fork.service") == "active", what="fork to start")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    a.stopped = True
    t.join()
    # B wants mainline: it waits for the dead holder's lease to expire, then switches the host itself
    t0 = time.monotonic()
    r, lines = stream(b, "3090-laguna-xs", 2)
    took = time.monotonic() - t0
    assert r.status == 200 and done(lines), (lines[-3:], b.logtext())
    b.wait_log("host 3090: switch to mainline waits for another modelgate's switch of the host "
               "(modelgate-switch-3090.service)")
    # the lease lasts StartTimeoutSec= (10 s) + the units' TimeoutStopSec= (5 s) + 10 s of slots + 5 s
    assert took < 35, took
    assert box.active_state("llama-fork.service") in ("inactive", "failed")
    assert box.active_state("llama-mainline.service") == "active"


def test_the_lease_of_a_killed_instance_ends_with_its_process(box, sshd, make_gate, tmp):
    """A runs as the box's own modelgate.service, so the bus broker knows its pid: its lease follows that pid
    (tail --pid) and ends within a second of its death, long before RuntimeMaxSec="""
    port, aport = free_port(), free_port()
    engines = shared_engines(box, port, startup_delay=6.0, start_timeout="20s")
    log = installed_units(box, tmp, aport, shared_conf(local_host("3090", port), engines, {"HoldDownSec": "0"}))
    b = make_gate(shared_conf(remote_host(box, sshd, port), engines, {"HoldDownSec": "0"}))
    b.wait_log("host 3090 up")

    def doomed():  # its gateway is killed under it
        try:
            c = http.client.HTTPConnection("127.0.0.1", aport, timeout=60)
            post(c, CHAT, chat("3090-flint-40b", "[[tokens:2]]")).read()
        except OSError:
            pass
    t = threading.Thread(target=doomed)
    t.start()
    wait_for(lambda: box.active_state("modelgate-switch-3090.service") == "active", timeout=30, what="A's lease")
    execs = box.systemctl("show", "-P", "ExecStart", "modelgate-switch-3090.service")
    pid = box.systemctl("show", "-P", "MainPID", "modelgate.service").strip()
    assert "path=tail" in execs and "--pid=%s" % pid in execs, (execs, pid, open(log).read())
    box.systemctl("kill", "-s", "KILL", "modelgate.service")
    killed = time.monotonic()
    wait_for(lambda: box.active_state("modelgate-switch-3090.service") in ("inactive", "failed"), timeout=10,
             what="the dead holder's lease to end")
    assert time.monotonic() - killed < 3
    t.join()
    r, lines = stream(b, "3090-laguna-xs", 2)
    assert r.status == 200 and done(lines), lines[-3:]
    assert box.active_state("llama-mainline.service") == "active"
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


def direct_stream(port, tokens, started, result):
    """a client that knows the engine's own address: modelgate counts nothing in flight"""
    try:
        d = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        rr = post(d, CHAT, chat("laguna-xs", "[[tokens:%d]]" % tokens, stream=True))
        started.set()
        result["lines"] = read_sse(rr)
    except OSError as e:
        result["error"] = e


def test_the_wait_for_someone_elses_slots_is_not_part_of_start_timeout_sec(box, make_gate):
    g, port = one_gate(box, make_gate, start_timeout="3s")
    r, lines = stream(g, "3090-laguna-xs", 1)
    assert r.status == 200
    result, started = {}, threading.Event()
    t = threading.Thread(target=direct_stream, args=(port, 120, started, result))  # 6 s, twice the timeout
    t.start()
    assert started.wait(30)
    r, lines = stream(g, "3090-flint-40b", 3)
    t.join()
    assert done(result["lines"])
    assert r.status == 200 and done(lines), lines[-3:]
    assert "did not answer /health" not in g.logtext()


def test_an_engine_that_stops_during_the_slots_wait_makes_one_switch_not_two(box, make_gate):
    g, port = one_gate(box, make_gate)
    r, lines = stream(g, "3090-laguna-xs", 1)
    result, started = {}, threading.Event()
    t = threading.Thread(target=direct_stream, args=(port, 400, started, result))
    t.start()
    assert started.wait(30)
    answer = {}
    t2 = threading.Thread(target=lambda: answer.update(zip(("r", "lines"), stream(g, "3090-flint-40b", 3))))
    t2.start()
    g.wait_log("switch to fork waits: engine mainline")
    box.systemctl("kill", "--signal=SIGKILL", "llama-mainline.service")
    t2.join()
    t.join()
    assert answer["r"].status == 200 and done(answer["lines"]), answer["lines"][-3:]
    g.wait_log("host 3090: engine mainline stopped while the switch to fork waited")
    g.log_mark("after")
    assert g.logtext().count("switching to engine fork") == 1, g.logtext()


def test_a_long_wait_for_slots_takes_the_lease_anew_before_it_can_expire(box, make_gate):
    port = free_port()
    engines = shared_engines(box, port, start_timeout="3s")  # the lease: 3 + 5 + 10 + 5 s
    g = make_gate(shared_conf(local_host("3090", port), engines, {"HoldDownSec": "0"}), env=gate_env(box))
    g.wait_log("host 3090 up")
    r, lines = stream(g, "3090-laguna-xs", 1)
    result, started = {}, threading.Event()
    t = threading.Thread(target=direct_stream, args=(port, 560, started, result))  # 28 s
    t.start()
    assert started.wait(30)
    r, lines = stream(g, "3090-flint-40b", 3)
    t.join()
    assert done(result["lines"]), "the direct stream was cut"
    assert r.status == 200 and done(lines), lines[-3:]
    g.log_mark("after")
    assert "ended before the switch did" not in g.logtext(), g.logtext()
    # 28 s of slots at work, 10 s a lease: taken anew twice, so that none outlived its RuntimeMaxSec=
    assert g.logtext().count("is taken anew after 10 s of waiting for the slots") == 2, g.logtext()
    assert "did not answer /health" not in g.logtext()
