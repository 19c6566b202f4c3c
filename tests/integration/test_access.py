"""[Access] and [Tier]: API keys made by modelgatectl, daily caps that survive restarts and crashes, caps
for anonymous clients per address, and a tier's model allowlist for routing and the model list."""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

import conftest
from conftest import MODELGATED, Gate, host_conf, post, read_response, wait_for
from test_catalog import Feed

MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))
CHAT = "/v1/chat/completions"


def conf_text(keys, anonymous="10"):
    return ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=%s\n"
            "[Tier]\nName=free\nDailyRequests=3\nModels=3090-*\n"
            "[Tier]\nName=pro\n" % (keys, anonymous))


def make_key(tmp, conf_body, tier):
    path = os.path.join(tmp, "keys-conf.conf")
    with open(path, "w") as f:
        f.write(conf_body)
    out = subprocess.run([MODELGATECTL, "--user", "--config=" + path, "key", "add", tier], capture_output=True,
                         text=True, timeout=30, env=dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent"))
    assert out.returncode == 0, out
    assert "modelgated was not reloaded" in out.stderr  # none runs yet: said, not fatal
    return out.stdout.strip()


def ask(g, key=None, model="3090-laguna-xs", header="Authorization", source="127.0.0.1"):
    a = conftest.ask(g, model, key=key, key_header=header, source=source, timeout=30)
    return a.response, a.json()


def test_keys_caps_and_allowlist(make_double, tmp):
    d3090 = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    da9 = make_double("--models", "qwen", "--loaded", "qwen")
    keys = os.path.join(tmp, "keys")
    hosts = host_conf("3090", d3090.url) + host_conf("a9", da9.url)
    free = make_key(tmp, conf_text(keys) + hosts, "free")
    pro = make_key(tmp, conf_text(keys) + hosts, "pro")
    assert free.startswith("mg-") and free != pro
    text = open(keys).read()
    assert free not in text and pro not in text  # digests only
    listed = subprocess.run([MODELGATECTL, "--config=" + os.path.join(tmp, "keys-conf.conf"), "key", "list"],
                            capture_output=True, text=True, timeout=30)
    assert [l.split()[1] for l in listed.stdout.splitlines()] == ["free", "pro"], listed

    state = os.path.join(tmp, "state")
    env = dict(os.environ, STATE_DIRECTORY=state)
    g = Gate(tmp, conf_text(keys) + hosts, env=env)
    try:
        # the free key: only 3090-* (a refusal costs nothing of the day), and 3 a day
        r, body = ask(g, free, model="a9-qwen")
        assert r.status == 403 and "may not use model 'a9-qwen'" in body["error"]["message"], body
        for header in ("Authorization", "X-Api-Key", "Authorization"):
            r, body = ask(g, free, header=header)
            assert r.status == 200, body
        r, body = ask(g, free)
        assert r.status == 429, body
        retry = int(r.getheader("Retry-After"))
        assert 0 < retry <= 86400
        assert "this key has used its 3 requests for today" in body["error"]["message"]
        # when, as a clock time (the UTC day's end) and a span, not as 68178 s
        assert re.search(r"the count starts again at 00:00 UTC \(in (\d+h )?(\d+min|\d+s)\)$",
                         body["error"]["message"]), body
        assert body["error"]["code"] == "rate_limit_exceeded"
        # another key is not affected, and may use every host
        for model in ("3090-laguna-xs", "a9-qwen"):
            r, body = ask(g, pro, model=model)
            assert r.status == 200, body
        # over its cap, any model request is told so first, in one piece or in two (head, then body)
        r, body = ask(g, free, model="a9-qwen")
        assert r.status == 429, body
        # the list shows what the caller may use
        c = g.conn()
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + free})
        ids = [m["id"] for m in json.loads(c.getresponse().read())["data"]]
        assert ids == ["3090-laguna-xs"], ids
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + pro})
        ids = sorted(m["id"] for m in json.loads(c.getresponse().read())["data"])
        assert ids == ["3090-laguna-xs", "a9-qwen"], ids
        # unknown keys are refused; keys never reach a host or the log, their tier and digest prefix do
        r, body = ask(g, "mg-not-a-key")
        assert r.status == 401 and "not known to this proxy" in body["error"]["message"]
        g.wait_log(" key=free:")
        g.wait_log(" key=pro:")
        # the unknown key's own access line, the last: every line before it is in the log file with it
        g.wait_log(" status=401 ")
        log = g.logtext()
        assert free not in log and pro not in log
        for dd in (d3090, da9):
            for req in dd.requests():
                names = [k.lower() for k, _ in req["headers"]]
                assert "authorization" not in names and "x-api-key" not in names
        # a clean restart keeps the count ...
        g.stop()
        g = Gate(tmp, conf_text(keys) + hosts, env=env)
        r, body = ask(g, free)
        assert r.status == 429, body
        r, body = ask(g, pro)
        assert r.status == 200
        # ... and so does a crash, once the count is written (at most 2 s behind)
        time.sleep(2.5)
        g.proc.send_signal(signal.SIGKILL)
        g.proc.wait()
        g.stopped = True
        usage = json.load(open(os.path.join(state, "usage.json")))
        assert sum(v for k, v in usage["counts"].items() if k.startswith("k:")) == 3 + 3
        g = Gate(tmp, conf_text(keys) + hosts, env=env)
        r, body = ask(g, free)
        assert r.status == 429, body
        # removing a key: it is refused after the reload
        prefix = [l.split()[0] for l in open(keys) if l.strip().endswith(" pro")][0][:12]
        out = subprocess.run([MODELGATECTL, "--config=" + os.path.join(tmp, "keys-conf.conf"), "key", "remove",
                              prefix], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out
        g.proc.send_signal(signal.SIGHUP)
        g.wait_log("Reloaded")
        r, body = ask(g, pro)
        assert r.status == 401, body
    finally:
        g.stop()


def test_anonymous_clients_are_capped_per_address_or_refused(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    g = make_gate(conf_text(keys, anonymous="2") + host_conf("3090", d.url))
    # a model that routes nowhere is not a request of the day
    r, body = ask(g, model="nohost-x")
    assert r.status == 404, body
    for _ in range(2):
        r, body = ask(g)
        assert r.status == 200, body
    r, body = ask(g)
    assert r.status == 429 and "this address has used its 2 requests" in body["error"]["message"], body
    # another address has its own count
    r, body = ask(g, source="127.0.0.2")
    assert r.status == 200, body
    g.wait_log("key=anonymous")

    g2 = make_gate(conf_text(keys, anonymous="0") + host_conf("3090", d.url))
    r, body = ask(g2)
    assert r.status == 401 and "needs an API key" in body["error"]["message"], body
    assert r.getheader("WWW-Authenticate") == "Bearer"
    # Anthropic's shape on /v1/messages
    c = g2.conn()
    r = post(c, "/v1/messages", {"model": "3090-laguna-xs", "max_tokens": 8,
                                 "messages": [{"role": "user", "content": "hi"}]})
    body = json.loads(r.read())
    assert r.status == 401 and body["type"] == "error" and body["error"]["type"] == "authentication_error", body


def test_anonymous_counters_are_bounded(make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    open(keys, "w").close()
    hosts = host_conf("3090", d.url)
    state = os.path.join(tmp, "state-inf")
    # AnonymousDailyRequests=infinity counts nothing: 100 addresses leave no entry
    g = Gate(tmp, conf_text(keys, anonymous="infinity") + hosts, env=dict(os.environ, STATE_DIRECTORY=state))
    try:
        for i in range(100):
            r, _ = ask(g, source="127.0.1.%d" % (1 + i))
            assert r.status == 200
    finally:
        g.stop()
    if os.path.exists(os.path.join(state, "usage.json")):
        counts = json.load(open(os.path.join(state, "usage.json")))["counts"]
        assert not [k for k in counts if k.startswith("ip:")], len(counts)

    # 200,000 anonymous entries of today: loaded in linear time, and no more than the cap is kept
    state = os.path.join(tmp, "state-big")
    os.makedirs(state)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    counts = {"ip:10.%d.%d.%d" % (i >> 16, (i >> 8) & 255, i & 255): 1 for i in range(200000)}
    with open(os.path.join(state, "usage.json"), "w") as f:
        json.dump({"day": day, "counts": counts}, f)
    g = Gate(tmp, conf_text(keys, anonymous="10") + hosts, env=dict(os.environ, STATE_DIRECTORY=state))
    try:
        start = time.monotonic()
        r, _ = ask(g, source="127.0.0.1")
        # the bound is far from the noise: a linear search per insert took minutes for this many
        assert time.monotonic() - start < 10
        # the cap is reached: new anonymous addresses share one count (of AnonymousDailyRequests=10)
        assert r.status == 200
        for i in range(9):
            r, _ = ask(g, source="127.0.0.%d" % (10 + i))
            assert r.status == 200
        r, body = ask(g, source="127.0.0.30")
        assert r.status == 429 and "anonymous addresses" in body["error"]["message"], body
        assert r.getheader("Retry-After")
        # an address counted before the cap keeps its own count
        r, _ = ask(g, source="127.0.0.1")
        assert r.status == 429
    finally:
        g.stop()


def test_a_corrupt_usage_file_is_kept_aside_and_said(make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    open(keys, "w").close()
    state = os.path.join(tmp, "state-corrupt")
    os.makedirs(state)
    with open(os.path.join(state, "usage.json"), "w") as f:
        f.write('{"day": "2026-')
    g = Gate(tmp, conf_text(keys, anonymous="10") + host_conf("3090", d.url),
             env=dict(os.environ, STATE_DIRECTORY=state))
    try:
        r, _ = ask(g)
        assert r.status == 200
        g.wait_log("usage.json.corrupt")
        assert open(os.path.join(state, "usage.json.corrupt")).read() == '{"day": "2026-'
    finally:
        g.stop()


def test_admission_comes_before_the_body(make_double, tmp):
    """A client without a (good) key is answered on its head: modelgate never holds its body."""
    import hashlib
    import socket
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    key = "mg-small-body-key"
    with open(keys, "w") as f:
        f.write("%s small\n" % hashlib.sha256(key.encode()).hexdigest())
    g = Gate(tmp, "[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=small\nMaxBodySize=1K\n" % keys
             + host_conf("3090", d.url))
    try:
        rss = g.rss_kb()
        socks, senders = [], []
        chunk = b"x" * (1 << 20)

        def send_body(s):
            # the reproducer: a 50 MB body sent whole but one byte (the old code held it all, and
            # answered nothing); modelgate answers on the head and drains, then closes: a reset may end it
            try:
                for _ in range(47):
                    s.sendall(chunk)
                s.sendall(b"x" * (50000000 - 47 * len(chunk) - 1))
            except OSError:
                pass

        for auth in [b"", b"Authorization: Bearer wrong\r\n", b"Authorization: Bearer " + key.encode() + b"\r\n"]:
            for _ in range(4):
                s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n" + auth +
                          b"Content-Length: 50000000\r\n\r\n")
                t = threading.Thread(target=send_body, args=(s,))
                t.start()
                senders.append(t)
                status, _, body = read_response(s.makefile("rb"))
                assert status == (413 if key.encode() in auth else 401), body
                socks.append(s)
        for t in senders:
            t.join(60)
        assert g.rss_kb() - rss < 20000  # nothing like 12 × 50 MB
        # answered on the head, and logged as the request it is
        g.wait_log('POST /v1/chat/completions model="" host=- status=401')
        g.wait_log('POST /v1/chat/completions model="" host=- status=413')
        for s in socks:
            s.close()
        # the event feed is no open endpoint: it needs a key like /models
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        c.request("GET", "/models/sse")
        assert c.getresponse().status == 401
        c.close()
        # a chunked body past the tier's limit is refused as it comes
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer " + key.encode() +
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + b"x" * 2048 + b"\r\n")
        status, _, _ = read_response(s.makefile("rb"))
        assert status == 413
        s.close()
    finally:
        g.stop()


def test_a_reload_while_an_admitted_body_is_read_keeps_the_callers_tier(make_double, tmp):
    """A head admitted with a key holds the configuration its tier belongs to: a reload (modelgatectl key add
    makes one) while the body is still coming must not leave the tier in a freed configuration (the
    sanitizer build reports a use after free; the plain one may route with garbage)."""
    import hashlib
    import socket
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    key = "mg-reload-key"
    with open(keys, "w") as f:
        f.write("%s small\n" % hashlib.sha256(key.encode()).hexdigest())
    g = Gate(tmp, "[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=small\nModels=3090-*\n"
             "DailyRequests=10\n" % keys + host_conf("3090", d.url))
    try:
        body = json.dumps({"model": "3090-laguna-xs", "messages": [{"role": "user", "content": "hi"}]}).encode()
        s = socket.create_connection(("127.0.0.1", g.port), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer " + key.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
        for i in range(3):  # each reload replaces the configuration the head was admitted under
            g.proc.send_signal(signal.SIGHUP)
            g.wait_log("Reloaded", count=i + 1)
        s.sendall(body[10:])
        status, _, answer = read_response(s.makefile("rb"))
        assert status == 200, answer
        g.wait_log("key=small:")
        s.close()
    finally:
        g.stop()


def test_an_anonymous_client_is_limited_on_its_head(make_double, tmp):
    """Admitted anonymous clients: AnonymousMaxBodySize= refuses a larger body on its head (413), and a client
    whose day is used up gets 429 on its head, not after its body was read."""
    import socket
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    open(keys, "w").close()
    g = Gate(tmp, "[Access]\nKeysFile=%s\nAnonymousDailyRequests=1\nAnonymousMaxBodySize=1K\n" % keys
             + host_conf("3090", d.url))
    try:
        def head_only(length):
            s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % length)
            status, headers, body = read_response(s.makefile("rb"))
            s.close()
            return status, headers, body
        status, _, body = head_only(50000000)
        assert status == 413 and b"AnonymousMaxBodySize=" in body, body
        r, body = ask(g)  # the one request of the day
        assert r.status == 200, body
        status, headers, body = head_only(900)  # within the body limit, past the day's cap: told at once
        assert status == 429 and b"requests for today" in body, body
        assert "retry-after" in headers, headers
        assert len([r for r in d.requests() if r["path"] == CHAT]) == 1
    finally:
        g.stop()


def test_connection_slots_are_bounded_per_address_and_for_feeds(make_double, tmp):
    import socket
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = Gate(tmp, "[Proxy]\nMaxConnections=12\nMaxConnectionsPerAddress=8\n" + host_conf("3090", d.url))
    try:
        feeds, taken, refused = [], [], []
        # half of MaxConnections=12 for both feeds, of which /models/sse leaves 3 (at most half) to /activity
        for path in ["/models/sse"] * 4 + ["/activity"] * 4:
            s = socket.create_connection(("127.0.0.1", g.port), timeout=10, source_address=("127.0.0.1", 0))
            s.sendall(b"GET %s HTTP/1.1\r\nHost: g\r\n\r\n" % path.encode())
            line = s.makefile("rb").readline()
            if line.startswith(b"HTTP/1.1 200"):
                feeds.append(s)
                taken.append(path)
            else:
                assert line.startswith(b"HTTP/1.1 503"), line
                refused.append(path)
                s.close()
        assert taken == ["/models/sse"] * 3 + ["/activity"] * 3 and refused == ["/models/sse", "/activity"]
        # the 9th connection of one address is told at once, before it sends anything
        extra = [socket.create_connection(("127.0.0.1", g.port), timeout=10) for _ in range(2)]
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        status, _, body = read_response(s.makefile("rb"))
        assert status == 503 and b"MaxConnectionsPerAddress=8" in body
        s.close()
        # another address still gets /health
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10, source_address=("127.0.0.2", 0))
        c.request("GET", "/health")
        assert c.getresponse().status == 200
        c.close()
        for s in feeds + extra:
            s.close()
    finally:
        g.stop()


def test_connections_that_hold_no_admitted_request_make_room(make_double, tmp):
    """At MaxConnections=, silent connections (or ones still sending a head) cannot keep out /health or an
    admitted client: the oldest of them is closed to make room, and an admitted one never is. A new
    connection gets HeaderTimeoutSec= for its first head, not IdleTimeoutSec=."""
    import socket
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = Gate(tmp, "[Proxy]\nMaxConnections=12\nMaxConnectionsPerAddress=8\nHeaderTimeoutSec=1h\n"
             "IdleTimeoutSec=1h\n" + host_conf("3090", d.url))
    held = []
    try:
        # an admitted client: a feed subscriber holds its connection with a request in progress
        feed = socket.create_connection(("127.0.0.1", g.port), timeout=10, source_address=("127.0.0.4", 0))
        feed.sendall(b"GET /models/sse HTTP/1.1\r\nHost: g\r\n\r\n")
        assert feed.makefile("rb").readline().startswith(b"HTTP/1.1 200")
        # two addresses take every other slot: silent, or a head never finished (the reproducer)
        for i in range(11):
            s = socket.create_connection(("127.0.0.1", g.port), timeout=10,
                                         source_address=("127.0.0.%d" % (1 + i % 2), 0))
            if i % 3 == 2:
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n")
            held.append(s)
        # /health from a third address is answered: the oldest idle connection made room
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=5, source_address=("127.0.0.3", 0))
        c.request("GET", "/health")
        assert c.getresponse().status == 200
        c.close()
        # (no timeout of its own can have closed it: both are an hour)
        held[0].settimeout(5)
        assert held[0].recv(1) == b"", "the oldest silent connection was not the one closed"
        # and a client with a real request is answered too, while the feed stays
        r, body = ask(g, source="127.0.0.5")
        assert r.status == 200, body
        feed.setblocking(False)
        try:
            assert feed.recv(65536) != b"", "the admitted feed subscriber was closed"
        except BlockingIOError:
            pass  # open, nothing new to say
    finally:
        for s in held:
            s.close()
        g.stop()
    # three of four connections busy (bodies on their way): each new connection is served in the fourth slot,
    # the one before it (idle once answered) making room; none is closed for a room nobody needed
    g = Gate(tmp, "[Proxy]\nMaxConnections=4\nIdleTimeoutSec=1h\n" + host_conf("3090", d.url))
    busy = []
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 1000\r\n"
                      b"Expect: 100-continue\r\n\r\n{")
            busy.append(s)
            # its head admitted (until then it is a connection that may make room for another)
            assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        for i in range(3):
            c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
            c.request("GET", "/health")
            assert c.getresponse().status == 200, i
            c.close()
        for s in busy:
            s.setblocking(False)
            try:
                assert s.recv(1) != b"", "a connection with a request on its way was closed"
            except BlockingIOError:
                pass
    finally:
        for s in busy:
            s.close()
        g.stop()
    # a connection that never sends a head is closed after HeaderTimeoutSec=, not IdleTimeoutSec=; and one
    # that starts its head late has HeaderTimeoutSec= from accept, not a second one from its first byte
    g = Gate(tmp, "[Proxy]\nHeaderTimeoutSec=3s\nIdleTimeoutSec=1h\n" + host_conf("3090", d.url))
    try:
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        s.settimeout(60)
        assert s.recv(1) == b"", "a silent connection was not closed after HeaderTimeoutSec="
        s.close()
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        accepted = time.monotonic()
        time.sleep(2)  # deliberately late: two thirds of the head's time gone before its first byte
        s.sendall(b"G")
        s.settimeout(60)
        while s.recv(4096):  # the 408, then the close
            pass
        took = time.monotonic() - accepted
        assert took < 4.5, "the head's deadline came %.1f s after accept, not 3 s: it started again" % took
        s.close()
    finally:
        g.stop()
    # every connection busy: a new one waits in the backlog until a reload raises MaxConnections=
    conf = "[Proxy]\nMaxConnections=%d\nIdleTimeoutSec=1h\n" + host_conf("3090", d.url)
    g = Gate(tmp, conf % 2)
    busy = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 1000\r\n"
                      b"Expect: 100-continue\r\n\r\n{")
            busy.append(s)
            # its head admitted (until then it is a connection that may make room for another)
            assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        waiting = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        busy.append(waiting)
        waiting.sendall(b"GET /health HTTP/1.1\r\nHost: g\r\n\r\n")
        waiting.settimeout(1)
        with pytest.raises(socket.timeout):
            waiting.recv(1)  # not accepted: both slots hold a request
        with open(g.conf, "w") as f:
            f.write(conf % 4)
        g.proc.send_signal(signal.SIGHUP)
        g.wait_log("Reloaded")
        waiting.settimeout(10)
        status, _, _ = read_response(waiting.makefile("rb"))
        assert status == 200
    finally:
        for s in busy:
            s.close()
        g.stop()


