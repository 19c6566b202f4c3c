"""The host catalog (rule:merged-list, rule:merged-feed, rule:list-never-stale,
rule:down-logged-once, rule:engine-for-key): a load seen within two polls at any phase of the periodic
refresh, the merged and relabelled event
feed, hosts going down and coming back, learned engine keys surviving a restart, and bounded memory with
a subscriber that never reads."""

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time

import pytest

from boxes import box_skip_reason, chat, engine_unit, gate_env, local_host
from conftest import DOUBLE, PYTHON, chunks, free_port, host_conf, metric_samples, post, read_response, wait_for

CHAT = "/v1/chat/completions"


def models(g):
    c = g.conn()
    c.request("GET", "/models")
    r = c.getresponse()
    assert r.status == 200
    return {m["id"]: m for m in json.loads(r.read())["data"]}


class Feed:
    """a /models/sse subscriber (with a key, if given) that reads in a thread and keeps every line"""

    def __init__(self, g, key=None):
        self.s = g.sock()
        auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
        self.s.sendall(b"GET /models/sse HTTP/1.1\r\nHost: x\r\n%s\r\n" % auth)
        self.f = self.s.makefile("rb")
        assert b" 200 " in self.f.readline()
        while self.f.readline() not in (b"\r\n", b""):
            pass
        self.lines = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        for data in chunks(self.f):  # the data is what we keep
            self.lines.extend(l for l in data.decode().split("\n") if l)

    def events(self):
        return [json.loads(l[6:]) for l in list(self.lines) if l.startswith("data: ")]

    def comments(self):
        return [l for l in list(self.lines) if l.startswith(":")]

    def saw(self, model, event=None, status=None):
        return any(e["model"] == model and (event is None or e["event"] == event) and
                   (status is None or e.get("data", {}).get("status") == status) for e in self.events())

    def close(self):
        self.s.close()


def load_and_poll(g, double, key, give_up_after=15):
    """what a careful client does: POST /models/load, then GET /models every 2 s; gives up if the model
    still reads unloaded 15 s after the load was accepted"""
    r = post(g.conn(), "/models/load", {"model": "3090-" + key})
    assert r.status == 200, r.read()
    r.read()
    accepted = time.monotonic()
    seen = []
    while True:
        st = models(g)["3090-" + key]["status"]["value"]
        seen.append(st)
        if st == "loaded":
            return seen
        assert not (st == "unloaded" and time.monotonic() - accepted > give_up_after), seen
        assert time.monotonic() - accepted < 60, seen
        time.sleep(2)  # the client's own polling interval: what is being tested


@pytest.mark.parametrize("phase", ["just-after", "just-before"])
def test_a_load_through_modelgate_is_seen_at_any_phase_of_the_periodic_poll(make_double, make_gate, phase):
    d = make_double("--models", "laguna-xs,big-70b", "--loaded", "laguna-xs", "--load-delay", "20")
    poll = 6
    g = make_gate("[Proxy]\nPollIntervalSec=%ds\n" % poll + host_conf("3090", d.url))
    assert models(g)["3090-big-70b"]["status"]["value"] == "unloaded"
    # place the load relative to modelgate's own periodic GET /models, seen in the double's request log
    d.clear()
    wait_for(lambda: any(r["path"] == "/models" for r in d.requests()), poll + 2, "a periodic poll")
    if phase == "just-before":
        time.sleep(poll - 0.5)  # deliberately placed: the next periodic poll is half a second away
    seen = load_and_poll(g, d, "big-70b")
    assert seen[0] in ("loading", "loaded"), seen
    assert seen[-1] == "loaded"


