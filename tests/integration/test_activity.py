"""GET /activity, the live feed (rule:activity-feed, rule:no-text-in-activity): a request's phases through an
engine switch, the ring of recent requests for a late subscriber, admission under [Access], no prompt text;
and modelgatectl top in tmux showing the switch."""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest

import conftest
from boxes import box_skip_reason, engines_conf, gate_env, local_host
from conftest import MODELGATED, chunks, free_port, host_conf, wait_for
from test_access import make_key

CHAT = "/v1/chat/completions"
FAST = "[Proxy]\nHoldDownSec=1s\n"
MODELGATECTL = os.environ.get("MODELGATECTL")


class Activity:
    """an /activity subscriber that reads in a thread and keeps every event as (type, data) and the raw bytes"""

    def __init__(self, g, key=None):
        self.s = g.sock()
        auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
        self.s.sendall(b"GET /activity HTTP/1.1\r\nHost: x\r\n%s\r\n" % auth)
        self.f = self.s.makefile("rb")
        self.status = int(self.f.readline().split()[1])
        self.headers = {}
        while True:
            line = self.f.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.raw = b""
        self.events = []
        if self.status == 200:
            self.t = threading.Thread(target=self.run, daemon=True)
            self.t.start()
        else:
            self.body = self.f.read(int(self.headers.get("content-length", "0")))

    def run(self):
        pending = b""
        for data in chunks(self.f):
            self.raw += data
            pending += data
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                typ, payload = None, None
                for line in block.decode().split("\n"):
                    if line.startswith("event: "):
                        typ = line[7:]
                    elif line.startswith("data: "):
                        payload = json.loads(line[6:])
                if typ:
                    self.events.append((typ, payload))

    def of(self, typ):
        return [d for t, d in list(self.events) if t == typ]

    def phases(self, rid):
        return [d for d in self.of("request") if d["id"] == rid]

    def close(self):
        # the reader's file holds the socket: shut it, so the daemon sees the end now
        self.s.shutdown(socket.SHUT_RDWR)
        self.s.close()