def keyctl(conf, *args):
    return subprocess.run([MODELGATECTL, "--user", "--config=" + conf, "key"] + list(args), capture_output=True,
                          text=True, timeout=30, env=dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent"))


def test_keys_file_rewrites_are_safe(tmp):
    """modelgatectl key add/remove: no fixed temporary name to plant a link at, the file keeps its owner,
    group and mode (the system flavour: root writes /etc/modelgate/keys for User=modelgate), and
    concurrent writers lose nothing."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("keeping a file's owner through a rewrite is tested as root (chown), and this is not root")
    keys = os.path.join(tmp, "keys")
    conf = os.path.join(tmp, "keys.conf")
    with open(conf, "w") as f:
        f.write(conf_text(keys) + host_conf("3090", "http://127.0.0.1:1"))
    with open(keys, "w") as f:
        f.write("# keys\n")
    os.chown(keys, 0, 65534)
    os.chmod(keys, 0o640)
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("untouched\n")
    os.symlink(victim, keys + ".tmp")  # what the old code opened and followed
    out = keyctl(conf, "add", "free")
    assert out.returncode == 0, out
    assert open(victim).read() == "untouched\n"
    st = os.stat(keys)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 65534, 0o640)
    # ten writers at once: ten keys
    procs = [subprocess.Popen([MODELGATECTL, "--user", "--config=" + conf, "key", "add", "pro"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent"))
             for _ in range(10)]
    for p in procs:
        p.wait(timeout=30)
        assert p.returncode == 0
    listed = keyctl(conf, "list").stdout.splitlines()
    assert len(listed) == 11 and sum(1 for l in listed if l.split()[1] == "pro") == 10, listed
    digest = listed[0].split()[0]
    assert keyctl(conf, "remove", digest).returncode == 0
    st = os.stat(keys)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 65534, 0o640)
    assert len(keyctl(conf, "list").stdout.splitlines()) == 10



def test_a_keys_file_root_makes_for_the_system_service_is_readable_by_it(tmp):
    """modelgatectl --system key add, as root, with no keys file yet: the system service (User=modelgate,
    Group=modelgate) must read the new file. Run in a mount namespace whose /etc/group has a 'modelgate'
    group (the machine's own files are not touched); the reader is an unprivileged user in that group."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("modelgatectl --system key add as root, and a mount namespace, need root; this is not root")
    gid = 64000
    while True:
        try:
            import grp
            grp.getgrgid(gid)
            gid += 1
        except KeyError:
            break
    group = os.path.join(tmp, "group")
    with open("/etc/group") as f:
        text = f.read()
    with open(group, "w") as f:
        f.write(text.replace("\nmodelgate:", "\nmodelgate-not:") + "modelgate:x:%d:\n" % gid)
    keys = os.path.join(tmp, "keys")
    conf = os.path.join(tmp, "keys.conf")
    with open(conf, "w") as f:
        f.write(conf_text(keys) + host_conf("3090", "http://127.0.0.1:1"))
    os.chmod(tmp, 0o755)
    script = ('mount --bind "$1" /etc/group && "$2" --system --config="$3" key add free >/dev/null && '
              'setpriv --reuid=65534 --regid=%d --clear-groups cat "$4"' % gid)
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", group,
                          MODELGATECTL, conf, keys], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent"))
    assert out.returncode == 0, out
    assert " free" in out.stdout  # the service's user read the key's line
    st = os.stat(keys)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, gid, 0o640)

