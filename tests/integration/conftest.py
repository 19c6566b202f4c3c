"""Fixtures: the llama.cpp double and modelgated, each a real process on loopback,
started and stopped by pid. Every wait is a wait for a condition with a deadline."""

import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

MODELGATED = os.environ.get("MODELGATED", os.path.join(os.path.dirname(__file__), "../../build/modelgated"))
# an ASan build (its own memory rules: LeakSanitizer needs ptrace, the quarantine grows)
SANITIZED = os.path.exists(MODELGATED) and b"__asan_init" in open(MODELGATED, "rb").read()
DOUBLE = os.environ.get("LLAMA_DOUBLE", os.path.join(os.path.dirname(__file__), "../double/llama-double.py"))
PYTHON = "/usr/bin/python3"


def wait_for(cond, timeout=10.0, what="condition", interval=0.01):
    """cond() until true; a cond that runs a program (systemctl, busctl) deserves a longer interval"""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


def free_port(family=socket.AF_INET, host="127.0.0.1"):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bus_config(path, listen, bus_type="session", extra=""):
    """A dbus-daemon configuration of the test's own, written to path, for a bus on listen (an address): it
    names no service directory (no <standard_*_servicedirs/>, no <servicedir>), so that nothing installed on
    the machine (an org.modelgate1 activation file under /usr/local, a desktop's services) can be started on
    the test's bus; extra: more elements (a policy's <include>). Every test that starts a dbus-daemon uses
    one (box.sh writes the box's own for its user bus)."""
    with open(path, "w") as f:
        f.write("""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>%s</type>
  <listen>%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
%s</busconfig>
""" % (bus_type, listen, extra))
    return path


