"""What bench/run and bench/scale.py share: paths, the processes they start, the C client."""

import os
import signal
import socket
import subprocess
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
QUICK = os.environ.get("BENCH_QUICK") == "1"
procs = []


def sh(*argv, **kw):
    return subprocess.run(list(argv), check=True, **kw)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, what):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit("%s did not listen on %d" % (what, port))


def start(argv, port, what, **kw):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(os.path.join(OUT, what + ".log"), "w"), **kw)
    procs.append(p)
    wait_port(port, p, what)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_ticks(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime, stime


def cpu_exact_ms(pid):
    """time on a CPU from the scheduler, in ms with µs to spare (utime and stime count 10 ms ticks); None
    where the kernel does not show it"""
    try:
        for line in open("/proc/%d/sched" % pid):
            if line.startswith("se.sum_exec_runtime"):
                return float(line.split(":")[1])
    except OSError:
        pass
    return None


def private_kb(pid):
    """the process's own pages (shared libraries' pages it only maps are not counted)"""
    kb = 0
    for line in open("/proc/%d/smaps_rollup" % pid):
        if line.startswith("Private_Clean:") or line.startswith("Private_Dirty:"):
            kb += int(line.split()[1])
    return kb


CLIENT_ERRORS = []


def client(*args, target=None):
    out = subprocess.run([os.path.join(OUT, "client")] + [str(a) for a in args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("client %s (%s) failed: %s" % (" ".join(map(str, args)), target, out.stderr.strip()))
    if out.stderr.strip():
        CLIENT_ERRORS.append("%s, client %s: %s" % (target, args[0], out.stderr.strip()))
    return out.stdout


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


WRK_LUA = """wrk.method = "POST"
wrk.body = '{"model":"b-m","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
"""




def post_lua():
    lua = os.path.join(OUT, "post.lua")
    with open(lua, "w") as f:
        f.write(WRK_LUA)
    return lua


def med(xs):
    return statistics.median(xs)