def ask(g, model, rid, content, key=None, session=None):
    a = conftest.ask(g, model, content, key=key, rid=rid, session=session)
    return a.status, a.body


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_a_switch_seen_live_and_by_a_late_subscriber(box, make_gate):
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), env=gate_env(box))
    g.wait_log("host 3090 up")
    marker = "PROMPT-MARKER-" + uuid.uuid4().hex
    status, _ = ask(g, "3090-laguna-xs", "warm-1", marker)
    assert status == 200
    feed = Activity(g)
    assert feed.status == 200 and feed.headers["content-type"].startswith("text/event-stream")
    wait_for(lambda: feed.of("snapshot"), what="the snapshot")
    snap = feed.of("snapshot")[0]
    assert feed.events[0][0] == "snapshot"
    h = [x for x in snap["hosts"] if x["host"] == "3090"][0]
    assert h["state"] == "serving" and h["engine"] == "mainline"
    assert [r["id"] for r in snap["recent"]] == ["warm-1"]
    assert snap["recent"][0]["phase"] == "done" and snap["recent"][0]["status"] == 200

    # the other engine: a switch, seen as the request's phases in order and the host's events
    status, _ = ask(g, "3090-flint-40b", "switch-1", marker)
    assert status == 200
    wait_for(lambda: any(d["phase"] == "done" for d in feed.phases("switch-1")), what="switch-1 done")
    seen = feed.phases("switch-1")
    names = [d["phase"] for d in seen]
    assert names == ["admitted", "queued", "switching", "first_byte", "done"], names
    queued, done = seen[1], seen[-1]
    # times are the wall clock's, in microseconds: each phase at or after the one before, and done's the
    # request's duration after its start
    ts = [d["t"] for d in seen]
    assert ts == sorted(ts) and seen[0]["started"] <= ts[0], seen
    assert abs(time.time() * 1e6 - ts[-1]) < 60e6, ts
    assert abs((ts[-1] - done["started"]) / 1000 - done["duration_ms"]) <= 2, done
    assert queued["waits_for"] in ("switch", "stream", "hold-down") and queued["position"] >= 0
    # rule:no-text-in-activity: a name the host does not list yet (fork never ran: its list is not known, and
    # Models=flint-* takes any words) is shown as unknown until it does
    assert all(d["host"] == "3090" and d["engine"] == "fork" and d["model"] in ("3090-flint-40b", None)
               for d in seen), seen
    assert done["status"] == 200 and done["tokens_out"] and done["tokens_out"] > 0
    assert done["tokens_in"] and done["duration_ms"] >= done["switch_ms"] > 0
    assert done["first_byte_ms"] is not None and done["key"] is None and done["api"] == "chat"
    hosts = [x for x in feed.of("host") if x["host"] == "3090"]
    assert any(x["state"] == "switching" and x["switching_to"] == "fork" for x in hosts), hosts
    wait_for(lambda: any(x["state"] == "serving" and x["engine"] == "fork" for x in feed.of("host")),
             what="the host up on fork")

    # a late subscriber finds both in the ring, in their done form, oldest first
    late = Activity(g)
    wait_for(lambda: late.of("snapshot"), what="the late snapshot")
    recent = late.of("snapshot")[0]["recent"]
    assert [r["id"] for r in recent] == ["warm-1", "switch-1"]
    assert recent[1] == done
    assert late.of("snapshot")[0]["inflight"] == []
    # rule:no-text-in-activity
    assert marker.encode() not in feed.raw and marker.encode() not in late.raw
    feed.close()
    late.close()

    # nobody watching: the ring still has the switch's time (the host's news is read during a switch)
    wait_for(lambda: "feed" in g.logtext() and g.logtext().count("GET /activity") >= 2, what="both feeds gone")
    status, _ = ask(g, "3090-laguna-xs", "switch-2", marker)
    assert status == 200
    again = Activity(g)
    wait_for(lambda: again.of("snapshot"), what="the third snapshot")
    last = again.of("snapshot")[0]["recent"][-1]
    assert last["id"] == "switch-2" and last["engine"] == "mainline" and last["switch_ms"] > 0, last
    # rule:queued-and-switch: the two parts of its wait are the access line's own (which of them is the
    # longer depends on how fast the engine starts: the hold-down left was under a second)
    line = [l for l in g.logtext().splitlines() if " id=switch-2" in l][-1]
    switch = re.search(r" switch=(\d+)\.(\d{3})s", line)
    assert switch and int(switch.group(1)) * 1000 + int(switch.group(2)) == last["switch_ms"], (line, last)
    queued = re.search(r" queued=(\d+)\.(\d{3})s", line)
    assert (int(queued.group(1)) * 1000 + int(queued.group(2)) if queued else 0) == last["queued_ms"], (line, last)
    again.close()


def test_only_a_tier_with_activity_may_subscribe(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    conf = ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=10\n"
            "[Tier]\nName=free\n[Tier]\nName=ops\nActivity=yes\n" % keys) + host_conf("3090", d.url)
    free = make_key(tmp, conf, "free")
    ops = make_key(tmp, conf, "ops")
    g = make_gate(conf)
    denied = Activity(g, free)
    assert denied.status == 403
    err = json.loads(denied.body)["error"]
    assert "tier 'free' may not watch the activity" in err["message"] and "Activity=yes" in err["message"]
    assert Activity(g).status == 403  # anonymous
    bad = Activity(g, "mg-not-a-key")
    assert bad.status == 401
    feed = Activity(g, ops)
    assert feed.status == 200
    wait_for(lambda: feed.of("snapshot"), what="the snapshot")
    marker = "PROMPT-MARKER-" + uuid.uuid4().hex
    status, _ = ask(g, "3090-laguna-xs", "free-1", marker, key=free)
    assert status == 200
    wait_for(lambda: any(x["phase"] == "done" for x in feed.phases("free-1")), what="free-1 done")
    done = feed.phases("free-1")[-1]
    assert done["key"].startswith("free:") and free not in json.dumps(done)
    assert marker.encode() not in feed.raw and free.encode() not in feed.raw
    # the configuration shows the option
    out = subprocess.run([MODELGATED, "--config=" + os.path.join(tmp, "keys-conf.conf"), "--check-config"],
                         capture_output=True, text=True, timeout=30)
    assert "Activity=yes" in out.stdout, out
    feed.close()