def test_a_listing_never_waits_for_a_re_read_after_a_load(make_double, make_gate):
    """The feed's status events are applied to the snapshot at once: after a load through modelgate, every
    listing answers from them. The host takes 3 s to answer GET /models here, so a listing that waited for
    a re-read would take that long."""
    d = make_double("--models", "laguna-xs,big-70b", "--loaded", "laguna-xs", "--load-delay", "1",
                    "--list-delay", "3")
    g = make_gate("[Proxy]\nPollIntervalSec=1h\n" + host_conf("3090", d.url))
    wait_for(lambda: "3090-big-70b" in models(g), 30, "the host's first list (3 s)")
    assert models(g)["3090-big-70b"]["status"]["value"] == "unloaded"
    r = post(g.conn(), "/models/load", {"model": "3090-big-70b"})
    assert r.status == 200, r.read()
    r.read()
    seen, slowest, start = [], 0.0, time.monotonic()
    while not seen or seen[-1] != "loaded":
        t = time.monotonic()
        seen.append(models(g)["3090-big-70b"]["status"]["value"])
        slowest = max(slowest, time.monotonic() - t)
        assert time.monotonic() - start < 30, seen
        time.sleep(0.05)
    assert "unloaded" not in seen, seen  # the load's own event came before the first listing after it
    assert slowest < 1.0, "a listing took %.3f s: it waited for the host's 3 s list" % slowest
    print("slowest of %d listings during the load: %.1f ms" % (len(seen), slowest * 1000))


def test_the_hosts_lists_are_merged_once_per_change_not_per_listing(make_double, make_gate):
    """a host's list may be megabytes: listings with nothing changed between them reuse the last merge, byte
    for byte (modelgate_models_merges_total counts merges); a reload, and a load through modelgate (its
    status is applied to the snapshot at once), each make the next listing merge again"""
    d = make_double("--models", "laguna-xs,big-70b", "--loaded", "laguna-xs", "--load-delay", "20")
    # no periodic read: the double's list carries the time, so each read would be a change
    g = make_gate("[Proxy]\nPollIntervalSec=1h\n" + host_conf("3090", d.url) +
                  "[Alias]\nName=laguna\nTargets=3090-laguna-xs\n")

    def listing():
        c = g.conn()
        c.request("GET", "/v1/models")
        r = c.getresponse()
        assert r.status == 200
        return r.read()

    def merges():
        return metric_samples(g)[("modelgate_models_merges_total", ())]

    def settled():
        """a listing that merged nothing: the reads at start and when the feed connects are over"""
        first, before = listing(), merges()
        return listing() == first and merges() == before

    wait_for(settled, 10, "a listing that reuses the last merge")
    before = merges()
    for _ in range(5):
        listing()
    assert merges() == before

    g.proc.send_signal(signal.SIGHUP)
    g.wait_log("Reloaded")
    listing()
    assert merges() == before + 1

    wait_for(settled, 10, "a listing that reuses the last merge")
    before = merges()
    r = post(g.conn(), "/models/load", {"model": "3090-big-70b"})
    assert r.status == 200, r.read()
    r.read()
    listed = {m["id"]: m for m in json.loads(listing())["data"]}
    assert listed["3090-big-70b"]["status"]["value"] == "loading"
    assert listed["laguna"]["status"]["value"] == "loaded"
    assert merges() > before


def health_answers(g, seconds):
    """how many /health requests, one after another, were answered in that time; each may take at most 3 s"""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        c = g.conn(timeout=3)
        try:
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
        except OSError:
            raise AssertionError("/health unanswered for 3 s (after %d answers)" % n) from None
        assert r.status == 200
        c.close()
        n += 1
    return n


def test_status_events_on_a_long_list_change_their_one_entry_and_hold_nobody(make_flood_host, make_gate):
    """a host that lists 2000 models (2.4 MB) and reports 200 status changes at once: each event is applied
    to the one entry it names, so /health goes on being answered while they are, and the listing has them
    all. (When each event re-read and re-wrote the whole list, 200 events on a 2.6 MB list held the loop for
    11.8 s in review.)"""
    host = make_flood_host("--models", "2000", "--entry-size", "1200", "--flood-models", "200")
    # no periodic read, so that what is measured is the events
    g = make_gate("[Proxy]\nPollIntervalSec=1h\n" + host_conf("h", host.url))
    wait_for(lambda: host.stats()["feeds"] == 1 and len(models(g)) == 2000, 20, "the list and the feed")
    host.events(200)
    answered = health_answers(g, 2)
    # every one of them reached its entry (the 200 events name m0..m199, each once, as loading)
    wait_for(lambda: all(models(g)["h-m%d" % i]["status"]["value"] == "loading" for i in range(200)), 10,
             "the events in the listing")
    assert models(g)["h-m200"]["status"]["value"] == "unloaded"
    print("/health answered %d times in the 2 s after 200 events" % answered)
    assert answered >= 20, answered


