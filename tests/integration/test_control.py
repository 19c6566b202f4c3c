"""org.modelgate1 on a boxed user bus, modelgatectl, reload, and the idle exit under socket activation."""

import json
import re
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest

import conftest
from boxes import box_skip_reason, chat, ctl, engines_conf, gate_env, installed_units, local_host, two_engines
from conftest import MODELGATED, free_port, host_conf, metric_samples, post, read_sse, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))
HOST_PATH = "/org/modelgate1/host/h"


def busctl(box, *args, check=True):
    return box.run("busctl", "--user", *args, check=check)


def prop(box, path, iface, name):
    return json.loads(busctl(box, "-j", "get-property", "org.modelgate1", path, iface, name))["data"]


@pytest.fixture
def engine_gate(box, make_gate):
    port = free_port()
    conf = local_host("h", port) + engines_conf(box, "h", port)
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    wait_for(lambda: prop(box, HOST_PATH, "org.modelgate1.Host", "State") == "idle", what="host h idle")
    return g


def test_introspection_shows_the_spec_members(box, engine_gate):
    manager = busctl(box, "introspect", "org.modelgate1", "/org/modelgate1")
    for member in ("org.modelgate1.Manager", ".Version", ".Listening", ".Connections", ".InFlight", ".Waiting",
                   ".Warnings", ".ListHosts", ".ListKeyUsage", ".Reload"):
        assert member in manager, manager
    host = busctl(box, "introspect", "org.modelgate1", HOST_PATH)
    for member in ("org.modelgate1.Host", ".Name", ".URL", ".Bus", ".State", ".Engine", ".Unit", ".Engines",
                   ".InFlight", ".Waiting", ".HoldDownUntilUSec", ".IdleStopAtUSec", ".LastError",
                   ".FailedStarts", ".WaitReason", ".SwitchEngine", ".StopEngine", ".ResetFailed"):
        assert member in host, host
    assert "/org/modelgate1/host/h" in busctl(box, "tree", "org.modelgate1")
    assert prop(box, HOST_PATH, "org.modelgate1.Host", "Engines") == ["mainline", "fork"]
    assert prop(box, "/org/modelgate1", "org.modelgate1.Manager", "Listening") == \
        ["127.0.0.1:%d" % engine_gate.port]


