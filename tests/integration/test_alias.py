"""Aliases across hosts (modelgate.conf(5) [Alias]): two GPU hosts, each a boxed user manager with its engines
as units (the second reached through ssh), one alias over a model of each. A request goes to the target that
costs no switch, moves on when a target refuses, and reaches the fallback only after every target refused."""

import hashlib
import http.client
import json
import os
import signal
import subprocess
import threading
import time

import pytest

import conftest
from boxes import box_skip_reason, chat, children, gate_env, local_host, two_engines
from conftest import free_port, host_conf, metric_samples, post, read_sse, wait_for
from test_access import make_key
from test_activity import Activity

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

CHAT = "/v1/chat/completions"
CTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(os.environ.get("MODELGATED", "")), "modelgatectl"))
# a stream of 80 tokens 50 ms apart (4 s): long enough to be in flight while the test looks
SLOW = "--token-delay 0.05"
LONG = "[[tokens:80]]"


def remote_host(box, sshd, port, extra=""):
    return ("[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
            "BusPath=unix:path=%s\n%s" % (port, sshd.port, sshd.ssh_command, box.bus, extra))


def two_hosts(make_box, sshd, make_gate, policy="warm", targets="3090-laguna-xs a9-laguna-xs", local_extra="",
              proxy="", extra="", setup=None, engine_extra=""):
    """hosts 3090 (local box) and a9 (a box through ssh), engines mainline (laguna-*) and fork (flint-*) on each,
    and [Alias] laguna over both; setup(local_box) runs before the gate starts; engine_extra goes in each
    [Engine]"""
    local, remote = make_box(), make_box()
    lport, rport = free_port(), free_port()
    conf = "[Proxy]\nHoldDownSec=1s\n" + proxy
    conf += local_host("3090", lport, local_extra) + two_engines(local, lport, double_args=SLOW) % {
        "host": "3090", "extra": engine_extra}
    conf += remote_host(remote, sshd, rport) + two_engines(remote, rport, double_args=SLOW) % {
        "host": "a9", "extra": engine_extra}
    conf += "[Alias]\nName=laguna\nTargets=%s\nPolicy=%s\n%s" % (targets, policy, extra)
    if setup:
        setup(local)
    g = make_gate(conf, extra_args=["--user"], env=gate_env(local))
    g.wait_log("host 3090 up")
    g.wait_log("host a9 up")
    g.boxes = (local, remote)
    return g


def ask(g, model="laguna", content="hi", stream=False, source=None, conn=None):
    """(status, served by, body); body is the joined stream when streaming"""
    a = conftest.ask(g, model, content, stream, source=source, conn=conn)
    return a.status, a.getheader("X-Modelgate-Served-By"), a.text()


def warm(g, *models):
    for m in models:
        status, _, body = ask(g, m)
        assert status == 200, body


def switches(g):
    return g.logtext().count("switching to engine")