def double_requests(port, path=None):
    """what the double on port received (only path's requests when given)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/_double/requests")
    r = json.loads(c.getresponse().read())
    c.close()
    return [x for x in r if x["path"] != "/_double/requests" and (path is None or x["path"] == path)]


class Double:
    def __init__(self, tmp, *args, host="127.0.0.1"):
        self.host = host
        portfile = os.path.join(tmp, "double-%d.port" % id(self))
        self.log = open(os.path.join(tmp, "double-%d.log" % id(self)), "w")
        self.proc = subprocess.Popen([PYTHON, DOUBLE, "--host", host, "--port-file", portfile] + list(args),
                                     stdout=self.log, stderr=self.log)
        wait_for(lambda: os.path.exists(portfile) or self.proc.poll() is not None, what="the double to listen")
        assert self.proc.poll() is None, "the double did not start"
        self.port = int(open(portfile).read())
        self.url = "http://%s:%d" % ("[%s]" % host if ":" in host else host, self.port)

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=30)

    def requests(self):
        return double_requests(self.port)

    def forwarded(self):
        """what clients sent through modelgate: its own catalog reads (GET /models, the feed) left out"""
        return [x for x in self.requests()
                if not (x["method"] == "GET" and x["path"].split("?")[0] in ("/models", "/models/sse"))]

    def clear(self):
        c = self.conn()
        c.request("DELETE", "/_double/requests")
        c.getresponse().read()
        c.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# e.g. "valgrind --error-exitcode=99 --leak-check=full": every modelgated of the tests runs under it
WRAPPER = os.environ.get("MODELGATED_WRAPPER", "").split()


class Gate:
    def __init__(self, tmp, config, extra_args=(), env=None, prefix=()):
        self.port = free_port()
        self.conf = os.path.join(tmp, "modelgate-%d.conf" % id(self))
        with open(self.conf, "w") as f:
            f.write("[Proxy]\nListen=127.0.0.1:%d\n" % self.port + config)
        self.logpath = os.path.join(tmp, "modelgated-%d.log" % id(self))
        self.log = open(self.logpath, "w")
        # learned engine keys go to the test's own directory, never the machine's ~/.local/state
        env = dict(env if env is not None else os.environ)
        env.setdefault("STATE_DIRECTORY", os.path.join(tmp, "state-%d" % id(self)))
        self.proc = subprocess.Popen(list(prefix) + WRAPPER + [MODELGATED, "--config=" + self.conf] + list(extra_args),
                                     stdout=self.log, stderr=self.log, env=env)
        # on a user bus (a box's), ready means its name is owned too: the name is asked for asynchronously, and
        # a test that calls modelgatectl or busctl at once would otherwise race it
        self.bus_env = dict(env, XDG_RUNTIME_DIR="/nonexistent") if "--user" in extra_args and \
            env.get("DBUS_SESSION_BUS_ADDRESS", "").startswith("unix:path=") else None
        try:
            wait_for(self.ready, timeout=30 if WRAPPER else 10, what="modelgated to answer /health")
        except BaseException:
            # not handed to the fixture yet: nobody else would stop it
            self.proc.kill()
            self.proc.wait()
            raise

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("modelgated exited with %s:\n%s" % (self.proc.returncode, self.logtext()))
        # its own line first: free_port() can hand out a port that another test's double takes before
        # modelgated binds it, and the double answers /health with 200 too
        if "Listening on 127.0.0.1:%d" % self.port not in self.logtext():
            return False
        try:
            c = self.conn()
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
        except OSError:
            return False
        if ok and self.bus_env:
            out = subprocess.run(["busctl", "--user", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                  "org.freedesktop.DBus", "NameHasOwner", "s", "org.modelgate1"], env=self.bus_env,
                                 capture_output=True, text=True, timeout=30)
            ok = out.stdout.strip() == "b true"
        return ok

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def sock(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def wait_log(self, text, timeout=30, count=1):
        """waits until the log has count lines containing text; returns the last of them"""
        def find():
            found = [line for line in self.logtext().splitlines() if text in line]
            return found[count - 1] if len(found) >= count else None
        try:
            return wait_for(find, timeout, what="log line %r" % text)
        except AssertionError as e:
            raise AssertionError("%s; the log:\n%s" % (e, self.logtext())) from None

    def access_line(self, rid, timeout=30):
        """the access line of the request whose id is rid (the switch, wait and fallback lines about it end
        with its id too: the access line is the one with its status)"""
        def find():
            return next((line for line in self.logtext().splitlines()
                         if " status=" in line and (" id=%s " % rid in line or line.endswith(" id=" + rid))),
                        None)
        try:
            return wait_for(find, timeout, what="the access line of id=%s" % rid)
        except AssertionError as e:
            raise AssertionError("%s; the log:\n%s" % (e, self.logtext())) from None

    def log_mark(self, name):
        """A GET /health named by its User-Agent, and its access line waited for. modelgated writes notice and
        info lines when its loop is idle, which may be after a client has its answer, but always in order:
        once this line is in the log, so is every line logged before the request. A test that asserts a line
        is not in the log, with no later line of its own to wait for, calls this first."""
        c = self.conn()
        c.request("GET", "/health", headers={"User-Agent": name})
        c.getresponse().read()
        c.close()
        return self.wait_log('ua="%s"' % name)

    def logtext(self):
        self.log.flush()
        return open(self.logpath).read()

    def rss_kb(self, field="VmRSS"):
        for line in open("/proc/%d/status" % self.proc.pid):
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError("no " + field)

    def stop(self):
        """A clean stop: exit 0 and no sanitizer report (ASan/UBSan/LSan builds print them to stderr)."""
        if getattr(self, "stopped", False):
            return
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=70)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("modelgated did not stop within 70 s of SIGTERM")
        log = self.logtext()
        self.log.close()
        assert "Sanitizer" not in log and "runtime error:" not in log, log
        assert self.proc.returncode == 0, "modelgated exited with %d:\n%s" % (self.proc.returncode, log)


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="modelgate-test.") as d:
        yield d


@pytest.fixture
def make_double(tmp):
    made = []

    def make(*args, host="127.0.0.1"):
        d = Double(tmp, *args, host=host)
        made.append(d)
        return d
    yield make
    for d in made:
        d.stop()


@pytest.fixture
def make_flood_host(tmp):
    """hosts that take more than their share (tests/hostile/flood_host.py), each a process of its own"""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../hostile"))
    from flood_host import FloodHost
    made = []

    def make(*args):
        f = FloodHost(tmp, *args)
        made.append(f)
        return f
    yield make
    for f in made:
        f.stop()


@pytest.fixture
def make_gate(tmp):
    made = []

    def make(config, extra_args=(), env=None, prefix=()):
        g = Gate(tmp, config, extra_args, env, prefix)
        made.append(g)
        return g
    yield make
    for g in made:
        g.stop()


def host_conf(name, url, extra=""):
    return "[Host]\nName=%s\nURL=%s\n%s" % (name, url, extra)


@pytest.fixture
def double(make_double):
    return make_double("--models", "laguna-xs,qwen3-8b", "--loaded", "laguna-xs")


@pytest.fixture
def gate(make_gate, double):
    return make_gate(host_conf("3090", double.url))


def read_sse(resp):
    """(arrival time, raw line) for every line of a streamed response"""
    out = []
    while True:
        line = resp.readline()
        if not line:
            return out
        out.append((time.monotonic(), line.decode()))


def keepalive_chunk(line):
    """a chat stream's data line that is modelgate's keepalive, not the engine's (rule:keepalive-events)"""
    return (line.startswith("data: {") and '"object":"chat.completion.chunk"' in line and '"choices":[]}' in line
            and '"usage"' not in line)  # llama.cpp's own last chunk has no choices either, and the usage


