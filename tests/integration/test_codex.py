"""The Codex CLI (npm @openai/codex, pinned in tests/sdk) through modelgate in front of the real llama-server,
on the Responses API (rule:responses-api): a streamed turn, a turn that waits through modelgate's early 200, a
context overflow before and after the early 200 (one POST each, and Codex says its context window is full),
an engine that fails to start after the early 200 (Codex prints modelgate's reason), Codex's built-in openai
provider, which opens a WebSocket first (rule:websocket-426).

Codex re-sends a turn whose stream ends without response.completed (up to 5 times) and ignores a data line
without a "type": an error that is not the Responses API's own event costs a user several POSTs and shows
them "stream closed before response.completed" instead of the reason. The access log counts the POSTs.

Skipped with the reason when node, Codex, the boxes or the server are missing; MODELGATE_REQUIRE_SDK=1 makes
a missing Codex fail, MODELGATE_REQUIRE_REAL_ENGINE=1 a missing server (as test_sdk.py and test_real.py do)."""

import os
import re
import shutil
import subprocess
import time

import pytest

from boxes import gate_env, local_host
from conftest import free_port
from test_real import agent_skip_reason, model_files, router_unit  # noqa: F401 (model_files: a fixture)

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../sdk")
CODEX = os.path.join(SDK, "node_modules/.bin/codex")
MODEL = "3090-laguna-xs"
POST = 'POST /v1/responses model="%s"' % MODEL
# Codex's prompt (instructions and tools) is ~5000 tokens; 9000 words more are over any slot of -c 8192
OVERFLOW = "overflow " * 9000
ROOM = "ran out of room"  # Codex's words for a full context window (clients.md)
TURN_TIMEOUT = 150  # s: a turn Codex re-sends five times, with its backoff, still ends within this


def codex_missing():
    if shutil.which("node") is None:
        return "node is not installed (tests/setup-and-test installs it)"
    if not os.access(CODEX, os.X_OK):
        return "the Codex CLI is not installed in tests/sdk (tests/setup-and-test runs npm ci there)"
    return None



def skip_reason():
    return agent_skip_reason(codex_missing)


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


@pytest.fixture
def codex_gate(box, tmp, model_files, make_gate):  # noqa: F811
    """make(start=...): the engine 'mainline' (the real router, laguna-xs, -c 8192, greedy, 16 tokens at
    most) behind modelgate with KeepaliveAfterSec=1s; start: the unit's ExecStartPre= (a slow or failing
    start); provider: lines for the default config's provider. Returns the gate, with .run(prompt) for one
    Codex turn (.run(prompt, .home(name, config), env) with a config of its own), .posts() for the POSTs
    logged and .lines(text) for any access lines"""
    tiny, _ = model_files

    def make(start="", provider=""):
        port = free_port()
        d = os.path.join(tmp, "models")
        os.makedirs(d)
        os.link(tiny, os.path.join(d, "laguna-xs.gguf"))
        box.add_unit("llama-mainline.service", router_unit("mainline", port, d, "-c 8192 --temp 0 -n 16",
                                                           "llama-fork.service", extra_service=start))
        box.reload()
        conf = ("[Proxy]\nHoldDownSec=1s\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("3090", port) +
                "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\n"
                "StartTimeoutSec=60s\n")
        g = make_gate(conf, env=gate_env(box))
        g.wait_log("host 3090 up")
        marks = [0]

        def home(name, config, extra=""):
            """a CODEX_HOME of its own, its config.toml the text config with modelgate's port, then extra"""
            d = os.path.join(tmp, name)
            os.makedirs(d)
            with open(os.path.join(d, "config.toml"), "w") as f:
                f.write(config % g.port + extra)
            return d
        default_home = home("codex-home", CONFIG, provider)

        def run(prompt, codex_home=default_home, env=None):
            assert codex_missing() is None, codex_missing()
            env = dict(os.environ, MG_API_KEY="unused", CODEX_HOME=codex_home, **(env or {}))
            t0 = time.monotonic()
            out = subprocess.run([CODEX, "exec", "--skip-git-repo-check", "-m", MODEL, prompt], cwd=tmp, env=env,
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TURN_TIMEOUT)
            print("codex turn: exit %d in %.1f s" % (out.returncode, time.monotonic() - t0))
            return out.returncode, out.stdout + out.stderr

        def lines(text):
            """the access lines with text of the requests so far, all of them written"""
            marks[0] += 1
            g.log_mark("codex-mark-%d" % marks[0])
            return [l for l in g.logtext().splitlines() if text in l]

        g.home, g.run, g.lines = home, run, lines
        g.posts = lambda: lines(POST)
        return g
    return make


CONFIG = """model_provider = "mg"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
[analytics]
enabled = false
[model_providers.mg]
name = "modelgate"
base_url = "http://127.0.0.1:%d/v1"
env_key = "MG_API_KEY"
wire_api = "responses"
"""


