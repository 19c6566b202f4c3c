"""What an operator types, as the README and the man pages give it: a reload after an idle exit, the engines
of every host in one command, the /ui page in a headless browser."""

import http.client
import json
import os
import signal
import subprocess
import time

import pytest

import conftest
from boxes import box_skip_reason, ctl, installed_units
from conftest import MODELGATED, free_port, host_conf, wait_for

boxed = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


@boxed
def test_a_reload_after_an_idle_exit_succeeds_and_starts_nothing(box, make_double, tmp):
    """modelgatectl reload (the unit's ExecReload=) of a modelgated that exited idle while its socket listens:
    nothing to reload, said, exit 0, and nothing started; systemctl try-reload-or-restart, as the docs say,
    alike. The next start reads the changed file."""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    log = installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1s\n" + host_conf("3090", d.url))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    c.close()
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, interval=0.2,
             what="the idle exit")
    assert box.active_state("modelgate.socket") == "active"
    starts = open(log).read().count("Listening")
    # a changed file, which the next start reads
    with open(os.path.join(tmp, "modelgate.conf"), "a") as f:
        f.write(host_conf("a9", d.url))

    out = ctl(box, "reload")
    assert out.returncode == 0, out
    assert "modelgated is not running" in out.stdout and "reads the configuration then" in out.stdout, out
    box.systemctl("try-reload-or-restart", "modelgate.service")
    assert box.active_state("modelgate.service") == "inactive", "a reload started modelgated"
    # systemctl reload of a unit that does not run fails, as the docs warn
    r = subprocess.run(["systemctl", "--user", "reload", "modelgate.service"], env=box.env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    # no start read the file (a request id in the log may hold the letters "a9": the starts are counted)
    assert open(log).read().count("Listening") == starts
    assert "host a9" not in open(log).read()

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/health")
    r = c.getresponse()
    assert r.status == 200 and b'"a9"' in r.read()
    c.close()


def test_a_headless_browser_under_virtual_time_returns_on_ui_once(make_double, make_gate, tmp):
    """chromium --headless --dump-dom --virtual-time-budget waits for the network to be idle: on /ui?once (one
    snapshot, the feed closed) it returns, with the snapshot drawn"""
    from browser import CHROMIUM, skip_reason
    if skip_reason():
        pytest.skip(skip_reason())
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    profile = os.path.join(tmp, "chromium-profile")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=" + profile,
            "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--dump-dom", "--virtual-time-budget=2000",
            "http://127.0.0.1:%d/ui?once" % g.port]
    # its own session: on a timeout the whole browser is stopped by its process group, nothing else
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        dom, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise AssertionError("chromium --dump-dom --virtual-time-budget did not return on /ui?once")
    dom = dom.decode()
    assert p.returncode == 0, dom
    assert 'class="conn once"' in dom, dom
    assert ">3090<" in dom, dom


@boxed
def test_engines_lists_every_engine_with_its_unit_state_and_models(box, make_gate):
    """modelgatectl engines: one line per engine of every host, its unit, its state and its models (the
    running one's as its list says now, another's as learned when it ran, its Models= before it ever ran)"""
    from boxes import engines_conf, gate_env, local_host
    from conftest import post
    from boxes import chat
    port = free_port()
    g = make_gate("[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port) + engines_conf(box, "3090", port),
                  extra_args=["--user"],
                  env=gate_env(box))
    wait_for(lambda: ctl(box, "engines").returncode == 0, timeout=30, interval=0.2, what="modelgated on the bus")

    def table():
        out = ctl(box, "engines")
        assert out.returncode == 0, out
        lines = out.stdout.splitlines()
        assert lines[0].split()[:5] == ["HOST", "ENGINE", "STATE", "UNIT", "MODELS"], out.stdout
        return {tuple(l.split()[:2]): l for l in lines[1:]}

    rows = table()
    assert set(rows) == {("3090", "mainline"), ("3090", "fork")}, rows
    assert rows[("3090", "fork")].split()[2:4] == ["stopped", "llama-fork.service"], rows
    assert "Models=flint-* (not listed yet)" in rows[("3090", "fork")], rows

    for model, engine in (("3090-laguna-xs", "mainline"), ("3090-flint-40b", "fork")):
        c = g.conn()
        r = post(c, "/v1/chat/completions", chat(model))
        assert r.status == 200 and r.getheader("X-Double") == engine, r.read()
        r.read()
        c.close()
    wait_for(lambda: table()[("3090", "fork")].split()[2] == "serving", timeout=30, interval=0.2,
             what="fork serving in modelgatectl engines")
    rows = table()
    assert rows[("3090", "fork")].endswith(" flint-40b (loaded)"), rows
    # mainline stopped by the switch: its models as learned while it ran
    assert rows[("3090", "mainline")].split()[2] == "stopped" and rows[("3090", "mainline")].endswith(
        " laguna-xs"), rows

    out = ctl(box, "--json", "engines")
    engines = {e["Engine"]: e for e in json.loads(out.stdout)}
    assert engines["fork"] == {"Host": "3090", "Engine": "fork", "Unit": "llama-fork.service", "State": "serving",
                               "Models": [{"Name": "flint-40b", "Status": "loaded"}],
                               "ModelPatterns": ["flint-*"]}, engines
    assert engines["mainline"]["Models"] == [{"Name": "laguna-xs", "Status": "listed"}], engines


def host_json(box):
    out = ctl(box, "--json", "hosts")
    assert out.returncode == 0, out
    return json.loads(out.stdout)[0]