def test_the_feed_shows_a_tier_only_its_models(make_double, tmp):
    """/models/sse is filtered by the subscriber's [Tier] Models= as /v1/models is: a key that may use only
    3090's models never hears another host's model names, load progress or loaded entries (with the server's
    arguments); a host-wide event ("<host>-*") reaches it only for a host it may use some model of; a key
    that may use only an alias hears none of its target's events. The feed keeps its tier through reloads."""
    import hashlib
    d3090 = make_double("--models", "laguna-xs,qwen", "--loaded", "laguna-xs")
    da9 = make_double("--models", "other-secret-70b")
    keys = os.path.join(tmp, "keys")
    names = {"free": "mg-feed-free", "pro": "mg-feed-pro", "aliases": "mg-feed-alias"}
    with open(keys, "w") as f:
        for tier, key in names.items():
            f.write("%s %s\n" % (hashlib.sha256(key.encode()).hexdigest(), tier))
    g = Gate(tmp, "[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n"
             "[Tier]\nName=free\nModels=3090-*\n[Tier]\nName=pro\n[Tier]\nName=aliases\nModels=laguna\n" % keys +
             host_conf("3090", d3090.url) + host_conf("a9", da9.url) +
             "[Alias]\nName=laguna\nTargets=a9-other-secret-70b\n")
    feeds = []
    try:
        wait_for(lambda: all(any(r["path"] == "/models/sse" for r in d.requests()) for d in (d3090, da9)), 10,
                 "modelgate to follow both hosts' feeds")
        feeds.extend(Feed(g, names[t]) for t in ("free", "pro", "aliases"))
        free, pro, alias = feeds
        # each reload replaces the configuration the subscribers' tiers belong to
        for i in range(2):
            g.proc.send_signal(signal.SIGHUP)
            g.wait_log("Reloaded", count=i + 1)
        pro_auth = {"Authorization": "Bearer " + names["pro"]}
        # the other host's load and its host-wide event, until the unrestricted subscriber has them all
        r = post(g.conn(), "/models/load", {"model": "a9-other-secret-70b"}, headers=pro_auth)
        assert r.status == 200, r.read()
        c = da9.conn()
        c.request("GET", "/models?reload=1")
        c.getresponse().read()
        wait_for(lambda: pro.saw("a9-other-secret-70b", status="loaded") and pro.saw("a9-*", "models_reload"),
                 10, "the a9 events on the unrestricted feed")
        # then 3090's: once the free subscriber has them, every a9 event was handed out before
        r = post(g.conn(), "/models/load", {"model": "3090-qwen"}, headers=pro_auth)
        assert r.status == 200, r.read()
        c = d3090.conn()
        c.request("GET", "/models?reload=1")
        c.getresponse().read()
        wait_for(lambda: free.saw("3090-qwen", status="loaded") and free.saw("3090-*", "models_reload") and
                 pro.saw("3090-*", "models_reload"), 10, "the 3090 events on the free and unrestricted feeds")
        assert pro.saw("a9-other-secret-70b", status="loading") and pro.saw("3090-qwen", status="loaded")
        assert {e["model"] for e in free.events()} == {"3090-qwen", "3090-*"}, free.events()
        # the other host going down is the whole host's news, as its models_reload was
        da9.stop()
        wait_for(lambda: any(l.startswith(": host a9 down") for l in pro.lines), 30,
                 "a9 down on the unrestricted feed")
        r = post(d3090.conn(), "/_double/events", {"n": 1, "model": "laguna-xs"})
        assert r.status == 200, r.read()
        wait_for(lambda: free.saw("3090-laguna-xs", "download_progress"), 10, "3090's event on the free feed")
        text = "\n".join(free.lines)
        assert "other-secret" not in text and "a9" not in text, text
        # the alias's tier: its target's events name the target, and the alias has no events of its own
        assert alias.events() == [], alias.events()
        text = "\n".join(alias.lines)
        assert "other-secret" not in text and "a9" not in text and "3090" not in text, text
        # nor does the greeting count hosts a subscriber hears nothing of
        assert [f.lines[0] for f in feeds] == [": modelgate model events from %d host(s)" % n for n in (1, 2, 0)]
        # and /v1/models shows that tier the alias, but nothing behind it: no targets, no pick, and a status
        # by its value only (llama.cpp's carries the server's arguments and model paths)
        c = g.conn()
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + names["aliases"]})
        listed = json.loads(c.getresponse().read())["data"]
        assert [m["id"] for m in listed] == ["laguna"], listed
        assert listed[0]["proxy"] == {"alias": {"policy": "warm"}}, listed
        assert "other-secret" not in json.dumps(listed) and "a9" not in json.dumps(listed), listed
        # an unrestricted key still sees where the alias goes
        c.request("GET", "/v1/models", headers=pro_auth)
        full = {m["id"]: m for m in json.loads(c.getresponse().read())["data"]}
        assert [t["id"] for t in full["laguna"]["proxy"]["alias"]["targets"]] == ["a9-other-secret-70b"], full
    finally:
        for f in feeds:
            f.close()
        g.stop()