def test_switch_engine_waits_for_a_running_stream_and_announces_the_change(box, engine_gate):
    # mainline up, with a slow stream running on it
    c = engine_gate.conn()
    r = post(c, "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:3]]"))
    assert r.status == 200
    r.read()
    monitor = subprocess.Popen(["busctl", "--user", "monitor", "--match",
                                "type='signal',interface='org.freedesktop.DBus.Properties',path='%s'" % HOST_PATH],
                               env=box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # busctl says so once it is a monitor: from then on it sees every signal
        assert "Monitoring bus message stream" in monitor.stderr.readline()
        s = engine_gate.conn()
        stream = post(s, "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:30]]", stream=True))
        assert stream.status == 200
        first = stream.readline()
        assert first
        started = time.monotonic()
        switch = subprocess.Popen(["busctl", "--user", "--timeout=120", "call", "org.modelgate1", HOST_PATH,
                                   "org.modelgate1.Host", "SwitchEngine", "s", "fork"], env=box.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = read_sse(stream)
        stream_end = time.monotonic()
        assert lines[-2][1] == "data: [DONE]\n", "the running stream was cut"
        assert switch.wait(timeout=120) == 0, switch.stderr.read()
        switch_end = time.monotonic()
        assert switch_end >= stream_end, "SwitchEngine returned before the running stream ended"
        assert switch_end - started > 0.2
        assert prop(box, HOST_PATH, "org.modelgate1.Host", "Engine") == "fork"
        assert prop(box, HOST_PATH, "org.modelgate1.Host", "Unit") == "llama-fork.service"
        assert box.active_state("llama-fork.service") == "active"
        assert box.active_state("llama-mainline.service") == "inactive"
        engine_gate.wait_log("host h: switching to engine fork for SwitchEngine()")
        time.sleep(0.3)  # PropertiesChanged is sent at most 50 ms after a change; give the monitor time
    finally:
        monitor.terminate()
        out = monitor.communicate(timeout=10)[0]
    assert "PropertiesChanged" in out, out
    # the engine changed, and the state went through the switch and back to serving
    assert 'STRING "fork"' in out, out
    assert 'STRING "switching"' in out or 'STRING "starting"' in out, out


def test_modelgatectl_switch_says_what_it_waits_for_as_it_waits(box, engine_gate):
    # rule:wait-reason: mainline just up, so its hold-down (30 s, the default) holds the switch, counted down
    c = engine_gate.conn()
    r = post(c, "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:3]]"))
    assert r.status == 200
    r.read()
    switch = subprocess.Popen([MODELGATECTL, "--user", "switch", "h", "fork"], env=box.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    first = switch.stdout.readline()
    assert re.fullmatch(r"host h: held by engine mainline's hold-down, \d+ s left\n", first), \
        (first, switch.stderr.read())
    assert prop(box, HOST_PATH, "org.modelgate1.Host", "WaitReason").startswith("held by engine mainline's")
    out, err = switch.communicate(timeout=120)
    assert switch.returncode == 0, err
    lines = (first + out).splitlines()
    assert lines[-1] == "host h: engine fork is up", lines
    held = [int(m.group(1)) for m in (re.fullmatch(r"host h: held by engine mainline's hold-down, (\d+) s left", l)
                                      for l in lines) if m]
    assert len(held) >= 5 and held == sorted(held, reverse=True) and len(set(held)) == len(held), lines
    # after the hold-down, only the switch's own progress, each line once as it changed
    rest = lines[len(held):-1]
    assert all(re.fullmatch(r"host h: (starting fork \(\d+\.\d s\)|waiting for the switch to fork)", l)
               for l in rest), lines
    # the bus property is the same words, and empty once nothing waits
    assert prop(box, HOST_PATH, "org.modelgate1.Host", "WaitReason") == ""


def test_switch_and_stop_errors_name_what_was_wrong(box, engine_gate):
    out = ctl(box, "switch", "h", "nope")
    assert out.returncode == 4 and "host 'h' has no engine 'nope'" in out.stderr, out
    # and names the ones it has
    assert "its engines: mainline, fork" in out.stderr, out
    out = ctl(box, "switch", "nohost", "fork")
    assert out.returncode == 4 and "no host 'nohost'" in out.stderr, out
    out = ctl(box, "frobnicate")
    assert out.returncode == 2 and "Unknown command 'frobnicate'" in out.stderr, out
    out = subprocess.run([MODELGATECTL, "--user", "status"], capture_output=True, text=True, timeout=60,
                         env=dict(box.env, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent/bus"))
    assert out.returncode == 3, out


def test_modelgatectl_status_matches_the_bus_and_stop_engine_stops(box, engine_gate):
    out = ctl(box, "switch", "h", "mainline")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "host h: engine mainline is up\n"
    samples = metric_samples(engine_gate)
    assert samples[("modelgate_switches_total", (("engine", "mainline"), ("host", "h")))] == 1
    assert samples[("modelgate_engine_up_seconds", (("engine", "mainline"), ("host", "h")))] >= 0
    status = json.loads(ctl(box, "--json", "status").stdout)
    for name in ("Version", "Listening", "Connections", "InFlight", "Waiting", "Warnings"):
        assert status[name] == prop(box, "/org/modelgate1", "org.modelgate1.Manager", name), name
    (h,) = status["Hosts"]
    for name in ("Name", "URL", "Bus", "State", "Engine", "Unit", "Engines", "InFlight", "Waiting",
                 "HoldDownUntilUSec", "IdleStopAtUSec", "LastError", "FailedStarts"):
        assert h[name] == prop(box, HOST_PATH, "org.modelgate1.Host", name), name
    assert h["State"] == "serving" and h["Engine"] == "mainline"
    assert h["HoldDownUntilUSec"] > time.time() * 1e6
    human = ctl(box, "status").stdout
    assert "h (http://127.0.0.1:" in human and "serving, engine mainline (llama-mainline.service)" in human
    # what is loaded and until when, as ollama ps shows it
    at = time.strftime("%H:%M", time.localtime(h["IdleStopAtUSec"] / 1e6))
    # rule:state-words: the engine and the models it has loaded, as ollama ps names them
    assert h["LoadedModels"] == ["laguna-xs"] == prop(box, HOST_PATH, "org.modelgate1.Host", "LoadedModels")
    assert "hold-down:" in human and "loaded:     mainline (laguna-xs), idle stop in 14min" in human, human
    assert "(at %s)" % at in human, human
    hosts = ctl(box, "hosts").stdout.splitlines()
    assert hosts[0].split() == ["HOST", "STATE", "ENGINE", "IN-FLIGHT", "WAITING", "IDLE-STOP", "HELD"]
    assert hosts[1].split() == ["h", "serving", "mainline", "0", "0", at, "-"]

    # StopEngine inside the hold-down: stops at once, nothing is in flight
    out = ctl(box, "stop", "h")
    assert out.returncode == 0, out.stderr
    engine_gate.wait_log("host h: engine mainline stopped on request")
    wait_for(lambda: prop(box, HOST_PATH, "org.modelgate1.Host", "State") == "idle", what="host idle")
    assert box.active_state("llama-mainline.service") == "inactive"
    assert prop(box, HOST_PATH, "org.modelgate1.Host", "Engine") == ""


def busy_unit_gate(box, make_gate):
    """host h with two engines and a BusyUnits= unit (not started yet) that refuses their switches"""
    port = free_port()
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    conf = "[Proxy]\nHoldDownSec=1s\n" + local_host("h", port, "BusyUnits=gpu-bench.service\n") + \
        engines_conf(box, "h", port)
    g = make_gate(conf, extra_args=["--user"], env=gate_env(box))
    wait_for(lambda: prop(box, HOST_PATH, "org.modelgate1.Host", "State") == "idle", what="host h idle")
    return g


def test_last_error_says_when_and_clears_once_recovered(box, make_gate):
    """rule:last-error: a refusal is LastError with its time (LastErrorUSec, and status's words); the next
    engine that comes up ends it, on the bus and in status"""
    g = busy_unit_gate(box, make_gate)
    host = lambda name: prop(box, HOST_PATH, "org.modelgate1.Host", name)
    assert host("LastError") == "" and host("LastErrorUSec") == 0
    box.systemctl("start", "gpu-bench.service")
    t1 = time.time() * 1e6
    r = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs"))
    assert r.status == 423, r.read()
    t2 = time.time() * 1e6
    assert "in use by someone else" in host("LastError")
    assert t1 - 50e3 <= host("LastErrorUSec") <= t2 + 50e3
    human = ctl(box, "status").stdout
    at = time.strftime("%H:%M:%S", time.localtime(host("LastErrorUSec") / 1e6))
    assert re.search(r"  last error: .*in use by someone else.* \(at %s, [0-9a-z ]+ ago\)\n" % at, human), human
    # recovered: the GPU free again and an engine up
    box.systemctl("stop", "gpu-bench.service")
    wait_for(lambda: post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs")).status == 200,
             timeout=30, what="the engine up once the GPU is free")
    assert host("LastError") == "" and host("LastErrorUSec") == 0
    assert "last error" not in ctl(box, "status").stdout


def test_a_repeated_error_signals_its_new_time(box, make_gate, tmp):
    """rule:last-error: the same refusal twice has the same words and a new time: LastErrorUSec is sent in a
    PropertiesChanged each time (EMITS_CHANGE), not only when the words change"""
    g = busy_unit_gate(box, make_gate)
    box.systemctl("start", "gpu-bench.service")
    out = os.path.join(tmp, "monitor.txt")
    with open(out, "w") as f:
        monitor = subprocess.Popen(["stdbuf", "-oL", "busctl", "--user", "monitor", "--match",
                                    "type='signal',path='%s',member='PropertiesChanged'" % HOST_PATH],
                                   env=box.env, stdout=f, stderr=subprocess.DEVNULL)
    try:
        said = lambda: open(out).read().count('"LastErrorUSec"')

        def refused():
            r = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs"))
            assert r.status == 423, r.read()
            return said() > 0

        # busctl monitor says nothing of when it is attached: until it has seen one signal, a refusal's may
        # have gone out before it was; each try is another refusal with the same words
        wait_for(refused, timeout=30, interval=0.5, what="the monitor to see a LastErrorUSec")
        seen, before = said(), prop(box, HOST_PATH, "org.modelgate1.Host", "LastErrorUSec")
        refused()
        wait_for(lambda: said() > seen, timeout=10, what="LastErrorUSec signalled again for the same words")
        assert prop(box, HOST_PATH, "org.modelgate1.Host", "LastErrorUSec") > before
    finally:
        monitor.terminate()
        monitor.wait(timeout=10)


def get(gate, path, method="GET"):
    c = gate.conn()
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), body


def running(gate):
    status, ctype, body = get(gate, "/running")
    assert status == 200 and ctype == "application/json", (status, body)
    return json.loads(body)["running"]


def test_running_and_unload_answer_as_llama_swap_and_wait_for_a_running_stream(box, engine_gate):
    assert running(engine_gate) == []
    r = post(engine_gate.conn(), "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:3]]"))
    assert r.status == 200
    r.read()
    # llama-swap's shape, under modelgate's names, once the engine's list says the model is loaded
    wait_for(lambda: running(engine_gate), what="/running to list the loaded model")
    (entry,) = running(engine_gate)
    assert entry["model"] == "h-laguna-xs" and entry["state"] == "ready", entry
    assert entry["engine"] == "mainline" and entry["unit"] == "llama-mainline.service", entry
    assert entry["host"] == "h" and entry["proxy"].startswith("http://127.0.0.1:"), entry

    # GET /unload with a stream running: "OK" at once, and the engine stops only after the stream
    stream = post(engine_gate.conn(), "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:20]]", stream=True))
    assert stream.status == 200
    assert stream.readline()
    assert get(engine_gate, "/unload") == (200, "text/plain; charset=utf-8", b"OK")
    engine_gate.wait_log("host h: unload asked by 127.0.0.1")
    assert box.active_state("llama-mainline.service") == "active"
    lines = read_sse(stream)
    assert lines[-2][1] == "data: [DONE]\n", "the running stream was cut"
    engine_gate.wait_log("host h: engine mainline stopped on request")
    wait_for(lambda: box.active_state("llama-mainline.service") == "inactive", what="mainline stopped")
    assert running(engine_gate) == []

    # the per-model form stops the engine of that model only, and only when it is the one running
    r = post(engine_gate.conn(), "/v1/chat/completions", chat("h-flint-40b", "[[tokens:2]]"))
    assert r.status == 200
    r.read()
    assert get(engine_gate, "/api/models/unload/h-laguna-xs", "POST")[::2] == (200, b"OK")
    engine_gate.log_mark("after-unload-of-a-stopped-engine")
    assert box.active_state("llama-fork.service") == "active"
    assert "engine fork stopped on request" not in engine_gate.logtext()
    assert get(engine_gate, "/api/models/unload/h-flint-40b", "POST")[::2] == (200, b"OK")
    engine_gate.wait_log("host h: engine fork stopped on request")
    status, _, body = get(engine_gate, "/api/models/unload/zz-flint-40b", "POST")
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found", body
    assert get(engine_gate, "/api/models/unload", "POST") == (200, "application/json", b'{"msg":"ok"}')
    # llama-swap's /unload is a GET; a POST there is not an unload (it names no model)
    assert get(engine_gate, "/unload", "POST")[0] == 400


