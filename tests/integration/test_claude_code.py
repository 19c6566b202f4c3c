"""Claude Code (npm @anthropic-ai/claude-code, pinned in tests/sdk; its native binary is the optional
dependency package @anthropic-ai/claude-code-linux-x64) through modelgate in front of the real llama-server.

Claude Code re-sends a turn after 300 s without an event the Anthropic SDK hands on (its stream idle
watchdog, CLAUDE_STREAM_IDLE_TIMEOUT_MS, never below 300 s): comments and pings do not count
(docs/clients-waiting.md). rule:keepalive-events begins the message and keeps it alive with message_delta
events, so it waits through an engine start longer than that with one POST.

The 330 s wait runs in the plain build only (MODELGATE_LONG_WAITS=1, set by tests/setup-and-test for it):
under the sanitizers it would add 6 minutes for the same bytes on the wire. Skipped with the reason when
node, Claude Code, the boxes or the server are missing; MODELGATE_REQUIRE_SDK=1 makes a missing Claude Code
fail, MODELGATE_REQUIRE_REAL_ENGINE=1 a missing server."""

import json
import os
import shutil
import subprocess
import time

import pytest

from boxes import box_skip_reason, gate_env, local_host
from conftest import free_port
from test_real import MISSING, REQUIRED, model_files, router_unit  # noqa: F401 (model_files: a fixture)

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../sdk")
CLAUDE = os.path.join(SDK, "node_modules/@anthropic-ai/claude-code-linux-x64/claude")
MODEL = "3090-laguna-xs"
POST = 'POST /v1/messages model="%s"' % MODEL


def claude_missing():
    if not os.access(CLAUDE, os.X_OK):
        return "Claude Code is not installed in tests/sdk (tests/setup-and-test runs npm ci there)"
    return None


def skip_reason():
    if not REQUIRED and (box_skip_reason() or MISSING):
        return box_skip_reason() or MISSING
    r = claude_missing()
    if r and os.environ.get("MODELGATE_REQUIRE_SDK"):
        return None  # CI installs it: a missing Claude Code must fail there, not skip
    return r


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
    g = claude_gate(start="ExecStartPre=/bin/sleep 330\n")
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