def test_warm_targets_serve_without_a_switch_and_a_pending_switch_sends_requests_elsewhere(
        make_box, sshd, make_gate):
    g = two_hosts(make_box, sshd, make_gate)
    warm(g, "3090-laguna-xs", "a9-laguna-xs")
    # the last warm-up's access line: the switch lines logged before it are in the log file too
    g.wait_log('model="a9-laguna-xs" host=a9 status=200')
    assert switches(g) == 2
    # two agents alternating on the alias: the first warm target, no switch
    agents = [g.conn(), g.conn()]
    for i in range(6):
        status, served, body = ask(g, conn=agents[i % 2])
        assert (status, served) == (200, "3090/mainline"), body
        assert json.loads(body)["model"] == "laguna-xs"  # the host saw its own key
    # the sixth one's access line, written after any switch they could have caused
    g.wait_log('model="laguna" host=3090 target=3090-laguna-xs status=200', count=6)
    assert switches(g) == 2

    # a stream in flight on 3090, and a request there for another engine: 3090 is about to switch away, so
    # the alias sends new requests to a9, where mainline is up, instead of queueing them behind the switch
    results = {}
    stream = threading.Thread(target=lambda: results.update(stream=ask(g, content=LONG, stream=True)))
    stream.start()
    wait_for(lambda: in_flight(g) == 1, what="the stream in flight on 3090")
    other = threading.Thread(target=lambda: results.update(other=ask(g, "3090-flint-40b")))
    other.start()
    wait_for(lambda: alias_pick(g)[0] == "a9-laguna-xs", what="3090's pending switch to be seen")
    status, served, body = ask(g)
    assert (status, served) == (200, "a9/mainline"), body
    # ... while the stream still runs, i.e. before 3090's switch even began (a switch begun before that answer
    # would be logged before its access line, so this is in the log file once that line is)
    g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200')
    assert stream.is_alive() and "host 3090: switching to engine fork" not in g.logtext()
    stream.join(60)
    other.join(60)
    assert results["stream"][:2] == (200, "3090/mainline") and "data: [DONE]" in results["stream"][2]
    assert results["other"][:2] == (200, "3090/fork")
    g.wait_log('model="3090-flint-40b" host=3090 status=200')  # the last answer's line: the switches before it
    g.wait_log('model="laguna" host=3090 target=3090-laguna-xs status=200', count=7)  # and the stream's
    assert switches(g) == 3  # the direct request's switch only

    # what modelgatectl and /v1/models say of it now: 3090 runs fork, a9 mainline
    out = subprocess.run([CTL, "--user", "aliases"], env=g.boxes[0].env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "laguna" in out.stdout and "a9-laguna-xs" in out.stdout and "engine up" in out.stdout, out.stdout
    assert "3090-laguna-xs: needs-switch, a9-laguna-xs: warm" in out.stdout, out.stdout
    samples = metric_samples(g)
    assert samples[("modelgate_alias_requests_total",
                    (("alias", "laguna"), ("status", "200"), ("target", "3090-laguna-xs")))] == 7
    assert samples[("modelgate_alias_requests_total",
                    (("alias", "laguna"), ("status", "200"), ("target", "a9-laguna-xs")))] == 1


def alias_pick(g):
    """(the target laguna would pick now, the state /v1/models gives its first target)"""
    c = g.conn()
    c.request("GET", "/v1/models")
    data = json.loads(c.getresponse().read())["data"]
    (entry,) = [m for m in data if m["id"] == "laguna"]
    alias = entry["proxy"]["alias"]
    return alias["pick"], alias["targets"][0]["state"]


def test_a_busy_gpu_sends_every_request_to_the_other_target_and_none_gets_423(make_box, sshd, make_gate):
    def busy(local):
        local.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
        local.reload()
        local.systemctl("start", "gpu-bench.service")
    g = two_hosts(make_box, sshd, make_gate, local_extra="BusyUnits=gpu-bench.service\n", setup=busy)
    # nothing runs anywhere: 3090 is first and could start its engine, but its GPU is someone else's, as the
    # followed BusyUnits= say before any request (rule:busy-followed): 3090 is busy, and never tried
    for _ in range(4):
        status, served, body = ask(g)
        assert (status, served) == (200, "a9/mainline"), body
    # the fourth one's access line: each line logged before it is in the log file with it
    g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200', count=4)
    log = g.logtext()
    assert "alias laguna: target 3090-laguna-xs refused" not in log, log
    assert "status=423" not in log
    assert g.boxes[0].active_state("llama-mainline.service") == "inactive"


def probe(g, model="laguna", path="/v1/messages/count_tokens"):
    """a token-count probe (rule:probe): (status, served by, x-should-retry, body, seconds)"""
    t0 = time.monotonic()
    r = post(g.conn(), path, {"model": model, "messages": [{"role": "user", "content": "a b c"}]})
    body = json.loads(r.read())
    return r.status, r.getheader("X-Modelgate-Served-By"), r.getheader("x-should-retry"), body, \
        time.monotonic() - t0


def test_a_probe_for_an_alias_goes_to_the_target_whose_engine_is_up_and_never_to_the_fallback(
        make_box, sshd, make_gate, make_double):
    """rule:probe: 3090 runs mainline, a9 fork; a probe for an alias over both hosts' fork is refused on 3090
    (Policy=ordered picks it first), served by a9 at once, and 3090 switches nothing; with fork up nowhere,
    the probe gets 423 at once and the engines' [Fallback] is not asked"""
    cloud = make_double("--models", "cloud-model", "--loaded", "cloud-model", "--name", "cloud", "--no-knobs")
    g = two_hosts(make_box, sshd, make_gate, policy="ordered", targets="3090-flint-40b a9-flint-40b",
                  engine_extra="Fallback=cloud\n",
                  extra="[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\n" % cloud.url)
    local, remote = g.boxes
    warm(g, "3090-laguna-xs", "a9-flint-40b")
    g.wait_log('model="a9-flint-40b" host=a9 status=200')
    assert switches(g) == 2

    status, served, _, body, took = probe(g)
    assert (status, served) == (200, "a9/fork") and body == {"input_tokens": 3}, body
    assert took < 0.5, took
    g.wait_log('model="laguna" host=a9 target=a9-flint-40b status=200')
    log = g.logtext()
    assert "alias laguna: target 3090-flint-40b refused (engine 'fork' of host '3090' is not running" in log, log
    assert switches(g) == 2 and "host 3090: switching to engine fork" not in log
    assert local.active_state("llama-fork.service") == "inactive"
    assert local.active_state("llama-mainline.service") == "active"

    # a9 runs mainline now: no target has fork up, and a probe moves no GPU, nor goes to the cloud
    warm(g, "a9-laguna-xs")
    g.wait_log('model="a9-laguna-xs" host=a9 status=200')
    assert switches(g) == 3
    status, _, retry, body, took = probe(g)
    assert (status, retry) == (423, "false"), body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body  # Anthropic's shape
    assert "engine 'fork' of host 'a9' is not running" in body["error"]["message"], body
    assert "engine 'mainline' runs there" in body["error"]["message"], body
    assert took < 0.25, took
    # the OpenAI shape carries the code
    status, _, retry, body, took = probe(g, path="/v1/responses/input_tokens")
    assert (status, retry, body["error"]["code"]) == (423, "false", "engine_not_running"), body
    assert took < 0.25, took
    g.wait_log('model="laguna" host=a9 target=a9-flint-40b status=423', count=2)
    log = g.logtext()
    assert switches(g) == 3 and "goes to fallback" not in log, log
    assert not any("count_tokens" in r["path"] for r in cloud.requests()), cloud.requests()
    for box in (local, remote):
        assert box.active_state("llama-fork.service") == "inactive"
        assert box.active_state("llama-mainline.service") == "active"


def test_an_alias_target_whose_engine_is_held_passes_the_request_on_at_once(make_box, sshd, make_gate, tmp):
    """rule:failed-start-hold: 3090's first target fails to start and is held; the alias's next requests go
    to a9 at once and do not start the broken unit again, until reset-failed ends the hold"""
    starts = os.path.join(tmp, "starts")

    def broken(local):
        local.add_unit("llama-broken.service",
                       "[Service]\nType=exec\nExecStart=/bin/sh -c 'echo start >> %s; exit 3'\n" % starts)
        local.reload()
    g = two_hosts(make_box, sshd, make_gate, policy="ordered", targets="3090-broken-1 a9-laguna-xs", setup=broken,
                  local_extra="FailedStartHoldSec=1h\n[Engine]\nHost=3090\nName=broken\n"
                              "Unit=llama-broken.service\nModels=broken-*\nStartTimeoutSec=10s\n")
    n_starts = lambda: len(open(starts).read().splitlines()) if os.path.exists(starts) else 0
    warm(g, "a9-laguna-xs")
    # the first one starts the broken unit, which fails: a9 takes the request, as after any engine's 502
    status, served, body = ask(g)
    assert (status, served) == (200, "a9/mainline"), body
    g.wait_log("host 3090: engine broken held after its failed start")
    assert n_starts() == 1
    for _ in range(3):
        t0 = time.monotonic()
        status, served, body = ask(g)
        assert (status, served) == (200, "a9/mainline"), body
        assert time.monotonic() - t0 < 0.5
    g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200', count=4)
    assert n_starts() == 1
    assert g.logtext().count("host 3090: switching to engine broken") == 1

    # the hold is what kept it: once it ends, the alias's first target is started again
    out = subprocess.run([CTL, "--user", "reset-failed", "3090"], env=g.boxes[0].env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    g.wait_log("host 3090: engine broken no longer held: reset-failed")
    status, served, body = ask(g)
    assert (status, served) == (200, "a9/mainline"), body
    assert n_starts() == 2


def test_a_host_whose_bus_goes_serves_on_and_cuts_no_running_stream(make_box, sshd, make_gate):
    # a9 first: it is the one whose ssh goes away
    g = two_hosts(make_box, sshd, make_gate, targets="a9-laguna-xs 3090-laguna-xs")
    warm(g, "a9-laguna-xs", "3090-laguna-xs")
    results = {}
    stream = threading.Thread(target=lambda: results.update(stream=ask(g, content=LONG, stream=True)))
    stream.start()
    wait_for(lambda: in_flight(g) == 1, what="the stream in flight on a9")
    # a9's bus goes away (no new ssh session either), its engine's HTTP does not: rule:bus-gone, the engine
    # serves on, and the alias still finds it warm there
    sshd.stop()
    (ssh,) = [p for p in children(g.proc.pid) if open("/proc/%d/comm" % p).read().strip() == "ssh"]
    os.kill(ssh, signal.SIGKILL)
    g.wait_log("host a9: bus gone (ssh:")
    for _ in range(3):
        status, served, body = ask(g)
        assert (status, served) == (200, "a9/mainline"), body
    stream.join(60)
    status, served, body = results["stream"]
    assert (status, served) == (200, "a9/mainline")
    assert "data: [DONE]" in body and body.count("data: {") >= 80, body
    # its access line (written when the loop is idle) says it ended whole
    line = g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200')
    assert "cut=" not in line, line


def test_spread_puts_two_streams_on_two_hosts_and_keeps_each_client_there(make_box, sshd, make_gate):
    g = two_hosts(make_box, sshd, make_gate, policy="spread")
    warm(g, "3090-laguna-xs", "a9-laguna-xs")
    results = {}
    a = threading.Thread(target=lambda: results.update(a=ask(g, content=LONG, stream=True, source="127.0.0.2")))
    a.start()
    wait_for(lambda: in_flight(g) == 1, what="the first stream in flight")
    b = threading.Thread(target=lambda: results.update(b=ask(g, content=LONG, stream=True, source="127.0.0.3")))
    b.start()
    a.join(60)
    b.join(60)
    first, second = results["a"][1], results["b"][1]
    assert {first, second} == {"3090/mainline", "a9/mainline"}, results
    # afterwards each client stays on the box that holds its prompt cache
    for _ in range(2):
        assert ask(g, source="127.0.0.2")[:2] == (200, first)
        assert ask(g, source="127.0.0.3")[:2] == (200, second)
    assert switches(g) == 2


def test_spread_keeps_each_session_of_one_key_on_its_own_box(make_box, sshd, make_gate, tmp):
    """rule:sessions: two agents' sessions under one key on a spread alias over two hosts: the second session's
    first turn, while the first's is in flight, goes to the other box; from then on each session's turns go
    back to its own box, though both boxes are idle and the key's last request went elsewhere. /activity shows
    two sessions, the access lines name them, and neither shows a session id itself."""
    keys = os.path.join(tmp, "keys")
    access = "[Access]\nKeysFile=%s\n[Tier]\nName=team\nActivity=yes\n" % keys
    key = make_key(tmp, access, "team")
    g = two_hosts(make_box, sshd, make_gate, policy="spread", extra=access)
    for m in ("3090-laguna-xs", "a9-laguna-xs"):
        r = post(g.conn(), CHAT, chat(m, "hi"), headers={"Authorization": "Bearer " + key})
        assert r.status == 200, r.read()
        r.read()
    # Claude Code's header for one session, Codex's for the other
    a = {"X-Claude-Code-Session-Id": "0f3c9a52-7d1e-4b8a-9c4e-2a6b1d5e8f70"}
    b = {"session-id": "01a244fb-bf8a-7e90-9278-691dabfb0b29"}

    def turn(session, content="hi", stream=False):
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=60)
        r = post(c, CHAT, chat("laguna", content, stream=stream), headers=dict(session, Authorization="Bearer " + key))
        body = "".join(l for _, l in read_sse(r)) if stream else r.read().decode()
        assert r.status == 200, body
        return r.getheader("X-Modelgate-Served-By")

    results = {}
    first = threading.Thread(target=lambda: results.update(a=turn(a, LONG, stream=True)))
    first.start()
    wait_for(lambda: in_flight(g) == 1, what="the first session's turn in flight")
    results["b"] = turn(b, LONG, stream=True)
    first.join(60)
    assert {results["a"], results["b"]} == {"3090/mainline", "a9/mainline"}, results
    # turn after turn, one at a time: each session back on its own box (the key alone would follow its
    # last request to the other)
    for _ in range(2):
        assert turn(a) == results["a"]
        assert turn(b) == results["b"]

    label = {name: hashlib.sha256(list(h.values())[0].encode()).hexdigest()[:12] for name, h in (("a", a), ("b", b))}
    feed = Activity(g, key)
    assert feed.status == 200
    wait_for(lambda: feed.of("snapshot"), what="the snapshot")
    sessions = {s["session"]: s for s in feed.of("snapshot")[0]["sessions"]}
    assert set(sessions) == set(label.values()), sessions
    for name in ("a", "b"):
        s = sessions[label[name]]
        assert s["key"].startswith("team:") and "%s/%s" % (s["host"], s["engine"]) == results[name], s
        assert (s["turns"], s["in_flight"], s["switches"]) == (3, 0, 0), s
        assert s["tokens_out"] > 0, s
    # the next turn of a session, live: its row's event
    assert turn(b) == results["b"]
    wait_for(lambda: any(s["session"] == label["b"] and s["turns"] == 4 for s in feed.of("session")),
             what="the session's row after its fourth turn")
    assert all(r["session"] in label.values() for r in feed.of("request")), feed.of("request")
    feed.close()
    g.log_mark("sessions-done")
    log = g.logtext()
    for name in ("a", "b"):
        assert log.count("session=%s" % label[name]) == 3 + (name == "b"), log
    for h in (a, b):
        raw = list(h.values())[0]
        assert raw not in log and raw.encode() not in feed.raw


def in_flight(g):
    """requests in flight on all hosts (the modelgate_in_flight gauges)"""
    c = g.conn()
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    return sum(int(float(l.split()[-1])) for l in text.splitlines() if l.startswith("modelgate_in_flight{"))


def test_the_fallback_answers_only_after_every_target_refused(make_gate, make_double, tmp):
    cloud = make_double("--models", "cloud-model", "--loaded", "cloud-model", "--name", "cloud", "--no-knobs")
    conf = ""
    for h in ("gone1", "gone2"):
        # a host whose bus cannot be reached: down at once
        conf += "[Host]\nName=%s\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=ssh -F /dev/null\n" \
            "[Engine]\nHost=%s\nName=main\nUnit=llama-main.service\nModels=*\nFallback=cloud\n" % (
                h, free_port(), free_port(), h)
    conf += "[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\n" % cloud.url
    conf += "[Alias]\nName=laguna\nTargets=gone1-laguna-xs gone2-laguna-xs\n"
    g = make_gate(conf)
    g.wait_log("host gone1 down")
    g.wait_log("host gone2 down")
    status, served, body = ask(g)
    assert (status, served) == (200, "fallback/cloud"), body
    g.wait_log('model="laguna" host=gone2 target=gone2-laguna-xs status=200')
    log = g.logtext()
    refused = log.index("alias laguna: target gone1-laguna-xs refused (host 'gone1' is down")
    assert log.index("host gone2: laguna goes to fallback cloud: host 'gone2' is down") > refused, log
    assert [r["path"] for r in cloud.requests()].count(CHAT) == 1
    assert metric_samples(g)[("modelgate_alias_moves_total", (("alias", "laguna"),))] == 1


def test_reload_adds_changes_and_removes_aliases_without_dropping_a_request(make_double, make_gate):
    one = make_double("--models", "laguna-xs", "--loaded", "laguna-xs", "--name", "one", "--token-delay", "0.05")
    two = make_double("--models", "laguna-xs", "--loaded", "laguna-xs", "--name", "two")
    hosts = host_conf("h1", one.url) + host_conf("h2", two.url)
    g = make_gate(hosts + "[Alias]\nName=laguna\nTargets=h1-laguna-xs h2-laguna-xs\nPolicy=ordered\n")
    results = {}
    stream = threading.Thread(target=lambda: results.update(stream=ask(g, content=LONG, stream=True)))
    stream.start()
    wait_for(lambda: any(r["path"] == CHAT for r in one.requests()), what="the stream to reach h1")
    # laguna now names h2 first; fast is new
    with open(g.conf, "a") as f:
        f.write("[Alias]\nName=laguna\nTargets=\nTargets=h2-laguna-xs h1-laguna-xs\n"
                "[Alias]\nName=fast\nTargets=h2-laguna-xs\n")
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded")
    assert ask(g)[:2] == (200, "h2")
    assert ask(g, "fast")[:2] == (200, "h2")
    stream.join(60)
    status, served, body = results["stream"]
    assert (status, served) == (200, "h1") and "data: [DONE]" in body
    # and removed: the name is not a model any more
    with open(g.conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\n" % g.port + hosts)
    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded", count=2)
    status, _, body = ask(g)
    assert status == 404 and "model 'laguna' does not start with a configured host name" in body, body


def test_a_tiers_models_match_the_alias_name(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    conf = ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\n[Tier]\nName=aliases\nModels=lag*\n" % keys +
            host_conf("3090", d.url) + "[Alias]\nName=laguna\nTargets=3090-laguna-xs\n")
    path = os.path.join(tmp, "keys.conf")
    with open(path, "w") as f:
        f.write(conf)
    out = subprocess.run([CTL, "--config=" + path, "key", "add", "aliases"], capture_output=True, text=True,
                         timeout=30, env=dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=/nonexistent"))
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip()
    g = make_gate(conf)
    auth = {"Authorization": "Bearer " + key}
    for model, want in (("laguna", 200), ("3090-laguna-xs", 403)):
        r = post(g.conn(), CHAT, chat(model), headers=auth)
        assert r.status == want, r.read()
        r.read()
    c = g.conn()
    c.request("GET", "/v1/models", headers=auth)
    ids = [m["id"] for m in json.loads(c.getresponse().read())["data"]]
    assert ids == ["laguna"], ids


def test_an_alias_in_the_query_and_on_model_calls_is_its_target(make_double, make_gate):
    d = make_double("--models", "laguna-xs,qwen", "--loaded", "qwen")
    g = make_gate(host_conf("h1", d.url) + "[Alias]\nName=laguna\nTargets=h1-laguna-xs\n")
    c = g.conn()
    r = post(c, "/models/load", {"model": "laguna"})
    assert r.status == 200, r.read()
    r.read()
    c.request("GET", "/props?model=laguna")
    r = c.getresponse()
    assert r.status == 200, r.read()
    r.read()
    r = post(c, "/v1/messages", {"model": "laguna", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200 and json.loads(r.read())["type"] == "message"
    seen = [(q["path"], json.loads(q["body"])["model"] if q.get("body") else None) for q in d.requests()
            if q["path"] != "/models"]
    assert ("/props?model=laguna-xs", None) in seen, seen
    assert ("/models/load", "laguna-xs") in seen and ("/v1/messages", "laguna-xs") in seen, seen


def test_a_target_without_engines_after_one_with_names_no_engine(make_box, make_double, make_gate, tmp):
    """rule:alias-next-target: a request that moves from a target with an engine to a host without engines is
    exactly a request for that host: no engine in X-Modelgate-Served-By or its access line, and no engine's
    budget. Before, the engine of the target that refused stayed on the attempt."""
    local = make_box()
    local.add_unit("llama-broken.service", "[Service]\nType=exec\nExecStart=/bin/sh -c 'exit 3'\n")
    local.reload()
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    conf = (local_host("3090", free_port(), "[Engine]\nHost=3090\nName=broken\nUnit=llama-broken.service\n"
                                            "Models=broken-*\nStartTimeoutSec=10s\nFirstTokenBudgetSec=1s\n")
            + host_conf("plain", d.url)
            + "[Alias]\nName=laguna\nTargets=3090-broken-1 plain-laguna-xs\nPolicy=ordered\n")
    g = make_gate(conf, extra_args=["--user"], env=gate_env(local))
    g.wait_log("host 3090 up")
    status, served, body = ask(g)
    assert (status, served) == (200, "plain"), body
    g.wait_log('model="laguna" host=plain target=plain-laguna-xs status=200')
    line = next(l for l in g.logtext().splitlines() if 'model="laguna" host=plain' in l and " status=" in l)
    assert " engine=" not in line, line
