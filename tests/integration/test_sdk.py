"""The official OpenAI and Anthropic SDKs (npm, run with the machine's Node.js) through modelgate: streaming
through a wait long enough for modelgate's early 200 and keepalive comments, and plain requests through an
engine switch, on chat completions, messages and the Responses API. Every answer must arrive whole, and an
error after the early 200 must be the event the SDK reads as one."""

import json
import os
import shutil
import subprocess
import threading

import pytest

from boxes import box_skip_reason, chat, engines_conf, gate_env, local_host
from conftest import free_port, post, read_sse

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../sdk")
EXPECTED = "".join("tok%d " % i for i in range(12))


def sdk_missing():
    if shutil.which("node") is None:
        return "node is not installed (tests/setup-and-test installs it)"
    for p in ("openai", "@anthropic-ai/sdk"):
        if not os.path.isdir(os.path.join(SDK, "node_modules", p)):
            return "the npm package %s is not installed in tests/sdk (tests/setup-and-test runs npm ci)" % p
    return None


def skip_reason():
    r = box_skip_reason()
    if r:
        return r
    r = sdk_missing()
    if r and os.environ.get("MODELGATE_REQUIRE_SDK"):
        return None  # CI installs them: a missing SDK must fail there, not skip
    return r


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


def run_sdk(script, base, model, mode, *extra):
    """extra: a JSON object of request fields the script adds"""
    assert sdk_missing() is None, sdk_missing()
    out = subprocess.run(["node", os.path.join(SDK, script), base, model, mode] + list(extra), capture_output=True,
                         text=True, timeout=180, cwd=SDK)
    assert out.returncode == 0, "%s %s %s failed:\n%s%s" % (script, model, mode, out.stdout, out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def two_engines_gate(box, make_gate):
    """modelgated in front of the double's two engines on one GPU, with a short hold-down and keepalives
    within a second, so that an SDK's request waits through a switch and sees comments meanwhile"""
    port = free_port()
    conf = "[Proxy]\nHoldDownSec=1s\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("3090", port) + \
        engines_conf(box, "3090", port, double_args="--token-delay 0.1")
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    return g


def busy_engine(g, model, tokens):
    """streams from model in the background; returns once the stream has begun"""
    started = threading.Event()
    done = {}

    def run():
        r = post(g.conn(timeout=120), "/v1/chat/completions", chat(model, "[[tokens:%d]]" % tokens, stream=True))
        r.readline()
        started.set()
        lines = read_sse(r)
        done["complete"] = bool(lines) and lines[-2][1] == "data: [DONE]\n"

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(60), "the background stream did not start"
    return t, done


def test_sdks_stream_through_a_wait_with_keepalives_and_get_the_whole_answer(box, make_gate):
    g = two_engines_gate(box, make_gate)
    base = "http://127.0.0.1:%d" % g.port

    # OpenAI SDK, streaming, waits ~4 s for fork while mainline streams
    t, done = busy_engine(g, "3090-laguna-xs", 40)
    r = run_sdk("openai.mjs", base + "/v1", "3090-flint-40b", "stream")
    t.join()
    assert done["complete"], "the running stream was cut"
    assert r["text"] == EXPECTED and r["finish"] == "stop"

    # Anthropic SDK, streaming, waits for mainline while fork streams
    t, done = busy_engine(g, "3090-flint-40b", 40)
    r = run_sdk("anthropic.mjs", base, "3090-laguna-xs", "stream")
    t.join()
    assert done["complete"]
    assert r["text"] == EXPECTED and r["stop"] == "end_turn"
    # rule:keepalive-events: modelgate began the message (one message_start, or the SDK throws), kept it
    # alive with message_delta events, and spliced the engine's usage in: its prompt tokens, not the 0 of
    # modelgate's own beginning
    assert r["types"][0] == "message_start" and "message_delta" in r["types"], r
    assert r["usage"]["input_tokens"] > 0 and r["usage"]["output_tokens"] == 12, r

    # each SDK's stream is the first request of its model on its path
    line = g.wait_log('POST /v1/chat/completions model="3090-flint-40b"')
    assert " early=200" in line, line
    line = g.wait_log('POST /v1/messages model="3090-laguna-xs"')
    assert " early=200" in line, line

    # plain (non-streaming) requests through a switch each: no early answer, the whole answer
    r = run_sdk("openai.mjs", base + "/v1", "3090-flint-40b", "plain")
    assert r["text"] == EXPECTED
    r = run_sdk("anthropic.mjs", base, "3090-laguna-xs", "plain")
    assert r["text"] == EXPECTED
    g.wait_log("switching to engine", count=4)


def test_sdk_responses_api_streams_through_a_wait_and_reads_its_errors_as_response_failed(box, make_gate):
    """rule:responses-api, rule:error-event: the OpenAI SDK's responses.create through an early 200, plain
    through a switch, and the errors after the early 200 (the host's overflow answer) and inside the
    engine's stream (llama.cpp's unnamed error line) as the response.failed events the SDK yields"""
    g = two_engines_gate(box, make_gate)
    base = "http://127.0.0.1:%d/v1" % g.port

    t, done = busy_engine(g, "3090-laguna-xs", 40)
    r = run_sdk("openai.mjs", base, "3090-flint-40b", "responses-stream")
    t.join()
    assert done["complete"], "the running stream was cut"
    assert r["text"] == EXPECTED and r["status"] == "completed" and r["error"] is None, r
    assert r["types"][0] == "response.created" and r["types"][-1] == "response.completed", r
    assert " early=200" in g.wait_log('POST /v1/responses model="3090-flint-40b"')

    r = run_sdk("openai.mjs", base, "3090-laguna-xs", "responses-plain")
    assert r["text"] == EXPECTED and r["status"] == "completed" and r["types"] == ["response"], r

    # the overflow answer arrives after the early 200: one response.failed, Codex's code, the reworded words
    t, done = busy_engine(g, "3090-flint-40b", 40)
    r = run_sdk("openai.mjs", base, "3090-laguna-xs", "responses-stream", json.dumps({"input": "[[overflow]]"}))
    t.join()
    # rule:keepalive-events: the answer modelgate began, then the failure inside it
    assert r["status"] == "failed" and r["types"] == ["response.created", "response.in_progress",
                                                      "response.failed"], r
    assert r["error"]["code"] == "context_length_exceeded", r
    assert r["error"]["message"].startswith("prompt is too long: "), r
    line = g.wait_log('POST /v1/responses model="3090-laguna-xs"', count=2)  # the plain one is the first
    assert " early=200" in line and " error=400" in line, line

    # the engine's own error inside its stream: the text so far, then response.failed
    r = run_sdk("openai.mjs", base, "3090-laguna-xs", "responses-stream",
                json.dumps({"input": "[[tokens:12]] [[error:3]]"}))
    assert r["text"] == "tok0 tok1 tok2 " and r["status"] == "failed", r
    assert r["error"] == {"code": "server_error", "message": "generation failed"}, r


def test_sdk_stream_helpers_take_a_begun_answer_whole(box, make_gate):
    """rule:keepalive-events: the OpenAI SDK's responses.stream() throws on any event before
    response.created and chat.completions.stream() accumulates every chunk, the Anthropic SDK's
    messages.stream() throws on a second message_start: through a wait with keepalives, each helper gets
    the whole answer, the engine's usage, and no error"""
    port = free_port()
    conf = "[Proxy]\nHoldDownSec=1s\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n" + local_host("3090", port) + \
        engines_conf(box, "3090", port, double_args="--token-delay 0.1")
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    base = "http://127.0.0.1:%d/v1" % g.port

    t, done = busy_engine(g, "3090-laguna-xs", 40)
    r = run_sdk("openai.mjs", base, "3090-flint-40b", "responses-helper")
    t.join()
    assert done["complete"], "the running stream was cut"
    assert " early=200" in g.wait_log('POST /v1/responses model="3090-flint-40b"')
    # responses.stream() takes modelgate's beginning (it throws on any event before response.created) and
    # its keepalives. Straight from llama.cpp it fails at once (its response.created has no "output" to push
    # items onto); through modelgate it gets as far as llama.cpp's content_part events, which lack the
    # output_index it needs — modelgate adds no failure of its own, and changes none of the engine's events
    direct = run_sdk("openai.mjs", "http://127.0.0.1:%d/v1" % port, "flint-40b", "responses-helper")
    assert direct["thrown"] is not None and r["events"] > direct["events"], (r, direct)
    assert r["types"][:2] == ["response.created", "response.in_progress"], r
    if r["thrown"] is None:
        assert r["final"] == EXPECTED and r["status"] == "completed" and r["usage"]["output_tokens"] == 12, r
    else:
        assert r["thrown"] == "missing output at index undefined", r

    t, done = busy_engine(g, "3090-flint-40b", 40)
    r = run_sdk("openai.mjs", base, "3090-laguna-xs", "chat-helper")
    t.join()
    assert r["text"] == EXPECTED and r["final"] == EXPECTED and r["finish"] == "stop", r
    # the first such line is the background stream's
    assert " early=200" in g.wait_log('POST /v1/chat/completions model="3090-laguna-xs"', count=2)