def host_line(pane, host="3090"):
    return next((l.split() for l in pane.splitlines() if l.startswith(host + " ")), None)


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_in_tmux_shows_a_switch_and_quits_on_q(box, make_gate, tmp):
    port = free_port()
    g = make_gate(FAST + local_host("3090", port) + engines_conf(box, "3090", port), extra_args=["--user"],
                  env=gate_env(box))
    g.wait_log("host 3090 up")
    session = "0f3c9a52-7d1e-4b8a-9c4e-2a6b1d5e8f70"
    assert ask(g, "3090-laguna-xs", "top-1", "hi", session=session)[0] == 200
    wait_for(lambda: subprocess.run([MODELGATECTL, "--user", "hosts"], env=box.env,
                                    capture_output=True).returncode == 0, timeout=30, what="the bus name")
    # no terminal: one frame, for scripts
    once = subprocess.run([MODELGATECTL, "--user", "top"], env=box.env, capture_output=True, text=True, timeout=30)
    assert once.returncode == 0, once
    assert host_line(once.stdout)[1:3] == ["serving", "mainline"], once.stdout
    # rule:state-words: the counts as status says them, in flight apart from waiting
    assert " 0 in flight, 0 waiting " in once.stdout.splitlines()[0], once.stdout
    assert host_line(once.stdout)[-2:] == ["0", "0"] and "IN-FLIGHT WAITING" in once.stdout, once.stdout
    assert "\033[" not in once.stdout
    # rule:sessions: the agent's session, by its label, with its one turn (the id itself nowhere)
    label = hashlib.sha256(session.encode()).hexdigest()[:12]
    row = next((l.split() for l in once.stdout.splitlines() if l.startswith(label + " ")), None)
    assert row and row[1:4] == ["anonymous", "3090", "1"], once.stdout
    assert "SESSION" in once.stdout and session not in once.stdout
    # every table fits 80 columns (an 80-column terminal sees each last column)
    assert all(len(l) <= 80 for l in once.stdout.splitlines() if not l.startswith("modelgate top")), once.stdout

    sock = "mg-top-%d" % os.getpid()
    tmux = ["tmux", "-L", sock]
    cmd = "env DBUS_SESSION_BUS_ADDRESS=%s %s --user top" % (box.env["DBUS_SESSION_BUS_ADDRESS"], MODELGATECTL)
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "30", cmd], check=True,
                   timeout=30)
    try:
        def pane():
            out = subprocess.run(tmux + ["capture-pane", "-p"], capture_output=True, text=True, timeout=10)
            return out.stdout

        wait_for(lambda: (host_line(pane()) or [None] * 3)[1:3] == ["serving", "mainline"], timeout=30,
                 what="top showing mainline up")
        assert "top-1" not in pane() and "RECENT" in pane()
        done = {}
        t = threading.Thread(target=lambda: done.update(r=ask(g, "3090-flint-40b", "top-2", "hi")))
        t.start()
        # the switch as it happens: the host's line goes through switching to fork up
        wait_for(lambda: (host_line(pane()) or [None] * 3)[1:3] == ["serving", "fork"], timeout=60,
                 what="top showing fork up after the switch")
        t.join(60)
        assert done["r"][0] == 200
        wait_for(lambda: any(l.startswith("200") and "3090-flint-40b" in l and "fork" in l
                             for l in pane().splitlines()), timeout=30, what="the request in RECENT")
        print(pane())  # the frame, in the log
        # at 80 columns, each table's last column is there
        frame = pane()
        assert all(len(l) <= 80 for l in frame.splitlines())
        assert all(column in frame for column in ("WAIT", "TTFB", "IDLE", "DECODE")), frame
        subprocess.run(tmux + ["send-keys", "q"], check=True, timeout=10)
        wait_for(lambda: subprocess.run(tmux + ["has-session"], capture_output=True).returncode != 0, timeout=10,
                 what="top to quit on q")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=10)
