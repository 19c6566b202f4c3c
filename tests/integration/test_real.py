"""modelgate in front of the real llama-server (router mode, CPU only, tiny generated models), as two engine
units in a boxed user manager: a cold start by a request, a switch, loads and unloads listed at once, the
merged event feed with the router's own progress events, keepalive comments that tell the load progress, the
context overflow reworded for each API, the official SDKs streaming (the Responses API too), a client gone mid-stream freeing
the server's slot, an [Alias] over two hosts' servers following the warm copy, and a head the server
refuses early (150 headers, 16 MiB unread) that stays that request's answer. The double (tests/double) stays for what the real server cannot be made to do on purpose.

The server comes from tests/real/build-llama-server (a cache outside the checkout), or from
$MODELGATE_LLAMA_SERVER. Without one the module skips, saying why; with MODELGATE_REQUIRE_REAL_ENGINE=1
(tests/setup-and-test) it fails instead."""

import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import conftest
from boxes import box_skip_reason, chat, gate_env, local_host
from conftest import PYTHON, free_port, post, wait_for
from test_activity import Activity
from test_catalog import Feed, models
from test_sdk import run_sdk, sdk_missing

HERE = os.path.dirname(os.path.abspath(__file__))
BUILDER = os.environ.get("LLAMA_SERVER_BUILDER", os.path.join(HERE, "../real/build-llama-server"))
MAKE_MODEL = os.environ.get("MAKE_MODEL", os.path.join(HERE, "../real/make-model"))
REQUIRED = bool(os.environ.get("MODELGATE_REQUIRE_REAL_ENGINE"))
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
FAST = "[Proxy]\nHoldDownSec=1s\n"


def find_server():
    """(path of llama-server, None) or (None, why there is none)"""
    path = os.environ.get("MODELGATE_LLAMA_SERVER")
    if not path:
        out = subprocess.run([BUILDER, "--find"], capture_output=True, text=True)
        if out.returncode != 0:
            return None, ("llama-server is not built: tests/real/build-llama-server builds it (tests/setup-and-test "
                          "runs it), or set MODELGATE_LLAMA_SERVER")
        path = out.stdout.strip().splitlines()[-1]
    if not os.access(path, os.X_OK):
        return None, "%s is not an executable" % path
    if subprocess.run([PYTHON, "-c", "import numpy"], capture_output=True).returncode != 0:
        return None, "%s has no numpy (Debian's python3-numpy) for tests/real/make-model" % PYTHON
    return path, None


SERVER, MISSING = find_server()
# the llama.cpp tree the server was built from: its gguf-py and vocabulary make the models
TREE = os.path.normpath(os.path.join(os.path.dirname(SERVER), "../..")) if SERVER else None


def agent_skip_reason(missing):
    """why a test of an agent's binary (tests/sdk) against the real server skips, or None: the boxes or the
    server missing (unless CI requires them), or the agent itself, missing(), unless CI requires the SDKs
    (then a missing agent must fail, not skip)"""
    if not REQUIRED and (box_skip_reason() or MISSING):
        return box_skip_reason() or MISSING
    r = missing()
    if r and os.environ.get("MODELGATE_REQUIRE_SDK"):
        return None
    return r


def skip_reason():
    if REQUIRED:
        return None  # CI has the server and boxes: what is missing fails the tests, in model_files
    return box_skip_reason() or MISSING


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


@pytest.fixture(scope="module")
def model_files():
    """one tiny model (~17 MB, loads in 0.1 s) and one hollow 800 MB model (zeros, a sparse file) that takes
    the server seconds to read with --no-mmap, so its load progress can be watched"""
    # MODELGATE_REQUIRE_REAL_ENGINE: a missing server, or a machine without boxes, fails
    assert box_skip_reason() is None, box_skip_reason()
    assert MISSING is None, MISSING
    d = tempfile.mkdtemp(prefix="modelgate-real.")
    try:
        tiny, big = os.path.join(d, "tiny.gguf"), os.path.join(d, "big.gguf")
        for argv in ([tiny, "--context", "8192"],
                     [big, "--hollow", "--embd", "1024", "--ff", "4096", "--blocks", "8"]):
            out = subprocess.run([PYTHON, MAKE_MODEL, "--tree", TREE] + argv, capture_output=True, text=True,
                                 timeout=120)
            assert out.returncode == 0, out.stdout + out.stderr
        yield tiny, big
    finally:
        shutil.rmtree(d)


