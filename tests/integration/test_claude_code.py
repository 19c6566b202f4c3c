"""Claude Code (npm @anthropic-ai/claude-code, pinned in tests/sdk; its native binary is the optional
dependency package @anthropic-ai/claude-code-linux-x64) through modelgate in front of the real llama-server.

Claude Code re-sends a turn after 300 s without an event the Anthropic SDK hands on (its stream idle
watchdog, CLAUDE_STREAM_IDLE_TIMEOUT_MS, never below 300 s): comments and pings do not count
(docs/clients-waiting.md). rule:keepalive-events begins the message and keeps it alive with message_delta
events, so it waits through an engine start longer than that with one POST.

The 330 s wait runs in the plain build only (MODELGATE_LONG_WAITS=1, set by tests/setup-and-test for it):
under the sanitizers it would add 6 minutes for the same bytes on the wire. Skipped with the reason when
node, Claude Code, the boxes or the server are missing; MODELGATE_REQUIRE_SDK=1 makes a missing Claude Code
fail, MODELGATE_REQUIRE_REAL_ENGINE=1 a missing server.

Two Claude Code sessions under one key on a spread alias over two hosts each stay on their own box across
turns (rule:sessions): Claude Code names its session in X-Claude-Code-Session-Id, the same on --resume.

A new session takes its system prompt from the engine's cache, as with CLAUDE_CODE_ATTRIBUTION_HEADER=0:
Claude Code's attribution block never reaches the host, and reaches the fallback (rule:attribution-line)."""

import hashlib
import http.client
import json
import os
import re
import subprocess
import time

import pytest

from boxes import gate_env, local_host
from conftest import free_port, post, wait_for
from test_access import make_key
from test_activity import Activity
from tap import Tap
from test_real import agent_skip_reason, model_files, router_unit  # noqa: F401 (model_files: a fixture)

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../sdk")
CLAUDE = os.path.join(SDK, "node_modules/@anthropic-ai/claude-code-linux-x64/claude")
MODEL = "3090-laguna-xs"
POST = 'POST /v1/messages model="%s"' % MODEL


def claude_missing():
    if not os.access(CLAUDE, os.X_OK):
        return "Claude Code is not installed in tests/sdk (tests/setup-and-test runs npm ci there)"
    return None



def skip_reason():
    return agent_skip_reason(claude_missing)


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


@pytest.fixture
def claude_gate(box, tmp, model_files, make_gate):  # noqa: F811
    """make(start=...): the engine 'mainline' (the real router, laguna-xs, greedy, 16 tokens at most) behind
    modelgate with the default keepalive timing; start: the unit's ExecStartPre= (a slow start). Returns the
    gate, with .run(prompt) for one Claude Code turn and .posts() for the POSTs logged"""
    tiny, _ = model_files

    def make(start="", proxy=""):
        port = free_port()
        d = os.path.join(tmp, "models")
        os.makedirs(d)
        os.link(tiny, os.path.join(d, "laguna-xs.gguf"))
        box.add_unit("llama-mainline.service", router_unit("mainline", port, d, "-c 32768 -np 1 --temp 0 -n 16 --logit-bias 2+100",
                                                           "llama-fork.service", extra_service=start))
        box.reload()
        conf = ("[Proxy]\n" + proxy + local_host("3090", port) +
                "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\n"
                "StartTimeoutSec=600s\n")
        g = make_gate(conf, env=gate_env(box))
        g.wait_log("host 3090 up")
        home = os.path.join(tmp, "claude-home")
        os.makedirs(home)
        marks = [0]

        def run(prompt, timeout=600):
            assert claude_missing() is None, claude_missing()
            env = dict(os.environ, HOME=home, ANTHROPIC_BASE_URL="http://127.0.0.1:%d" % g.port,
                       ANTHROPIC_API_KEY="unused", ANTHROPIC_MODEL=MODEL, ANTHROPIC_SMALL_FAST_MODEL=MODEL,
                       DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                       DISABLE_TELEMETRY="1")
            t0 = time.monotonic()
            # without its tools: their definitions are tens of thousands of tokens, which the suite's CPU
            # engine would take minutes to read (and this tests the wait, not the tools)
            out = subprocess.run([CLAUDE, "-p", prompt, "--output-format", "json", "--model", MODEL,
                                  "--tools", ""], cwd=tmp,
                                 env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=timeout)
            print("claude turn: exit %d in %.1f s" % (out.returncode, time.monotonic() - t0))
            for line in g.logtext().splitlines():
                if "POST /v1/messages" in line:
                    print(line)
            return out.returncode, out.stdout, out.stderr

        def posts():
            marks[0] += 1
            g.log_mark("claude-mark-%d" % marks[0])
            return [l for l in g.logtext().splitlines() if POST in l]

        g.run, g.posts = run, posts
        return g
    return make