def usage_ctl(box, *args):
    out = subprocess.run([MODELGATECTL, "--user", "key", "usage"] + list(args), env=box.env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out
    return out.stdout


def chat_tokens(g, key, n_out, words="hello there"):
    """a chat whose prompt is len(words) + 1 words (the double's prompt tokens) and whose answer is n_out tokens"""
    c = g.conn()
    r = post(c, CHAT, {"model": "3090-laguna-xs",
                       "messages": [{"role": "user", "content": "[[tokens:%d]] %s" % (n_out, words)}]},
             headers={"Authorization": "Bearer " + key})
    return r, json.loads(r.read() or b"{}")


@pytest.mark.skipif(__import__("boxes").box_skip_reason() is not None,
                    reason=str(__import__("boxes").box_skip_reason()))
def test_key_usage_is_kept_shown_and_capped_in_tokens(make_double, make_gate, box, tmp):
    """rule:key-usage, rule:daily-tokens: two keys' requests and tokens by `modelgatectl key usage` (table and
    --json), kept across a restart; DailyTokens= refuses with 429 once spent, the request that crossed it
    served"""
    from boxes import gate_env
    import hashlib
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    text = ("[Access]\nKeysFile=%s\n[Tier]\nName=free\nDailyRequests=10\nDailyTokens=20\n[Tier]\nName=pro\n"
            % keys) + host_conf("3090", d.url)
    free, pro = make_key(tmp, text, "free"), make_key(tmp, text, "pro")
    fd, pd = (hashlib.sha256(k.encode()).hexdigest()[:16] for k in (free, pro))
    env = dict(gate_env(box), STATE_DIRECTORY=os.path.join(tmp, "state"))
    g = make_gate(text, extra_args=["--user"], env=env)
    wait_for(lambda: subprocess.run([MODELGATECTL, "--user", "key", "usage"], env=box.env,
                                    capture_output=True).returncode == 0, what="modelgated on the bus")
    # each free request: 3 prompt tokens, 5 generated, none cached: 8 of DailyTokens=20
    for _ in range(3):
        r, body = chat_tokens(g, free, 5)
        assert r.status == 200, body
    # the third crossed the cap (24) and was served; the next is refused on its head
    r, body = chat_tokens(g, free, 5)
    assert r.status == 429 and body["error"]["code"] == "rate_limit_exceeded", body
    assert 0 < int(r.getheader("Retry-After")) <= 86400
    assert "has used 24 tokens today" in body["error"]["message"] and "DailyTokens=20" in body["error"]["message"]
    for n in (2, 7):
        r, body = chat_tokens(g, pro, n, words="one two three four")
        assert r.status == 200, body
    # a stream's usage is in its last chunk: counted as well
    c = g.conn()
    r = post(c, CHAT, {"model": "3090-laguna-xs", "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "[[tokens:4]] one two three four"}]},
             headers={"Authorization": "Bearer " + pro})
    assert r.status == 200 and b'"completion_tokens": 4' in r.read().replace(b'":4', b'": 4')
    day = time.strftime("%Y-%m-%d", time.gmtime())

    def check(table, rows):
        lines = table.splitlines()
        assert lines[0].split() == ["KEY", "TIER", "DAY", "REQUESTS", "TOKENS-IN", "CACHED", "TOKENS-OUT", "COUNTED",
                                    "CAP"]
        assert sorted(l.split() for l in lines[1:]) == sorted(rows), table

    # COUNTED: what DailyTokens= counted, the 24 of the 429 above
    free_row = [fd, "free", day, "3", "9", "0", "15", "24", "10", "req,", "20", "tok"]
    pro_row = [pd, "pro", day, "3", "15", "0", "13", "28", "-"]
    check(usage_ctl(box), [free_row, pro_row])
    check(usage_ctl(box, "free"), [free_row])
    check(usage_ctl(box, pd[:8]), [pro_row])
    rows = json.loads(usage_ctl(box, "--json", "pro"))
    assert rows == [{"Key": pd, "Tier": "pro", "Day": day, "Requests": 3, "TokensIn": 15, "CachedTokens": 0,
                     "TokensOut": 13, "DailyRequests": 2**64 - 1, "DailyTokens": 2**64 - 1, "CountedTokens": 28}], rows
    (row,) = json.loads(usage_ctl(box, "--json", fd))
    assert (row["Requests"], row["TokensIn"], row["TokensOut"], row["DailyRequests"], row["DailyTokens"]) == \
        (3, 9, 15, 10, 20), row

    # a restart keeps it all, shown before any request, and the spent tokens still refuse
    g.stop()
    g = make_gate(text, extra_args=["--user"], env=env)
    wait_for(lambda: subprocess.run([MODELGATECTL, "--user", "key", "usage"], env=box.env,
                                    capture_output=True).returncode == 0, what="modelgated on the bus again")
    check(usage_ctl(box), [free_row, pro_row])
    r, body = chat_tokens(g, free, 1)
    assert r.status == 429 and "DailyTokens=20" in body["error"]["message"], body
    usage = json.load(open(os.path.join(tmp, "state", "usage.json")))
    assert usage["counts"] == {"k:" + fd: 3, "k:" + pd: 3}, usage
    assert usage["tokens"]["k:" + fd] == [9, 0, 15], usage


def test_only_a_tier_with_control_may_unload(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    conf = ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=10\n"
            "[Tier]\nName=free\nActivity=yes\n[Tier]\nName=ops\nControl=yes\n" % keys) + host_conf("3090", d.url)
    free = make_key(tmp, conf, "free")
    ops = make_key(tmp, conf, "ops")
    g = make_gate(conf)

    def call(method, path, key=None):
        c = g.conn()
        c.request(method, path, headers={"Authorization": "Bearer " + key} if key else {})
        r = c.getresponse()
        return r.status, r.read()

    for method, path in (("GET", "/unload"), ("POST", "/api/models/unload"),
                         ("POST", "/api/models/unload/3090-laguna-xs")):
        status, body = call(method, path, free)
        err = json.loads(body)["error"]
        # watching is not controlling: Activity=yes is not enough
        assert status == 403 and err["code"] == "control_not_allowed", body
        assert "tier 'free' may not stop engines" in err["message"] and "Control=yes" in err["message"]
        status, body = call(method, path)
        assert status == 403 and "tier 'anonymous'" in json.loads(body)["error"]["message"], body
        assert call(method, path, "mg-not-a-key")[0] == 401
        status, body = call(method, path, ops)
        if path.startswith("/api/models/unload/"):
            # a host without [Engine]s: modelgate starts and stops nothing there
            assert status == 404 and "no engine of host '3090' serves 'laguna-xs'" in body.decode(), body
        else:
            assert status == 200, body
    # /running changes nothing: any admitted caller reads it, as it reads /v1/models
    assert call("GET", "/running", free) == (200, b'{"running":[]}')
    out = subprocess.run([MODELGATED, "--config=" + os.path.join(tmp, "keys-conf.conf"), "--check-config"],
                         capture_output=True, text=True, timeout=30)
    assert "Control=yes" in out.stdout, out