def router_unit(name, port, models_dir, args, conflicts, extra_service=""):
    return """[Unit]
Description=test engine %(name)s (llama-server, router mode)
Conflicts=%(c)s
After=%(c)s

[Service]
Type=exec
ExecStart=%(server)s --models-dir %(dir)s --models-max 1 --host 127.0.0.1 --port %(port)d %(args)s
Restart=no
%(extra)s""" % {"name": name, "c": conflicts, "server": SERVER, "dir": models_dir, "port": port, "args": args,
                "extra": extra_service}


@pytest.fixture
def engines(box, tmp, model_files):
    """engines 'mainline' (laguna-xs, laguna-s; -c 512, so an overflow is one request away) and 'fork'
    (flint-xs, and flint-40b, which loads for seconds) on one port, conflicting both ways; returns
    (port, the [Host] and [Engine] sections for host 3090)"""
    tiny, big = model_files
    port = free_port()
    a, b = os.path.join(tmp, "models-mainline"), os.path.join(tmp, "models-fork")
    os.makedirs(a)
    os.makedirs(b)
    for path, src in ((os.path.join(a, "laguna-xs.gguf"), tiny), (os.path.join(a, "laguna-s.gguf"), tiny),
                      (os.path.join(b, "flint-xs.gguf"), tiny)):
        os.link(src, path)
    # a file of its own, holes and all: none of it in the page cache yet, so reading it takes the server a
    # while again (a hard link would share the pages an earlier test read)
    subprocess.run(["cp", "--sparse=always", big, os.path.join(b, "flint-40b.gguf")], check=True)
    box.add_unit("llama-mainline.service", router_unit("mainline", port, a, "-c 512", "llama-fork.service"))
    box.add_unit("llama-fork.service", router_unit("fork", port, b, "-c 4096 --no-mmap", "llama-mainline.service"))
    box.reload()
    conf = local_host("3090", port) + """
[Engine]
Host=3090
Name=mainline
Unit=llama-mainline.service
Models=laguna-*
StartTimeoutSec=60s

[Engine]
Host=3090
Name=fork
Unit=llama-fork.service
Models=flint-*
StartTimeoutSec=60s
"""
    return port, conf


def ask(g, model, content="hi", max_tokens=8, path=CHAT, stream=False, **extra):
    """greedy: the same answer each time (a random model's random sample can be text that llama.cpp's chat
    output parser refuses with a 500)"""
    if path == RESPONSES:
        body = {"model": model, "input": content, "stream": stream, "max_output_tokens": max_tokens}
    else:
        body = chat(model, content, stream)
        body.update(max_tokens=max_tokens)
    body.update(temperature=0, **extra)
    return conftest.ask(g, path=path, body=body, timeout=120, read=False)


def listing(g):
    """the merged list, and how long it took to answer"""
    t0 = time.monotonic()
    m = models(g)
    return m, time.monotonic() - t0


def status(g, model):
    return models(g)[model]["status"]["value"]


def long_stream(g, model, headers=b""):
    """a streamed chat over the model's whole context on a raw socket, which the test can close at any
    byte: the socket and its reader"""
    s = g.sock()
    body = json.dumps(dict(chat(model, "go on", True), max_tokens=100000, ignore_eos=True,
                           temperature=0)).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
              headers + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s, s.makefile("rb")


def test_cold_start_and_switch_on_the_real_server(box, engines, make_gate):
    port, conf = engines
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    assert box.active_state("llama-mainline.service") == "inactive"
    r = ask(g, "3090-laguna-xs")
    body = json.loads(r.read())
    assert r.status == 200, body
    assert r.getheader("X-Modelgate-Served-By") == "3090/mainline"
    # the router's own answer, model named by the key, with its timings untouched
    assert body["model"] == "laguna-xs" and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] >= 1 and "timings" in body
    assert box.active_state("llama-mainline.service") == "active"
    g.wait_log("host 3090: switching to engine mainline for 3090-laguna-xs")

    r = ask(g, "3090-flint-xs")
    body = json.loads(r.read())
    assert r.status == 200, body
    assert r.getheader("X-Modelgate-Served-By") == "3090/fork" and body["model"] == "flint-xs"
    assert box.active_state("llama-fork.service") == "active"
    assert box.active_state("llama-mainline.service") == "inactive"
    g.wait_log("host 3090: switching to engine fork for 3090-flint-xs")


