"""For bench/run: system calls per proxied request (modelgate beside nginx) and fifty hosts on one daemon
(latency with traffic over all of them, again with three bad hosts beside them, and idle CPU)."""

import os
import re
import signal
import subprocess
import tempfile
import time

from common import (OUT, QUICK, ROUNDS, client, cpu_exact_ms, cpu_ticks, free_port, med, pct, post_lua, procs,
                    rss_kb, start, stop)

HOSTS = 50
BAD = (("h50", "blackholed: accepts, never answers"), ("h51", "stalls after 2 chunks of a stream"),
       ("h52", "refuses: nothing listens on its port"))
TRICKLE_MS = 100
GIVEUP_MS = 1000
IDLE_SEC = 10 if QUICK else 30


def strace_count(pid, port, tag):
    """system calls of one process while wrk runs, and wrk's request count"""
    out = os.path.join(OUT, "strace-%s.txt" % tag)
    st = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    procs.append(st)
    # counting starts once strace says so, not after a guessed delay
    line = st.stderr.readline()
    if "attached" not in line:
        raise SystemExit("strace -p %d: %s" % (pid, line.strip()))
    w = subprocess.run(["wrk", "-t", "2", "-c", "16", "-d", "3s", "-s", post_lua(),
                        "http://127.0.0.1:%d/v1/chat/completions" % port], capture_output=True, text=True,
                       check=True).stdout
    st.send_signal(signal.SIGINT)
    st.wait(timeout=30)
    requests = int(re.search(r"(\d+) requests in", w).group(1))
    calls = {}
    for line in open(out):
        f = line.split()
        # "% time seconds usecs/call calls [errors] syscall"; the header, rules and total are skipped
        if len(f) in (5, 6) and re.fullmatch(r"[\d.]+", f[0]) and f[-1] != "total":
            calls[f[-1]] = (int(f[3]), int(f[4]) if len(f) == 6 else 0)
    errors = [l for l in w.splitlines() if "Non-2xx" in l or "Socket errors" in l]
    return {"requests": requests, "calls": calls, "wrk_errors": errors}


def syscalls(t):
    """strace -c on modelgated and on nginx's worker (not its master) under the same wrk load"""
    return {k: strace_count(t.pids[k], t.ports[k], k) for k in ("modelgate", "nginx")}


def report_syscalls(sc):
    per = {k: {n: (c / sc[k]["requests"], e / sc[k]["requests"]) for n, (c, e) in sc[k]["calls"].items()}
           for k in sc}
    names = sorted(set(per["modelgate"]) | set(per["nginx"]),
                   key=lambda n: -(per["modelgate"].get(n, (0, 0))[0] + per["nginx"].get(n, (0, 0))[0]))

    def cell(k, n):
        c, e = per[k].get(n, (0, 0))
        if c < 0.005:
            return "-"
        return "%.2f" % c + (" (%.2f failed)" % e if e >= 0.005 else "")

    lines = ["## System calls per proxied keep-alive request (strace)", "",
             "| system call | modelgate | nginx |", "|---|---|---|"]
    lines += ["| %s | %s | %s |" % (n, cell("modelgate", n), cell("nginx", n)) for n in names
              if cell("modelgate", n) != "-" or cell("nginx", n) != "-"]
    tot = {k: sum(c for c, _ in per[k].values()) for k in per}
    lines += ["| **total** | **%.2f** | **%.2f** |" % (tot["modelgate"], tot["nginx"]), "",
              "`strace -c -f -p` on modelgated and on nginx's worker process while `wrk -t 2 -c 16 -d 3s` posts"
              " small non-streaming requests (the throughput test's); each count over wrk's request count"
              " (modelgate %d, nginx %d requests: slower under strace, the counts are what matter). \"failed\":"
              " calls that returned an error, mostly EAGAIN. Counts below 0.005 a request are left out." % (
                  sc["modelgate"]["requests"], sc["nginx"]["requests"]), ""]
    errs = sc["modelgate"]["wrk_errors"] + sc["nginx"]["wrk_errors"]
    if errs:
        lines += ["wrk reported: " + "; ".join(errs), ""]
    return lines


