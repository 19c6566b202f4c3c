"""/ui in a real headless browser (Debian's chromium over the DevTools protocol): the page loads from
modelgated under its Content-Security-Policy with no error, no exception and no violation, follows
/activity live, and shows a request and a switch as they happen (rule:ui-page, rule:ui-key).
Each test keeps a screenshot in the test log directory."""

import base64
import hashlib
import html.parser
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import browser
import conftest
from boxes import box_skip_reason, chat, engines_conf, gate_env, local_host
from conftest import Gate, host_conf, post

from test_access import make_key

CHAT = "/v1/chat/completions"
EMBED = os.path.join(os.path.dirname(__file__), "../../src/modelgated/client/ui-embed.py")
LOG_DIR = os.environ.get("MODELGATE_TEST_LOG_DIR") or None

needs_browser = pytest.mark.skipif(browser.skip_reason() is not None and not os.environ.get("MODELGATE_REQUIRE_BROWSER"),
                                   reason=str(browser.skip_reason()))


@pytest.fixture(autouse=True)
def browser_present():
    # CI installed chromium: its tests must run, not skip
    if browser.skip_reason() and os.environ.get("MODELGATE_REQUIRE_BROWSER"):
        pytest.fail("MODELGATE_REQUIRE_BROWSER=1: " + browser.skip_reason())


def log_dir(tmp):
    d = LOG_DIR or tmp
    os.makedirs(d, exist_ok=True)
    return d


def get(g, path, headers=None):
    c = g.conn()
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


class Page(html.parser.HTMLParser):
    """the page's tags, and the text of its scripts and styles, as a browser would take them"""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.tags, self.inline, self.open = [], {"script": [], "style": []}, None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        if tag in self.inline:
            self.open = tag
            self.inline[tag].append("")

    def handle_endtag(self, tag):
        self.open = None

    def handle_data(self, data):
        if self.open:
            self.inline[self.open][-1] += data