def test_codex_turns_stream_and_wait_through_an_early_200(codex_gate):
    # a start slower than KeepaliveAfterSec=1s: the first turn gets modelgate's early 200 and comments
    g = codex_gate(start="ExecStartPre=/bin/sleep 3\n")
    rc, out = g.run("say hi")
    assert rc == 0, out
    (line,) = g.posts()
    assert " status=200" in line and " early=200" in line and " error=" not in line, line
    # the engine runs now: a plain streamed turn, the router's own stream passed on
    rc, out = g.run("say hi again")
    assert rc == 0, out
    posts = g.posts()
    assert len(posts) == 2 and " early=200" not in posts[1] and " status=200" in posts[1], posts
    assert "Reconnecting" not in out, out
    # rule:sessions: Codex names its session (session-id, a UUID per codex exec): each run is one session
    labels = [re.search(r" session=([0-9a-f]{12}) ", l) for l in posts]
    assert all(labels) and labels[0].group(1) != labels[1].group(1), posts


def test_codex_waits_through_a_start_longer_than_its_idle_timer(codex_gate):
    """rule:keepalive-events: Codex counts only SSE events towards stream_idle_timeout_ms (300 s by default,
    8 s here: above KeepaliveIntervalSec=1s, below the 20 s start), and re-sends the turn when it runs out.
    The keepalives of modelgate's early 200 are events of the answer it began (response.created, then
    response.in_progress): one POST, the answer, exit 0. With comments alone: 6 POSTs and exit 1.
    (The timer also runs while the engine prefills Codex's prompt in silence, after its answer's head: a
    few seconds on a busy CPU, which is why it is not shorter.)"""
    g = codex_gate(start="ExecStartPre=/bin/sleep 20\n", provider="stream_idle_timeout_ms = 8000\n")
    rc, out = g.run("say hi")
    assert rc == 0, out
    assert "Reconnecting" not in out and "idle timeout" not in out, out
    (line,) = g.posts()
    assert " status=200" in line and " early=200" in line and " error=" not in line, line
    print("Codex waited through a 20 s start with an 8 s idle timer: " + line)


def test_codex_context_overflow_after_and_before_the_early_200_is_one_post_each(codex_gate):
    g = codex_gate(start="ExecStartPre=/bin/sleep 3\n")
    # after the early 200: the overflow is event response.failed with code context_length_exceeded
    rc, out = g.run(OVERFLOW)
    assert rc != 0 and ROOM in out and "Reconnecting" not in out, out
    print("Codex: " + [l for l in out.splitlines() if ROOM in l][-1])
    (line,) = g.posts()
    assert " early=200" in line and " error=400" in line, line
    # before it (the engine runs): 400 context_length_exceeded, which Codex reads the same way
    rc, out = g.run(OVERFLOW)
    assert rc != 0 and ROOM in out and "Reconnecting" not in out, out
    posts = g.posts()
    assert len(posts) == 2 and " status=400" in posts[1] and " early=200" not in posts[1], posts


def test_codex_prints_modelgates_reason_when_the_engine_fails_to_start(codex_gate, tmp):
    # a failed start remembered (docs/rules.md, "Asked for, not built"): the unit is started once, however
    # often Codex re-sends
    starts = os.path.join(tmp, "starts")
    g = codex_gate(start="ExecStartPre=/bin/sh -c 'echo start >> %s; sleep 2; exit 1'\n" % starts)
    rc, out = g.run("say hi")
    assert rc != 0, out
    assert "llama-mainline.service" in out and "failed to start" in out, out
    print("Codex: " + [l for l in out.splitlines() if "failed to start" in l][-1])
    assert "stream closed before response.completed" not in out, out
    posts = g.posts()
    # the first waits through the early 200; a re-send may be answered 502 before it, once the failure is known
    assert posts and " early=200" in posts[0] and " error=502" in posts[0], posts
    assert all(" error=502" in l or " status=502" in l for l in posts), posts
    print("Codex sent %d POSTs; the unit was started %d times" % (len(posts), open(starts).read().count("start")))
    assert open(starts).read().count("start") == 1, (posts, open(starts).read())


# Codex's built-in provider pointed at modelgate; its key from CODEX_API_KEY (run(env=...))
BUILT_IN = """openai_base_url = "http://127.0.0.1:%d/v1"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
[analytics]
enabled = false
"""


def test_codex_with_its_built_in_provider_answers_its_first_turn_without_a_retry(codex_gate):
    # rule:websocket-426: before its turn Codex opens a WebSocket to /v1/responses; answered as plain HTTP
    # (400: no model) it ends the turn with that error, anything but a 426 costs it retries first
    g = codex_gate()
    rc, out = g.run("say hi", g.home("codex-built-in", BUILT_IN), env={"CODEX_API_KEY": "unused"})
    assert rc == 0 and "Reconnecting" not in out and "Falling back" not in out, out
    gets = g.lines('GET /v1/responses model=""')
    assert gets and all(" status=426" in l for l in gets), gets
    (line,) = g.posts()
    assert " status=200" in line and " error=" not in line, line
    print("Codex: %d WebSocket refused with 426, then one POST" % len(gets))


# a provider of its own whose key comes from a command: Codex asks it for its model list then, as it asks
# OpenAI's (without the command, it uses the list it ships, which does not know the model)