def test_modelgatectl_H_takes_the_ssh_command_and_bus_path_that_SSHCommand_and_BusPath_take(box, engine_gate, sshd):
    # no local bus at all: whatever answers comes through ssh
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent/bus")
    remote = ["-H", "root@127.0.0.1:%d" % sshd.port, "--ssh-command=" + sshd.ssh_command,
              "--bus-path=unix:path=" + box.bus]

    def ctl_remote(*args):
        return subprocess.run([MODELGATECTL, "--user"] + list(args), env=env, capture_output=True, text=True,
                              timeout=120)
    out = ctl_remote(*remote, "--json", "status")
    assert out.returncode == 0, out
    (h,) = json.loads(out.stdout)["Hosts"]
    assert h["Name"] == "h" and h["Engines"] == ["mainline", "fork"], h
    out = ctl_remote(*remote, "switch", "h", "fork")
    # a switch that takes over a second (a loaded machine, a sanitizer build) says what it waits for first
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[-1] == "host h: engine fork is up", out
    assert all(re.match(r"host h: (starting fork|waiting for the switch to fork)", l) for l in lines[:-1]), out
    assert box.active_state("llama-fork.service") == "active"
    out = ctl_remote(*remote, "stop", "h")
    assert out.returncode == 0, out
    engine_gate.wait_log("host h: engine fork stopped on request")
    # the plain ssh, without the key and known_hosts of the command, is refused by this sshd
    # (no bus: 3, as for a local bus that is not there)
    out = ctl_remote("-H", "root@127.0.0.1:%d" % sshd.port, "--bus-path=unix:path=" + box.bus, "status")
    assert out.returncode == 3 and "Host key verification failed" in out.stderr, out
    # the options belong to -H, and a command line that cannot be one is said
    out = ctl_remote("--ssh-command=ssh -v", "status")
    assert out.returncode == 2 and "are for -H" in out.stderr, out
    out = ctl_remote("-H", "root@127.0.0.1", "--bus-path=unix:path=/a b'c", "status")
    assert out.returncode == 2 and "--bus-path='unix:path=/a b'c'" in out.stderr, out


