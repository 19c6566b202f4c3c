"""Clean stop on SIGTERM, and socket activation in a boxed systemd user manager."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import MODELGATED, DOUBLE, PYTHON, free_port, host_conf, post, read_sse, unit_for_tests

BOX = os.path.join(os.path.dirname(__file__), "box.sh")


def test_sigterm_lets_a_running_stream_finish(make_double, make_gate):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs", "--token-delay", "0.3")
    g = make_gate(host_conf("3090", d.url))
    c = g.conn()
    r = post(c, "/v1/chat/completions", {"model": "3090-laguna-xs", "stream": True,
                                         "messages": [{"role": "user", "content": "[[tokens:6]]"}]})
    assert r.status == 200
    first = r.readline()
    assert first
    g.proc.send_signal(signal.SIGTERM)
    lines = read_sse(r)
    assert lines[-2][1] == "data: [DONE]\n", "the stream was cut by the stop"
    assert g.proc.wait(timeout=30) == 0
    # and it no longer accepts
    with pytest.raises(OSError):
        g.sock()
    g.wait_log("Stopping: no new connections")


def test_check_config_prints_effective_configuration(tmp):
    conf = os.path.join(tmp, "m.conf")
    open(conf, "w").write("[Host]\nName=a\nURL=http://127.0.0.1:1\n")
    os.mkdir(conf + ".d")
    open(os.path.join(conf + ".d", "10-x.conf"), "w").write("[Host]\nName=a\nHoldDownSec=1min\n")
    out = subprocess.run([MODELGATED, "--config=" + conf, "--check-config"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "[Host]\nName=a\nURL=http://127.0.0.1:1\nBus=local\nHoldDownSec=1min\n" in out.stdout
    open(os.path.join(conf + ".d", "20-bad.conf"), "w").write("[Host]\nName=a\nIdleStopSec=soon\n")
    out = subprocess.run([MODELGATED, "--config=" + conf, "--check-config"], capture_output=True, text=True)
    assert out.returncode == 78  # EX_CONFIG
    assert "20-bad.conf:3: [Host] IdleStopSec='soon' is not valid" in out.stderr


def test_socket_activation_in_a_boxed_user_manager(make_double, tmp):
    if os.geteuid() != 0:
        pytest.skip("the boxed systemd user manager needs root (cgroups, namespaces)")
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    conf = os.path.join(tmp, "modelgate.conf")
    open(conf, "w").write(host_conf("3090", d.url))
    units = os.path.join(os.path.dirname(__file__), "../../units")
    service = open(os.path.join(units, "modelgate.service.in")).read().replace(
        "@libexecdir@/modelgated --user", "%s --user --config=%s" % (os.path.abspath(MODELGATED), conf)).replace(
        "@bindir@/modelgatectl", os.path.join(os.path.dirname(os.path.abspath(MODELGATED)), "modelgatectl"))
    socket_unit = open(os.path.join(units, "modelgate.socket")).read().replace(
        "ListenStream=127.0.0.1:8080", "ListenStream=127.0.0.1:%d" % port)
    # the box has no journal: the daemon's log goes to a file, for the assertions' messages
    daemon_log = os.path.join(tmp, "daemon.log")
    service = unit_for_tests(service).rstrip("\n") + "\nStandardOutput=append:%s\nStandardError=inherit\n" % daemon_log
    open(os.path.join(tmp, "modelgate.service"), "w").write(service)
    open(os.path.join(tmp, "modelgate.socket"), "w").write(socket_unit)
    script = os.path.join(tmp, "inside.sh")
    open(script, "w").write("""set -eu
mkdir -p "$XDG_RUNTIME_DIR/systemd/user"
cp %(tmp)s/modelgate.service %(tmp)s/modelgate.socket "$XDG_RUNTIME_DIR/systemd/user/"
systemctl --user daemon-reload
systemctl --user start modelgate.socket
echo "before: $(systemctl --user is-active modelgate.service || true)"
trap 'systemctl --user status --no-pager modelgate.service modelgate.socket >&2 || true' ERR
curl -sS --max-time 20 -H 'Content-Type: application/json' \
     -d '{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}' \
     http://127.0.0.1:%(port)d/v1/chat/completions > %(tmp)s/answer.json
echo "after: $(systemctl --user is-active modelgate.service)"
echo "status: $(systemctl --user show -p StatusText --value modelgate.service)"
systemctl --user stop modelgate.service modelgate.socket
echo "stopped: $(systemctl --user is-active modelgate.service || true)"
systemctl --user show -p Result -p ExecMainCode -p ExecMainStatus modelgate.service
""" % {"tmp": tmp, "port": port})
    out = subprocess.run([BOX, "bash", script], capture_output=True, text=True, timeout=150)
    log = open(daemon_log).read() if os.path.exists(daemon_log) else "(no daemon log)"
    why = out.stdout + out.stderr + "\n--- modelgated:\n" + log
    assert out.returncode == 0, why
    assert "before: inactive" in out.stdout, why
    assert "after: active" in out.stdout, why
    assert "status: Listening on 127.0.0.1:%d; 1 host(s)" % port in out.stdout, why
    assert "stopped: inactive" in out.stdout, why
    answer = json.load(open(os.path.join(tmp, "answer.json")))
    assert answer["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 "


def test_check_config_warns_about_a_fallback_key_over_http(tmp):
    """A fallback's key sent over http:// crosses the network in clear text: said at load, the configuration
    still accepted. Not for https://, and not for an http:// fallback without a key (a local server)."""
    key = os.path.join(tmp, "cloud.key")
    open(key, "w").write("sk-cloud-test\n")
    warning = "is http://, so its key crosses the network in clear text; use https://"
    for url, keyed, warned in [("http://127.0.0.1:9/v1base", True, True), ("https://127.0.0.1:9/v1base", True, False),
                               ("http://127.0.0.1:9", False, False)]:
        conf = os.path.join(tmp, "m.conf")
        open(conf, "w").write("[Host]\nName=h\nURL=http://127.0.0.1:1\n[Engine]\nHost=h\nName=main\n"
                              "Unit=llama-main.service\nModels=*\nFallback=cloud\n[Fallback]\nName=cloud\nURL=%s\n"
                              "Model=cloud-model\n%s" % (url, "KeyFile=%s\n" % key if keyed else ""))
        out = subprocess.run([MODELGATED, "--config=" + conf, "--check-config"], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        assert "URL=%s\n" % url in out.stdout, out.stdout
        lines = [l for l in out.stderr.splitlines() if warning in l]  # <4>: a warning, on the [Fallback] line
        if warned:
            assert lines == ["<4>%s:10: [Fallback] 'cloud': URL=%s %s" % (conf, url, warning)], out.stderr
        else:
            assert lines == [], out.stderr
