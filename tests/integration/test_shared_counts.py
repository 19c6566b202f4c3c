"""[Access] Redis= (rule:shared-counts): three instances share one Redis, started here on a unix socket in
the test's directory. A key's cap hit from all three at once is never passed; Redis stopped and started
again while requests go on loses no count and counts none twice; what an instance owed when it was killed
is sent by the next start. A Redis that answers wrong (tests/hostile/wrong-redis.py, on loopback TCP) costs
its connection, never the process, and holds no request past the 2 s an answer may take."""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

import conftest
from conftest import MODELGATED, PYTHON, Gate, host_conf, wait_for
from test_access import make_key

REDIS_SERVER = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server")
                                                else None)
CHAT = "/v1/chat/completions"
WRONG_REDIS = os.path.join(os.path.dirname(__file__), "../hostile/wrong-redis.py")


def built_with_hiredis(tmp):
    path = os.path.join(tmp, "probe.conf")
    with open(path, "w") as f:
        f.write("[Access]\nRedis=unix:/nonexistent/redis.sock\n")
    out = subprocess.run([MODELGATED, "--config=" + path, "--check-config"], capture_output=True, text=True,
                         timeout=30)
    return "built without hiredis" not in out.stdout + out.stderr


@pytest.fixture
def make_redis(tmp):
    """Redis(tmp, ...) for the test, stopped at its end however it ends; a skip with the reason when there is
    no redis-server or modelgated was built without hiredis"""
    if not REDIS_SERVER:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    if not built_with_hiredis(tmp):
        pytest.skip("modelgated was built without hiredis (Debian: apt-get install libhiredis-dev, meson reconfigure)")
    made = []

    def make(**kwargs):
        r = Redis(tmp, **kwargs)
        made.append(r)
        r.start()
        return r
    yield make
    for r in made:
        if r.proc and r.proc.poll() is None:
            os.kill(r.proc.pid, signal.SIGCONT)  # a test that stopped it with SIGSTOP
        r.stop()


