"""rule:history: /activity's ring of finished requests (what /ui and modelgatectl top show) outlives the process:
after a kill -9 and after an idle exit, the socket-activated start shows the same entries, read back from the
state directory's history file (no journal: the box's units log to a file) or from the journal (a boxed
systemd-journald). And rule:ctl-never-starts: modelgatectl's reading verbs never start a stopped modelgate, and
say it is stopped and what its socket will do."""

import http.client
import json
import os
import shutil
import subprocess
import time

import pytest

import conftest
from boxes import box_skip_reason, ctl, installed_units
from conftest import MODELGATED, free_port, host_conf, unit_for_tests, wait_for

MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))
BOX = os.path.join(os.path.dirname(__file__), "box.sh")
UNITS = os.path.join(os.path.dirname(__file__), "../../units")

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

# The first /activity event, read by a client of its own (a tool the box script runs too)
SNAPSHOT = r'''
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("GET", "/activity")
r = c.getresponse()
assert r.status == 200, r.status
lines = []
while True:
    line = r.readline().decode()
    if line in ("\n", ""):
        break
    lines.append(line)
data = [l[len("data: "):] for l in lines if l.startswith("data: ")]
assert lines[0] == "event: snapshot\n", lines
print(json.dumps(json.loads("".join(data))))
'''