def post(conn, path, obj, headers=None):
    body = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body, h)
    return conn.getresponse()


CHAT = "/v1/chat/completions"


def chat(model, content="hi", stream=False):
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": content}]}


class Answer:
    """one answer of modelgated, read to its end: status, headers (their names in lower case), body (bytes;
    a stream's lines joined), lines (a stream's lines, as text, when a stream was asked for), took (seconds
    from the request to the end of the answer), response (the http.client response: getheader())"""

    def __init__(self, response, body, lines, took):
        self.response, self.status, self.body, self.lines, self.took = response, response.status, body, lines, took
        self.headers = {k.lower(): v for k, v in response.getheaders()}

    def getheader(self, name):
        return self.response.getheader(name)

    def text(self):
        return self.body.decode()

    def json(self):
        """the body as JSON; an empty body as {}"""
        return json.loads(self.body or b"{}")


def ask(g, model="3090-laguna-xs", content="hi", stream=False, *, path=CHAT, method="POST", body=None, key=None,
        key_header="Authorization", rid=None, session=None, headers=None, source=None, conn=None, timeout=60,
        read=True):
    """One request to modelgated, its answer read (an Answer). g: a Gate or a port. The request is a chat of
    content to model unless body says otherwise (a dict is sent as JSON, bytes as they are; a GET or a DELETE
    has none); key goes as a bearer token in Authorization, or as the whole value of key_header; rid as
    X-Request-Id, session as X-Claude-Code-Session-Id; headers after those. From the address source, on conn
    when given (else on a connection of its own, closed once the answer is read). With read=False, the
    http.client response instead, its body unread: for a caller that reads a stream as it arrives."""
    if body is None and method == "POST":
        body = chat(model, content, stream)
    h = {}
    if body is not None:
        h["Content-Type"] = "application/json"
        body = body if isinstance(body, bytes) else json.dumps(body).encode()
    if rid:
        h["X-Request-Id"] = rid
    if session:
        h["X-Claude-Code-Session-Id"] = session
    if key:
        h[key_header] = ("Bearer " + key) if key_header == "Authorization" else key
    h.update(headers or {})
    c = conn or http.client.HTTPConnection("127.0.0.1", g if isinstance(g, int) else g.port, timeout=timeout,
                                           source_address=(source, 0) if source else None)
    t0 = time.monotonic()
    if not read:
        c.request(method, path, body, h)
        return c.getresponse()
    try:
        c.request(method, path, body, h)
        r = c.getresponse()
        lines = [line for _, line in read_sse(r)] if stream else None
        return Answer(r, "".join(lines).encode() if stream else r.read(), lines, time.monotonic() - t0)
    finally:
        if conn is None:
            c.close()


def chunks(f):
    """the data of each chunk of a chunked body, as it arrives, until its last chunk or the end of the
    connection (a feed that never ends is read in a thread)"""
    while True:
        size = f.readline()
        if not size:
            return
        n = int(size.strip() or b"0", 16)
        if n == 0:
            return
        data = f.read(n)
        f.readline()
        yield data


def read_response(f):
    """(status, {header: value}, body) of one response from a binary file, keep-alive safe"""
    status = int(f.readline().split()[1])
    headers = {}
    while True:
        line = f.readline().decode()
        if line in ("\r\n", ""):
            break
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            n = int(f.readline().strip(), 16)
            if n == 0:
                f.readline()
                return status, headers, body
            body += f.read(n)
            f.readline()
    return status, headers, f.read(int(headers.get("content-length", "0")))


# boxed user managers and sshd (boxes.py), stopped by the fixtures
@pytest.fixture
def make_box():
    made = []

    def make():
        from boxes import Box
        b = Box()
        made.append(b)
        return b
    yield make
    for b in made:
        b.stop()


@pytest.fixture
def box(make_box):
    return make_box()


@pytest.fixture
def sshd(tmp):
    from boxes import Sshd
    s = Sshd(tmp)
    yield s
    s.stop()


def metric_samples(gate):
    """every sample of GET /metrics, parsed by the Prometheus client's own text-format parser"""
    from prometheus_client.parser import text_string_to_metric_families
    c = gate.conn()
    c.request("GET", "/metrics")
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def unit_for_tests(service_text):
    """the unit as shipped, but under a sanitizer build its seccomp filter is lifted: LeakSanitizer stops
    the world with ptrace(), which @system-service does not allow, and would fail the exit"""
    if SANITIZED:
        service_text = service_text.rstrip("\n") + "\nSystemCallFilter=\n"
    return service_text