def start_daemon(tmp, name, hosts):
    port = free_port()
    conf = os.path.join(tmp, name + ".conf")
    with open(conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\nMaxConnectionsPerAddress=65536\n" % port)
        for host, up in hosts:
            f.write("[Host]\nName=%s\nURL=http://127.0.0.1:%d\n" % (host, up))
    p = start([os.path.join(OUT, "build", "modelgated"), "--config=" + conf], port, "hosts-" + name)
    # a listing waits (bounded) for the hosts' first reads after a start: how long the first two took
    first = [int(x) for x in client("get", port, 2, "/v1/models", target=name).split()]
    return p, port, first


def tcp_sockets(pid):
    """(state, remote port) of each of the process's TCP sockets: state 01 established, 08 close-wait"""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[9] in inodes:
            out.append((f[3], int(f[2].split(":")[1], 16)))
    return out


def first_byte(port, models, n, target):
    """p50 and p99 of the time to the first SSE byte, after a warm-up that touches every host"""
    client("latency", port, 200, *models, target=target)
    first = [int(l.split()[0]) for l in client("latency", port, n, *models, target=target).splitlines()]
    return {"p50": pct(first, 50), "p99": pct(first, 99)}


def rounds(ports, models, n):
    """the targets alternate round by round; medians over rounds"""
    res = {k: [] for k in ports}
    keys = list(ports)
    for r in range(ROUNDS):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            res[k].append(first_byte(ports[k], models[k], n, k))
    out = {k: {f: med([x[f] for x in v]) for f in ("p50", "p99")} for k, v in res.items()}
    for k, v in res.items():
        out[k]["p99s"] = [x["p99"] for x in v]  # the spread, for a reader to judge the median by
    return out


def listing(port, target):
    ends = [int(x) for x in client("get", port, 200 if QUICK else 1000, "/v1/models", target=target).split()]
    return {"p50": pct(ends, 50), "p99": pct(ends, 99)}


def idle_cpu(daemons):
    """utime+stime of each daemon over IDLE_SEC without traffic, as % of one core"""
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), {k: cpu_ticks(p.pid) for k, p in daemons.items()}
    e0 = {k: cpu_exact_ms(p.pid) for k, p in daemons.items()}
    time.sleep(IDLE_SEC)
    el = time.monotonic() - t0
    return {k: {"cpu_pct": (cpu_ticks(p.pid) - c0[k]) / hz / el * 100, "rss_kb": rss_kb(p.pid),
                "exact_ms": None if e0[k] is None else cpu_exact_ms(p.pid) - e0[k]}
            for k, p in daemons.items()}