class Redis:
    """redis-server on a unix socket in the test's directory, its data in an append-only file there, so that a
    stop and a start keep what it counted; and a client of a few lines (RESP) to read its counts"""

    def __init__(self, tmp, password=None):
        self.password = password
        self.dir = os.path.join(tmp, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "redis.sock")
        self.log = open(os.path.join(self.dir, "redis.log"), "a")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([REDIS_SERVER, "--port", "0", "--unixsocket", self.socket,
                                      "--unixsocketperm", "700", "--dir", self.dir, "--save", "",
                                      "--appendonly", "yes", "--appendfsync", "always"] +
                                     (["--requirepass", self.password] if self.password else []),
                                     stdout=self.log, stderr=self.log)
        wait_for(self.answers, timeout=30, what="redis-server to answer")

    def answers(self):
        if self.proc.poll() is not None:
            raise AssertionError("redis-server exited: " + open(os.path.join(self.dir, "redis.log")).read())
        try:
            return self.command("PING") == "PONG"
        except OSError:
            return False
        except AssertionError as e:  # -LOADING while it reads its file back
            if "LOADING" in str(e):
                return False
            raise

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def command(self, *args):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.socket)
        try:
            if self.password:
                s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(self.password), self.password.encode()))
            s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode())
                                                          for a in args))
            f = s.makefile("rb")
            if self.password:
                assert self.read(f) == "OK"
            return self.read(f)
        finally:
            s.close()

    def read(self, f):
        line = f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:].decode()
        if kind == b"+":
            return rest
        if kind == b"-":
            raise AssertionError("redis: " + rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            return None if rest == "-1" else f.read(int(rest) + 2)[:-2].decode()
        if kind == b"*":
            return [self.read(f) for _ in range(int(rest))]
        raise AssertionError("redis: %r" % line)

    def count(self, what):
        """the sum of every caller's count of what ("requests", "tokens") over the days it holds"""
        keys = self.command("KEYS", "modelgate:*:" + what)
        return sum(int(self.command("GET", k)) for k in keys)


def key_digest(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def conf_text(keys, redis, cap, access="", anonymous=0):
    return ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=%d\nRedis=unix:%s\n%s"
            "[Tier]\nName=free\nDailyRequests=%d\n" % (keys, anonymous, redis.socket, access, cap))


def ask(port, key):
    a = conftest.ask(port, key=key, timeout=30)
    return a.status, a.json()


def health(g):
    c = g.conn()
    c.request("GET", "/health")
    body = json.loads(c.getresponse().read())
    c.close()
    return body


def start_gates(tmp, text, n=3):
    return [Gate(tmp, text, env=dict(os.environ, STATE_DIRECTORY=os.path.join(tmp, "state-%d" % i)))
            for i in range(n)]


def test_three_instances_never_pass_the_cap(make_redis, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis()
    keys = os.path.join(tmp, "keys")
    cap = 7
    text = conf_text(keys, redis, cap, anonymous=4) + host_conf("3090", d.url)
    key = make_key(tmp, text, "free")
    gates = start_gates(tmp, text)
    try:
        for g in gates:
            wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        def at_once(key, per_gate):
            """per_gate clients on each instance, all at once: their answers"""
            results = []
            lock = threading.Lock()
            go = threading.Barrier(per_gate * len(gates))

            def client(g):
                go.wait()
                status, body = ask(g.port, key)
                with lock:
                    results.append((status, body))

            threads = [threading.Thread(target=client, args=(g,)) for g in gates for _ in range(per_gate)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return results

        results = at_once(key, 10)
        statuses = sorted(s for s, _ in results)
        assert statuses.count(200) == cap, results
        assert statuses.count(429) == 30 - cap, results
        assert all("this key has used its %d requests for today" % cap in b["error"]["message"]
                   for s, b in results if s == 429)
        # the store holds what was served, refusals counting nothing
        assert redis.count("requests") == cap
        name = "k:" + key_digest(key)
        assert any(k.endswith(name + ":requests") for k in redis.command("KEYS", "modelgate:*"))
        # every instance refuses the next one, on its head
        for g in gates:
            assert ask(g.port, key)[0] == 429
        assert redis.count("requests") == cap
        # an anonymous address's cap is shared the same way
        results = at_once(None, 4)
        assert sorted(s for s, _ in results).count(200) == 4, results
        assert all("this address has used its 4 requests for today" in b["error"]["message"]
                   for s, b in results if s == 429), results
        assert int(redis.command("GET", redis.command("KEYS", "modelgate:*:ip:127.0.0.1:requests")[0])) == 4
        # the keys expire after the day
        ttl = redis.command("TTL", redis.command("KEYS", "modelgate:*:requests")[0])
        assert 86400 < ttl <= 2 * 86400
    finally:
        for g in gates:
            g.stop()
        redis.stop()


def test_redis_away_and_back_loses_nothing_counts_nothing_twice(make_redis, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis()
    keys = os.path.join(tmp, "keys")
    text = conf_text(keys, redis, 100000) + host_conf("3090", d.url)
    key = make_key(tmp, text, "free")
    gates = start_gates(tmp, text)
    served = [0]
    tokens = [0]
    failures = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(g):
        while not stop.is_set():
            status, body = ask(g.port, key)
            with lock:
                if status == 200:
                    served[0] += 1
                    u = body.get("usage", {})
                    tokens[0] += u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)
                else:
                    failures.append((status, body))

    def served_past(n):
        return lambda: served[0] >= n

    threads = [threading.Thread(target=client, args=(g,)) for g in gates for _ in range(2)]
    try:
        for g in gates:
            wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        for t in threads:
            t.start()
        wait_for(served_past(30), timeout=60, what="requests before Redis stops")
        redis.stop()
        for g in gates:
            g.wait_log("is unreachable")
            wait_for(lambda: health(g).get("redis") == "unreachable", what="/health to say so")
        at_stop = served[0]
        wait_for(served_past(at_stop + 30), timeout=60, what="requests counted locally")
        redis.start()
        for g in gates:
            g.wait_log("answers again")
            wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis again")
        at_start = served[0]
        wait_for(served_past(at_start + 30), timeout=60, what="requests after Redis is back")
        stop.set()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        # what each instance owed goes out when Redis is back, each change once
        wait_for(lambda: redis.count("requests") == served[0], timeout=30,
                 what="Redis's count (%s) to be the requests served (%d)" % (redis.count("requests"), served[0]))
        wait_for(lambda: redis.count("tokens") == tokens[0], timeout=30, what="Redis's tokens to be the usage's")
        assert tokens[0] > 0
        # and nothing more comes later: one more request per instance is one more count
        for g in gates:
            assert ask(g.port, key)[0] == 200
        assert redis.count("requests") == served[0] + len(gates)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for g in gates:
            g.stop()
        redis.stop()


def test_owed_counts_survive_a_crash(make_redis, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis()
    keys = os.path.join(tmp, "keys")
    text = conf_text(keys, redis, 100000) + host_conf("3090", d.url)
    key = make_key(tmp, text, "free")
    state = os.path.join(tmp, "state-crash")
    env = dict(os.environ, STATE_DIRECTORY=state)
    g = Gate(tmp, text, env=env)
    try:
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        assert ask(g.port, key)[0] == 200
        redis.stop()
        g.wait_log("is unreachable")
        for _ in range(5):
            assert ask(g.port, key)[0] == 200
        pending = os.path.join(state, "redis-pending.json")

        def owed():
            try:
                return sum(op["requests"] for op in json.load(open(pending))["ops"])
            except (OSError, ValueError):
                return 0
        wait_for(lambda: owed() == 5, timeout=10, what="redis-pending.json to hold the 5 requests owed")
        g.proc.send_signal(signal.SIGKILL)
        g.proc.wait()
        g.stopped = True  # killed on purpose: not the clean stop Gate.stop() checks
        g.log.close()
        redis.start()
        g2 = Gate(tmp, text, env=env)
        try:
            g2.wait_log("change(s) of the daily counts owed from before sent")
            wait_for(lambda: redis.count("requests") == 6, timeout=30,
                     what="Redis to count the 6 requests (%s)" % redis.count("requests"))
            wait_for(lambda: owed() == 0, timeout=10, what="redis-pending.json to owe nothing")
            # the file of the killed instance is sent once: another start sends nothing again
            g2.stop()
            g3 = Gate(tmp, text, env=env)
            try:
                assert ask(g3.port, key)[0] == 200
                assert redis.count("requests") == 7
            finally:
                g3.stop()
        finally:
            g2.stop()
    finally:
        g.stop()
        redis.stop()


def test_password_from_a_credential(make_redis, make_double, tmp):
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis(password="s3cret-for-the-test")
    keys = os.path.join(tmp, "keys")
    creds = os.path.join(tmp, "credentials")
    os.makedirs(creds)
    with open(os.path.join(creds, "redis-password"), "w") as f:
        f.write("not-the-password\n")
    text = conf_text(keys, redis, 3, access="RedisPasswordCredential=redis-password\n") + host_conf("3090", d.url)
    key = make_key(tmp, text, "free")
    env = dict(os.environ, STATE_DIRECTORY=os.path.join(tmp, "state-pw"), CREDENTIALS_DIRECTORY=creds)
    g = Gate(tmp, text, env=env)
    try:
        # refused: said as Redis says it, and counted locally meanwhile
        line = g.wait_log("is unreachable")
        assert "WRONGPASS" in line or "invalid" in line, line
        assert "not-the-password" not in g.logtext()
        assert health(g)["redis"] == "unreachable"
        assert ask(g.port, key)[0] == 200
        # the right one, read again at reload: the request counted meanwhile goes to Redis
        with open(os.path.join(creds, "redis-password"), "w") as f:
            f.write("s3cret-for-the-test\n")
        g.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis with the password")
        wait_for(lambda: redis.count("requests") == 1, what="the request counted while refused to reach Redis")
        assert [ask(g.port, key)[0] for _ in range(3)] == [200, 200, 429]
        assert redis.count("requests") == 3
        assert "s3cret-for-the-test" not in g.logtext()
    finally:
        g.stop()
        redis.stop()


def test_a_redis_that_stops_answering(make_redis, make_double, tmp):
    """SIGSTOP: the socket stays, no answer comes. The instance gives up 2 s after the command was sent,
    serves the request that waited, and counts locally until Redis answers again."""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis()
    keys = os.path.join(tmp, "keys")
    text = conf_text(keys, redis, 100) + host_conf("3090", d.url)
    key = make_key(tmp, text, "free")
    g = Gate(tmp, text, env=dict(os.environ, STATE_DIRECTORY=os.path.join(tmp, "state-stopped")))
    try:
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        assert ask(g.port, key)[0] == 200
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            assert ask(g.port, key)[0] == 200  # waited for Redis, then admitted alone
            assert "no answer within 2s" in g.wait_log("is unreachable")
            assert health(g)["redis"] == "unreachable"
            assert ask(g.port, key)[0] == 200
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        g.wait_log("answers again")
        wait_for(lambda: redis.count("requests") == 3, timeout=30,
                 what="Redis to count the 3 requests once each (%s)" % redis.count("requests"))
        assert ask(g.port, key)[0] == 200
        assert redis.count("requests") == 4
    finally:
        g.stop()
        redis.stop()


def test_tokens_cap_across_instances(make_redis, make_double, tmp):
    """DailyTokens= with the tokens every instance added: what one instance's requests used refuses the
    next request on another, which served none of them"""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_redis()
    keys = os.path.join(tmp, "keys")
    text = (conf_text(keys, redis, 100).replace("DailyRequests=100\n", "DailyRequests=100\nDailyTokens=5\n") +
            host_conf("3090", d.url))
    key = make_key(tmp, text, "free")
    gates = start_gates(tmp, text, n=2)
    try:
        for g in gates:
            wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        status, body = ask(gates[0].port, key)
        assert status == 200, body
        used = body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        assert used >= 5, body
        wait_for(lambda: redis.count("tokens") == used, what="the request's tokens in Redis")
        status, body = ask(gates[1].port, key)
        assert status == 429, body
        assert "has used %d tokens today" % used in body["error"]["message"], body
        assert "DailyTokens=5" in body["error"]["message"]
        assert redis.count("requests") == 1  # the refused one counted nothing
    finally:
        for g in gates:
            g.stop()
        redis.stop()


@pytest.fixture
def make_wrong_redis(tmp):
    """WrongRedis(tmp, scenario) for the test, stopped by its pid at its end; a skip with the reason when
    modelgated was built without hiredis"""
    if not built_with_hiredis(tmp):
        pytest.skip("modelgated was built without hiredis (Debian: apt-get install libhiredis-dev, meson reconfigure)")
    made = []

    def make(scenario):
        r = WrongRedis(tmp, scenario)
        made.append(r)
        return r
    yield make
    for r in made:
        r.stop()


class WrongRedis:
    def __init__(self, tmp, scenario):
        portfile = os.path.join(tmp, "wrong-redis-%s.port" % scenario)
        self.outpath = os.path.join(tmp, "wrong-redis-%s.out" % scenario)
        self.out = open(self.outpath, "w")
        self.proc = subprocess.Popen([PYTHON, WRONG_REDIS, "--scenario", scenario, "--port-file", portfile],
                                     stdout=self.out, stderr=self.out)
        wait_for(lambda: os.path.exists(portfile) or self.proc.poll() is not None, what="the wrong Redis to listen")
        assert self.proc.poll() is None, open(self.outpath).read()
        self.target = "redis://127.0.0.1:%s" % open(portfile).read()

    def lines(self):
        return open(self.outpath).read().splitlines()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()


def wrong_conf(keys, redis, d):
    return ("[Access]\nKeysFile=%s\nAnonymousDailyRequests=0\nRedis=%s\n[Tier]\nName=free\nDailyRequests=100\n"
            % (keys, redis.target) + host_conf("3090", d.url))


@pytest.mark.parametrize("scenario,why", [("extra", "an answer to no command"),
                                          ("wrongtype", "an answer not understood")])
def test_a_wrong_answer_costs_the_connection_not_the_process(make_wrong_redis, make_double, tmp, scenario, why):
    """one answer too many (hiredis's asynchronous client asserted on it: SIGABRT, the gateway gone for
    every client), or one of the wrong type: that connection's error. One warning, the requests counted
    locally meanwhile and served, the connection made again after a backoff, what was owed sent then"""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_wrong_redis(scenario)
    keys = os.path.join(tmp, "keys")
    text = wrong_conf(keys, redis, d)
    key = make_key(tmp, text, "free")
    g = Gate(tmp, text, env=dict(os.environ, STATE_DIRECTORY=os.path.join(tmp, "state-" + scenario)))
    try:
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        assert ask(g.port, key)[0] == 200
        line = g.wait_log("is unreachable")
        assert why in line, line
        assert g.proc.poll() is None, g.logtext()
        assert health(g)["redis"] == "unreachable"
        for _ in range(3):
            assert ask(g.port, key)[0] == 200  # counted locally
        g.wait_log("answers again", timeout=30)
        wait_for(lambda: "connection 2" in redis.lines(), what="the second connection")
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis again")
        assert ask(g.port, key)[0] == 200
        assert g.logtext().count("is unreachable") == 1, g.logtext()
    finally:
        g.stop()


def test_a_redis_that_trickles_holds_no_request_past_its_answer_time(make_wrong_redis, make_double, tmp):
    """one answer every 1.5 s: each answer used to push the 2 s watchdog back, and eight requests at once
    waited 1.5 … 12 s. The 2 s bound each command's own wait, from when it was sent"""
    d = make_double("--models", "laguna-xs", "--loaded", "laguna-xs")
    redis = make_wrong_redis("trickle")
    keys = os.path.join(tmp, "keys")
    text = wrong_conf(keys, redis, d)
    key = make_key(tmp, text, "free")
    g = Gate(tmp, text, env=dict(os.environ, STATE_DIRECTORY=os.path.join(tmp, "state-trickle")))
    try:
        wait_for(lambda: health(g).get("redis") == "connected", what="the instance to reach Redis")
        results = []
        lock = threading.Lock()
        go = threading.Barrier(8)

        def client():
            go.wait()
            started = time.monotonic()
            status, _ = ask(g.port, key)
            with lock:
                results.append((status, time.monotonic() - started))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [s for s, _ in results] == [200] * 8, results
        waited = max(w for _, w in results)
        assert waited < 4, "a request waited %.1f s for Redis: %s" % (waited, results)
        assert "no answer within 2s" in g.wait_log("is unreachable")
        assert g.proc.poll() is None
    finally:
        g.stop()
