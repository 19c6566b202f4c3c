"""The installed units' start limit (units/modelgate.service.in; modelgated(8), UNIT SETTINGS), in a boxed
user manager: every idle exit and re-activation is a start, and must never fail the socket; a crash loop must
end, restarting no faster than RestartSec=, with the socket's clients refused rather than left waiting."""

import http.client
import json
import socket
import time

import pytest

from boxes import box_skip_reason, installed_units
from conftest import free_port, wait_for

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
