"""A configuration with errors (rule:refusing-state, rule:config-errors): refused at once with the errors
under socket activation, in a boxed user manager with the installed units; EX_CONFIG when started by hand."""

import http.client
import json
import os
import subprocess
import time

import signal

import pytest

from boxes import MODELGATECTL, box_skip_reason, chat, ctl, installed_units
from conftest import MODELGATED, bus_config, free_port, host_conf, post, wait_for

REFUSAL_HINT = ("fix it; a running modelgate reads it on 'systemctl --user reload modelgate', a stopped one at its "
                "next start")


def show(box, prop, unit="modelgate.service"):
    return box.systemctl("show", "-P", prop, unit).strip()


def warnings(box):
    out = box.run("busctl", "--user", "-j", "get-property", "org.modelgate1", "/org/modelgate1",
                  "org.modelgate1.Manager", "Warnings")
    return json.loads(out)["data"]


def answer(conn, path="/v1/chat/completions", obj=None):
    r = post(conn, path, obj or chat("3090-laguna-xs"))
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), json.loads(r.read())


def assert_in_order(text, parts):
    at = 0
    for p in parts:
        i = text.find(p, at)
        assert i >= 0, "%r not found (in order) in:\n%s" % (p, text)
        at = i + len(p)


def assert_clean(log):
    text = open(log).read()
    assert "Sanitizer" not in text and "runtime error:" not in text, text


def test_without_socket_activation_a_broken_file_is_ex_config(tmp):
    conf = os.path.join(tmp, "modelgate.conf")
    with open(conf, "w") as f:
        f.write("[Proxy]\nBogusKey=1\n")
    for extra in ([], ["--check-config"]):
        out = subprocess.run([MODELGATED, "--config=" + conf] + extra, capture_output=True, text=True, timeout=30)
        assert out.returncode == 78, out  # EX_CONFIG: the units' RestartPreventExitStatus=
        assert "%s:2: unknown key 'BogusKey' in section [Proxy]" % conf in out.stderr
        assert "Refusing to start: the configuration has 1 error (above)." in out.stderr