def test_claude_code_answers_through_modelgate(claude_gate):
    g = claude_gate()
    rc, out, err = g.run("say hi")
    assert rc == 0, out + err
    result = json.loads(out)
    assert result["is_error"] is False, result
    posts = g.posts()
    # its turn's requests (-p sends the turn and a side request of its own), each answered once
    assert posts and all(" status=200" in l for l in posts), posts


@pytest.mark.skipif(not os.environ.get("MODELGATE_LONG_WAITS"),
                    reason="the 330 s wait runs once, in the plain build (MODELGATE_LONG_WAITS=1)")
def test_claude_code_waits_through_a_start_longer_than_its_idle_watchdog(claude_gate):
    """Claude Code's watchdog is 300 s at least; the engine takes 330 s to start. Its turn sends no request
    twice: as many POSTs as the same turn with the engine up, the first through modelgate's early 200."""
    # systemd's own start timeout (90 s by default) must not end the start first
    g = claude_gate(start="ExecStartPre=/bin/sleep 330\nTimeoutStartSec=600\n")
    rc, out, err = g.run("say hi", timeout=900)
    assert rc == 0, out + err
    assert json.loads(out)["is_error"] is False, out
    waited = g.posts()
    # the streamed turn through modelgate's early 200; every request answered, none with an error
    assert any(" early=200" in l for l in waited), waited
    assert all(" status=200" in l and " error=" not in l for l in waited), waited
    rc, out, err = g.run("say hi")
    assert rc == 0, out + err
    again = g.posts()[len(waited):]
    assert len(waited) == len(again), (waited, again)
    print("Claude Code waited through a 330 s start:\n" + "\n".join(waited))


