#!/usr/bin/python3
"""A switch with the prompt caches saved and restored (rule:prompt-cache) against one without, on the same
prompts: what the save and the restore add to a switch, and what they save of the prefill after it.

usage: bench/promptcache.py      as root (a boxed systemd user manager runs the engines); builds modelgated
                                 (release, bench/out/build), makes the model, measures, prints the section
                                 and puts it in bench/results.md

The real llama-server the tests build (tests/real/build-llama-server --find, or $MODELGATE_LLAMA_SERVER),
CPU only, in router mode, as two engine units of one host that conflict both ways (one GPU): 'mainline'
serves laguna-xs and 'fork' flint-xs, the same tiny random model (tests/real/make-model, here with a 16 k
context), each started with --parallel 1 and --slot-save-path. Two agents, A on laguna-xs and B on flint-xs,
each with a context of its own of about PROMPT_TOKENS tokens (the same on each of its turns, a new user
message each turn), take turns: A, B, A, B, ... so that every turn after the first two switches the engine.

Each round runs two modelgated, one after the other on the same engines (their order turning round by
round): 'with' has PromptCacheSaveSec=30s, 'without' PromptCacheSaveSec=0 (no save, no restore). Before
each, both engines are stopped and the saved files removed. A turn after a switch is measured: its time at
the client, the access line's switch= (the old engine's stop, the save in it, the new engine's start and
the restore before it counts as up), and the engine's own timings (prompt_n, cache_n, prompt_ms). The save
and restore times are modelgated's log lines. Medians over the turns; the ratio is the prefill time saved
over the switch time added. BENCH_QUICK=1: one round of fewer turns (for checking the script);
BENCH_ROUNDS=N: rounds (default 3)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True
from common import HERE, OUT, QUICK, TOP, free_port, med, sh, start, stop

TITLE = "## Prompt caches across a switch"
ROUNDS = 1 if QUICK else int(os.environ.get("BENCH_ROUNDS", "3"))
TURNS = 3 if QUICK else 8  # per agent and daemon; the first of each is before any switch
PROMPT_TOKENS = 4000
CONTEXT = 16384


CACHE_LINE = re.compile(r": (saved|restored) the prompt caches of 1 slot \(\d+ tokens, (\d+) KiB\) in ([^;\n]+)")


def span_ms(span):
    """systemd's format_timespan() at ms precision ("1s 234ms", "11ms", "0") in ms"""
    unit = {"min": 60000, "s": 1000, "ms": 1, "": 0}
    return sum(int(n) * unit[u] for n, u in re.findall(r"(\d+)(min|ms|s|)", span))


