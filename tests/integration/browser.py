"""A real headless browser for the /ui tests: Debian's chromium, started and stopped by pid (its own session,
so its process group is its own and nothing else's), driven over the DevTools protocol on loopback. Every
exception the page throws, every console error and every Content-Security-Policy violation is collected:
a page test fails on any of them."""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from conftest import wait_for

CHROMIUM = os.environ.get("MODELGATE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

# the page sees its violations itself too: added before any of its own script runs
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push(e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || ''));
});
"""


def skip_reason():
    try:
        import websocket  # noqa: F401  (python3-websocket)
    except ImportError:
        return "python3-websocket is not installed (tests/setup-and-test installs it)"
    if not os.path.exists(CHROMIUM):
        return "chromium is not installed (tests/setup-and-test installs it)"
    return None


class Chromium:
    def __init__(self, tmp, log_dir=None, loopback_names=()):
        """loopback_names: names the browser resolves to 127.0.0.1 itself (as a DNS rebinding would make
        them), every other name but 127.0.0.1 resolving to nothing"""
        import websocket
        self.profile = tempfile.mkdtemp(prefix="chromium.", dir=tmp)
        self.logpath = os.path.join(log_dir or tmp, "chromium.log")
        self.log = open(self.logpath, "w")
        # loopback only: no name resolves but 127.0.0.1, and nothing of the browser's own calls home
        argv = [CHROMIUM, "--headless=new", "--no-sandbox", "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1", "--user-data-dir=" + self.profile,
                "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-pings",
                "--disable-domain-reliability", "--disable-client-side-phishing-detection",
                "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
                "--host-resolver-rules=" + "".join("MAP %s 127.0.0.1, " % n for n in loopback_names) +
                "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-gpu",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1400,1000", "about:blank"]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.errors = []      # exceptions, console errors, log errors, CSP violations: each a failure
        self.auth = None      # (user, password) given when a page asks for HTTP authentication
        self.events = []      # (method, params) of the events not otherwise handled
        self.next_id = 0
        self.replies = {}
        try:
            port_file = os.path.join(self.profile, "DevToolsActivePort")

            def active():
                if self.proc.poll() is not None:
                    raise AssertionError("chromium exited with %s:\n%s" % (self.proc.returncode, self.logtext()))
                try:
                    lines = open(port_file).read().split("\n")
                except OSError:
                    return None
                return lines if len(lines) >= 2 and lines[1] else None
            port, path = wait_for(active, timeout=60, what="chromium's DevToolsActivePort", interval=0.1)[:2]
            self.ws = websocket.create_connection("ws://127.0.0.1:%s%s" % (port, path), timeout=60,
                                                  suppress_origin=True)
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(domain + ".enable", session=True)
            self.call("Fetch.enable", session=True, handleAuthRequests=True, patterns=[{"urlPattern": "*"}])
            self.call("Page.addScriptToEvaluateOnNewDocument", session=True, source=WATCH_VIOLATIONS)
        except BaseException:
            self.stop()
            raise

    def logtext(self):
        self.log.flush()
        return open(self.logpath).read()

    # the protocol: one websocket to the browser, the page's commands and events by session

    def send(self, method, session=False, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        return self.next_id

    def call(self, method, session=False, timeout=60, **params):
        i = self.send(method, session, **params)
        deadline = time.monotonic() + timeout
        while i not in self.replies:
            if time.monotonic() > deadline:
                raise AssertionError("no answer from chromium to " + method)
            self.pump_one(deadline - time.monotonic())
        r = self.replies.pop(i)
        if "error" in r:
            raise AssertionError("%s: %s" % (method, r["error"]))
        return r.get("result", {})

    def pump_one(self, timeout):
        import websocket
        self.ws.settimeout(max(0.05, timeout))
        try:
            msg = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return
        if "id" in msg:
            self.replies[msg["id"]] = msg
            return
        self.on_event(msg["method"], msg.get("params", {}))

    def on_event(self, method, p):
        if method == "Fetch.requestPaused":
            self.send("Fetch.continueRequest", session=True, requestId=p["requestId"])
        elif method == "Fetch.authRequired":
            if self.auth:
                answer = {"response": "ProvideCredentials", "username": self.auth[0], "password": self.auth[1]}
            else:
                answer = {"response": "CancelAuth"}
            self.events.append((method, p))
            self.send("Fetch.continueWithAuth", session=True, requestId=p["requestId"], authChallengeResponse=answer)
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append("exception: %s %s" % (d.get("text"), d.get("exception", {}).get("description", "")))
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
            self.errors.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description")))
                                                                   for a in p["args"])))
        elif method == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            e = p["entry"]
            self.errors.append("log %s (%s): %s %s" % (e["level"], e["source"], e["text"], e.get("url", "")))
        else:
            self.events.append((method, p))

    def pump(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.pump_one(deadline - time.monotonic())

    # what the tests do with a page

    def navigate(self, url, timeout=60):
        self.events = [e for e in self.events if e[0] != "Page.loadEventFired"]
        r = self.call("Page.navigate", session=True, url=url)
        if r.get("errorText"):
            raise AssertionError("navigating to %s: %s" % (url, r["errorText"]))
        self.wait_event("Page.loadEventFired", timeout)
        return r

    def wait_event(self, method, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e[0] == method:
                    return e[1]
            if time.monotonic() > deadline:
                raise AssertionError("no %s from chromium" % method)
            self.pump_one(deadline - time.monotonic())

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError("evaluating %r: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait_js(self, expression, timeout=30, what=None):
        """expression's value once it is truthy; the browser's events are read meanwhile"""
        deadline = time.monotonic() + timeout
        while True:
            v = self.evaluate(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for %s" % (what or expression))
            self.pump(0.1)

    def screenshot(self, path, selector=None):
        """the page as a PNG, or only what the CSS selector matches first"""
        params = {}
        if selector:
            r = self.evaluate("(() => { const r = document.querySelector(%s).getBoundingClientRect(); "
                              "return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })()"
                              % json.dumps(selector))
            params["clip"] = dict(r, scale=1)
        data = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                         **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def failures(self):
        """what went wrong in the page: its errors, and the violations it saw itself"""
        self.pump(0.2)
        v = self.evaluate("window.__violations || []") or []
        return self.errors + ["CSP violation: " + x for x in v]

    def stop(self):
        if getattr(self, "ws", None):
            try:
                self.ws.close()
            except OSError:
                pass
            self.ws = None
        # its own session: the group is chromium and the helpers it started, nothing else (its helpers may
        # outlive it, so the group is killed even when chromium itself has exited)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()