def test_two_sessions_of_one_key_stay_each_on_its_own_box(box, tmp, model_files, make_gate):  # noqa: F811
    """rule:sessions with the real Claude Code: hosts 3090 and a9 (each the real router with laguna-xs, in one
    boxed manager), [Alias] laguna over both with Policy=spread, one key. Session A's first turn finds only
    3090's engine up, session B's only a9's; then, both engines up and idle, each session's later turns
    (claude --resume) go back to its own box, where its prompt is cached, though the key's last request went
    to the other one (main's build follows the key there). /activity shows the two sessions."""
    tiny, _ = model_files
    conf = ""
    for host in ("3090", "a9"):
        port = free_port()
        d = os.path.join(tmp, "models-" + host)
        os.makedirs(d)
        os.link(tiny, os.path.join(d, "laguna-xs.gguf"))
        # every answer ends at once (the end-of-text token, id 2, made certain): -n is no cap on a request's
        # max_tokens, and a turn of random weights' tokens would run to Claude Code's thousands
        box.add_unit("llama-%s.service" % host, router_unit(host, port, d, "-c 32768 --temp 0 --logit-bias 2+100",
                                                            "llama-none.service"))
        conf += local_host(host, port) + ("[Engine]\nHost=%s\nName=mainline\nUnit=llama-%s.service\n"
                                          "Models=laguna-*\nStartTimeoutSec=120s\n" % (host, host))
    box.reload()
    access = "[Access]\nKeysFile=%s\n[Tier]\nName=team\nActivity=yes\nControl=yes\n" % os.path.join(tmp, "keys")
    key = make_key(tmp, access, "team")
    g = make_gate(access + conf + "[Alias]\nName=laguna\nTargets=3090-laguna-xs a9-laguna-xs\nPolicy=spread\n",
                  env=gate_env(box))
    g.wait_log("host 3090 up")
    g.wait_log("host a9 up")
    home = os.path.join(tmp, "claude-home")
    os.makedirs(home)
    auth = {"Authorization": "Bearer " + key}

    def call(path, body):
        c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=120)
        r = post(c, path, body, headers=auth)
        data = r.read()
        assert r.status == 200, data
        return data

    def warm(host):
        call("/v1/messages", {"model": host + "-laguna-xs", "max_tokens": 4,
                                      "messages": [{"role": "user", "content": "hi"}]})

    def claude(session, prompt, first):
        env = dict(os.environ, HOME=home, ANTHROPIC_BASE_URL="http://127.0.0.1:%d" % g.port, ANTHROPIC_API_KEY=key,
                   ANTHROPIC_MODEL="laguna", ANTHROPIC_SMALL_FAST_MODEL="laguna", DISABLE_AUTOUPDATER="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1")
        argv = [CLAUDE, "-p", prompt, "--output-format", "json", "--model", "laguna",
                "--session-id" if first else "--resume", session]
        try:
            out = subprocess.run(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=600)
        except subprocess.TimeoutExpired:
            print("modelgated's log so far:\n" + g.logtext()[-6000:])
            raise
        assert out.returncode == 0 and json.loads(out.stdout)["is_error"] is False, out.stdout + out.stderr
        # the turn's requests: the access lines since the last turn's, all through the alias on one box
        g.log_mark("claude-turn-%d" % len(turns))
        log = g.logtext()
        lines = [l for l in log[len(turns[-1][2]) if turns else 0:].splitlines()
                 if 'POST /v1/messages model="laguna"' in l]
        hosts = {re.search(r" host=(\S+)", l).group(1) for l in lines}
        assert len(hosts) == 1, lines
        turns.append((session, lines, log))
        return hosts.pop()

    turns = []  # (session, its access lines, the log after it)
    a, b = "0f3c9a52-7d1e-4b8a-9c4e-2a6b1d5e8f70", "5b0e8d41-93a2-4c67-8f1d-7e2c9a4b6d03"
    # A: only 3090's engine is up
    warm("3090")
    assert claude(a, "say hi", first=True) == "3090"
    # B: only a9's
    warm("a9")
    call("/api/models/unload/3090-laguna-xs", b"")
    g.wait_log("host 3090: engine mainline stopped on request")
    assert claude(b, "say hi", first=True) == "a9"
    # both up and idle: each session back on its own box, turn after turn
    warm("3090")
    for i in range(2):
        assert claude(a, "say hi again", first=False) == "3090"
        assert claude(b, "say hi again", first=False) == "a9"
    # rule:sessions: each line names its session by label, never by the id
    for session, lines, _ in turns:
        label = hashlib.sha256(session.encode()).hexdigest()[:12]
        assert all(" session=%s " % label in l for l in lines), lines
    assert a not in turns[-1][2] and b not in turns[-1][2]
    feed = Activity(g, key)
    try:
        wait_for(lambda: feed.of("snapshot"), what="the snapshot")
        rows = {s["session"]: s for s in feed.of("snapshot")[0]["sessions"]}
        for session, host in ((a, "3090"), (b, "a9")):
            row = rows[hashlib.sha256(session.encode()).hexdigest()[:12]]
            assert row["key"].startswith("team:") and row["host"] == host and row["turns"] >= 3, row
        assert len(rows) == 2, rows
        assert a.encode() not in feed.raw and b.encode() not in feed.raw
    finally:
        feed.close()



ATTRIBUTION = re.compile(r'\{"type":"text","text":"x-anthropic-billing-header: cc_version=[0-9a-f.]+; '
                         r'cc_entrypoint=[a-z-]+;"\},')


@pytest.fixture
def tap():
    """tap(port): a relay in front of port that keeps the requests (tests/integration/tap.py), stopped after"""
    made = []

    def make(port):
        made.append(Tap(port).start())
        return made[-1]
    yield make
    for t in made:
        t.stop()


