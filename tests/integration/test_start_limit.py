"""The installed units' start limit (units/modelgate.service.in; modelgated(8), UNIT SETTINGS), in a boxed
user manager: every idle exit and re-activation is a start, and must never fail the socket; a crash loop must
end, restarting no faster than RestartSec=, with the socket's clients refused rather than left waiting."""

import http.client
import json
import os
import socket
import subprocess
import time

import pytest

from boxes import box_skip_reason, installed_units
from conftest import MODELGATED, free_port, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

RESTART_SEC = 0.2  # RestartSec= in the units
BURST = 20  # StartLimitBurst=


def show(box, prop, unit="modelgate.service"):
    return box.systemctl("show", "-P", prop, unit).strip()


def test_fifty_idle_exits_in_a_row_leave_the_socket_listening(box, tmp):
    port = free_port()
    # the shortest ExitIdleSec= there is (shorter is raised to it); GET /health needs no host
    log = installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1s\n")
    for i in range(50):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/health")
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        assert r.status == 200 and body["status"] == "ok", (i, body)
        wait_for(lambda: open(log).read().count("Idle for 1s, exiting") == i + 1, 30, "idle exit %d" % (i + 1),
                 interval=0.05)
        wait_for(lambda: box.active_state("modelgate.service") == "inactive", 30, "exit %d" % (i + 1),
                 interval=0.05)
        assert box.active_state("modelgate.socket") == "active", (i, box.systemctl(
            "status", "--no-pager", "modelgate.socket", "modelgate.service", check=False))
    assert show(box, "Result") == "success" and show(box, "NRestarts") == "0"
    assert show(box, "Result", "modelgate.socket") == "success"
    # and the 51st connection is served as the others
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    c.close()


def test_a_crash_loop_ends_at_the_start_limit_and_refuses_clients(box, tmp):
    port = free_port()
    # a daemon that fails at every start (not for its configuration: that is answered, test_config_errors.py)
    log = installed_units(box, tmp, port, "", exec_start="/bin/sh -c 'echo crashed >&2; exit 1'")
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.sendall(b"GET /health HTTP/1.1\r\nHost: modelgate\r\n\r\n")
    started = time.monotonic()
    # (systemd 252 leaves the service's Result= at the last crash's; the socket says why it gave up)
    wait_for(lambda: box.active_state("modelgate.socket") == "failed", 60, "the start limit", interval=0.2)
    took = time.monotonic() - started

    # bounded in number (the burst: the next start is refused), and in rate: RestartSec= apart at least
    crashes = open(log).read().count("crashed")
    restarts = int(show(box, "NRestarts"))
    assert crashes == BURST, crashes
    assert crashes - 1 <= restarts <= crashes, (crashes, restarts)
    assert took >= (crashes - 1) * RESTART_SEC, "%d crashes in %.2f s" % (crashes, took)
    assert box.active_state("modelgate.service") == "failed"

    # the socket failed with it: the waiting client's connection ends, and the next one is refused
    assert show(box, "Result", "modelgate.socket") == "service-start-limit-hit"
    try:
        assert client.recv(100) == b""
    except ConnectionResetError:
        pass
    client.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_slow_crash_loop_ends_in_a_refusal_not_in_restarts(box, tmp):
    """A daemon killed a second after each start is beyond the start limit's reach (20 starts in 10 s need runs
    shorter than about 300 ms, and idle exits must never reach it): modelgated counts the runs that ended
    without a clean exit, and after five the next one refuses every request with why, stays up, and is not
    restarted; the socket stays. A reload serves again, and a clean stop leaves no run behind."""
    port = free_port()
    conf = os.path.join(tmp, "modelgate.conf")
    script = os.path.join(tmp, "crashing-daemon")
    with open(script, "w") as f:
        # killed as by a crash, a second after it starts, whenever it serves (not when it refuses)
        f.write("(sleep 1; curl -s -m 5 http://127.0.0.1:%d/health | grep -q '\"status\":\"ok\"' && kill -KILL $$) &\n"
                "exec %s --user --config=%s\n" % (port, os.path.abspath(MODELGATED), conf))
    log = installed_units(box, tmp, port, "[Proxy]\nExitIdleSec=1h\n", exec_start="/bin/sh " + script)
    c = socket.create_connection(("127.0.0.1", port), timeout=30)  # activates the socket
    c.close()
    wait_for(lambda: os.path.exists(log) and "without a clean exit" in open(log).read(), 90,
             "the crash loop's refusal", interval=0.2)
    message = ("modelgated ended 5 times in the last 5min without a clean exit (it crashed or was killed: "
               "'journalctl --user -u modelgate' says why); it refuses requests until 'systemctl --user reload "
               "modelgate' while it runs, or until those runs are 5min old")
    assert open(log).read().count(message) == 1

    def answer(path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        return r.status, body
    status, body = answer("/health")
    assert status == 503 and body["status"] == "crash-loop" and body["message"] == message, body
    status, body = answer("/v1/models")
    assert status == 503 and body["error"]["code"] == "crash_loop", body
    # no more restarts: the same process, looked at for longer than three of the killed runs took
    pid, restarts = show(box, "MainPID"), show(box, "NRestarts")
    assert restarts == "5", restarts
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert show(box, "MainPID") == pid and show(box, "NRestarts") == "5"
        assert box.active_state("modelgate.socket") == "active"
        time.sleep(0.5)
    # the operator's reload: serving again, the runs before forgotten
    reload = subprocess.run(["systemctl", "--user", "reload", "modelgate"], env=box.env, capture_output=True,
                            text=True, timeout=60)
    assert reload.returncode == 0, reload
    status, body = answer("/health")
    assert status == 200 and body["status"] == "ok", body
    assert len(open(os.path.join(tmp, "unclean-runs")).read().split()) == 1  # this run's own line
    box.systemctl("stop", "modelgate.service")
    assert not os.path.exists(os.path.join(tmp, "unclean-runs"))  # a clean stop is no crash
