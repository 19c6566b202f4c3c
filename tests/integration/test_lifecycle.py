"""Clean stop on SIGTERM, and socket activation in a boxed systemd user manager."""

import json
import os
import signal
import socket
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


def test_a_reload_that_changes_listen_says_the_listener_needs_a_restart(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    other = free_port()
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n" % other + host_conf("3090", d.url))
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("[Proxy] Listen= changed from '127.0.0.1:%d' to '127.0.0.1:%d': a reload keeps the listeners, "
               "modelgated listens on '127.0.0.1:%d' until it is restarted" % (g.port, other, g.port))
    # as it says: the old listener answers, nothing listens on the new one
    c = g.conn()
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", other), timeout=5).close()
    # a value no listener can be made of is the file's error, named by line, before any start
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\nListen=localhost:8080\n" % g.port + host_conf("3090", d.url))
    out = subprocess.run([MODELGATED, "--config=" + g.conf, "--check-config"], capture_output=True, text=True)
    assert out.returncode == 78, out
    assert "%s:3: [Proxy] Listen='localhost:8080' is not valid: each an IPv4:port" % g.conf in out.stderr, out
    # and the default is shown when none is given
    with open(g.conf, "w") as f:
        f.write(host_conf("3090", d.url))
    out = subprocess.run([MODELGATED, "--config=" + g.conf, "--check-config"], capture_output=True, text=True)
    assert out.returncode == 0 and "[Proxy]\n# Listen= is used without socket activation" in out.stdout, out
    assert "\nListen=127.0.0.1:8080\n" in out.stdout, out


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


def test_access_and_switch_lines_are_journal_entries_with_fields(make_double, tmp):
    """rule:journal-fields, under a real systemd-journald: one of the box's own (its sockets in the box's
    /run/systemd, its files on a tmpfs of the box's mount namespace), started before modelgate.service, whose
    stderr the user manager connects to it as for any unit."""
    if os.geteuid() != 0:
        pytest.skip("the boxed systemd user manager needs root (cgroups, namespaces)")
    if not os.path.exists("/usr/lib/systemd/systemd-journald"):
        pytest.skip("no /usr/lib/systemd/systemd-journald on this machine")
    from boxes import engine_unit
    from shared_ids import MESSAGE_ID_ACCESS, MESSAGE_ID_SWITCH
    port, engine_port = free_port(), free_port()
    conf = os.path.join(tmp, "modelgate.conf")
    open(conf, "w").write("[Host]\nName=3090\nURL=http://127.0.0.1:%d\nBus=local\n[Engine]\nHost=3090\nName=mainline\n"
                          "Unit=llama-mainline.service\nModels=laguna-*\nStartTimeoutSec=30s\n" % engine_port)
    units = os.path.join(os.path.dirname(__file__), "../../units")
    service = open(os.path.join(units, "modelgate.service.in")).read().replace(
        "@libexecdir@/modelgated --user", "%s --user --config=%s" % (os.path.abspath(MODELGATED), conf)).replace(
        "@bindir@/modelgatectl", os.path.join(os.path.dirname(os.path.abspath(MODELGATED)), "modelgatectl"))
    open(os.path.join(tmp, "modelgate.service"), "w").write(unit_for_tests(service))
    open(os.path.join(tmp, "modelgate.socket"), "w").write(open(os.path.join(units, "modelgate.socket")).read().replace(
        "ListenStream=127.0.0.1:8080", "ListenStream=127.0.0.1:%d" % port))
    open(os.path.join(tmp, "llama-mainline.service"), "w").write(
        engine_unit("mainline", engine_port, "laguna-xs", double_args="--startup-delay 1"))
    script = os.path.join(tmp, "inside.sh")
    open(script, "w").write("""set -eu
# the box's own journal: nothing of it reaches the machine's /run/log or /var/log
mount -t tmpfs tmpfs /run/log
[ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal
/usr/lib/systemd/systemd-journald >%(tmp)s/journald.log 2>&1 &
journald=$!
trap 'kill $journald' EXIT
for i in $(seq 100); do [ -S /run/systemd/journal/stdout ] && [ -S /run/systemd/journal/socket ] && break; sleep 0.1; done
mkdir -p "$XDG_RUNTIME_DIR/systemd/user"
cp %(tmp)s/modelgate.service %(tmp)s/modelgate.socket %(tmp)s/llama-mainline.service "$XDG_RUNTIME_DIR/systemd/user/"
systemctl --user daemon-reload
systemctl --user start modelgate.socket
curl -sS --max-time 30 -H 'Content-Type: application/json' -H 'X-Request-Id: journal-1' -A 'agent "x"' \\
     -d '{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}' \\
     http://127.0.0.1:%(port)d/v1/chat/completions > %(tmp)s/answer.json
# the entries, waited for (the daemon sends each as its line is made; the journal stores it on receipt)
for i in $(seq 100); do
        journalctl -D /run/log/journal -o json --no-pager MESSAGE_ID=%(access)s MODELGATE_REQUEST_ID=journal-1 \\
                >%(tmp)s/access.json 2>/dev/null || true
        journalctl -D /run/log/journal -o json --no-pager MESSAGE_ID=%(switch)s >%(tmp)s/switch.json 2>/dev/null || true
        [ -s %(tmp)s/access.json ] && [ -s %(tmp)s/switch.json ] && break
        sleep 0.1
done
journalctl -D /run/log/journal --no-pager _SYSTEMD_UNIT=modelgate.service >%(tmp)s/unit.txt 2>&1 || true
systemctl --user stop modelgate.service modelgate.socket llama-mainline.service
""" % {"tmp": tmp, "port": port, "access": MESSAGE_ID_ACCESS, "switch": MESSAGE_ID_SWITCH})
    out = subprocess.run([BOX, "bash", script], capture_output=True, text=True, timeout=150)
    read = lambda f: open(os.path.join(tmp, f)).read() if os.path.exists(os.path.join(tmp, f)) else "(none)"
    why = out.stdout + out.stderr + "\n--- journald:\n" + read("journald.log") + "\n--- the unit's entries:\n" + \
        read("unit.txt")
    assert out.returncode == 0, why
    assert json.load(open(os.path.join(tmp, "answer.json")))["choices"], why
    access = [json.loads(l) for l in read("access.json").splitlines() if l.strip()]
    switch = [json.loads(l) for l in read("switch.json").splitlines() if l.strip()]
    assert len(access) == 1 and len(switch) == 1, why
    a, s = access[0], switch[0]
    # the same text as the line, its priority, and the fields (only those known)
    assert a["MESSAGE"].startswith('POST /v1/chat/completions model="3090-laguna-xs" host=3090 status=200 '), a
    assert ' ua="agent \\x22x\\x22"' in a["MESSAGE"] and a["MESSAGE"].endswith(" id=journal-1"), a
    assert a["PRIORITY"] == "6" and a["_SYSTEMD_UNIT"] == "modelgate.service", a
    assert (a["MODELGATE_HOST"], a["MODELGATE_ENGINE"], a["MODELGATE_MODEL"], a["MODELGATE_STATUS"]) == \
        ("3090", "mainline", "3090-laguna-xs", "200"), a
    assert int(a["MODELGATE_SWITCH_USEC"]) >= 1_000_000, a  # the engine's start, its --startup-delay 1
    assert int(a["MODELGATE_DURATION_USEC"]) >= int(a["MODELGATE_FIRST_BYTE_USEC"]) >= int(a["MODELGATE_SWITCH_USEC"])
    assert " switch=%.3fs" % (int(a["MODELGATE_SWITCH_USEC"]) // 1000 / 1000) in a["MESSAGE"], a
    answer = json.load(open(os.path.join(tmp, "answer.json")))
    assert int(a["MODELGATE_TOKENS_IN"]) == answer["usage"]["prompt_tokens"], (a, answer)
    assert int(a["MODELGATE_TOKENS_OUT"]) == answer["usage"]["completion_tokens"], (a, answer)
    assert "MODELGATE_KEY" not in a and "MODELGATE_FALLBACK" not in a, a
    assert s["MESSAGE"].startswith("host 3090: engine mainline up after ") and s["PRIORITY"] == "5", s
    assert (s["MODELGATE_HOST"], s["MODELGATE_ENGINE_FROM"], s["MODELGATE_ENGINE_TO"]) == ("3090", "-", "mainline"), s
    assert int(s["MODELGATE_SWITCH_USEC"]) >= int(a["MODELGATE_SWITCH_USEC"]), (s, a)
    # the line is not on stderr too: once in the journal (the switch line names the id as well: rule:request-id)
    unit = read("unit.txt").splitlines()
    assert sum("POST /v1/chat/completions" in l and "id=journal-1" in l for l in unit) == 1, why
    assert sum("switching to engine mainline for 3090-laguna-xs id=journal-1" in l for l in unit) == 1, why
