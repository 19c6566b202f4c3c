#!/usr/bin/python3
"""The switch scheduler's cost per event with 10 000 requests waiting (issue 26), before and after.

usage: bench/schedcost.py [--before=REV]    measure, print the section, put it in bench/results.md
       (bench/run measures it too, with the rest)

bench/sched.c is built twice with gcc -O2: against src/modelgated/sched/sched.c of the tree, and against the
one of REV (by default the last commit whose scheduler walked every request on each event), taken with
`git archive` with the src/shared headers of its time. Each runs the same events on the same host
(bench/sched.c says which): CPU time per event, the median of ROUNDS runs alternating the two, and
instructions per event under callgrind, which move by less than 0.1 % from run to run."""

import glob
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
QUICK = os.environ.get("BENCH_QUICK") == "1"
# the scheduler of issue 26: every sched_next(), sched_next_timer() and sched_ahead() walked the requests
BEFORE = "463a2c315ed9868cd928b42caed88c78f76b2a9d"
WAITING = 10000
EVENTS = 500 if QUICK else 2000
ROUNDS = 3 if QUICK else 7
KINDS = ("arrive", "leave", "keepalive")


def build(name, src):
    exe = os.path.join(OUT, "sched-" + name)
    # the scheduler's files: sched.c, and since the tree of waiting requests moved out, sched-tree.c
    files = [os.path.join(src, "modelgated", "sched", f) for f in ("sched.c", "sched-tree.c")]
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-Wall", "-I", src, "-o", exe, os.path.join(HERE, "sched.c")] +
                   [f for f in files if os.path.exists(f)], check=True)
    return exe


def run(exe):
    out = subprocess.run([exe, str(WAITING), str(EVENTS)], capture_output=True, text=True, check=True).stdout
    return {k: float(ns) for k, _, ns in (l.split() for l in out.splitlines())}


def callgrind(exe):
    """instructions per event of each kind: one dump per kind, the setup not instrumented"""
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        "--callgrind-out-file=" + os.path.join(tmp, "cg.out"), exe, str(WAITING), str(EVENTS)],
                       capture_output=True, check=True)
        res = {}
        for path in glob.glob(os.path.join(tmp, "cg.out*")):
            kind, total = None, 0
            for line in open(path):
                if line.startswith("desc: Trigger: Client Request: "):
                    kind = line.split(": ")[-1].strip()
                elif line.startswith("summary:") or line.startswith("totals:"):
                    total = int(line.split()[1])
            if kind in KINDS:
                res[kind] = total / EVENTS
        return res