def test_a_list_longer_than_a_host_may_have_is_left_out_with_a_warning(make_flood_host, make_gate):
    """a host's /models is read up to 2048 models: a longer one is refused as a whole (a part of it would be a
    guess), said once, and the host's models are still forwarded"""
    host = make_flood_host("--models", "2049")
    ok = make_flood_host("--models", "3")
    g = make_gate("[Proxy]\nPollIntervalSec=1s\n" + host_conf("big", host.url) + host_conf("ok", ok.url))
    g.wait_log("host big: /models lists more than 2048 models (or 4 MiB), more than modelgate reads of one "
               "host; its models are left out of /v1/models until it lists fewer")
    wait_for(lambda: host.stats()["models_reads"] >= 3, 10, "two more reads")
    assert g.logtext().count("host big: /models lists more than") == 1
    assert sorted(models(g)) == ["ok-m0", "ok-m1", "ok-m2"]
    # the host is up, and its models are still its own to serve
    assert "host big down" not in g.logtext()
    r = post(g.conn(), CHAT, chat("big-m7"))
    assert r.status == 200, r.read()
    r.read()


def test_slow_readers_of_a_big_list_share_one_copy_and_queue_at_most_256_kib_each(make_flood_host, make_gate):
    """a /v1/models of megabytes to 40 clients that do not read: each holds at most 256 KiB of it queued
    and a reference to one shared answer, not a copy of its own (40 copies would be over 100 MB); a client
    that reads gets the whole list"""
    host = make_flood_host("--models", "2000", "--entry-size", "1200")
    # ASan keeps freed memory in quarantine: RSS would measure that, not modelgated
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=1")
    g = make_gate(host_conf("big", host.url), env=env)
    c = g.conn()
    c.request("GET", "/v1/models")
    r = c.getresponse()
    whole = r.read()
    assert r.status == 200 and len(whole) > 2 << 20, len(whole)
    assert len(json.loads(whole)["data"]) == 2000
    before = g.rss_kb()
    slow = []
    for _ in range(40):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that takes almost nothing
        s.connect(("127.0.0.1", g.port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        slow.append(s)
    wait_for(lambda: g.logtext().count("GET /v1/models ") >= 41, 30, "the 40 answers begun")
    grown = g.rss_kb() - before
    assert grown < 40 * 1024, "modelgated grew by %d KiB for 40 slow readers" % grown
    # one of them reads after all: its answer is whole, byte for byte the same
    f = slow[0].makefile("rb")
    status, _, body = read_response(f)
    assert status == 200 and body == whole
    for s in slow:
        s.close()


def test_feed_is_relabelled_and_host_down_and_up_reach_list_and_feed(make_double, make_gate, tmp):
    port = free_port()
    d = make_double("--models", "laguna-xs,qwen3-8b", "--loaded", "laguna-xs", "--port", str(port))
    g = make_gate("[Proxy]\nPollIntervalSec=1s\n" + host_conf("3090", "http://127.0.0.1:%d" % port))
    assert set(models(g)) == {"3090-laguna-xs", "3090-qwen3-8b"}
    f = Feed(g)
    wait_for(lambda: any(r["path"] == "/models/sse" for r in d.requests()), 10, "modelgate to follow the feed")
    r = post(g.conn(), "/models/load", {"model": "3090-qwen3-8b"})
    assert r.status == 200
    wait_for(lambda: any(e.get("data", {}).get("status") == "loaded" for e in f.events()), 10, "the loaded event")
    ev = f.events()
    assert ev[0] == {"model": "3090-qwen3-8b", "event": "model_status", "data": {"status": "loading"},
                     "proxy": {"host": "3090", "key": "qwen3-8b"}}
    assert models(g)["3090-qwen3-8b"]["status"]["value"] == "loaded"
    # a reload of the host's list: model "*" becomes "<host>-*"
    c = d.conn()
    c.request("GET", "/models?reload=1")
    c.getresponse().read()
    wait_for(lambda: any(e["event"] == "models_reload" for e in f.events()), 10, "models_reload")
    assert [e for e in f.events() if e["event"] == "models_reload"][0] == {
        "model": "3090-*", "event": "models_reload", "proxy": {"host": "3090", "key": "*"}}

    # the host goes away: left out of the list, and the feed says why
    d.stop()
    # the state, not one wording: the feed's connection ending and the next poll being refused race to say
    # it first, and how the feed ends depends on timing
    line = g.wait_log("host 3090 down: ")
    reason = line.split("host 3090 down: ", 1)[1]
    assert reason in ("connection refused", "connection closed before the response ended", "connection reset",
                      "connection closed"), line
    wait_for(lambda: any("host 3090 down: " + reason in l for l in f.comments()), 10, "the comment")
    assert models(g) == {}
    # and comes back on the same port
    d2 = make_double("--models", "laguna-xs,qwen3-8b", "--loaded", "laguna-xs", "--port", str(port))
    g.wait_log("host 3090 up")
    wait_for(lambda: any(": host 3090 up" == l for l in f.comments()), 10, "the up comment")
    wait_for(lambda: set(models(g)) == {"3090-laguna-xs", "3090-qwen3-8b"}, 10, "the list back")
    f.close()


def test_two_hundred_subscribers_and_one_that_never_reads_stay_bounded(make_double, make_gate):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    # ASan keeps freed memory in quarantine (up to 256 MiB): RSS would measure that, not modelgated
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=1")
    # MaxFeedSubscribers= (64 by default) raised for the 200
    g = make_gate("[Proxy]\nMaxFeedSubscribers=256\n" + host_conf("3090", d.url), env=env)
    models(g)
    readers = []
    for _ in range(199):
        s = g.sock()
        s.sendall(b"GET /models/sse HTTP/1.1\r\nHost: x\r\n\r\n")
        readers.append(s)
    lazy = socket.socket()
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lazy.connect(("127.0.0.1", g.port))
    lazy.sendall(b"GET /models/sse HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for(lambda: any(r["path"] == "/models/sse" for r in d.requests()), 10, "modelgate to follow the feed")
    # each subscriber is subscribed once its hello comment is out (client_start_feed()): the events are
    # sent only then, or one accepted late (a busy machine) would miss the first ones and seem behind
    hello = b"model events from"
    heard = {s: b"" for s in readers + [lazy]}
    deadline = time.monotonic() + 60
    while any(hello not in v for v in heard.values()):
        assert time.monotonic() < deadline, "a subscriber was not subscribed"
        rl, _, _ = select.select([s for s, v in heard.items() if hello not in v], [], [], 1)
        for s in rl:
            heard[s] += s.recv(4096)
    # events received per reader, counted by their relabelled model (a tail keeps split ones whole)
    pattern = b'"download_progress"'
    got = {s: heard[s].count(pattern) for s in readers}
    tails = {s: heard[s][-(len(pattern) - 1):] for s in readers}
    before = g.rss_kb()
    # a feed is a trickle: batches of 100 events (~60 KiB), the next once every reader has the last
    batches, n, size = 40, 100, 600
    c = d.conn()
    for b in range(batches):
        c.request("POST", "/_double/events", json.dumps({"n": n, "size": size}))
        r = c.getresponse()
        assert r.status == 200
        r.read()
        want = (b + 1) * n
        deadline = time.monotonic() + 60
        while min(got.values()) < want:
            assert time.monotonic() < deadline, "a reading subscriber fell behind"
            rl, _, _ = select.select(readers, [], [], 1)
            for s in rl:
                data = tails[s] + s.recv(1 << 20)
                got[s] += data.count(pattern)
                tails[s] = data[-(len(pattern) - 1):]
    # the one that never read held more than 2 MiB of events back: it is dropped, not buffered
    g.wait_log("does not read /models/sse, dropping it")
    assert g.rss_kb() - before < 16 * 1024, "memory grew by %d KiB" % (g.rss_kb() - before)
    g.log_mark("after-the-events")  # a reader dropped by now is in the log file then
    assert "does not read /models/sse" not in g.logtext().split("dropping it", 1)[1], "a reader was dropped"
    for s in readers:
        s.close()
    lazy.close()


box_reason = box_skip_reason()


@pytest.mark.skipif(box_reason is not None, reason=str(box_reason))
def test_after_a_switch_the_new_engines_feed_and_list_are_followed(box, make_gate):
    port = free_port()
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs", ["llama-fork.service"]))
    box.add_unit("llama-fork.service", engine_unit("fork", port, "flint-40b", ["llama-mainline.service"])
                 .replace("--loaded flint-40b", "--loaded flint-40b --load-delay 1").replace(
                     "--models flint-40b", "--models flint-40b,flint-mini"))
    box.reload()
    conf = "[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port) + \
        "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-*\n" \
        "[Engine]\nHost=3090\nName=fork\nUnit=llama-fork.service\nModels=flint-*\n"
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    f = Feed(g)
    assert post(g.conn(timeout=60), CHAT, chat("3090-laguna-xs")).status == 200
    m = models(g)
    assert m["3090-laguna-xs"]["proxy"]["engine"] == "mainline"
    assert post(g.conn(timeout=60), CHAT, chat("3090-flint-40b")).status == 200
    wait_for(lambda: "3090-flint-mini" in models(g), 10, "fork's list")
    m = models(g)
    assert m["3090-flint-40b"]["proxy"]["engine"] == "fork"
    # mainline is stopped: its learned key is listed as unloaded, with its engine
    assert m["3090-laguna-xs"]["status"]["value"] == "unloaded" and m["3090-laguna-xs"]["proxy"]["engine"] == "mainline"
    r = post(g.conn(), "/models/load", {"model": "3090-flint-mini"})
    assert r.status == 200
    wait_for(lambda: any(e["model"] == "3090-flint-mini" and e.get("data", {}).get("status") == "loaded"
                         for e in f.events()), 15, "fork's load in the merged feed")
    assert models(g)["3090-flint-mini"]["status"]["value"] == "loaded"
    f.close()


@pytest.mark.skipif(box_reason is not None, reason=str(box_reason))
def test_a_stopped_engines_keys_still_route_after_a_restart(box, make_gate, tmp):
    port = free_port()
    state = os.path.join(tmp, "state")
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs", ["llama-fork.service"]))
    box.add_unit("llama-fork.service", engine_unit("fork", port, "flint-40b", ["llama-mainline.service"]))
    box.reload()
    # no Models= at all: what an engine serves is learned from its own list
    conf = "[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port) + \
        "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\n" \
        "[Engine]\nHost=3090\nName=fork\nUnit=llama-fork.service\n"
    # no $STATE_DIRECTORY nor $XDG_STATE_HOME: the file goes to ~/.local/state/modelgate, made with its parents
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    env = {k: v for k, v in gate_env(box).items() if k not in ("STATE_DIRECTORY", "XDG_STATE_HOME")}
    env.update(HOME=home, STATE_DIRECTORY="")
    state = os.path.join(home, ".local", "state", "modelgate")
    box.systemctl("start", "llama-fork.service")
    g = make_gate(conf, env=env)
    g.wait_log("engine fork adopted")
    wait_for(lambda: "3090-flint-40b" in models(g), 10, "fork's list")
    saved = json.load(open(os.path.join(state, "engine-keys.json")))
    assert saved["3090"]["fork"] == ["flint-40b"]
    g.stop()
    box.systemctl("stop", "llama-fork.service")
    # a new instance (as after an idle exit): fork is stopped, yet its key routes and starts it
    g2 = make_gate(conf, env=env)
    g2.wait_log("host 3090 up")
    r = post(g2.conn(timeout=60), CHAT, chat("3090-flint-40b"))
    assert r.status == 200 and r.getheader("X-Double") == "fork", (r.read(), g2.logtext())
    g2.wait_log("host 3090: switching to engine fork for 3090-flint-40b")
    # a corrupt file is ignored with a warning
    g2.stop()
    open(os.path.join(state, "engine-keys.json"), "w").write("{not json")
    g3 = make_gate(conf, env=env)
    g3.wait_log("engine-keys.json is not a JSON object, ignoring it")


def test_a_down_host_with_engines_lists_its_configured_names_marked_down(make_gate, tmp):
    """rule:down-listed, rule:remembered-context: names in Models= are configuration, not a guess: listed while
    the host's bus cannot be reached, with what was remembered of them and the host's state"""
    state = os.path.join(tmp, "state-down")
    os.makedirs(state)
    # what an earlier run remembered of laguna-xs: its meta and args
    with open(os.path.join(state, "models-seen.json"), "w") as f:
        json.dump({"version": 1, "hosts": {"gpu": {"laguna-xs": {
            "engine": "mainline", "meta": {"n_ctx": 8192, "n_ctx_train": 32768},
            "args": ["llama-server", "--port", "0", "--ctx-size", "8192"], "seen": 1700000000000000}}}}, f)
    conf = "[Host]\nName=gpu\nURL=http://127.0.0.1:9\nBus=ssh:nobody@127.0.0.1:9\nSSHCommand=false\n" \
        "[Engine]\nHost=gpu\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-xs laguna-s qwen3-*\n"
    g = make_gate(conf, env=dict(os.environ, STATE_DIRECTORY=state))
    g.wait_log("host gpu down: ")
    m = models(g)
    assert sorted(m) == ["gpu-laguna-s", "gpu-laguna-xs"], m  # the glob is no name
    xs, s = m["gpu-laguna-xs"], m["gpu-laguna-s"]
    assert xs["proxy"] == {"host": "gpu", "key": "laguna-xs", "engine": "mainline", "host_state": "down",
                           "remembered": True, "seen": "2023-11-14T22:13:20Z"}, xs
    assert xs["meta"] == {"n_ctx": 8192, "n_ctx_train": 32768} and xs["context_length"] == 8192, xs
    assert xs["max_model_len"] == 8192 and xs["status"]["value"] == "unloaded", xs
    assert "--ctx-size" in xs["status"]["args"], xs
    # never seen: listed, with no window rather than a guessed one
    assert s["proxy"] == {"host": "gpu", "key": "laguna-s", "engine": "mainline", "host_state": "down"}, s
    assert "meta" not in s and "context_length" not in s, s
    g.stop()
    # a file that is not a memory is moved aside, said, and the names are still listed
    open(os.path.join(state, "models-seen.json"), "w").write("{not json")
    g2 = make_gate(conf, env=dict(os.environ, STATE_DIRECTORY=state))
    g2.wait_log("models-seen.json cannot be read (not a model memory); moved to ")
    assert os.path.exists(os.path.join(state, "models-seen.json.corrupt"))
    g2.wait_log("host gpu down: ")
    assert "remembered" not in models(g2)["gpu-laguna-xs"]["proxy"]


@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_a_fresh_install_lists_exact_names_at_once_and_globs_once_seen(box, make_gate, tmp):
    """rule:merged-list, as modelgate.conf(5) says under [Engine] Models=: on a fresh install (no state, no
    engine ever ran) /v1/models lists every exact Models= name at once; a key only a glob covers is listed
    once its engine has run and its list was seen"""
    port = free_port()
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs", ["llama-fork.service"]))
    box.add_unit("llama-fork.service", engine_unit("fork", port, "flint-40b", ["llama-mainline.service"]))
    box.reload()
    conf = "[Proxy]\nHoldDownSec=1s\n" + local_host("3090", port) + \
        "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-xs laguna-*\n" \
        "[Engine]\nHost=3090\nName=fork\nUnit=llama-fork.service\nModels=flint-*\n"
    g = make_gate(conf, env=dict(gate_env(box), STATE_DIRECTORY=os.path.join(tmp, "fresh-state")))
    g.wait_log("host 3090 up")
    m = models(g)
    assert sorted(m) == ["3090-laguna-xs"], m  # a glob is no name
    assert m["3090-laguna-xs"]["status"]["value"] == "unloaded" and \
        m["3090-laguna-xs"]["proxy"]["engine"] == "mainline", m
    r = post(g.conn(), CHAT, chat("3090-flint-40b"))
    assert r.status == 200, r.read()
    r.read()
    wait_for(lambda: "3090-flint-40b" in models(g), 10, "fork's key, once its list was seen")
    assert "3090-laguna-xs" in models(g)