@boxed
def test_an_engine_has_its_own_idle_stop(box, make_gate):
    """[Engine] IdleStopSec= over the host's: fork stops after its own 2 s idle, mainline keeps the host's hour"""
    from boxes import gate_env, local_host, two_engines
    port = free_port()
    engines = two_engines(box, port) % {"host": "3090", "extra": ""}
    engines = engines.replace("Name=fork\n", "Name=fork\nIdleStopSec=2s\n")
    g = make_gate("[Proxy]\nHoldDownSec=1s\nIdleStopSec=1h\n" + local_host("3090", port) + engines,
                  extra_args=["--user"], env=gate_env(box))
    wait_for(lambda: ctl(box, "hosts").returncode == 0, timeout=30, interval=0.2, what="modelgated on the bus")

    def ask(model):
        return conftest.ask(g, model, timeout=30).status

    assert ask("3090-laguna-xs") == 200
    # mainline: the host's hour
    h = wait_for(lambda: (lambda h: h if h["IdleStopAtUSec"] else None)(host_json(box)), timeout=30,
                 interval=0.2, what="mainline's idle stop")
    left = h["IdleStopAtUSec"] / 1e6 - time.time()
    assert h["Engine"] == "mainline" and 3000 < left <= 3600, h
    assert ask("3090-flint-40b") == 200
    # fork: its own 2 s
    g.wait_log("host 3090: idle 2s, engine fork stopped", timeout=30)
    assert box.active_state("llama-fork.service") == "inactive"
    # the effective configuration says it
    check = subprocess.run([MODELGATED, "--config=" + g.conf, "--check-config"],
                           capture_output=True, text=True, timeout=30)
    assert "Name=fork\nUnit=llama-fork.service\nModels=flint-*\nStartTimeoutSec=30s\nIdleStopSec=2s\n" in \
        check.stdout, check


@boxed
def test_the_switch_and_wait_lines_carry_the_request_id(box, make_gate):
    """rule:request-id: the lines about a request, not only its access line, say its id: the switch it
    causes and its wait for the hold-down (the client's X-Request-Id, or the one made and returned)"""
    from boxes import chat, gate_env, local_host, two_engines
    from conftest import post
    port = free_port()
    engines = two_engines(box, port) % {"host": "3090", "extra": ""}
    g = make_gate("[Proxy]\nHoldDownSec=3s\n" + local_host("3090", port) + engines, extra_args=["--user"],
                  env=gate_env(box))
    c = g.conn()
    r = post(c, "/v1/chat/completions", chat("3090-laguna-xs"))
    r.read()
    made = r.getheader("X-Request-Id")
    assert r.status == 200 and made, r.status
    r = post(c, "/v1/chat/completions", chat("3090-flint-40b"), headers={"X-Request-Id": "op-fork-1"})
    r.read()
    assert r.status == 200 and r.getheader("X-Request-Id") == "op-fork-1"
    c.close()
    assert g.wait_log("host 3090: switching to engine mainline for 3090-laguna-xs").endswith(" id=" + made)
    g.wait_log("host 3090: 3090-flint-40b id=op-fork-1 waits before switching to fork: held by engine mainline's "
               "hold-down")
    assert g.wait_log("host 3090: switching to engine fork for 3090-flint-40b").endswith(" id=op-fork-1")


@boxed
def test_the_example_oneshot_preloads_a_model_and_it_stays(box, tmp):
    """units/examples/modelgate-preload.service as shipped (its address the test's): the engine that serves
    the model starts and its server loads it; with IdleStopSec=0 on that [Engine] it has no idle stop, and
    modelgated still exits when idle, leaving it loaded"""
    from boxes import UNITS, engine_unit
    from conftest import double_requests
    port, engine_port = free_port(), free_port()
    for name, models, other in (("mainline", "laguna-xs", "fork"), ("fork", "flint-40b", "mainline")):
        unit = engine_unit(name, engine_port, models, ["llama-%s.service" % other])
        box.add_unit("llama-%s.service" % name, unit.replace("--loaded %s " % models, ""))
    conf = ("[Proxy]\nExitIdleSec=1s\n[Host]\nName=3090\nURL=http://127.0.0.1:%d\nBus=local\n"
            "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\nIdleStopSec=0\n"
            "[Engine]\nHost=3090\nName=fork\nUnit=llama-fork.service\nModels=flint-*\n" % engine_port)
    installed_units(box, tmp, port, conf)
    unit = open(os.path.join(UNITS, "examples", "modelgate-preload.service")).read()
    assert "http://127.0.0.1:8080/models/load" in unit and '"model":"3090-laguna-xs"' in unit
    box.add_unit("modelgate-preload.service", unit.replace("127.0.0.1:8080", "127.0.0.1:%d" % port))
    box.reload()
    box.systemctl("start", "modelgate-preload.service")

    assert box.active_state("llama-mainline.service") == "active"
    loads = [r for r in double_requests(engine_port, "/models/load")]
    assert [json.loads(r["body"])["model"] for r in loads] == ["laguna-xs"], loads

    def status():
        c = http.client.HTTPConnection("127.0.0.1", engine_port, timeout=10)
        c.request("GET", "/models")
        models = json.loads(c.getresponse().read())["data"]
        c.close()
        return {m["id"]: m["status"]["value"] for m in models}
    wait_for(lambda: status().get("laguna-xs") == "loaded", timeout=30, interval=0.2, what="laguna-xs loaded")
    h = host_json(box)
    assert h["Engine"] == "mainline" and h["IdleStopAtUSec"] == 0, h
    # modelgated exits when idle; the engine and its model stay
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, interval=0.2,
             what="modelgated's idle exit")
    assert box.active_state("llama-mainline.service") == "active"
    assert status().get("laguna-xs") == "loaded"