def find_server():
    path = os.environ.get("MODELGATE_LLAMA_SERVER")
    if not path:
        out = subprocess.run([os.path.join(TOP, "tests/real/build-llama-server"), "--find"], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise SystemExit("llama-server is not built: run tests/real/build-llama-server, or set "
                             "MODELGATE_LLAMA_SERVER")
        path = out.stdout.strip().splitlines()[-1]
    return path


def build():
    b = os.path.join(OUT, "build")
    if not os.path.isdir(b):
        sh("meson", "setup", b, TOP, "--buildtype=release", "-Dtests=false")
    sh("ninja", "-C", b, stdout=subprocess.DEVNULL)
    return os.path.join(b, "modelgated")


def agent_prompt(name):
    """a coding agent's context: file lines, about PROMPT_TOKENS tokens with the tiny model's vocabulary"""
    return "You are agent %s. " % name + " ".join("file%d line%d says %s%d;" % (i % 37, i, name, i * 7)
                                                  for i in range(PROMPT_TOKENS // 13))


def post(port, path, body, timeout=600):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Box:
    """a boxed systemd user manager (tests/integration/box.sh) that runs the two engine units"""

    def __init__(self):
        self.proc = subprocess.Popen([os.path.join(TOP, "tests", "integration", "box.sh"), "sh", "-c",
                                      'echo "$MODELGATE_BOX"; read x'], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.dir = self.proc.stdout.readline().strip()
        if not self.dir:
            raise SystemExit("the boxed user manager did not start (see ../shared/TESTING.md)")
        self.env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=%s/xdg/bus" % self.dir,
                        XDG_RUNTIME_DIR="/nonexistent")

    def units(self, server, models, port, saves):
        d = os.path.join(self.dir, "xdg", "systemd", "user")
        os.makedirs(d, exist_ok=True)
        for name, other in (("mainline", "fork"), ("fork", "mainline")):
            with open(os.path.join(d, "llama-%s.service" % name), "w") as f:
                f.write("[Unit]\nConflicts=llama-%s.service\nAfter=llama-%s.service\n[Service]\nType=exec\n"
                        "ExecStart=%s --models-dir %s --models-max 1 --host 127.0.0.1 --port %d -c %d "
                        "--parallel 1 --temp 0 --slot-save-path %s/\n"
                        % (other, other, server, os.path.join(models, name), port, CONTEXT, saves))
        self.systemctl("daemon-reload")

    def systemctl(self, *args):
        subprocess.run(["systemctl", "--user"] + list(args), env=self.env, check=True, capture_output=True)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def run_daemon(daemon, box, port, saves, save_sec, log):
    """one modelgated, agents A and B turn about; returns the measured turns (each after a switch)"""
    box.systemctl("stop", "llama-mainline.service", "llama-fork.service")
    for f in os.listdir(saves):
        os.unlink(os.path.join(saves, f))
    p = free_port()
    conf = os.path.join(OUT, log + ".conf")
    with open(conf, "w") as f:
        f.write("[Proxy]\nListen=127.0.0.1:%d\nHoldDownSec=0\n[Host]\nName=gpu\nURL=http://127.0.0.1:%d\n"
                "Bus=local\n" % (p, port))
        for name, models in (("mainline", "laguna-*"), ("fork", "flint-*")):
            f.write("[Engine]\nHost=gpu\nName=%s\nUnit=llama-%s.service\nModels=%s\nStartTimeoutSec=120s\n"
                    "PromptCacheSaveSec=%s\n" % (name, name, models, save_sec))
    logpath = os.path.join(OUT, log + ".log")
    d = start([daemon, "--config=" + conf], p, log, env=box.env)
    try:
        deadline = time.monotonic() + 30
        while "host gpu up" not in open(logpath).read():
            if time.monotonic() > deadline:
                raise SystemExit("modelgated did not see the engines' host: " + logpath)
            time.sleep(0.05)
        agents = (("gpu-laguna-xs", agent_prompt("A")), ("gpu-flint-xs", agent_prompt("B")))
        turns = []
        for i in range(TURNS * 2):
            model, system = agents[i % 2]
            body = {"model": model, "temperature": 0, "max_tokens": 4,
                    "messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": "turn %d" % (i // 2)}]}
            t0 = time.monotonic()
            r = post(p, "/v1/chat/completions", body)
            took = time.monotonic() - t0
            if i < 2:
                continue  # the engine's first start, nothing to restore
            log_text = ""
            deadline = time.monotonic() + 10
            while r["id"] not in log_text and time.monotonic() < deadline:  # the access line names the id
                time.sleep(0.05)
                log_text = open(logpath).read()
            line = [l for l in log_text.splitlines() if "POST /v1/chat/completions" in l][-1]
            m = re.search(r" switch=([\d.]+)s", line)
            turns.append({"s": took, "switch": float(m.group(1)) if m else 0.0,
                          "prompt_n": r["timings"]["prompt_n"], "cache_n": r["timings"]["cache_n"],
                          "prompt_ms": r["timings"]["prompt_ms"], "tokens": r["usage"]["prompt_tokens"]})
        ms, kib = {"saved": [], "restored": []}, []
        for what, k, span in CACHE_LINE.findall(open(logpath).read()):
            ms[what].append(span_ms(span))
            if what == "saved":
                kib.append(int(k))
        return turns, ms, kib
    finally:
        stop(d)


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def main():
    server = find_server()
    tree = os.path.normpath(os.path.join(os.path.dirname(server), "../.."))
    daemon = os.environ.get("BENCH_PROMPTCACHE_DAEMON") or build()
    work = os.path.join(OUT, "promptcache")
    shutil.rmtree(work, ignore_errors=True)
    saves = os.path.join(work, "saves")
    os.makedirs(saves)
    model = os.path.join(work, "tiny.gguf")
    # Debian's python3 with its numpy, as the tests run it
    sh("/usr/bin/python3", os.path.join(TOP, "tests/real/make-model"), "--tree", tree, model, "--context",
       str(CONTEXT), stdout=subprocess.DEVNULL)
    for name, file in (("mainline", "laguna-xs.gguf"), ("fork", "flint-xs.gguf")):
        os.makedirs(os.path.join(work, name))
        os.link(model, os.path.join(work, name, file))
    os.environ["STATE_DIRECTORY"] = os.path.join(OUT, "state")
    load = loadavg()
    t0 = time.monotonic()
    box = Box()
    res = {"with": [], "without": []}
    cache = {"saved": [], "restored": [], "kib": []}
    try:
        port = free_port()
        box.units(server, work, port, saves)
        for r in range(ROUNDS):
            for kind in (("with", "without") if r % 2 == 0 else ("without", "with")):
                turns, ms, kib = run_daemon(daemon, box, port, saves, "30s" if kind == "with" else "0",
                                            "promptcache-" + kind)
                res[kind] += turns
                if kind == "with":
                    cache["saved"] += ms["saved"]
                    cache["restored"] += ms["restored"]
                    cache["kib"] += kib
                print("round %d %s: %s" % (r + 1, kind, ", ".join(
                    "%.2fs (switch %.2fs, prefilled %d in %.0f ms)" % (t["s"], t["switch"], t["prompt_n"],
                                                                       t["prompt_ms"]) for t in turns)))
        box.systemctl("stop", "llama-mainline.service", "llama-fork.service")
    finally:
        box.close()
    with open(os.path.join(OUT, "promptcache.json"), "w") as f:
        json.dump({"turns": res, "cache": cache}, f)
    lines = report(res, cache, load, time.monotonic() - t0, server)
    write_section(lines)
    print("\n".join(lines))
    return 0


def report(res, cache, load, took, server):
    w, wo = res["with"], res["without"]

    def m(rows, k):
        return med([t[k] for t in rows])

    # the switch's own time is the turn's less its prefill: the router loads the model inside switch= for a
    # restore, in the request's own time without one, so switch= alone would count that load on one side
    for t in w + wo:
        t["other"] = t["s"] - t["prompt_ms"] / 1000
    added = m(w, "other") - m(wo, "other")
    saved_ms = m(wo, "prompt_ms") - m(w, "prompt_ms")
    rows = [("without (PromptCacheSaveSec=0)", wo), ("with (PromptCacheSaveSec=30s)", w)]
    out = [TITLE, "",
           "rule:prompt-cache: two agents on two engines of one host take turns, each turn after a switch. "
           "Command: `%sbench/promptcache.py` (as root), on %s; %d round(s), %d turns after a switch per daemon "
           "a round, the two daemons' order turning; medians over turns. The real llama-server (%s), CPU only, "
           "the suite's tiny random model (`tests/real/make-model`, 2 blocks, embedding 64) with a %d-token "
           "context, `--parallel 1 --slot-save-path`; each agent's prompt %d tokens. **The machine was shared "
           "with other work while it ran** (load average %s as it began, 2 CPUs): the times are this run's, "
           "the ratio is the point. Took %.0f s."
           % ("".join("%s=%s " % (k, os.environ[k]) for k in ("BENCH_QUICK", "BENCH_ROUNDS") if k in os.environ),
              time.strftime("%Y-%m-%d"), ROUNDS, TURNS * 2 - 2, os.path.basename(os.path.dirname(
               os.path.dirname(os.path.dirname(os.path.dirname(server))))), CONTEXT,
              med([t["tokens"] for t in w + wo]), load, took), "",
           "| daemon | turn at the client | of which not the prefill | switch= (stop, save, start, restore) "
           "| tokens prefilled | reused | prefill time |",
           "|---|---|---|---|---|---|---|"]
    for name, rs in rows:
        out.append("| %s | %.2f s | %.2f s | %.2f s | %d | %d | %.0f ms |" % (
            name, m(rs, "s"), m(rs, "other"), m(rs, "switch"), m(rs, "prompt_n"), m(rs, "cache_n"),
            m(rs, "prompt_ms")))
    out += ["",
            "Switch time added by the save and the restore (the turn less its prefill, with against without): "
            "%+.0f ms; prefill time saved: %.0f ms; **ratio (saved over added): %s**. The turn after a switch "
            "takes %.2f of its time without them."
            % (added * 1000, saved_ms, ("%.1f" % (saved_ms / (added * 1000))) if added > 0 else "no time added",
               m(w, "s") / m(wo, "s")),
            "Each save (modelgated's log line): median %.0f ms for %d KiB; each restore %.0f ms."
            % (med(cache["saved"]) if cache["saved"] else 0, med(cache["kib"]) if cache["kib"] else 0,
               med(cache["restored"]) if cache["restored"] else 0),
            "The tiny model makes the KV cache small (a few KiB a token) and the prefill cheap; on a GPU with a "
            "real model both grow: a 32 B model's slot of 28 k tokens is several GB to write and read "
            "(`modelgate.conf`(5), `PromptCacheSaveSec=`), against 10 to 30 s of prefill on a 3090 and 60 to "
            "90 s on a Strix Halo box. The ratio here is the tiny model's. In router mode the restore loads the "
            "model (the router starts its child for it), so `switch=` with the restore holds the model's load, "
            "which without it is in the first request's own time: hence the time added is counted on the whole "
            "turn less its prefill."]
    return out


def write_section(lines):
    path = os.path.join(HERE, "results.md")
    text = open(path).read() if os.path.exists(path) else ""
    section = "\n".join(lines) + "\n"
    m = re.search(r"^%s\n.*?(?=^## |\Z)" % re.escape(TITLE), text, re.S | re.M)
    text = text[:m.start()] + section + text[m.end():] if m else text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