def test_every_error_of_the_files_in_one_run_each_with_its_fix(tmp):
    conf = os.path.join(tmp, "modelgate.conf")
    with open(conf, "w") as f:
        f.write("[Proxy]\nIdelStopSec=5min\nMaxBodySize=lots\n[host]\nName=x\n"
                "[Host]\nName=rtx-4090\nURL=http://127.0.0.1:1\n[Host]\nName=a\nURL=http://127.0.0.1:2\nUnit=x.service\n"
                "[Engine]\nHost=a\nName=main\nUnit=llama-main.service\n")
    os.mkdir(conf + ".d")
    with open(os.path.join(conf + ".d", "50-more.conf"), "w") as f:
        f.write("[Engine]\nHost=a\nName=fork\nUnit=llama-fork\n[Alias]\nName=fast\nTargets=nowhere-x\n")
    out = subprocess.run([MODELGATED, "--config=" + conf, "--check-config"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 78, out
    dropin = os.path.join(conf + ".d", "50-more.conf")
    assert_in_order(out.stderr, [
        "%s:2: unknown key 'IdelStopSec' in section [Proxy]; did you mean IdleStopSec=?" % conf,
        "%s:3: [Proxy] MaxBodySize='lots' is not valid: a size in bytes, or with K, M or G" % conf,
        "%s:4: section [host] is unknown; did you mean [Host]?" % conf,
        "%s:7: [Host] Name='rtx-4090' is not valid: '-' is not allowed in a host name (letters, digits, '_' and "
        "'.', at most 64: '-' separates host and model in '<host>-<model>'), e.g. 'rtx_4090'" % conf,
        "%s:12: unknown key 'Unit' in section [Host]; Unit= is a key of [Engine]" % conf,
        "%s:4: [Engine] Unit='llama-fork' is not valid: a unit name with its type, like llama-mainline.service"
        % dropin,
        # and what only the whole can tell, in the same run
        "%s:5: [Alias] 'fast': target 'nowhere-x' does not start with a configured host name and '-'" % dropin,
        "Refusing to start: the configuration has 7 errors (above).",
    ])


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gets the system instance by default")
def test_as_root_a_missing_system_instance_points_at_user(tmp):
    if os.path.exists("/etc/modelgate/modelgate.conf") or os.path.isdir("/etc/modelgate/modelgate.conf.d"):
        pytest.skip("this machine has a system modelgate configuration in /etc/modelgate")
    out = subprocess.run([MODELGATED, "--check-config"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 78, out
    assert ("No system modelgate: /etc/modelgate/modelgate.conf does not exist; for the user instance use --user."
            in out.stderr), out.stderr

    # modelgatectl: no system bus at all, then a system bus without modelgated on it
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + os.path.join(tmp, "none"))
    out = subprocess.run([MODELGATECTL, "status"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 3, out
    assert "no system modelgate; for the user instance use --user" in out.stderr, out.stderr
    sock = os.path.join(tmp, "system_bus_socket")
    conf = bus_config(os.path.join(tmp, "bus.conf"), "unix:path=" + sock, "system")
    # as on a machine where modelgate was installed under /usr/local: its activation files are there (seen by
    # this bus alone, through a mount namespace), and the test's bus, which has a configuration of its own,
    # never starts that modelgated
    installed = os.path.join(tmp, "usr-local-share")
    for d in ("services", "system-services"):
        os.makedirs(os.path.join(installed, "dbus-1", d))
        with open(os.path.join(installed, "dbus-1", d, "org.modelgate1.service"), "w") as f:
            f.write("[D-BUS Service]\nName=org.modelgate1\nExec=/bin/false\nUser=root\n")
    bus = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind "$1" /usr/local/share && exec dbus-daemon --config-file="$2" --nofork '
                            '--nopidfile', "sh", installed, conf],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(sock), what="the private bus")
        env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=" + sock
        names = subprocess.run(["busctl", "--system", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                "org.freedesktop.DBus", "ListActivatableNames"], env=env, capture_output=True,
                               text=True, timeout=30)
        assert names.stdout.strip() == 'as 1 "org.freedesktop.DBus"', names
        for verb in (["status"], ["hosts"], ["reload"]):
            out = subprocess.run([MODELGATECTL] + verb, env=env, capture_output=True, text=True, timeout=30)
            assert out.returncode == 3, out
            assert "no system modelgate" in out.stderr and "for the user instance use --user" in out.stderr, out
    finally:
        bus.send_signal(signal.SIGTERM)
        bus.wait(timeout=10)


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_a_broken_file_is_answered_at_once_until_a_reload_fixes_it(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    good = "[Proxy]\nExitIdleSec=1s\n" + host_conf("3090", d.url)
    # ExitIdleSec=1s is in the broken file too: it must not apply (a file with errors is not used at all);
    # and its engine is a unit of the box that nothing may start or stop
    box.add_unit("llama-mainline.service", "[Service]\nExecStart=/bin/sleep infinity\n")
    log = installed_units(box, tmp, port, "[Proxy]\nBogusKey=1\nExitIdleSec=1s\n" + host_conf("3090", d.url, "Bus=local\n")
                          + "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\n")
    conf = os.path.join(tmp, "modelgate.conf")
    assert show(box, "RestartPreventExitStatus") == "78"

    # the first request starts the daemon, and is answered at once with file, line and key
    started = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    status, headers, body = answer(c)
    took = time.monotonic() - started
    c.close()
    assert status == 503, body
    message = body["error"]["message"]
    assert message == ("modelgate's configuration has errors: %s:2: unknown key 'BogusKey' in section [Proxy]; "
                       "modelgate.conf(5) lists its keys; %s" % (conf, REFUSAL_HINT))
    assert body["error"]["code"] == "config_error"
    assert headers["x-should-retry"] == "false"
    assert took < 1.0, "the first answer took %.2f s" % took

    # the same in Anthropic's shape, on /health, in STATUS= and on the bus
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    status, _, body = answer(c, "/v1/messages", {"model": "3090-laguna-xs", "max_tokens": 8,
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert status == 503 and body["type"] == "error" and body["error"]["message"] == message, body
    c.request("GET", "/health")
    r = c.getresponse()
    health = json.loads(r.read())
    assert r.status == 503 and health["status"] == "config-error" and health["message"] == message, health
    c.close()
    assert show(box, "StatusText") == "Refusing requests: " + message
    assert warnings(box) == [message]
    # modelgatectl says it, and does not exit 0 while every request is refused
    for verb in ("status", "hosts"):
        out = ctl(box, verb)
        assert out.returncode == 6, out
    assert "refusing every request (config-error): see the warnings below" in ctl(box, "status").stdout
    assert "modelgated refuses every request (config-error)" in ctl(box, "--json", "hosts").stderr

    # no restart loop, and no idle exit after the broken file's 1 s: ten seconds of it, looked at all along
    pid = show(box, "MainPID")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert show(box, "NRestarts") == "0"
        assert box.active_state("modelgate.service") == "active"
        time.sleep(0.5)
    assert show(box, "MainPID") == pid

    # the error is logged once, not once per request; and no host heard of anything
    text = open(log).read()
    assert text.count("unknown key 'BogusKey'") == 1, text
    assert text.count("status=503") == 3, text
    assert d.requests() == []
    assert show(box, "ActiveState", "llama-mainline.service") == "inactive"
    assert show(box, "InactiveExitTimestampMonotonic", "llama-mainline.service") == "0", "the engine was started"

    # a reload with a file that is still broken fails, and the new errors are the answer
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # held across both reloads
    assert answer(c)[0] == 503
    with open(conf, "w") as f:
        f.write("[Proxy]\nIdleStopSec=soon\n" + host_conf("3090", d.url))
    failed = subprocess.run(["systemctl", "--user", "reload", "modelgate"], env=box.env, capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode != 0, failed
    status, _, body = answer(c)
    assert status == 503
    assert "%s:2: [Proxy] IdleStopSec='soon' is not valid" % conf in body["error"]["message"], body
    assert "BogusKey" not in body["error"]["message"]
    assert "IdleStopSec='soon'" in warnings(box)[0]

    # a good file: into service, on the same connection, without a restart
    with open(conf, "w") as f:
        f.write(good)
    box.systemctl("reload", "modelgate")
    status, _, body = answer(c)
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 "
    c.close()
    assert [r["path"] for r in d.requests()].count("/v1/chat/completions") == 1
    assert show(box, "MainPID") == pid and show(box, "NRestarts") == "0"
    assert show(box, "StatusText").startswith("Reloaded; 1 host(s)")
    assert warnings(box) == []
    assert ctl(box, "status").returncode == 0
    assert "has no errors now: serving requests" in open(log).read()

    # and it stops cleanly (a sanitizer build reports here what the refusal and the reloads left behind)
    box.systemctl("stop", "modelgate.service")
    assert show(box, "Result") == "success" and show(box, "ExecMainStatus") == "0"
    assert_clean(log)


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_a_refusing_daemon_exits_when_idle_and_answers_the_same_again(box, tmp):
    port = free_port()
    log = installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1s\n[Host]\nName=a\n")
    conf = os.path.join(tmp, "modelgate.conf")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    status, _, body = answer(c)
    c.close()
    closed = time.monotonic()
    assert status == 503
    message = body["error"]["message"]
    assert "%s:3: [Host] 'a' has no URL=" % conf in message, message

    # the default ExitIdleSec= (60s), not the broken file's 1s
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", 120, "the idle exit", interval=1)
    assert time.monotonic() - closed > 50
    assert show(box, "Result") == "success" and show(box, "NRestarts") == "0"
    assert "Idle for 1min, exiting; the socket stays with systemd" in open(log).read()
    assert_clean(log)
    assert box.active_state("modelgate.socket") == "active"

    # the next connection starts it again, and gets the same answer
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    status, _, body = answer(c)
    c.close()
    assert status == 503 and body["error"]["message"] == message
    assert open(log).read().count("has no URL=") == 2  # once per start

    # SIGHUP reloads as systemctl reload does
    with open(conf, "w") as f:
        f.write("[Proxy]\n")
    box.systemctl("kill", "--kill-who=main", "-s", "SIGHUP", "modelgate.service")
    wait_for(lambda: "has no errors now: serving requests" in open(log).read(), 30, "the reload")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/health")
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["status"] == "ok"
    c.close()


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_a_refused_reload_says_why_in_the_units_status_and_keeps_serving(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    log = installed_units(box, tmp, port, host_conf("3090", d.url))
    conf = os.path.join(tmp, "modelgate.conf")
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    assert answer(c)[0] == 200
    pid = show(box, "MainPID")

    with open(conf, "w") as f:
        f.write("[Proxy]\nIdelStopSec=5min\n" + host_conf("3090", d.url) + "[Host]\nName=rtx-4090\nURL=%s\n" % d.url)
    failed = subprocess.run(["systemctl", "--user", "reload", "modelgate"], env=box.env, capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode != 0, failed
    # systemctl says only that the job failed and points at 'systemctl status': the reason is there
    first = "%s:2: unknown key 'IdelStopSec' in section [Proxy]; did you mean IdleStopSec=?" % conf
    assert show(box, "StatusText") == (
        "Reload refused, serving with the previous configuration: 2 errors, the first: " + first)
    # every error in the log, once each, and the running configuration serves on
    text = open(log).read()
    assert_in_order(text, ["Reloading " + conf, first, "%s:7: [Host] Name='rtx-4090' is not valid: '-'" % conf,
                           "Reload refused, the running configuration stays: %s has 2 errors (above)" % conf])
    assert answer(c)[0] == 200
    assert ctl(box, "status").returncode == 0
    assert show(box, "MainPID") == pid

    with open(conf, "w") as f:
        f.write(host_conf("3090", d.url))
    box.systemctl("reload", "modelgate")
    assert show(box, "StatusText").startswith("Reloaded; 1 host(s)")
    c.close()
    box.systemctl("stop", "modelgate.service")
    assert_clean(log)