def many_hosts():
    tmp = tempfile.mkdtemp(prefix="hosts.", dir=OUT)
    n = 500 if QUICK else 2000
    started = []
    try:
        ups = []
        for i in range(HOSTS):
            port = free_port()
            started.append(start([os.path.join(OUT, "upstream"), str(port)], port, "hosts-up%d" % i))
            ups.append(port)
        healthy = [("h%d" % i, ups[i]) for i in range(HOSTS)]
        bad, badstarted = bad_hosts()
        started += badstarted
        res = {"first_listing": {}, "listing": {}, "n": n}
        d = {}
        for k, hosts in (("one", healthy[:1]), ("fifty", healthy), ("bad", healthy + bad)):
            d[k], port, res["first_listing"][k] = start_daemon(tmp, k, hosts)
            started.append(d[k])
            d[k].port = port
        models = {"direct": ["b-m"], "one": ["h0-m"], "fifty": ["h%d-m" % i for i in range(HOSTS)]}
        models["bad"] = models["fifty"]
        res["a"] = rounds({"direct": ups[0], "one": d["one"].port, "fifty": d["fifty"].port}, models, n)
        res["listing"]["fifty"] = listing(d["fifty"].port, "fifty")
        tr = subprocess.Popen([os.path.join(OUT, "client"), "trickle", str(d["bad"].port), str(TRICKLE_MS),
                               str(GIVEUP_MS)] + ["%s-m" % h for h, _ in BAD], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
        procs.append(tr)
        t0, c0 = time.monotonic(), cpu_ticks(d["bad"].pid)
        # the rounds begin once the first abandoned answers are there
        time.sleep(GIVEUP_MS / 1000 + 0.5)
        res["b"] = rounds({"direct": ups[0], "one": d["one"].port, "bad": d["bad"].port}, models, n)
        res["listing"]["bad"] = listing(d["bad"].port, "bad")
        # what the daemon with the bad hosts spent meanwhile (the rounds' own requests included)
        res["busy_b"] = (cpu_ticks(d["bad"].pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0) * 100
        tr.stdin.close()
        res["trickle"] = tr.stdout.read().splitlines()
        tr.wait()
        res["idle"] = idle_cpu(d)
        # upstream connections left after the idle time: the feeds (idle pooled ones close after 4 s)
        socks = {k: tcp_sockets(p.pid) for k, p in d.items()}
        res["feeds"] = {k: len({port for st, port in v if st == "01"} & set(ups)) for k, v in socks.items()}
        # connections whose client has closed and that the daemon still holds
        res["close_wait"] = {k: sum(1 for st, _ in v if st == "08") for k, v in socks.items()}
        return res
    finally:
        for p in reversed(started):
            stop(p)


def bad_hosts():
    """h50 blackholed, h51 stalling mid-stream, h52 refusing"""
    bh, st = free_port(), free_port()
    ps = [start([os.path.join(OUT, "upstream"), str(bh), "blackhole"], bh, "hosts-blackhole"),
          start([os.path.join(OUT, "upstream"), str(st), "stall=2"], st, "hosts-stall")]
    return [("h50", bh), ("h51", st), ("h52", free_port())], ps


def report_hosts(h):
    a, b = h["a"], h["b"]
    add = {"one_a": a["one"]["p99"] - a["direct"]["p99"], "fifty": a["fifty"]["p99"] - a["direct"]["p99"],
           "one_b": b["one"]["p99"] - b["direct"]["p99"], "bad": b["bad"]["p99"] - b["direct"]["p99"]}
    rows = [("direct (the upstream)", a["direct"], None, None), ("one host", a["one"], a["direct"], None),
            ("50 hosts, requests over all 50", a["fifty"], a["direct"], add["one_a"]),
            ("direct (the upstream), again", b["direct"], None, None),
            ("one host, again", b["one"], b["direct"], None),
            ("50 hosts + 3 bad ones, requests over the 50 healthy, the bad ones with their own traffic",
             b["bad"], b["direct"], add["one_b"])]
    lines = ["## Fifty hosts on one daemon", "",
             "One modelgated with 50 `[Host]` sections (h0..h49), each in front of its own C upstream process;"
             " the one-host daemon beside it is the reference. Time to the first SSE byte, concurrency 1, %d"
             " requests a round naming the hosts' models in turn (h0-m, h1-m, ...), after 200 to warm up;"
             " %d rounds, the targets alternating; medians over rounds. Added: minus direct in the same"
             " rounds." % (h["n"], ROUNDS), "",
             "| setup | first byte p50 | p99 | added p50 | added p99 | added p99 minus one host's | p99 of each"
             " round |", "|---|---|---|---|---|---|---|"]
    for name, m, d, ref in rows:
        lines.append("| %s | %d µs | %d µs | %s | %s | %s | %s |" % (
            name, m["p50"], m["p99"], "%+d µs" % (m["p50"] - d["p50"]) if d else "",
            "%+d µs" % (m["p99"] - d["p99"]) if d else "",
            "%+d µs" % (m["p99"] - d["p99"] - ref) if ref is not None else "",
            " ".join("%d" % x for x in m["p99s"])))
    within = abs(add["bad"] - add["one_b"]) <= 1000
    lines += ["", "With the bad hosts the healthy hosts' added p99 is %+d µs against one host's %+d µs in the"
              " same rounds: %s." % (add["bad"], add["one_b"], "within 1 ms" if within else
                                      "**more than 1 ms apart**"), ""]
    lines += ["The bad hosts are h50..h52 of a third daemon (h0..h49 as above and these three, started with"
              " the other two; its rounds begin %.1f s after the bad hosts' traffic does): " % (
                  GIVEUP_MS / 1000 + 0.5) + "; ".join("%s %s" % hb for hb in BAD) + ". Their own traffic: a streaming"
              " request every %d ms, each on its own connection, naming them in turn, read until it ends;"
              " a client gives up on an answer that has not ended after %d ms and closes its connection,"
              " as clients with a timeout do (status: count, 0 for a close without an answer; open: neither"
              " ended nor given up when the rounds were over):" % (TRICKLE_MS, GIVEUP_MS), ""]
    lines += ["    " + l for l in h["trickle"]]
    lines += ["", "Meanwhile (from the first bad request to the end of the rounds) that daemon used %.0f %% of a"
              " core, its share of the rounds' requests included." % h["busy_b"]]
    fl, li = h["first_listing"], h["listing"]
    lines += ["", "`GET /v1/models` (the merged list), %d one after another: 50 hosts p50 %d µs / p99 %d µs;"
              " with the bad hosts and their traffic p50 %d µs / p99 %d µs. The first two right after a start"
              " (a listing waits at most 2 s for the first read of each host it can reach; `modelgated`(8):"
              " \"only the first request after a start waits\"): one host %s, 50 hosts %s, 50 hosts + the"
              " bad ones %s." % (
                  200 if QUICK else 1000, li["fifty"]["p50"], li["fifty"]["p99"], li["bad"]["p50"],
                  li["bad"]["p99"], *("%.1f ms and %.1f ms" % (fl[k][0] / 1e3, fl[k][1] / 1e3)
                                      for k in ("one", "fifty", "bad"))), ""]
    idle, feeds = h["idle"], h["feeds"]
    lines += ["### Idle", "",
              "| daemon | CPU idle, %% of one core (over %d s) | on a CPU, from the scheduler | RSS | feeds followed"
              " | client connections closed by the client, still held |" % IDLE_SEC, "|---|---|---|---|---|---|"]
    for k, name in (("one", "one host"), ("fifty", "50 hosts"), ("bad", "50 hosts + the 3 bad ones")):
        ex = idle[k]["exact_ms"]
        lines.append("| %s | %.2f %% | %s | %.1f MiB | %d | %d |" % (
            name, idle[k]["cpu_pct"], "-" if ex is None else "%.1f ms (%.3f %%)" % (ex, ex / IDLE_SEC / 10),
            idle[k]["rss_kb"] / 1024, feeds[k], h["close_wait"][k]))
    lines += ["", "utime + stime from `/proc/PID/stat` (10 ms ticks) of each daemon over the same %d s with no"
              " client traffic, and the scheduler's own count (`se.sum_exec_runtime` in `/proc/PID/sched`),"
              " right after the rounds above, `PollIntervalSec=` at its default 30 s: each host's `/models`"
              " read every 30 s, each host's `/models/sse` followed (the upstream sends a comment"
              " every 15 s). Feeds followed: the healthy upstreams the daemon still had a connection to after"
              " the idle time (pooled connections close after 4 s idle). Connections closed by the client and still"
              " held: the daemon's TCP sockets in CLOSE-WAIT after the idle time." % IDLE_SEC, ""]
    return lines