def test_a_new_sessions_system_prompt_comes_from_the_engines_cache(box, tmp, model_files, make_gate, tap):  # noqa: F811
    """rule:attribution-line with the real Claude Code: two sessions with different first messages, one after
    the other, through modelgate to the real llama-server with one slot (-np 1). The second session's first
    request reuses what the first session's left in the cache: its system prompt at least (a third of the
    prompt and more), about as much as the same two sessions with CLAUDE_CODE_ATTRIBUTION_HEADER=0 (the best
    case; main's build before the rule reused 33 of 1,625 tokens). What reaches the host is what Claude Code
    sent less its attribution block (a relay in front of each side keeps the bytes); what reaches the
    fallback (host a9, whose engine cannot start: the same server, through a relay of its own) has it."""
    tiny, _ = model_files
    port = free_port()
    d = os.path.join(tmp, "models")
    os.makedirs(d)
    os.link(tiny, os.path.join(d, "laguna-xs.gguf"))
    # greedy, every answer ended at once (EOS certain): the turn is the prompt's prefill and little else
    box.add_unit("llama-mainline.service", router_unit("mainline", port, d, "-c 8192 -np 1 --temp 0 --logit-bias 2+100",
                                                       "llama-none.service"))
    box.add_unit("llama-a9.service", router_unit("a9", free_port(), d, "", "llama-none.service",
                                                 extra_service="ExecStartPre=/bin/false\n"))
    box.reload()
    host, cloud = tap(port), tap(port)
    conf = (local_host("3090", host.port) +
            "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\nStartTimeoutSec=120s\n" +
            local_host("a9", free_port()) +
            "[Engine]\nHost=a9\nName=broken\nUnit=llama-a9.service\nModels=laguna-*\nStartTimeoutSec=20s\n"
            "Fallback=cloud\n[Fallback]\nName=cloud\nURL=http://127.0.0.1:%d\nModel=laguna-xs\n" % cloud.port)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    client = tap(g.port)  # what Claude Code sent
    home = os.path.join(tmp, "claude-home")
    os.makedirs(home)

    def session(prompt, model=MODEL, **extra):
        """one claude -p; its first request's (prompt tokens, reused, prefilled) from its access line"""
        env = dict(os.environ, HOME=home, ANTHROPIC_BASE_URL="http://127.0.0.1:%d" % client.port,
                   ANTHROPIC_API_KEY="unused", ANTHROPIC_MODEL=model, ANTHROPIC_SMALL_FAST_MODEL=model,
                   DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                   **extra)
        before = len(g.logtext())
        t0 = time.monotonic()
        out = subprocess.run([CLAUDE, "-p", prompt, "--output-format", "json", "--model", model, "--tools", ""],
                             cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        print("claude -p %r: exit %d in %.1f s" % (prompt, out.returncode, time.monotonic() - t0))
        assert out.returncode == 0 and json.loads(out.stdout)["is_error"] is False, out.stdout + out.stderr
        g.log_mark("claude-%d" % len(client.requests()))
        lines = [l for l in g.logtext()[before:].splitlines() if 'POST /v1/messages model="%s"' % model in l]
        assert lines and all(" status=200" in l for l in lines), lines
        m = re.search(r" tokens=in:(\d+),cached:(\d+),", lines[0])
        assert m, lines[0]
        return int(m.group(1)), int(m.group(2)), int(m.group(1)) - int(m.group(2))

    def sent(model):
        return [r["body"] for r in client.requests("POST", "/v1/messages") if '"model":"%s"' % model in r["body"]]

    def as_host_gets(body, model):
        return ATTRIBUTION.sub("", body, count=1).replace('"model":"%s"' % model, '"model":"laguna-xs"', 1)

    runs = {}
    for name, extra in (("Claude Code as it is", {}),
                        ("CLAUDE_CODE_ATTRIBUTION_HEADER=0", {"CLAUDE_CODE_ATTRIBUTION_HEADER": "0"})):
        had = len(host.requests("POST", "/v1/messages"))
        session("say hi", **extra)
        runs[name] = session("name a colour", **extra)
        print("the second session's first request, %s: %d prompt tokens, %d reused, %d prefilled" %
              ((name,) + runs[name]))
        n, reused, prefilled = runs[name]
        assert reused >= n / 3, (name, n, reused, prefilled)  # the system prompt at least, from the cache
        got = [r["body"] for r in host.requests("POST", "/v1/messages")][had:]
        assert got, host.requests()
        ours = sent(MODEL)[-len(got):]
        # Claude Code sent its line (unless told not to); the host got every other byte of each request
        assert all(bool(ATTRIBUTION.search(b)) != bool(extra) for b in ours), [b[:300] for b in ours]
        assert got == [as_host_gets(b, MODEL) for b in ours]
        assert not [b for b in got if "x-anthropic-billing-header" in b]
        if not extra:
            # the fallback gets the request as Claude Code sent it, the line and all (the model its own)
            session("say hi", model="a9-laguna-xs")
            to_cloud = [r["body"] for r in cloud.requests("POST", "/v1/messages")]
            assert to_cloud and ATTRIBUTION.search(to_cloud[0]), to_cloud[:1]
            assert to_cloud == [b.replace('"model":"a9-laguna-xs"', '"model":"laguna-xs"', 1)
                                for b in sent("a9-laguna-xs")]
        # the next sessions begin with an empty cache: the engine stopped, a new one started by the first
        call = http.client.HTTPConnection("127.0.0.1", g.port, timeout=60)
        assert post(call, "/api/models/unload/" + MODEL, b"").status == 200
        g.wait_log("host 3090: engine mainline stopped on request", count=len(runs))
    prefilled, best = runs["Claude Code as it is"][2], runs["CLAUDE_CODE_ATTRIBUTION_HEADER=0"][2]
    # as good as Claude Code without the line, within a few tokens (its prompts differ by a few)
    assert prefilled <= best + 16, runs