def write_conf(gate, text):
    with open(gate.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n" % gate.port + text)


def test_reload_keeps_a_running_stream_and_drains_a_removed_host(make_double, make_gate, box):
    a = make_double("--models", "laguna-xs", "--loaded", "laguna-xs", "--token-delay", "0.1")
    b = make_double("--models", "flint", "--loaded", "flint")
    g = make_gate(host_conf("a", a.url), extra_args=["--user"], env=gate_env(box))
    c = g.conn()
    stream = post(c, "/v1/chat/completions", chat("a-laguna-xs", "[[tokens:30]]", stream=True))
    assert stream.status == 200
    assert stream.readline()

    # a bad file is refused and changes nothing
    write_conf(g, host_conf("a", a.url) + "[Host]\nName=b\nURL=http://127.0.0.1:%d\nHoldDownSec=soon\n" % b.port)
    out = ctl(box, "reload")
    assert out.returncode == 1 and "the configuration has errors" in out.stderr, out
    g.wait_log("HoldDownSec='soon' is not valid")

    # host a removed, b added, through SIGHUP this time
    write_conf(g, host_conf("b", b.url))
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded %s: 1 host(s), 0 kept, 1 new, 1 draining" % g.conf)
    r = post(g.conn(), "/v1/chat/completions", chat("b-flint"))
    assert r.status == 200, r.read()
    r.read()
    r = post(g.conn(), "/v1/chat/completions", chat("a-laguna-xs"))
    assert r.status == 404
    r.read()
    lines = read_sse(stream)
    assert lines[-2][1] == "data: [DONE]\n", "the reload cut the stream"
    assert sum(1 for _, l in lines if l.startswith("data: {")) >= 30
    g.wait_log("host a: drained")
    assert busctl(box, "tree", "org.modelgate1").count("/org/modelgate1/host/b") == 1


def test_reload_keeps_an_engine_host_with_its_running_engine(box, make_gate):
    port = free_port()
    base = local_host("h", port) + engines_conf(box, "h", port)
    g = make_gate(base, extra_args=["--user"], env=gate_env(box))
    assert ctl(box, "switch", "h", "fork").returncode == 0
    write_conf(g, local_host("h", port, "HoldDownSec=7min\n") + engines_conf(box, "h", port))
    out = ctl(box, "reload")
    assert out.returncode == 0, out.stderr
    g.wait_log("1 kept, 0 new, 0 draining")
    assert prop(box, HOST_PATH, "org.modelgate1.Host", "Engine") == "fork"
    until = prop(box, HOST_PATH, "org.modelgate1.Host", "HoldDownUntilUSec")
    assert until > (time.time() + 5 * 60) * 1e6, "the new HoldDownSec= does not apply"


def activated_units(box, tmp, port, conf_text, exit_idle):
    return installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=%s\n" % exit_idle + conf_text)


def request(port, content="hi", model="3090-laguna-xs"):
    """one request on a new connection, as the idle-exit tests need"""
    a = conftest.ask(port, model, content, headers={"Connection": "close"})
    return a.status, a.json()


def test_the_user_unit_keeps_its_state_in_local_state_not_beside_the_configuration(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1h\n" + host_conf("3090", d.url), state_in_tmp=False)
    assert request(port)[0] == 200
    home = os.path.join(box.dir, "home")
    # a running run's line is in unclean-runs from its start (modelgated(8), FILES)
    wait_for(lambda: os.path.exists(os.path.join(home, ".local/state/modelgate/unclean-runs")),
             what="unclean-runs in ~/.local/state/modelgate")
    # systemd 252 would have made StateDirectory=modelgate ~/.config/modelgate, beside modelgate.conf
    assert not os.path.exists(os.path.join(home, ".config/modelgate")), os.listdir(os.path.join(home, ".config"))
    assert box.systemctl("show", "-P", "StateDirectory", "modelgate.service").strip() == ""
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


def test_a_reload_of_a_socket_activated_daemon_says_listen_is_not_used(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    log = activated_units(box, tmp, port, host_conf("3090", d.url), "1h")
    assert request(port)[0] == 200
    with open(os.path.join(tmp, "modelgate.conf"), "a") as f:
        f.write("[Proxy]\nListen=127.0.0.1:9\n")
    box.systemctl("reload", "modelgate.service")
    wait_for(lambda: "[Proxy] Listen= changed from '(none)' to '127.0.0.1:9', which a socket-activated "
             "modelgated never uses: it listens where modelgate.socket's ListenStream= says" in open(log).read(),
             what="the warning about Listen=")
    assert request(port)[0] == 200
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


def test_the_box_bus_activates_only_what_the_test_installs(box):
    """What the machine has installed (an org.modelgate1 activation file under /usr/local, a desktop's
    services under /usr/share) is not the box's: its user bus reads a configuration of the box's own, whose
    one service directory is in the box (box.sh)"""
    def names():
        out = busctl(box, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                     "ListActivatableNames")
        return sorted(out.split()[2:])  # as N "name"...

    assert names() == ['"org.freedesktop.DBus"']
    services = os.path.join(box.dir, "xdg", "dbus-1", "services")
    shutil.copy(os.path.join(os.path.dirname(__file__), "../../units/dbus/org.modelgate1.service"), services)
    busctl(box, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")
    assert names() == ['"org.freedesktop.DBus"', '"org.modelgate1"']


def test_idle_exit_and_reactivation_lose_no_connection(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs", "--token-delay", "0")
    port = free_port()
    log = activated_units(box, tmp, port, host_conf("3090", d.url), "1s")

    # D-Bus activation as installed: the bus asks systemd for modelgate.service
    # (in the runtime directory: the session bus finds the home directory through getpwuid(), which is
    # the real root's here, not the box's)
    services = os.path.join(box.dir, "xdg", "dbus-1", "services")
    os.makedirs(services, exist_ok=True)
    shutil.copy(os.path.join(os.path.dirname(__file__), "../../units/dbus/org.modelgate1.service"), services)
    busctl(box, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")

    assert request(port)[0] == 200
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, what="the idle exit")
    # systemctl status says why it is gone, and that it went cleanly
    show = box.systemctl("show", "-p", "StatusText", "-p", "Result", "-p", "ExecMainStatus", "modelgate.service")
    assert "Result=success" in show and "ExecMainStatus=0" in show, show
    assert "StatusText=Exited after 1s idle (ExitIdleSec=); the next connection starts it again" in show, show
    assert "Idle for 1s, exiting; the socket stays with systemd" in open(log).read()
    assert box.active_state("modelgate.socket") == "active"

    # asking the bus for org.modelgate1 starts it again
    assert prop(box, "/org/modelgate1", "org.modelgate1.Manager", "Version") == "0.1"
    assert box.active_state("modelgate.service") in ("active", "deactivating")
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, what="the next idle exit")

    # 1000 requests, 20 clients, in rounds with pauses around ExitIdleSec so that exits and arrivals meet
    errors, statuses = [], []
    lock = threading.Lock()

    def client(i, n, rnd):
        for k in range(n):
            try:
                status, answer = request(port, "c%d-%d" % (i, k))
                with lock:
                    statuses.append(status)
                    if answer["choices"][0]["message"]["content"] != "tok0 tok1 tok2 tok3 tok4 ":
                        errors.append("wrong answer %r" % answer)
            except Exception as e:  # every failure is a lost connection: collect, report them all
                with lock:
                    errors.append(repr(e))

    rnd = random.Random(6)
    for _ in range(10):
        threads = [threading.Thread(target=client, args=(i, 5, rnd)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(rnd.uniform(0.9, 1.8))
    assert errors == [], "%s\n%s\n%s" % (errors[:5], open(log).read()[-4000:], box.systemctl(
        "status", "--no-pager", "modelgate.service", "modelgate.socket", check=False))
    assert len(statuses) == 1000 and set(statuses) == {200}
    exits = open(log).read().count("Idle for 1s, exiting")
    assert exits >= 5, "only %d idle exits: the test did not exercise re-activation" % exits
    starts = int(box.systemctl("show", "-P", "NRestarts", "modelgate.service").strip() or 0)
    assert starts == 0, "modelgated failed and was restarted"


def test_idle_exit_waits_for_an_engine_idle_stop(box, tmp):
    port = free_port()
    conf = local_host("h", port, "IdleStopSec=2s\n") + engines_conf(box, "h", port)
    sock_port = free_port()
    log = activated_units(box, tmp, sock_port, conf, "1s")
    status, _ = request(sock_port, model="h-laguna-xs")
    assert status == 200
    assert box.active_state("llama-mainline.service") == "active"
    # the daemon stays for the engine's idle stop, then goes
    wait_for(lambda: "engine mainline stopped" in open(log).read(), timeout=30, what="the idle stop")
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, what="the idle exit")
    text = open(log).read()
    assert text.index("idle 2s, engine mainline stopped") < text.index("Idle for 1s, exiting")
    assert box.active_state("llama-mainline.service") == "inactive"


def test_systemctl_reload_applies_a_good_file_and_refuses_a_bad_one(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    log = activated_units(box, tmp, port, host_conf("3090", d.url), "0")
    assert request(port)[0] == 200
    assert box.active_state("modelgate.service") == "active"
    conf = os.path.join(tmp, "modelgate.conf")
    # a second host appears: systemctl reload runs modelgatectl reload (ExecReload=), which waits for it
    with open(conf, "a") as f:
        f.write(host_conf("a9", d.url))
    box.systemctl("reload", "modelgate.service")
    # (lines below warning are written when the loop is idle: a moment after the reply)
    wait_for(lambda: "Reloaded %s: 2 host(s), 1 kept, 1 new, 0 draining" % conf in open(log).read(),
             what="the reload's log line")
    # a broken file: the reload fails, and the running configuration stays
    with open(conf, "a") as f:
        f.write("[Host]\nName=bad-name\n")
    failed = subprocess.run(["systemctl", "--user", "reload", "modelgate.service"], env=box.env,
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0, failed
    assert box.active_state("modelgate.service") == "active"
    wait_for(lambda: "Reload refused, the running configuration stays" in open(log).read(),
             what="the refusal's log line")
    assert request(port)[0] == 200
    assert prop(box, "/org/modelgate1/host/a9", "org.modelgate1.Host", "Name") == "a9"


def test_a_changed_engine_host_starts_only_after_the_old_one_drained(box, make_gate):
    port = free_port()
    engines = two_engines(box, port, double_args="--token-delay 0.1") % {"host": "h", "extra": ""}
    g = make_gate("[Proxy]\nHoldDownSec=1s\n" + local_host("h", port) + engines, extra_args=["--user"],
                  env=gate_env(box))
    g.wait_log("host h up")
    stream = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-laguna-xs", "[[tokens:30]]", stream=True))
    assert stream.status == 200 and stream.readline()

    # a third engine changes the host itself: the old Host keeps the stream, the new one waits for it
    write_conf(g, "[Proxy]\nHoldDownSec=1s\n" + local_host("h", port) + engines +
               "[Engine]\nHost=h\nName=third\nUnit=llama-third.service\nModels=third-*\n")
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("host h: changed; it starts once the previous one has answered what it has")
    answer = {}

    def other_engine():
        r = post(g.conn(timeout=60), "/v1/chat/completions", chat("h-flint-40b"))
        answer["status"], answer["at"], answer["engine"] = r.status, time.monotonic(), r.getheader("X-Double")
        r.read()

    t = threading.Thread(target=other_engine)
    t.start()
    lines = read_sse(stream)
    stream_end = time.monotonic()
    assert lines[-2][1] == "data: [DONE]\n", "the reload cut the stream"
    t.join(timeout=60)
    assert answer["status"] == 200 and answer["engine"] == "fork", answer
    assert answer["at"] >= stream_end, "the new Host switched the GPU under the old one's stream"
    g.wait_log("host h: drained")
    g.wait_log("host h: switching to engine fork")
    log = g.logtext()
    assert log.index("host h: drained") < log.index("host h: switching to engine fork")
