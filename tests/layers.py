#!/usr/bin/python3
"""The layout of src/, checked: every #include "…" points down the layer order below, or within its own
module, and no files include each other in a circle. The order is the documentation (README.md, "Layout"
names the same layers): a new file gets its place here, or this test fails.

usage: layers.py SRC_DIR            exit 0 when the layout holds, 1 with every violation listed
       layers.py --self-test         shows that a circle and an upward include are caught
"""

import os
import re
import sys

# Bottom to top. A module is a set of files; a file belongs to the module whose pattern matches its
# name without the extension (first match wins). Files of one module may include each other.
LAYERS = [
    ("shared", [r"shared/.*"]),
    ("conf", [r"modelgated/conf(-.*)?", r"modelgated/url", r"modelgated/ssh-command"]),
    ("rules", [r"modelgated/access-line", r"modelgated/http", r"modelgated/http-header", r"modelgated/http-writer", r"modelgated/api-error", r"modelgated/sched",
               r"modelgated/route", r"modelgated/sse", r"modelgated/catalog-event", r"modelgated/engine"]),
    ("transport", [r"modelgated/upstream(-.*)?", r"modelgated/host-bus(-.*)?", r"modelgated/access",
                   r"modelgated/metrics", r"modelgated/feed-hub"]),
    ("catalog", [r"modelgated/catalog"]),
    ("host", [r"modelgated/host(-switch|-warmup|-private)?"]),
    ("engine-keys", [r"modelgated/engine-keys"]),
    ("manager", [r"modelgated/manager"]),
    ("request", [r"modelgated/models", r"modelgated/exchange"]),
    ("client", [r"modelgated/client(-.*)?"]),
    ("server", [r"modelgated/server"]),
    ("bus-object", [r"modelgated/bus-(object|call)(-.*)?"]),
    ("main", [r"modelgated/modelgated", r"modelgatectl/.*"]),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(name):
    """(layer index, module name) of a path relative to src/ without its extension"""
    for i, (module, patterns) in enumerate(LAYERS):
        if any(re.fullmatch(p, name) for p in patterns):
            return i, module
    return None


def read_includes(src):
    """{file: [included file]} for every .c and .h under src, paths relative to src"""
    graph = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.relpath(os.path.join(root, f), src)
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                graph[path] = [i for i in INCLUDE.findall(fh.read())]
    return graph


def find_circle(graph):
    """one include circle as a list of files, or None"""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if m not in graph:
                continue
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if state.get(m) is None:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if state.get(n) is None:
            found = visit(n)
            if found:
                return found
    return None


def check(graph):
    problems = []
    for f in sorted(graph):
        here = module_of(os.path.splitext(f)[0])
        if here is None:
            problems.append("%s: in no layer of tests/layers.py; give it its place there" % f)
            continue
        for inc in graph[f]:
            if inc not in graph:
                continue  # not ours (llhttp.h is included with <>; a stale path fails the build)
            there = module_of(os.path.splitext(inc)[0])
            if there is None:
                continue  # reported as a file of its own
            if there[1] != here[1] and there[0] >= here[0]:
                problems.append("%s (layer %s) includes %s (layer %s): it points %s" %
                                (f, here[1], inc, there[1], "up" if there[0] > here[0] else "sideways"))
    circle = find_circle(graph)
    if circle:
        problems.append("include circle: " + " -> ".join(circle))
    return problems


def self_test():
    """the checks themselves: each broken layout must be refused"""
    good = {"shared/a.h": [], "modelgated/http.h": ["shared/a.h"], "modelgated/manager.c": ["modelgated/http.h"]}
    assert check(good) == [], check(good)
    upward = dict(good, **{"modelgated/http.c": ["modelgated/manager.h"], "modelgated/manager.h": []})
    assert any("points up" in p for p in check(upward)), check(upward)
    circle = dict(good, **{"modelgated/client.c": ["modelgated/client-internal.h"],
                           "modelgated/client-internal.h": ["modelgated/client.c"]})
    assert any("include circle" in p for p in check(circle)), check(circle)
    stray = dict(good, **{"modelgated/newthing.c": []})
    assert any("in no layer" in p for p in check(stray)), check(stray)
    print("self-test: an upward include, a circle and a file in no layer are each refused")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    problems = check(read_includes(sys.argv[1]))
    for p in problems:
        print(p)
    if problems:
        return 1
    print("%d files; every include points down the %d layers, no circle" %
          (len(read_includes(sys.argv[1])), len(LAYERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
