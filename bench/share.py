#!/usr/bin/python3
"""A flooding feed and a full-speed stream (for bench/run, or alone): a third host's request latency with
either or both, against the same daemon idle.

One modelgated with three [Host]s, each in front of its own C upstream: 'flood' (`upstream PORT flood=N`:
its /models lists N models, and on SIGUSR1 its /models/sse sends status_change events naming them in
turn as fast as the socket takes them, until SIGUSR2), 'blast' (`client blast` reads `?blast=1`, an
answer streamed in 16 KiB chunks as fast as the socket takes them, as fast as it comes) and 'c', the host
whose requests are measured: `client latency`, streaming requests of 8 chunks one after another. Each
round runs idle (the flood off, no stream), flood, stream and both, in an order that turns round by
round; medians over rounds.

Placement: the daemon has CPU 0 to itself; the upstreams and clients share CPU 1. The daemon, the
measured client and the measured host run SCHED_FIFO: on a machine shared with other work, a busy
daemon (as it is under the flood) is otherwise preempted for whole time slices by whatever else runs
there, which is the machine's scheduler, not the daemon's loop. The kernel's real-time throttling
(sched_rt_runtime_us, 95 % by default) still leaves the CPU to others for 50 ms a second, which is one
request of a run at concurrency 1; the largest figure is reported apart for that reason.

Alone: `bench/share.py` builds what it needs (modelgated in release in bench/out/build, the C upstream
and client) and writes its section into bench/results.md. BENCH_SHARE_DAEMON=PATH measures another
modelgated instead and prints what it saw; BENCH_SHARE_BEFORE=PATH (and BENCH_SHARE_BEFORE_NAME, what to
call it) also measures an older build, one short round, and adds what it saw to the section (the figure
before a change); BENCH_QUICK=1 and BENCH_ROUNDS=N as for bench/run."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
from common import (HERE, OUT, QUICK, ROUNDS, TOP, cpu_ticks, free_port, med, pct, procs, sh, start, stop)

FLOOD_MODELS = 1000
TIMEOUT = 60  # a loop held by the flood answers nothing: a run gives up after this
TITLE = "## A flooding feed and a full-speed stream"
RUNS = (("idle", "idle (no flood, no stream)"), ("flood", "one host floods its feed"),
        ("stream", "another streams at full speed"), ("both", "both"))


def two_cpus():
    return (os.cpu_count() or 1) >= 2


def place(pid, cpu, realtime=False):
    if two_cpus():
        os.sched_setaffinity(pid, {cpu})
    if realtime:
        try:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(10))
        except PermissionError:
            pass


def measured_client():
    place(0, 1, realtime=True)


def latency(port, n, timeout):
    """(first byte, end) per request; None when the daemon did not answer them all in time"""
    try:
        out = subprocess.run([os.path.join(OUT, "client"), "latency", str(port), str(n), "c-m"],
                             capture_output=True, text=True, timeout=timeout, preexec_fn=measured_client)
    except subprocess.TimeoutExpired:
        return None
    return [tuple(map(int, l.split())) for l in out.stdout.splitlines()]


def run(kind, port, n, flood, pid):
    latency(port, 200, TIMEOUT)  # warm-up
    blast = None
    if kind in ("stream", "both"):
        blast = subprocess.Popen([os.path.join(OUT, "client"), "blast", str(port), "blast-m"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(blast)
        place(blast.pid, 1)
    if kind in ("flood", "both"):
        flood.send_signal(signal.SIGUSR1)
    if blast or kind == "flood":
        time.sleep(0.5)  # under way before anything is measured
    c0, t0 = cpu_ticks(pid), time.monotonic()
    rows = latency(port, n, TIMEOUT)
    cpu = (cpu_ticks(pid) - c0) / os.sysconf("SC_CLK_TCK") / max(time.monotonic() - t0, 1e-3) * 100
    if kind in ("flood", "both"):
        flood.send_signal(signal.SIGUSR2)
    streamed = None
    if blast:
        blast.stdin.close()
        out = blast.stdout.read().split()
        blast.wait()
        streamed = int(out[0]) / float(out[1]) / 1e6 if len(out) == 2 else 0.0
    time.sleep(0.5)  # the flood's last block drained, the stream's connection gone
    if rows is None:
        return {"answered": False, "cpu": cpu, "mbps": streamed}
    first, end = [a for a, _ in rows], [b for _, b in rows]
    return {"answered": True, "first_p50": pct(first, 50), "first_p99": pct(first, 99), "end_p50": pct(end, 50),
            "end_p99": pct(end, 99), "max": max(end), "cpu": cpu, "mbps": streamed}


def measure(daemon=None, rounds=ROUNDS, n=None):
    daemon = daemon or os.path.join(OUT, "build", "modelgated")
    n = n or (500 if QUICK else 2000)
    tmp = tempfile.mkdtemp(prefix="share.", dir=OUT)
    started = []
    try:
        ports = {k: free_port() for k in ("flood", "blast", "c")}
        ups = {}
        for k, port in ports.items():
            argv = [os.path.join(OUT, "upstream"), str(port)] + (["flood=%d" % FLOOD_MODELS] if k == "flood" else [])
            ups[k] = start(argv, port, "share-" + k)
            started.append(ups[k])
            place(ups[k].pid, 1, realtime=k == "c")
        port = free_port()
        conf = os.path.join(tmp, "modelgate.conf")
        with open(conf, "w") as f:
            f.write("[Proxy]\nListen=127.0.0.1:%d\n" % port)
            for k, p in ports.items():
                f.write("[Host]\nName=%s\nURL=http://127.0.0.1:%d\n" % (k, p))
        d = start([daemon, "--config=" + conf], port, "share-modelgated")
        started.append(d)
        place(d.pid, 0, realtime=True)
        time.sleep(1)  # each host's list read, and its feed followed
        res = {k: [] for k, _ in RUNS}
        res.update({"n": n, "daemon": daemon, "rt": os.sched_getscheduler(d.pid) == os.SCHED_FIFO,
                    "date": time.strftime("%Y-%m-%d"), "load": os.getloadavg()[0]})
        kinds = [k for k, _ in RUNS]
        res["rounds"] = rounds
        for r in range(rounds):
            for kind in kinds[r % 4:] + kinds[:r % 4]:
                x = run(kind, port, n, ups["flood"], d.pid)
                res[kind].append(x)
                if not x["answered"]:
                    res["held"] = kind
                    return res
            print("share round %d done" % (r + 1), flush=True)
        return res
    finally:
        for p in reversed(started):
            stop(p)


def summary(res):
    out = {}
    for k, _ in RUNS:
        ok = [x for x in res[k] if x["answered"]]
        if not ok:
            out[k] = None
            continue
        out[k] = {f: med([x[f] for x in ok]) for f in ("first_p50", "first_p99", "end_p50", "end_p99", "cpu")}
        out[k]["p99s"] = [x["end_p99"] for x in ok]
        out[k]["max"] = max(x["max"] for x in ok)
        mb = [x["mbps"] for x in ok if x["mbps"] is not None]
        out[k]["mbps"] = med(mb) if mb else None
    return out


def report(res, before=None):
    s = summary(res)
    lines = [TITLE, "",
             "rule:fair-share: no host's feed or list can take more than its share of a turn of the loop. One modelgated"
             " with three `[Host]`s, each in front of its own C upstream: `flood` lists %d models and sends"
             " `status_change` events naming them in turn as fast as its socket takes them (`upstream PORT"
             " flood=%d`, SIGUSR1 and SIGUSR2); `blast` streams an answer in 16 KiB chunks as fast as its socket"
             " takes them to `client blast`, which reads as fast; `c` is the host measured: `client latency`, %d"
             " streaming requests of 8 chunks one after another, after 200 to warm up. %d rounds of the four"
             " runs, their order turning; medians over rounds. The daemon has CPU 0 to itself, the upstreams and"
             " clients share CPU 1; the daemon, the measured client and host run SCHED_FIFO%s, so that the"
             " machine's other work does not preempt them (a busy daemon would otherwise lose whole time slices"
             " to it). Command: `bench/share.py` (or `bench/run`), on %s, the machine's load average %.1f as it"
             " began (%d CPUs)." % (
                 FLOOD_MODELS, FLOOD_MODELS, res["n"], res["rounds"], "" if res.get("rt") else
                 " (**not here: no permission, so the figures include the machine's scheduler**)", res["date"],
                 res["load"], os.cpu_count()), ""]
    if all(s[k] for k, _ in RUNS):
        lines += ["| run | first byte p50 | p99 | end p50 | end p99 | end p99 minus idle | end p99 of each round"
                  " | stream | daemon CPU |", "|---|---|---|---|---|---|---|---|---|"]
        for k, name in RUNS:
            m = s[k]
            lines.append("| %s | %d µs | %d µs | %d µs | %d µs | %s | %s | %s | %.0f %% |" % (
                name, m["first_p50"], m["first_p99"], m["end_p50"], m["end_p99"],
                "%+d µs" % (m["end_p99"] - s["idle"]["end_p99"]) if k != "idle" else "",
                " ".join("%d" % x for x in m["p99s"]), "%.0f MB/s" % m["mbps"] if m["mbps"] else "-", m["cpu"]))
        d = s["both"]["end_p99"] - s["idle"]["end_p99"]
        lines += ["", "With a host flooding its feed and another streaming at full speed, the third host's p99 is"
                  " %+d µs from the idle run's: %s. The largest single request under both was %.1f ms (the kernel"
                  " lends a real-time task's CPU to others 50 ms a second)." % (
                      d, "within 1 ms" if abs(d) <= 1000 else "**more than 1 ms**", s["both"]["max"] / 1000), ""]
    else:
        lines += ["The daemon did not answer the measured host's requests within %d s in the run '%s'." % (
            TIMEOUT, res.get("held")), ""]
    if before:
        lines += ["Before each connection had a bounded share of a turn and an event its one entry (%s, the same"
                  " setup): %s" % (before["what"], before["text"]), ""]
    return lines


def describe(res):
    s = summary(res)
    parts = ["%s: end p50 %d µs, p99 %d µs" % (k, s[k]["end_p50"], s[k]["end_p99"]) for k, _ in RUNS if s[k]]
    if res.get("held"):
        parts.append("%s: the %d requests were not answered within %d s (the loop read the flooding feed for as"
                     " long as it lasted)" % (res["held"], res["n"], TIMEOUT))
    return "; ".join(parts) + "."


def write_section(lines):
    path = os.path.join(HERE, "results.md")
    text = open(path).read() if os.path.exists(path) else ""
    section = "\n".join(lines) + "\n"
    m = re.search(r"^%s\n.*?(?=^## |\Z)" % re.escape(TITLE), text, re.S | re.M)
    text = text[:m.start()] + section + text[m.end():] if m else text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def build():
    os.makedirs(OUT, exist_ok=True)
    b = os.path.join(OUT, "build")
    if not os.path.isdir(b):
        sh("meson", "setup", b, TOP, "--buildtype=release", "-Dtests=false")
    sh("ninja", "-C", b, stdout=subprocess.DEVNULL)
    for prog in ("upstream", "client"):
        sh("gcc", "-O2", "-Wall", "-o", os.path.join(OUT, prog), os.path.join(HERE, prog + ".c"))


def main():
    os.environ["STATE_DIRECTORY"] = os.path.join(OUT, "state")
    build()
    other = os.environ.get("BENCH_SHARE_DAEMON")
    if other:
        print(describe(measure(other)))
        return 0
    before = None
    if os.environ.get("BENCH_SHARE_BEFORE"):
        old = measure(os.environ["BENCH_SHARE_BEFORE"], rounds=1, n=200)
        before = {"what": os.environ.get("BENCH_SHARE_BEFORE_NAME", os.environ["BENCH_SHARE_BEFORE"]),
                  "text": "200 requests a run, one round: " + describe(old)}
    lines = report(measure(), before)
    write_section(lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for p in procs:
            stop(p)