def sha256(text):
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_the_page_comes_with_a_strict_policy_and_no_inline_handlers(make_double, make_gate):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    r, body = get(g, "/ui")
    assert r.status == 200, body
    assert r.getheader("Content-Type") == "text/html; charset=utf-8"
    assert r.getheader("X-Content-Type-Options") == "nosniff"
    assert r.getheader("Cache-Control") == "no-cache"
    assert r.getheader("Referrer-Policy") == "no-referrer"
    assert r.getheader("X-Frame-Options") == "DENY"
    csp = r.getheader("Content-Security-Policy")
    directives = dict((p.strip().split(" ", 1) + [""])[:2] for p in csp.split(";"))
    # the page's own script and style by their hashes, computed here from what was served
    p = Page()
    p.feed(body.decode())
    assert len(p.inline["script"]) == 1 and len(p.inline["style"]) == 1
    assert directives == {
        "default-src": "'none'", "script-src": sha256(p.inline["script"][0]),
        "style-src": sha256(p.inline["style"][0]), "connect-src": "'self'", "img-src": "'self' data:",
        "base-uri": "'none'", "form-action": "'none'", "frame-ancestors": "'none'"}, csp
    for tag, attrs in p.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            assert name != "style", tag
            assert not (value or "").strip().lower().startswith("javascript:"), (tag, name)
        if tag in ("script", "style", "link") and tag != "link":
            assert attrs == [], (tag, attrs)
        if tag == "link":
            assert dict(attrs)["href"].startswith("data:"), attrs  # nothing from elsewhere
    # the same page as the embedding script's policy says: the build hashed what it embedded
    out = subprocess.run([sys.executable, EMBED, "--csp", os.path.join(os.path.dirname(EMBED), "ui.html")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == csp
    # no body for HEAD, and only the page's own path
    c = g.conn()
    c.request("HEAD", "/ui")
    h = c.getresponse()
    assert h.status == 200 and h.read() == b"" and h.getheader("Content-Security-Policy") == csp
    c.close()


def test_the_embedding_refuses_what_the_policy_would_block(tmp):
    for bad in ('<button onclick="x()">', '<div style="color:red">', '<a href="javascript:x()">',
                '<script src="/x.js"></script>'):
        page = os.path.join(tmp, "bad.html")
        with open(page, "w") as f:
            f.write("<!doctype html><style>p{}</style>%s<script>1</script>" % bad)
        out = subprocess.run([sys.executable, EMBED, page, os.path.join(tmp, "out.c")], capture_output=True,
                             text=True)
        assert out.returncode == 1 and "ui-embed.py:" in out.stderr, (bad, out)


def wait_for_request(b, model, host):
    """the page shows a finished request for model: in the recent list, and as a bar in host's lane"""
    return b.wait_js(
        "(() => { const rows = [...document.querySelectorAll('#recent tbody tr[data-id]')]"
        ".filter(tr => tr.querySelector('td.model').textContent === %s);"
        " const bars = document.querySelectorAll('#timeline g.host[data-host=%s] g.request[data-model=%s]');"
        " return rows.length && bars.length ? {rows: rows.length, bars: bars.length,"
        " status: rows[0].querySelector('td.st').textContent} : null; })()"
        % (json.dumps(model), json.dumps(host), json.dumps(model)), timeout=30,
        what="the page to show the request for " + model)


@needs_browser
def test_the_page_follows_the_activity_live(make_double, make_gate, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    b = browser.Chromium(tmp, log_dir(tmp))
    try:
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        # the snapshot: the host's card
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        assert b.evaluate("document.getElementById('conn').textContent") == "live"
        assert b.evaluate("document.querySelectorAll('#recent tbody tr[data-id]').length") == 0
        c = g.conn()
        r = post(c, CHAT, chat("3090-laguna-xs"))
        assert r.status == 200, r.read()
        r.read()
        rid = r.getheader("X-Request-Id")
        shown = wait_for_request(b, "3090-laguna-xs", "3090")
        assert shown["status"] == "200", shown
        assert b.evaluate("document.querySelector('#recent tbody tr[data-id=%s]') !== null" % json.dumps(rid))
        # rule:upstream-error: the engine's error inside its 200, in its words beside the status
        r = post(c, CHAT, dict(chat("3090-laguna-xs", "[[error:1]]"), stream=True),
                 headers={"X-Request-Id": "ui-upstream-error"})
        assert r.status == 200
        r.read()
        cell = "document.querySelector('#recent tbody tr[data-id=\"ui-upstream-error\"] .st')"
        b.wait_js("!!%s" % cell, what="the errored request's row")
        assert "engine 500: generation failed" in b.evaluate("%s.textContent" % cell)
        shot = b.screenshot(os.path.join(log_dir(tmp), "ui-live.png"))
        print("screenshot:", shot)
        assert b.failures() == []
    finally:
        b.stop()


@needs_browser
def test_a_name_made_to_lead_here_is_refused_to_the_browser(make_double, make_gate, tmp):
    """rule:host-check in a real browser: rebound.test resolves to 127.0.0.1 (the browser's own resolver here,
    a DNS rebinding in the wild), so a page of that name would read /activity and the API as same-origin; the
    browser's requests say they are a page's (Sec-Fetch-Site) and name rebound.test, and are refused. The
    page on modelgate's own address is served as before, and ServerNames= makes the name modelgate's."""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    b = browser.Chromium(tmp, log_dir(tmp), loopback_names=["rebound.test"])
    try:
        for path in ("/ui", "/activity", "/v1/models"):
            b.navigate("http://rebound.test:%d%s" % (g.port, path))
            text = b.evaluate("document.body.innerText")
            assert '"code":"host_not_served"' in text and "[Proxy] ServerNames=" in text, text
        assert "status=403" in g.wait_log("GET /activity ")
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        assert b.evaluate("document.getElementById('conn').textContent") == "live"
        # the browser logs each 403 it was given (the pages', their icons'), when it likes: those aside
        others = lambda errors: [e for e in errors if "status of 403" not in e]
        assert others(b.failures()) == []
        with open(g.conf, "a") as f:
            f.write("[Proxy]\nServerNames=rebound.test\n")
        g.proc.send_signal(signal.SIGHUP)
        g.wait_log("Reloaded ")
        b.navigate("http://rebound.test:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        assert b.evaluate("document.getElementById('conn').textContent") == "live"
        assert others(b.failures()) == []
    finally:
        b.stop()


@needs_browser
def test_the_page_shows_each_agents_session_as_one_row(make_double, make_gate, tmp):
    """rule:sessions: the requests of one session are one row (its turns, tokens, waits), by label, never
    the id the agent sent"""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    g = make_gate(host_conf("3090", d.url))
    ids = {"one": "ses_3b1f0c2a9ffeWk2nXo", "two": "0f3c9a52-7d1e-4b8a-9c4e-2a6b1d5e8f70"}
    label = {k: hashlib.sha256(v.encode()).hexdigest()[:12] for k, v in ids.items()}
    b = browser.Chromium(tmp, log_dir(tmp))
    try:
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        assert b.evaluate("document.querySelectorAll('#sessions tbody tr[data-session]').length") == 0
        for k in ("one", "one", "two"):
            c = g.conn()
            r = post(c, CHAT, chat("3090-laguna-xs"), headers={"X-Session-Id": ids[k]})
            assert r.status == 200, r.read()
            r.read()
        rows = b.wait_js(
            "(() => { const r = [...document.querySelectorAll('#sessions tbody tr[data-session]')]"
            ".map(tr => [tr.dataset.session, tr.children[4].textContent, tr.children[2].textContent]);"
            " return r.length === 2 && r.some(x => x[1] === '2') && r.some(x => x[1] === '1') ? r : null; })()",
            timeout=30, what="two session rows, of two turns and one")
        assert sorted(rows) == sorted([[label["one"], "2", "3090"], [label["two"], "1", "3090"]]), rows
        # the recent requests say which session each was
        assert b.evaluate("[...document.querySelectorAll('#recent tbody tr[data-session]')].length") == 3
        text = b.evaluate("document.body.textContent")
        assert all(v not in text for v in ids.values()), text
        shot = b.screenshot(os.path.join(log_dir(tmp), "ui-sessions.png"))
        print("screenshot:", shot)
        assert b.failures() == []
    finally:
        b.stop()


def access_conf(keys):
    return ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=10\n"
            "[Tier]\nName=ops\nActivity=yes\n[Tier]\nName=free\n" % keys)


@needs_browser
def test_the_page_and_its_feed_are_for_a_tier_that_may_watch(make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    keys = os.path.join(tmp, "keys")
    conf = access_conf(keys) + host_conf("3090", d.url)
    ops, free = make_key(tmp, conf, "ops"), make_key(tmp, conf, "free")
    g = Gate(tmp, conf)
    try:
        # no key, though clients without one are admitted: asked for one, as a browser understands
        r, body = get(g, "/ui")
        assert r.status == 401, body
        assert 'Basic realm="modelgate"' in ",".join(r.headers.get_all("WWW-Authenticate")), r.headers
        # a key whose tier may not watch: 403, by Bearer or Basic
        basic = lambda user, key: "Basic " + base64.b64encode(("%s:%s" % (user, key)).encode()).decode()
        for h in ({"Authorization": "Bearer " + free}, {"Authorization": basic("me", free)}):
            r, body = get(g, "/ui", h)
            assert r.status == 403, body
            assert "may not watch the activity" in json.loads(body)["error"]["message"], body
            r, body = get(g, "/activity", h)
            assert r.status == 403, body
        r, body = get(g, "/ui", {"Authorization": "Bearer " + ops})
        assert r.status == 200
        # Basic credentials are for the browser's two pages only: elsewhere the key must be a Bearer one
        c = g.conn()
        r = post(c, CHAT, chat("3090-laguna-xs"), headers={"Authorization": basic("me", ops)})
        r.read()
        assert r.status == 200
        line = g.wait_log("POST %s" % CHAT)
        assert "key=anonymous" in line, line  # the Basic credentials were not taken
        # the browser: asked for credentials, given the ops key as the password, then the feed follows
        b = browser.Chromium(tmp, log_dir(tmp))
        try:
            b.auth = ("ops", ops)
            b.navigate("http://127.0.0.1:%d/ui" % g.port)
            assert any(e[0] == "Fetch.authRequired" for e in b.events), "the browser was not asked for a key"
            b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
            c = g.conn()
            r = post(c, CHAT, chat("3090-laguna-xs"), headers={"Authorization": "Bearer " + free})
            r.read()
            assert r.status == 200
            wait_for_request(b, "3090-laguna-xs", "3090")
            assert b.failures() == []
        finally:
            b.stop()
        # the key is never in the log: only its tier and digest
        log = g.logtext()
        assert ops not in log and free not in log
        assert "GET /ui" in log and "key=ops:" in log
    finally:
        g.stop()


@needs_browser
@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_the_timeline_shows_a_switch(box, make_gate, make_double, tmp):
    from conftest import free_port
    port = free_port()
    a9 = make_double("--models", "qwen3-8b", "--loaded", "qwen3-8b")
    g = make_gate("[Proxy]\nHoldDownSec=2s\n" + local_host("3090", port) + engines_conf(box, "3090", port,
                                                                                         startup_delay=1)
                  + host_conf("a9", a9.url), env=gate_env(box))
    g.wait_log("host 3090 up")
    b = browser.Chromium(tmp, log_dir(tmp))

    def ask(model, results):
        a = conftest.ask(g, model, timeout=90)
        results.append((model, a.status, a.body))
    try:
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        # mainline starts, flint waits for the hold-down and switches to fork, laguna switches back
        done = []
        for model in ("a9-qwen3-8b", "3090-laguna-xs", "3090-flint-40b", "3090-laguna-xs"):
            ask(model, done)
            assert done[-1][1] == 200, done
            wait_for_request(b, model, model.split("-")[0])
        b.wait_js("document.querySelectorAll('#recent tbody tr[data-id]').length === 4", what="four requests")
        shot = b.screenshot(os.path.join(log_dir(tmp), "ui-switch.png"))
        print("screenshot:", shot)
        # the lane: both engines' runs, and the switches between them with how long each took
        runs = b.wait_js("(() => { const e = [...document.querySelectorAll('#timeline g.host[data-host=\"3090\"]"
                         " g.run')].map(g => g.dataset.engine); return e.includes('fork') && "
                         "e.includes('mainline') ? e : null; })()", what="both engines' runs")
        switches = b.wait_js("(() => { const s = [...document.querySelectorAll('#timeline g.host[data-host=\"3090\"]"
                             " g.switch')].map(g => [g.dataset.from, g.dataset.engine, g.dataset.ms]);"
                             " return s.length >= 2 ? s : null; })()", what="the switches in the timeline")
        # from mainline to fork and back, each with how long it took (the double starts in about 1 s)
        assert any(s[0] == "mainline" and s[1] == "fork" and int(s[2]) >= 500 for s in switches), switches
        assert any(s[0] == "fork" and s[1] == "mainline" and int(s[2]) >= 500 for s in switches), (runs, switches)
        # labels where there is room for them (the others are the bars' tooltips)
        labels = b.evaluate("[...document.querySelectorAll('#timeline g.switch text')].map(t => t.textContent)")
        assert labels and all(re.match(r"((mainline|fork) → )?(fork|mainline)( started)?: up after [0-9.]+ m?s$", l)
                              for l in labels), labels
        # the recent list says how long the requests waited for their switch
        waited = b.evaluate("[...document.querySelectorAll('#recent tbody tr')].filter(tr => "
                            "tr.children[8].textContent !== '–').length")
        assert waited >= 1
        assert b.failures() == []
    finally:
        b.stop()


BANDS = ("[...document.querySelectorAll('#timeline g.host[data-host=\"3090\"] g.band')].map(g => ({"
         "kind: g.dataset.kind, engine: g.dataset.engine, start: Number(g.dataset.start),"
         " end: g.dataset.end === '' ? null : Number(g.dataset.end), text: g.textContent}))")


@needs_browser
@pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))
def test_the_timeline_draws_only_what_happened(box, make_gate, tmp):
    """rule:ui-timeline: a scripted sequence — an engine adopted at start, a switch refused with 423 while it
    serves, a switch, a request queued behind the hold-down, an idle stop, a busy GPU refusing a start —
    and the bands the page draws (read back from their data-* attributes) against the times the test
    caused each of them: each happened where it is drawn, and nothing is drawn that did not happen"""
    from conftest import free_port
    port = free_port()
    box.add_unit("gpu-bench.service", "[Service]\nType=exec\nExecStart=/bin/sleep 1000\n")
    # the hold-down shorter than the idle stop: the request queued behind fork's hold-down gets mainline
    conf = ("[Proxy]\nHoldDownSec=4s\nIdleStopSec=10s\n" +
            local_host("3090", port, "BusyUnits=gpu-bench.service\n") + engines_conf(box, "3090", port))
    box.systemctl("start", "llama-mainline.service")
    b = browser.Chromium(tmp, log_dir(tmp))  # first: mainline's idle stop counts from its adoption
    now = lambda: time.time() * 1e6
    slack = 50e3  # µs: the daemon's times are its loop's, read a little before or after the test's

    def bands(kind=None, engine=None):
        return [x for x in b.evaluate(BANDS) if (kind is None or x["kind"] == kind) and
                (engine is None or x["engine"] == engine)]

    def within(x, a, z, what):
        assert a - slack <= x <= z + slack, "%s at %d, not in [%d, %d]" % (what, x, a, z)

    def ask(model):
        a = conftest.ask(g, model, timeout=90)
        return a.status, a.body

    try:
        t_gate = now()
        g = make_gate(conf, env=gate_env(box))
        g.wait_log("host 3090: engine mainline adopted")
        t_adopted = now()
        b.navigate("http://127.0.0.1:%d/ui" % g.port)
        b.wait_js("!!document.querySelector('#hosts .host[data-host=\"3090\"]')", what="the host's card")
        # the adoption: drawn where it happened, the run of mainline from there on, and no start of ours
        adopt = b.wait_js("(%s).filter(x => x.kind === 'adopt')" % BANDS, what="the adoption")
        assert len(adopt) == 1 and adopt[0]["engine"] == "mainline", adopt
        within(adopt[0]["end"], t_gate, t_adopted, "the adoption")
        assert "mainline adopted" in adopt[0]["text"], adopt
        runs = bands("run")
        assert [(r["engine"], r["end"]) for r in runs] == [("mainline", None)], runs
        within(runs[0]["start"], t_gate, t_adopted, "mainline's run")
        assert bands("switch") == [] and bands("switching") == [], bands()

        # a switch refused with 423 (the GPU someone else's) while mainline serves: a refusal, no switch; the
        # host is busy from the unit's start (rule:busy-followed)
        t0 = now()
        box.systemctl("start", "gpu-bench.service")
        t1 = now()
        status, body = ask("3090-flint-40b")
        assert status == 423, body
        t2 = now()
        refused = b.wait_js("(%s).filter(x => x.kind === 'refused')" % BANDS, what="the refusal")
        assert len(refused) == 1 and refused[0]["engine"] == "fork", refused
        within(refused[0]["start"], t1, t2, "the refused request's start")
        within(refused[0]["end"], t1, t2, "the refusal")
        assert "fork refused (423)" in refused[0]["text"], refused
        b.pump(1.2)  # a render or more after the refusal
        assert [(r["engine"], r["end"]) for r in bands("run")] == [("mainline", None)], bands()
        assert bands("switch") == [] and bands("switching") == [], bands()
        busy = b.wait_js("(%s).filter(x => x.kind === 'busy')" % BANDS, what="the busy band while mainline serves")
        within(busy[0]["start"], t0, t2, "busy while mainline serves")
        box.systemctl("stop", "gpu-bench.service")

        # a switch that happened: from the ask to fork serving, mainline's run ending inside it
        t3 = now()
        status, body = ask("3090-flint-40b")
        assert status == 200, body
        t4 = now()
        sw = b.wait_js("(%s).filter(x => x.kind === 'switch')" % BANDS, what="the switch")
        assert len(sw) == 1 and sw[0]["engine"] == "fork", sw
        within(sw[0]["start"], t3, t4, "the switch's start")
        within(sw[0]["end"], sw[0]["start"], t4, "fork up")
        assert re.search(r"mainline → fork: up after [0-9.]+ m?s", sw[0]["text"]), sw
        runs = bands("run")
        assert [(r["engine"], r["end"] is None) for r in runs] == [("mainline", False), ("fork", True)], runs
        within(runs[0]["end"], t3, sw[0]["end"], "mainline's end")
        assert runs[1]["start"] == sw[0]["end"], (runs, sw)
        # its hold-down: from fork's start, open, and its label says the time left
        hold = b.wait_js("(%s).filter(x => x.kind === 'hold' && x.end === null)" % BANDS, what="fork's hold-down")
        assert hold[0]["start"] == runs[1]["start"], (hold, runs)
        left = re.search(r"hold-down: ([0-9.]+) s left", hold[0]["text"])
        assert left and 0 < float(left.group(1)) <= 4.1, hold

        # a request for mainline during the hold-down: queued, with the hold-down's time left as it goes
        done = []
        t = threading.Thread(target=lambda: done.append(ask("3090-laguna-xs")))
        t.start()
        phase = b.wait_js("(() => { const p = document.querySelector('#inflight tbody tr[data-id] .phase');"
                          " return p && /hold-down/.test(p.textContent) ? p.textContent : null; })()",
                          what="the request queued for the hold-down")
        m = re.fullmatch(r"queued, 0 ahead, waits for the hold-down: ([0-9.]+) s left", phase)
        assert m and float(m.group(1)) <= 4.1, phase
        # rule:state-words: counted as status counts it, waiting and not in flight
        b.wait_js("document.getElementById('inflight-count').textContent === '0 in flight, 1 waiting'", timeout=5,
                  what="the request counted as waiting")
        t.join(60)
        assert done and done[0][0] == 200, done
        t5 = now()

        # the idle stop of mainline, IdleStopSec= after its request: a band until the engine is gone
        idle = b.wait_js("(%s).filter(x => x.kind === 'idle-stop' && x.end !== null)" % BANDS, timeout=40,
                         what="the idle stop")
        assert len(idle) == 1 and idle[0]["engine"] == "mainline", idle
        within(idle[0]["start"], t5 + 10e6 - 1e6, now(), "the idle stop")
        last = bands("run", "mainline")[-1]
        assert last["end"] == idle[0]["end"], (last, idle)
        assert [s["engine"] for s in bands("switch")] == ["fork", "mainline"], bands("switch")

        # a busy GPU with no engine running: a refusal and a busy band, ending once the GPU is free
        t5b = now()
        box.systemctl("start", "gpu-bench.service")
        t6 = now()
        status, body = ask("3090-laguna-xs")
        assert status == 423, body
        t7 = now()
        busy = b.wait_js("(%s).filter(x => x.kind === 'busy').slice(1)" % BANDS, what="the busy band")
        within(busy[0]["start"], t5b, t7, "busy")
        refused = b.wait_js("(%s).filter(x => x.kind === 'refused')" % BANDS + ".map(x => x.engine).join(' ')"
                            " === 'fork mainline'", what="the second refusal")
        box.systemctl("stop", "gpu-bench.service")
        t8 = now()
        busy = b.wait_js("(%s).filter(x => x.kind === 'busy' && x.end !== null).slice(1)" % BANDS, timeout=15,
                         what="the busy band's end")
        within(busy[0]["end"], t8, now(), "busy's end")
        # nothing else was drawn: two switches, no start of fork or mainline for a refused request
        kinds = sorted(set(x["kind"] for x in bands()))
        assert kinds == ["adopt", "busy", "hold", "idle-stop", "refused", "run", "switch"], kinds
        assert len(bands("run")) == 3, bands("run")
        # each kind drawn has its legend
        legend = b.evaluate("document.querySelector('.legend').textContent")
        for words in ("adopted", "hold-down", "idle stop", "busy", "refused (423)", "switch or start"):
            assert words in legend, legend
        shot = b.screenshot(os.path.join(log_dir(tmp), "ui-timeline.png"))
        print("screenshot:", shot)
        assert b.failures() == []
    finally:
        b.stop()