def test_load_and_unload_through_modelgate_are_listed_at_once(box, engines, make_gate):
    port, conf = engines
    g = make_gate(FAST + "PollIntervalSec=1h\n" + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    assert ask(g, "3090-laguna-xs").status == 200
    assert status(g, "3090-laguna-s") == "unloaded"

    slowest = 0.0
    for verb, want, gone in (("load", ("loading", "loaded"), "unloaded"), ("unload", ("unloaded",), None)):
        # the router may still count the model that just answered as busy for a moment, and then says
        # "model limit reached, try again later" (500): a client does as it says
        def done():
            r = post(g.conn(), "/models/" + verb, {"model": "3090-laguna-s"})
            body = r.read()
            if r.status == 500 and b"try again later" in body:
                return False
            assert r.status == 200, body
            return True
        wait_for(done, 15, "the router to take the " + verb, interval=0.2)
        accepted = time.monotonic()
        # a client that lists at once, then every 2 s (rule:list-never-stale); the router's events arrive meanwhile,
        # and no listing waits for a re-read of the host's list because of them
        seen = []
        while True:
            m, took = listing(g)
            slowest = max(slowest, took)
            seen.append(m["3090-laguna-s"]["status"]["value"])
            if seen[-1] == want[-1]:
                break
            assert not (verb == "load" and seen[-1] == "unloaded" and time.monotonic() - accepted > 15), seen
            assert time.monotonic() - accepted < 60, seen
            time.sleep(2 if len(seen) > 3 else 0.1)
        if verb == "load":
            # the first answer after the 200 already says so: the load's answer is in the snapshot
            assert seen[0] in want, seen
            # --models-max 1: the router unloaded the other model for it
            wait_for(lambda: status(g, "3090-laguna-xs") == "unloaded", 15, "laguna-xs to read unloaded")
    # rule:list-never-stale: a listing never waits for a host; the bound here is far from a busy
    # machine's noise and far below the 0.9-2.2 s a listing used to wait for the re-read after a load
    print("slowest listing around a load or an unload: %.1f ms" % (slowest * 1000))
    assert slowest < 0.5, slowest


def test_feed_relabels_the_routers_progress_events_and_the_list_follows_them(box, engines, make_gate):
    port, conf = engines
    g = make_gate(FAST + "PollIntervalSec=1h\n" + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    assert ask(g, "3090-flint-xs").status == 200  # fork runs, and modelgate follows its feed
    f = Feed(g)
    time.sleep(0.5)  # the feed (re)connects when the engine comes up: let it settle before the load
    r = post(g.conn(), "/models/load", {"model": "3090-flint-40b"})
    assert r.status == 200, r.read()
    r.read()

    def midway():
        return [e for e in f.events() if e["model"] == "3090-flint-40b" and e["event"] == "status_change"
                and 0 < e["data"].get("progress", {}).get("value", 0) < 1]
    wait_for(midway, 30, "a progress event of the load")
    # while the router says it loads, so does the list, at once
    assert status(g, "3090-flint-40b") == "loading"
    wait_for(lambda: any(e["data"].get("status") == "loaded" for e in f.events() if "data" in e), 60,
             "the loaded event")
    assert status(g, "3090-flint-40b") == "loaded"
    assert status(g, "3090-flint-xs") == "unloaded"
    f.close()

    ev = [e for e in f.events() if e["model"] == "3090-flint-40b"]
    assert ev[0] == {"model": "3090-flint-40b", "event": "model_status", "data": {"status": "loading"},
                     "proxy": {"host": "3090", "key": "flint-40b"}}
    progress = [e["data"]["progress"]["value"] for e in ev if "progress" in e.get("data", {})]
    assert progress == sorted(progress) and progress[-1] == 1.0, progress
    loaded = [e for e in ev if e["data"].get("status") == "loaded"][0]
    assert loaded["event"] == "status_change" and loaded["data"]["info"]["id"] == "flint-40b"
    assert all(e["proxy"] == {"host": "3090", "key": "flint-40b"} for e in ev)


def test_keepalive_comments_tell_how_far_the_model_has_loaded(box, engines, make_gate):
    port, conf = engines
    g = make_gate(FAST + "KeepaliveAfterSec=100ms\nKeepaliveIntervalSec=100ms\n" + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    feed = Activity(g)  # rule:activity-feed: the same load as the request's loading phase
    wait_for(lambda: feed.of("snapshot"), what="the activity snapshot")
    # a cold start: the request waits for fork, then for the router to load flint-40b (seconds)
    r = ask(g, "3090-flint-40b", stream=True, max_tokens=4)
    assert r.status == 200
    lines = []
    while True:
        line = r.readline()
        if not line:
            break
        lines.append(line.decode().rstrip("\n"))
    comments = [l for l in lines if l.startswith(":")]
    loading = [re.fullmatch(r": loading 3090-flint-40b(?: (\d+)%)?", l) for l in comments]
    percents = [int(m.group(1)) for m in loading if m and m.group(1)]
    # how far it gets between two comments depends on the machine; the feed test sees the values in between
    assert percents and percents == sorted(percents), comments
    # (and, after the engine's head, while it reads the prompt: rule:keepalive-events)
    assert all(m or l.startswith(": waiting for engine fork on 3090") or l == ": engine fork is reading the prompt"
               for m, l in zip(loading, comments)), comments
    # then the router's own stream, in the same response
    assert any(l.startswith("data: {") for l in lines) and lines[-2:] == ["data: [DONE]", ""], lines[-5:]
    assert " early=200" in g.wait_log('model="3090-flint-40b"')
    wait_for(lambda: any(d["phase"] == "done" for d in feed.of("request")), what="the request's done event")
    phases = [d for d in feed.of("request") if d["model"] == "3090-flint-40b"]
    names = [d["phase"] for d in phases]
    assert "loading" in names and names.index("loading") < names.index("first_byte") < names.index("done"), names
    shown = [d["progress"] for d in phases if d["phase"] == "loading" and d["progress"] is not None]
    assert shown == sorted(shown) and all(0 <= p <= 1 for p in shown), phases
    assert phases[-1]["tokens_out"] and phases[-1]["decode_tps"], phases[-1]
    feed.close()


OVERFLOW = re.compile(r"prompt is too long: (\d+) tokens > 512 maximum")


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_reworded_for_each_api(box, engines, make_gate, path, stream):
    port, conf = engines
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    r = ask(g, "3090-laguna-xs", content="overflow " * 700, path=path, stream=stream)
    body = json.loads(r.read())
    assert r.status == 400, body
    if path == MESSAGES:
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        msg = body["error"]["message"]
    else:
        assert body["error"]["code"] == "context_length_exceeded", body
        msg = body["error"]["message"]
    m = OVERFLOW.fullmatch(msg)
    assert m and int(m.group(1)) > 512, msg


def reference(g, model, extra):
    """the answer of a plain request: what a stream of the same greedy request must add up to"""
    r = post(g.conn(timeout=120), CHAT, dict(chat(model, "[[tokens:12]]"), **extra))
    body = json.loads(r.read())
    assert r.status == 200, body
    return body["choices"][0]["message"]["content"]


def test_official_sdks_stream_from_the_real_server(box, engines, make_gate):
    missing = sdk_missing()
    if missing and not os.environ.get("MODELGATE_REQUIRE_SDK"):
        pytest.skip(missing)
    port, conf = engines
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    base = "http://127.0.0.1:%d" % g.port
    # greedy and without the prompt cache: a stream and a plain answer are the same computation
    extra = {"max_tokens": 24, "temperature": 0, "cache_prompt": False}
    for model in ("3090-laguna-xs", "3090-flint-xs"):  # the second through a switch
        r = run_sdk("openai.mjs", base + "/v1", model, "stream", json.dumps(extra))
        assert r["chunks"] >= 2 and r["finish"] in ("length", "stop"), r
        assert r["text"] == reference(g, model, extra), r
        r = run_sdk("anthropic.mjs", base, model, "stream", json.dumps(extra))
        assert r["events"] >= 4 and r["stop"] in ("max_tokens", "end_turn"), r
        assert r["text"] == reference(g, model, extra), r
        # the Responses API (rule:responses-api), streamed and plain: the same computation again
        resp = {"max_output_tokens": 24, "temperature": 0, "cache_prompt": False}
        r = run_sdk("openai.mjs", base + "/v1", model, "responses-stream", json.dumps(resp))
        assert r["status"] == "completed" and r["types"][-1] == "response.completed", r
        assert "response.output_text.delta" in r["types"] and r["text"] == reference(g, model, extra), r
        r = run_sdk("openai.mjs", base + "/v1", model, "responses-plain", json.dumps(resp))
        assert r["status"] == "completed" and r["text"] == reference(g, model, extra), r
    g.wait_log("host 3090: switching to engine fork for 3090-flint-xs")


def connections(pid, port):
    """pid's established TCP connections to 127.0.0.1:port, as (local port) from /proc"""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = set()
    for line in open("/proc/%d/net/tcp" % pid).read().splitlines()[1:]:
        f = line.split()
        local, remote, state, inode = f[1], f[2], f[3], f[9]
        if inode in inodes and state == "01" and remote == "0100007F:%04X" % port:
            out.add(int(local.split(":")[1], 16))
    return out


def test_a_client_gone_mid_stream_frees_the_servers_slot(box, engines, make_gate):
    port, conf = engines
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")

    def processing():
        c = g.conn()
        c.request("GET", "/slots?model=3090-flint-xs")
        r = c.getresponse()
        slots = json.loads(r.read())
        assert r.status == 200, slots
        return [s["id"] for s in slots if s["is_processing"]]

    # the whole context (4096) of tokens: seconds of streaming on this machine
    s, f = long_stream(g, "3090-flint-xs")
    wait_for(lambda: f.readline().startswith(b"data: {"), 60, "the first token")
    assert processing(), "the stream's slot is not processing"
    streaming = connections(g.proc.pid, port)  # the stream's, the feed's, and any pooled one
    f.close()
    s.close()  # the last reference: the connection closes
    gone = time.monotonic()
    # modelgate's part: the stream's connection to the server closes at once, so the server can stop
    wait_for(lambda: len(connections(g.proc.pid, port) & streaming) < len(streaming), 1.0,
             "modelgate to close its connection to the engine")
    # the server's part: llama-server's router notices a gone client by polling it every 500 ms, in its
    # reader and again in the model's process, so that straight to the router (no modelgate) the slot was
    # free 25-1475 ms after the client left (17 runs); the bound leaves that room and no more
    wait_for(lambda: not processing(), 3.0, "the slot to be free again")
    print("slot free %.0f ms after the client left" % ((time.monotonic() - gone) * 1000))


def test_an_alias_over_two_real_servers_goes_where_the_model_is_up(make_box, sshd, tmp, model_files, make_gate):
    """[Alias] laguna over 3090 (local box) and a9 (a box through ssh), each with the real router as its
    mainline engine and a fork engine: requests follow the warm copy, and no GPU switches for the alias"""
    tiny, _ = model_files
    local, remote = make_box(), make_box()
    conf = FAST
    for name, box in (("3090", local), ("a9", remote)):
        port = free_port()
        a, b = os.path.join(tmp, name + "-mainline"), os.path.join(tmp, name + "-fork")
        os.makedirs(a)
        os.makedirs(b)
        os.link(tiny, os.path.join(a, "laguna-xs.gguf"))
        os.link(tiny, os.path.join(b, "flint-xs.gguf"))
        box.add_unit("llama-mainline.service", router_unit("mainline", port, a, "-c 512", "llama-fork.service"))
        box.add_unit("llama-fork.service", router_unit("fork", port, b, "-c 512", "llama-mainline.service"))
        box.reload()
        if box is local:
            conf += local_host(name, port)
        else:
            conf += ("[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
                     "BusPath=unix:path=%s\n" % (port, sshd.port, sshd.ssh_command, box.bus))
        for engine, models in (("mainline", "laguna-*"), ("fork", "flint-*")):
            conf += "[Engine]\nHost=%s\nName=%s\nUnit=llama-%s.service\nModels=%s\nStartTimeoutSec=60s\n" % (
                name, engine, engine, models)
    conf += "[Alias]\nName=laguna\nTargets=3090-laguna-xs a9-laguna-xs\n"
    g = make_gate(conf, env=gate_env(local))
    g.wait_log("host 3090 up")
    g.wait_log("host a9 up")

    def served(model, path=CHAT):
        r = ask(g, model, path=path)
        body = json.loads(r.read())
        assert r.status == 200, body
        return r.getheader("X-Modelgate-Served-By"), body

    # nothing runs: the first target can start its engine without stopping another
    who, body = served("laguna")
    assert who == "3090/mainline" and body["model"] == "laguna-xs"
    # 3090 goes to fork for a direct request; the alias then starts a9's copy rather than switch 3090 back
    assert served("3090-flint-xs")[0] == "3090/fork"
    assert served("laguna")[0] == "a9/mainline"
    # the last answer's access line: the switches logged before it are in the log file too
    g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200')
    switches = g.logtext().count("switching to engine")
    assert switches == 3
    for path in (CHAT, MESSAGES, CHAT, MESSAGES):
        who, body = served("laguna", path)
        assert who == "a9/mainline", body
    g.wait_log('model="laguna" host=a9 target=a9-laguna-xs status=200', count=5)
    assert g.logtext().count("switching to engine") == switches  # none for the alias once a copy is warm
    assert local.active_state("llama-fork.service") == "active"
    assert remote.active_state("llama-mainline.service") == "active"


def test_an_oversized_head_refused_by_the_real_server_is_that_requests_answer(tmp, model_files, make_gate):
    """cpp-httplib answers 400 to a head of 150 headers and closes with the 16 MiB body unread (the
    kernel resets the connection under modelgate's writes): the client gets that 400, every time, and the
    host stays up for everybody (RFC 9112 §9.5; one request's failure is not the host's)"""
    tiny, _ = model_files
    models_dir = os.path.join(tmp, "models-plain")
    os.makedirs(models_dir)
    os.link(tiny, os.path.join(models_dir, "x.gguf"))
    port = free_port()
    log = open(os.path.join(tmp, "llama-server-plain.log"), "w")
    server = subprocess.Popen([SERVER, "--models-dir", models_dir, "--models-max", "1", "--host", "127.0.0.1",
                               "--port", str(port), "-c", "512"], stdout=log, stderr=log)
    try:
        def healthy():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                return c.getresponse().status == 200
            except OSError:
                return False
        wait_for(healthy, 60, "the plain llama-server", interval=0.1)
        g = make_gate("[Proxy]\nMaxBodySize=32M\n[Host]\nName=r\nURL=http://127.0.0.1:%d\n" % port)
        headers = {"X-Filler-%d" % i: "v" * 20 for i in range(150)}
        body = {"model": "r-x", "messages": [{"role": "user", "content": "a" * (16 << 20)}]}
        for _ in range(5):
            r = post(g.conn(timeout=60), CHAT, body, headers)
            r.read()
            assert r.status == 400, r.status
        assert "r-x" in models(g), models(g)
        assert "host r down" not in g.logtext()
    finally:
        server.kill()
        server.wait()
        log.close()


def test_every_configured_model_is_listed_with_its_remembered_context_after_a_restart(box, engines, make_gate, tmp):
    """rule:merged-list, rule:model-context, rule:remembered-context: exact Models= names are listed before
    their engine ever ran; each model the router listed keeps its context window (meta.n_ctx, as the
    loaded model said it, or its --ctx-size) and its args across a restart, marked remembered"""
    port, conf = engines
    conf = conf.replace("Models=laguna-*", "Models=laguna-xs laguna-*").replace("Models=flint-*",
                                                                                  "Models=flint-xs flint-*")
    state = os.path.join(tmp, "state-remembered")
    env = dict(gate_env(box), STATE_DIRECTORY=state)
    g = make_gate(FAST + conf, env=env)
    g.wait_log("host 3090 up")
    m = models(g)
    for key, engine in (("laguna-xs", "mainline"), ("flint-xs", "fork")):
        e = m["3090-" + key]
        assert e["status"]["value"] == "unloaded" and e["proxy"]["engine"] == engine, e
        assert "context_length" not in e and "remembered" not in e["proxy"], e  # nothing said of it yet

    assert ask(g, "3090-laguna-xs").status == 200
    def loaded_with_context():
        e = models(g)["3090-laguna-xs"]
        return e if e["status"]["value"] == "loaded" and e.get("meta", {}).get("n_ctx") == 512 else None
    e = wait_for(loaded_with_context, 15, "laguna-xs loaded with its meta")
    assert e["context_length"] == 512 and e["max_model_len"] == 512 and "remembered" not in e["proxy"], e
    # an unloaded model of the running engine: its window from its own --ctx-size
    s = models(g)["3090-laguna-s"]
    assert s["meta"]["n_ctx"] == 512 and s["context_length"] == 512 and "--ctx-size" in s["status"]["args"], s
    seen_file = os.path.join(state, "models-seen.json")
    wait_for(lambda: os.path.exists(seen_file) and
             json.load(open(seen_file))["hosts"]["3090"].get("laguna-xs", {}).get("meta", {}).get("n_ctx") == 512,
             15, "laguna-xs's meta in models-seen.json")

    assert ask(g, "3090-flint-xs").status == 200
    g.wait_log("host 3090: switching to engine fork for 3090-flint-xs")
    # its own meta, once loaded (a window from its --ctx-size is listed before: not what this waits for),
    # and in the file, which a stop does not have to write
    wait_for(lambda: json.load(open(seen_file))["hosts"]["3090"].get("flint-xs", {}).get("meta", {})
             .get("n_ctx_train") == 8192, 15, "flint-xs's own meta in models-seen.json")
    assert models(g)["3090-flint-xs"]["meta"]["n_ctx"] == 4096
    e = models(g)["3090-laguna-xs"]  # mainline stopped: what the router said of it, from memory
    assert e["proxy"]["remembered"] is True and e["proxy"]["engine"] == "mainline", e
    assert e["meta"]["n_ctx"] == 512 and e["meta"]["n_ctx_train"] == 8192 and e["context_length"] == 512, e
    g.stop()
    box.systemctl("stop", "llama-fork.service")

    # a fresh start (as after an idle exit), nothing running: every model with its remembered window
    g2 = make_gate(FAST + conf, env=env)
    g2.wait_log("host 3090 up")
    m = models(g2)
    print("listing after a restart: %s" % json.dumps({k: (v.get("context_length"), v["proxy"]) for k, v in m.items()}))
    for key, engine, n_ctx in (("laguna-xs", "mainline", 512), ("laguna-s", "mainline", 512),
                               ("flint-xs", "fork", 4096), ("flint-40b", "fork", 4096)):
        e = m["3090-" + key]
        assert e["status"]["value"] == "unloaded" and e["proxy"]["engine"] == engine, e
        assert e["meta"]["n_ctx"] == n_ctx and e["context_length"] == n_ctx and e["max_model_len"] == n_ctx, e
        assert e["proxy"]["remembered"] is True and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                                                                 e["proxy"]["seen"]), e
        assert "--ctx-size" in e["status"]["args"], e
    # the loaded models' own meta came back too, not only the window
    assert m["3090-flint-xs"]["meta"]["n_ctx_train"] == 8192, m["3090-flint-xs"]
    assert "n_ctx_train" not in m["3090-laguna-s"]["meta"], m["3090-laguna-s"]  # never ran: args only


def engine_usage(path, stream, body):
    """(in, cached, out, timings) as the server's own answer says them, for the access line's tokens=
    (rule:usage): Anthropic's input_tokens leaves out the cached ones, the others count them"""
    if stream:
        events = [json.loads(line[6:]) for line in body.decode().splitlines()
                  if line.startswith("data: {")]
    else:
        events = [json.loads(body)]
    u, timings = {}, None
    for e in events:
        for o in (e, e.get("message", {}), e.get("response", {})):
            if isinstance(o.get("usage"), dict):
                u.update(o["usage"])
        timings = e.get("timings") or timings
    if path in (CHAT, COMPLETIONS):
        return (u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], u["completion_tokens"],
                timings)
    if path == MESSAGES:
        return (u["input_tokens"] + u["cache_read_input_tokens"], u["cache_read_input_tokens"],
                u["output_tokens"], timings)
    return u["input_tokens"], u["input_tokens_details"]["cached_tokens"], u["output_tokens"], timings


def speed(n, ms):
    """tokens per second to a tenth, rounded as the access line does"""
    t = int(n * 1000.0 / ms * 10 + 0.5)
    return "%d.%dt/s" % (t // 10, t % 10)


def test_the_access_line_counts_the_engines_own_tokens_and_names_the_request(box, engines, make_gate):
    """rule:usage, rule:request-id: for each of the four APIs, streaming and not, the line's tokens are the numbers the
    server's answer carries, its speeds those of the server's timings; the client's X-Request-Id goes to the
    server and comes back, one is made when it sends none; a client that leaves mid-stream is 499 and its
    count says (cut), its prompt charged by rule:usage-charge"""
    port, conf = engines
    g = make_gate(FAST + conf, env=gate_env(box))
    g.wait_log("host 3090 up")

    for path in (CHAT, COMPLETIONS, MESSAGES, RESPONSES):
        for stream in (False, True):
            rid = "t-%s-%d" % (path.strip("/").replace("/", "-"), stream)
            extra = {"stream_options": {"include_usage": True}} if path in (CHAT, COMPLETIONS) and stream else {}
            if path == RESPONSES:
                body = {"model": "3090-laguna-xs", "input": "hi", "stream": stream, "max_output_tokens": 8}
            elif path == COMPLETIONS:
                body = {"model": "3090-laguna-xs", "prompt": "hi", "stream": stream, "max_tokens": 8}
            else:
                body = dict(chat("3090-laguna-xs", "hi", stream), max_tokens=8)
            body.update(temperature=0, **extra)
            r = post(g.conn(timeout=120), path, body, headers={"X-Request-Id": rid})
            answer = r.read()
            assert r.status == 200, answer
            assert r.getheader("X-Request-Id") == rid
            n_in, cached, out, timings = engine_usage(path, stream, answer)
            line = g.access_line(rid)
            print(line)
            assert " engine=mainline " in line and " first_byte=" in line, line
            want = " tokens=in:%d,cached:%d,out:%d" % (n_in, cached, out)
            assert want + " " in line or line.endswith(want), (want, line)
            if timings:
                assert " prefill=%s decode=%s " % (speed(timings["prompt_n"], timings["prompt_ms"]),
                                                   speed(timings["predicted_n"], timings["predicted_ms"])) in line
            else:  # llama.cpp sends timings with chat's answers and in response.completed only
                assert path == MESSAGES or (path == RESPONSES and not stream), answer[-600:]
                assert " prefill=" not in line and " decode=" not in line, line

    # no id of its own, or one that is not sane: one is made, returned and logged
    for h in ({}, {"X-Request-Id": "has space"}):
        r = post(g.conn(timeout=120), CHAT, dict(chat("3090-laguna-xs"), max_tokens=4, temperature=0), headers=h)
        r.read()
        made = r.getheader("X-Request-Id")
        assert made and re.fullmatch(r"[0-9a-f]{32}", made), made
        g.access_line(made)
    # modelgate's own answers carry one too
    c = g.conn()
    c.request("GET", "/health", headers={"X-Request-Id": "t-health"})
    r = c.getresponse()
    r.read()
    assert r.getheader("X-Request-Id") == "t-health"
    g.access_line("t-health")

    # a client that leaves mid-stream: status 499, and the count of what it was sent so far says (cut). On fork's
    # 4096 of context, so the stream outlasts the client's five lines: laguna's 512 were all sent in 0.35 s on
    # CI's machine, before the client had read them, and such a stream was rightly whole (200)
    s, f = long_stream(g, "3090-flint-xs", b"X-Request-Id: t-left\r\n")
    seen = 0
    while seen < 5:
        line = f.readline()
        assert line, "the stream ended before 5 data lines"
        seen += line.startswith(b"data: {")
    f.close()
    s.close()
    line = g.access_line("t-left")
    print(line)
    assert " status=499 " in line and " cut=client " in line, line
    # rule:usage-charge: the prompt the stream never said is charged at 4 bytes a token of the request's body
    sent = len(json.dumps(dict(chat("3090-flint-xs", "go on", True), max_tokens=100000, ignore_eos=True,
                               temperature=0)))
    m = re.search(r" tokens=in:~(\d+),cached:\?,out:(\d+)\(cut\) ", line)
    assert m and int(m.group(1)) == -(-sent // 4), (sent, line)
    assert int(m.group(2)) >= seen - 1, line  # the first data line names the role, no token