def snapshot(tmp, port):
    tool = os.path.join(tmp, "snapshot.py")
    with open(tool, "w") as f:
        f.write(SNAPSHOT)
    out = subprocess.run(["/usr/bin/python3", tool, str(port)], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def ask(port, rid, model="3090-laguna-xs", stream=False):
    return conftest.ask(port, model, stream=stream, rid=rid, headers={"Connection": "close"}).status


def same(before, after):
    """the ring's entries, field by field; the speeds to the journal field's tenth"""
    assert [e["id"] for e in after] == [e["id"] for e in before], (before, after)
    for b, a in zip(before, after):
        for k in b:
            if k in ("prefill_tps", "decode_tps") and b[k] is not None:
                assert abs(a[k] - b[k]) <= 0.051, (k, b, a)
            else:
                assert a[k] == b[k], (k, b, a)


def ours(snap):
    return [e for e in snap["recent"] if e["id"].startswith("hist-")]


def test_the_ring_outlives_a_kill_and_an_idle_exit_through_the_state_file(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    conf = "[Proxy]\nExitIdleSec=2s\n" + host_conf("3090", d.url) + host_conf("down", "http://127.0.0.1:9")
    log = installed_units(box, tmp, port, conf)
    # a connection of its own keeps this run from its idle exit until the kill
    held = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    held.request("GET", "/health")
    assert held.getresponse().read() is not None
    assert ask(port, "hist-1") == 200
    assert ask(port, "hist-2", stream=True) == 200
    assert ask(port, "hist-3", model="down-laguna-xs") == 503
    before = ours(snapshot(tmp, port))
    assert [e["id"] for e in before] == ["hist-1", "hist-2", "hist-3"], before
    assert [e["status"] for e in before] == [200, 200, 503] and before[1]["stream"] is True, before
    pid = box.systemctl("show", "-P", "MainPID", "modelgate.service").strip()
    assert pid not in ("", "0"), "modelgated is not running"

    box.systemctl("kill", "-s", "KILL", "modelgate.service")
    held.close()
    wait_for(lambda: box.systemctl("show", "-P", "MainPID", "modelgate.service").strip() in ("0", ""),
             timeout=30, what="the kill")
    # the next connection starts it again (the socket's): the same entries
    after_kill = ours(snapshot(tmp, port))
    same(before, after_kill)
    assert box.systemctl("show", "-P", "MainPID", "modelgate.service").strip() != pid
    assert os.path.exists(os.path.join(tmp, "history")), os.listdir(tmp)

    # an idle exit, and the start after it
    wait_for(lambda: box.active_state("modelgate.service") == "inactive", timeout=30, what="the idle exit")
    assert "Idle for 2s, exiting" in open(log).read()
    after_idle = ours(snapshot(tmp, port))
    same(before, after_idle)
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


@pytest.mark.parametrize("readable", [True, False], ids=["journal-read", "journal-unreadable"])
def test_the_ring_outlives_a_kill_through_the_journal(make_double, tmp, readable):
    """under a real systemd-journald of the box's own, as test_lifecycle's journal test runs one: the unit's
    stderr is the journal's, so the access lines are its entries, and the start reads them back. A journal
    the daemon may not read back (a volatile one for a user, the system service's user outside the journal's
    groups; here its files made inaccessible to the unit) leaves the history file in the state directory."""
    if not os.path.exists("/usr/lib/systemd/systemd-journald"):
        pytest.skip("no /usr/lib/systemd/systemd-journald on this machine")
    from shared_ids import MESSAGE_ID_ACCESS
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    conf = os.path.join(tmp, "modelgate.conf")
    open(conf, "w").write("[Proxy]\nExitIdleSec=1h\n" + host_conf("3090", d.url))
    service = open(os.path.join(UNITS, "modelgate.service.in")).read().replace(
        "@libexecdir@/modelgated --user", "%s --user --config=%s" % (os.path.abspath(MODELGATED), conf)).replace(
        "@bindir@/modelgatectl", os.path.abspath(MODELGATECTL))
    # the state directory of the test's own: a history file there would be the wrong path taken
    service = service.replace("[Service]\n", "[Service]\nEnvironment=STATE_DIRECTORY=%s/state\n" % tmp +
                              ("" if readable else "CapabilityBoundingSet=~CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH\n"))
    open(os.path.join(tmp, "modelgate.service"), "w").write(unit_for_tests(service))
    open(os.path.join(tmp, "modelgate.socket"), "w").write(open(os.path.join(UNITS, "modelgate.socket")).read().replace(
        "ListenStream=127.0.0.1:8080", "ListenStream=127.0.0.1:%d" % port))
    with open(os.path.join(tmp, "snapshot.py"), "w") as f:
        f.write(SNAPSHOT)
    script = os.path.join(tmp, "inside.sh")
    open(script, "w").write("""set -eu
mount -t tmpfs tmpfs /run/log
[ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal
/usr/lib/systemd/systemd-journald >%(tmp)s/journald.log 2>&1 &
journald=$!
trap 'kill $journald' EXIT
for i in $(seq 100); do [ -S /run/systemd/journal/stdout ] && [ -S /run/systemd/journal/socket ] && break; sleep 0.1; done
# unreadable: the journal's files closed to the unit, which runs without root's right to read anything
%(close)s
mkdir -p "$XDG_RUNTIME_DIR/systemd/user"
cp %(tmp)s/modelgate.service %(tmp)s/modelgate.socket "$XDG_RUNTIME_DIR/systemd/user/"
systemctl --user daemon-reload
systemctl --user start modelgate.socket
ask() {
        curl -sS --max-time 30 -o /dev/null -H 'Content-Type: application/json' -H "X-Request-Id: $1" \\
             -d '{"model":"3090-laguna-xs","messages":[{"role":"user","content":"hi"}]}' \\
             http://127.0.0.1:%(port)d/v1/chat/completions
}
ask hist-1 || { systemctl --user status --no-pager modelgate.service >&2; journalctl -D /run/log/journal --no-pager -n 30 >&2; exit 1; }
ask hist-2
/usr/bin/python3 %(tmp)s/snapshot.py %(port)d >%(tmp)s/before.json
# both entries in the journal before the kill (journald stores each as it reads it)
for i in $(seq 100); do
        n=$(journalctl -D /run/log/journal -o cat --no-pager MESSAGE_ID=%(access)s | grep -c ' id=hist-' || true)
        [ "$n" = 2 ] && break
        sleep 0.1
done
systemctl --user kill -s KILL modelgate.service
for i in $(seq 100); do
        [ "$(systemctl --user show -P MainPID modelgate.service)" = 0 ] && break
        sleep 0.1
done
/usr/bin/python3 %(tmp)s/snapshot.py %(port)d >%(tmp)s/after.json
ls %(tmp)s/state >%(tmp)s/state.txt 2>&1 || true
systemctl --user stop modelgate.service modelgate.socket
""" % {"tmp": tmp, "port": port, "access": MESSAGE_ID_ACCESS,
       "close": "" if readable else "chmod 000 /run/log/journal; [ ! -d /var/log/journal ] || chmod 000 /var/log/journal"})
    out = subprocess.run([BOX, "bash", script], capture_output=True, text=True, timeout=150)
    read = lambda f: open(os.path.join(tmp, f)).read() if os.path.exists(os.path.join(tmp, f)) else "(none)"
    why = out.stdout + out.stderr + "\n--- journald:\n" + read("journald.log")
    assert out.returncode == 0, why
    before, after = ours(json.loads(read("before.json"))), ours(json.loads(read("after.json")))
    assert [e["id"] for e in before] == ["hist-1", "hist-2"], before
    same(before, after)
    if readable:  # read from the journal: no history file was written
        assert "history" not in read("state.txt"), read("state.txt")
    else:
        assert "history" in read("state.txt"), read("state.txt")


def install_bus_activation(box):
    """D-Bus activation as installed: a call for org.modelgate1 would start modelgate.service"""
    services = os.path.join(box.dir, "xdg", "dbus-1", "services")
    os.makedirs(services, exist_ok=True)
    shutil.copy(os.path.join(UNITS, "dbus/org.modelgate1.service"), services)
    box.run("busctl", "--user", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
            "ReloadConfig")


def test_reading_verbs_never_start_a_stopped_modelgate(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1h\n" + host_conf("3090", d.url))
    install_bus_activation(box)
    assert box.active_state("modelgate.service") == "inactive"
    said = "modelgate is not running; its socket modelgate.socket listens on 127.0.0.1:%d and starts it " \
           "on the next request" % port
    for verb in (["status"], ["hosts"], ["aliases"], ["top", "--once"], ["key", "usage"]):
        out = ctl(box, *verb)
        assert out.returncode == 3, (verb, out)
        assert said in out.stdout + out.stderr, (verb, out)
        assert box.active_state("modelgate.service") == "inactive", (verb, "started modelgate")
    # with the socket stopped too, nothing would start it
    box.systemctl("stop", "modelgate.socket")
    out = ctl(box, "status")
    assert out.returncode == 3 and "modelgate is not running, and its socket modelgate.socket is inactive: " \
        "nothing starts it" in out.stdout + out.stderr, out
    box.systemctl("start", "modelgate.socket")
    # reload of a stopped modelgate whose socket listens has nothing to reload: its start reads the file
    out = ctl(box, "reload")
    assert out.returncode == 0 and "modelgated is not running" in out.stdout, out
    assert box.active_state("modelgate.service") == "inactive", out
    # a request starts it
    assert ask(port, "hist-started") == 200
    # running, status shows it
    out = ctl(box, "status")
    assert out.returncode == 0 and "listening on" in out.stdout, out
    box.systemctl("stop", "modelgate.socket", "modelgate.service")


def test_a_manager_without_modelgate_units_is_no_modelgate_not_a_stopped_one(box):
    """rule:ctl-never-starts: the user manager has no modelgate.socket at all (it loads as not-found): that is
    no modelgate of this instance, said as before, not a stopped one whose socket 'is inactive'"""
    assert box.run("systemctl", "--user", "show", "-P", "LoadState", "modelgate.socket").strip() == "not-found"
    out = ctl(box, "status")
    assert out.returncode == 3, out
    assert "modelgated is not running on the user bus" in out.stderr, out
    assert "its socket" not in out.stdout + out.stderr, out


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_left_open_does_not_undo_an_idle_exit(box, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    port = free_port()
    log = installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1s\n" + host_conf("3090", d.url))
    install_bus_activation(box)
    assert ask(port, "hist-top") == 200
    sock = "mg-hist-%d" % os.getpid()
    tmux = ["tmux", "-L", sock]
    cmd = "env DBUS_SESSION_BUS_ADDRESS=%s %s --user top" % (box.env["DBUS_SESSION_BUS_ADDRESS"], MODELGATECTL)
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-x", "120", "-y", "30", cmd], check=True,
                   timeout=30)
    said = "modelgate is not running; its socket modelgate.socket listens on 127.0.0.1:%d" % port

    def pane():
        return subprocess.run(tmux + ["capture-pane", "-p"], capture_output=True, text=True, timeout=10).stdout

    try:
        # top asks once a second; modelgated exits after 1 s idle all the same, and top says so
        wait_for(lambda: said in pane(), timeout=30, what="top saying modelgate is not running")
        exits = open(log).read().count("Idle for 1s, exiting")
        assert exits >= 1
        # three of top's refreshes, a second apart: none starts it again (the old top's started it each time)
        for _ in range(3):
            time.sleep(1.1)
            assert box.active_state("modelgate.service") == "inactive" and said in pane(), pane()
        assert open(log).read().count("Idle for 1s, exiting") == exits
        # a request starts it (its kept-alive connection keeps it), and top shows it again, with the request
        # before the exit still there
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/chat/completions", json.dumps({"model": "3090-laguna-xs", "messages": []}),
                  {"Content-Type": "application/json", "X-Request-Id": "hist-top-2"})
        r = c.getresponse()
        r.read()
        assert r.status == 200
        wait_for(lambda: said not in pane() and "RECENT" in pane(), timeout=30, what="top showing modelgate")
        assert pane().count("3090-laguna-xs") >= 2, pane()
        c.close()
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=10)
    box.systemctl("stop", "modelgate.socket", "modelgate.service")