def after_rev():
    """the tree's commit, and whether its scheduler differs from it"""
    rev = subprocess.run(["git", "-C", TOP, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "the tree"
    changed = subprocess.run(["git", "-C", TOP, "diff", "--quiet", "HEAD", "--", "src/modelgated/sched/sched.c",
                              "src/modelgated/sched/sched.h", "src/shared"]).returncode != 0
    return rev + (" with changes to the scheduler not committed" if changed else "")


def measure(before=BEFORE):
    """the numbers, or {"skipped": why} (no git history to take the old scheduler from, no gcc)"""
    try:
        return measure_both(before)
    except (OSError, subprocess.CalledProcessError) as e:
        return {"skipped": str(e)}


def measure_both(before):
    os.makedirs(OUT, exist_ok=True)
    old = os.path.join(OUT, "sched-before-src")
    subprocess.run(["rm", "-rf", old], check=True)
    os.makedirs(old)
    # REV is older than the folders: its scheduler is src/modelgated/sched.[ch], and lands where bench/sched.c
    # includes it from (its own sched.c includes the header where it was)
    archive = subprocess.run(["git", "-C", TOP, "archive", before, "src/shared", "src/modelgated/sched.c",
                              "src/modelgated/sched.h"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
    rules = os.path.join(old, "src", "modelgated", "sched")
    os.makedirs(rules)
    os.rename(os.path.join(old, "src", "modelgated", "sched.c"), os.path.join(rules, "sched.c"))
    shutil.copy(os.path.join(old, "src", "modelgated", "sched.h"), os.path.join(rules, "sched.h"))
    exes = {"before": build("before", os.path.join(old, "src")), "after": build("after", os.path.join(TOP, "src"))}
    times = {v: {k: [] for k in KINDS} for v in exes}
    for r in range(ROUNDS):
        for v in (("before", "after") if r % 2 == 0 else ("after", "before")):
            for k, ns in run(exes[v]).items():
                times[v][k].append(ns)
    res = {"before_rev": subprocess.run(["git", "-C", TOP, "rev-parse", "--short", before], capture_output=True,
                                        text=True, check=True).stdout.strip(),
           "after_rev": after_rev(),
           "waiting": WAITING, "events": EVENTS, "rounds": ROUNDS}
    for v in exes:
        res[v] = {k: {"ns": statistics.median(times[v][k])} for k in KINDS}
        try:
            ir = callgrind(exes[v])
        except (OSError, subprocess.CalledProcessError):
            ir = {}
        for k in KINDS:
            res[v][k]["ir"] = ir.get(k)
    return res


def report(res):
    def ir(x):
        return "%.0f" % x if x is not None else "-"

    def ratio(a, b):
        return "%.0f×" % (a / b) if a and b else "-"

    if "skipped" in res:
        return ["## Scheduler: cost per event with %d requests waiting" % WAITING, "",
                "Not measured: %s." % res["skipped"], ""]
    lines = ["## Scheduler: cost per event with %d requests waiting" % res["waiting"], "",
             "One host (`bench/sched.c`): engine A up past its hold-down with one stream in flight, so the pending"
             " switch waits; %d requests wait for B, C and A in turn. An event is the call and then the pass"
             " `schedule_cb()` makes (`sched_next()` until it has nothing, `sched_next_timer()`): a request"
             " arrives and waits; a waiting client goes away (one picked at random); a waiting client's keepalive"
             " comment asks `sched_ahead()`. Before: `src/modelgated/sched.c` of %s, which walked the requests"
             " on each of these; after: `src/modelgated/sched/sched.c` of %s. CPU time: the thread's, over %d events of each kind, the median"
             " of %d runs alternating the two builds (gcc -O2); instructions: callgrind, each kind's events"
             " counted apart (they move by less than 0.1 %% from run to run)." % (
                 res["waiting"], res["before_rev"], res["after_rev"], res["events"], res["rounds"]), "",
             "| event | before: CPU per event | instructions | after: CPU per event | instructions | instructions before/after |",
             "|---|---|---|---|---|---|"]
    b, a = res["before"], res["after"]
    for k in KINDS:
        lines.append("| %s | %.1f µs | %s | %.2f µs | %s | %s |" % (
            k, b[k]["ns"] / 1e3, ir(b[k]["ir"]), a[k]["ns"] / 1e3, ir(a[k]["ir"]), ratio(b[k]["ir"], a[k]["ir"])))
    lines += ["", "Measured by `bench/schedcost.py` (also part of `bench/run`) on %s." % time.strftime("%Y-%m-%d"), ""]
    return lines


def update_results(lines):
    """this section of bench/results.md replaced (or added), the rest kept"""
    path = os.path.join(HERE, "results.md")
    text = open(path).read().split("\n") if os.path.exists(path) else []
    start = next((i for i, l in enumerate(text) if l.startswith("## Scheduler: cost per event")), None)
    if start is None:
        text = text + [""] + lines if text and text[-1] != "" else text + lines
    else:
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = lines
    with open(path, "w") as f:
        f.write("\n".join(text))


def main():
    before = BEFORE
    for a in sys.argv[1:]:
        if a.startswith("--before="):
            before = a.split("=", 1)[1]
        else:
            print(__doc__, file=sys.stderr)
            return 2
    lines = report(measure(before))
    update_results(lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
