#!/usr/bin/python3
"""The layout of src/, checked: every #include "…" points down the layer order below, or within its own
module, and no files include each other in a circle. The order is the documentation (README.md, "Layout"
names the same layers): a new file gets its place here, or this test fails.

usage: layers.py SRC_DIR            exit 0 when the layout holds, 1 with every violation listed
       layers.py --self-test         shows that a circle and an upward include or call are caught
"""

import os
import re
import sys
import tempfile

# Bottom to top, one folder a module: a file belongs to the module of its folder (src/shared/, a folder of
# src/modelgated/, or main: src/modelgated/modelgated.c and src/modelgatectl/). Files of one module include
# and call each other freely; between modules, includes and calls point down this list.
FOLDERS = ["conf", "http", "api", "sched", "event", "records", "access", "upstream", "catalog", "hostbus",
           "host", "manager", "client", "server", "bus"]
LAYERS = ([("shared", [r"shared/.*"])] + [(f, [r"modelgated/%s/.*" % f]) for f in FOLDERS] +
          [("main", [r"modelgated/modelgated", r"modelgatectl/.*"])])
# Folders of pure functions: no event loop, no bus, no file or socket of their own (tests drive them alone)
# Pure: folders, and the pure files of a folder that is not (what a test drives alone beside its owner)
PURE = {"http", "api", "sched", "catalog/catalog-list.c", "catalog/catalog-list.h", "catalog/catalog-event.c",
        "catalog/catalog-event.h", "access/basic-auth.c", "access/basic-auth.h", "access/host-check.c",
        "access/host-check.h"}
IMPURE = re.compile(r'^\s*#\s*include\s+<(systemd/[^>]+|unistd\.h|fcntl\.h|sys/epoll\.h|sys/stat\.h)>', re.M)

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


def impure(src):
    """files of a PURE folder that include the event loop's, the bus's or the kernel's I/O headers"""
    problems = []
    for pure in sorted(PURE):
        top = os.path.join(src, "modelgated", pure)
        if os.path.isfile(top):
            folder, names = os.path.dirname(pure), [os.path.basename(pure)]
        else:
            folder, names = pure, sorted(os.listdir(top)) if os.path.isdir(top) else []
        for f in names:
            with open(os.path.join(src, "modelgated", folder, f), encoding="utf-8") as fh:
                for inc in IMPURE.findall(fh.read()):
                    problems.append("modelgated/%s/%s includes <%s>: %s is pure" % (folder, f, inc, pure))
    return problems


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
    # A file and its header are one room (client.c with client.h): a private header that includes the
    # public one, included back by the file of the public one's name, is a circle between rooms.
    circle = find_circle(stem_graph(graph))
    if circle:
        problems.append("include circle between rooms (a file and its header): " + " -> ".join(circle))
    return problems


DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b([a-z_]\w*)\s*\([^;{]*\)\s*\{", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"", re.S)


def read_calls(src):
    """{file.c: [file.c of another module whose functions it calls]}: between modules calls point down
    (news goes up through callback tables, whose calls name no function); the files of one module call
    each other freely, through the module's internal header"""
    texts = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    texts[os.path.relpath(os.path.join(root, f), src)] = COMMENT.sub("", fh.read())
    defined = {}
    for f, text in texts.items():
        for name in DEFINITION.findall(text):
            defined.setdefault(name, f)
    calls = {}
    for f, text in texts.items():
        called = set(re.findall(r"\b([a-z_]\w*)\s*\(", text))
        calls[f] = sorted({defined[n] for n in called if n in defined and not same_module(defined[n], f)})
    return calls


def same_module(a, b):
    """whether two files (paths relative to src) are of one module"""
    ma, mb = module_of(os.path.splitext(a)[0]), module_of(os.path.splitext(b)[0])
    return a == b or (ma is not None and ma == mb)


def upward_calls(calls):
    """every call from a module to one above it in LAYERS"""
    problems = []
    for f in sorted(calls):
        here = module_of(os.path.splitext(f)[0])
        for t in calls[f]:
            there = module_of(os.path.splitext(t)[0])
            if here is not None and there is not None and there[0] > here[0]:
                problems.append("%s (layer %s) calls %s (layer %s): it points up" % (f, here[1], t, there[1]))
    return problems


def tangles(graph):
    """every set of two or more files that reach each other (Tarjan's strongly connected components)"""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(n):
        index[n] = low[n] = len(index)
        stack.append(n)
        on.add(n)
        for m in graph.get(n, []):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            group = []
            while True:
                m = stack.pop()
                on.discard(m)
                group.append(m)
                if m == n:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


def stem_graph(graph):
    """the include graph between rooms: a path without its extension stands for its .c and its .h"""
    stems = {}
    for f, incs in graph.items():
        edges = stems.setdefault(os.path.splitext(f)[0], [])
        for inc in incs:
            stem = os.path.splitext(inc)[0]
            if inc in graph and stem != os.path.splitext(f)[0] and stem not in edges:
                edges.append(stem)
    return stems


def room_tangles(includes, calls):
    """rooms (a file with its header) tied in a circle by includes and calls together: a file that includes
    another room's header while that room calls into it is a circle no single graph shows"""
    graph = {stem: list(edges) for stem, edges in stem_graph(includes).items()}
    for f, targets in calls.items():
        edges = graph.setdefault(os.path.splitext(f)[0], [])
        for t in targets:
            stem = os.path.splitext(t)[0]
            if stem != os.path.splitext(f)[0] and stem not in edges:
                edges.append(stem)
    return tangles(graph)


def self_test():
    """the checks themselves: each broken layout must be refused"""
    good = {"shared/a.h": [], "modelgated/http/http.h": ["shared/a.h"], "modelgated/manager/manager.c": ["modelgated/http/http.h"]}
    assert check(good) == [], check(good)
    upward = dict(good, **{"modelgated/http/http.c": ["modelgated/manager/manager.h"], "modelgated/manager/manager.h": []})
    assert any("points up" in p for p in check(upward)), check(upward)
    circle = dict(good, **{"modelgated/client/client.c": ["modelgated/client/client-internal.h"],
                           "modelgated/client/client-internal.h": ["modelgated/client/client.c"]})
    assert any("include circle" in p for p in check(circle)), check(circle)
    rooms = dict(good, **{"modelgated/host/host.c": ["modelgated/host/host-internal.h"], "modelgated/host/host.h": [],
                          "modelgated/host/host-internal.h": ["modelgated/host/host.h"]})
    assert any("between rooms" in p for p in check(rooms)), check(rooms)
    assert tangles({"a.c": ["b.c"], "b.c": ["a.c"], "c.c": ["a.c"]}) == [["a.c", "b.c"]]
    # http-header.c includes http.h while http.c calls http-header.c: a circle of rooms
    assert room_tangles({"m/http.c": ["m/http.h"], "m/http.h": [], "m/http-header.c": ["m/http.h"]},
                        {"m/http.c": ["m/http-header.c"], "m/http-header.c": []}) == [["m/http", "m/http-header"]]
    stray = dict(good, **{"modelgated/newthing.c": []})
    assert any("in no layer" in p for p in check(stray)), check(stray)
    # calls, read from files: two files of the client module call each other freely; a module that calls
    # one above it is refused, and so is a circle of calls between modules
    with tempfile.TemporaryDirectory() as src:
        sources = {
            "modelgated/client/client-a.c": "void client_a(void) { client_b(); manager_go(); }\n",
            "modelgated/client/client-b.c": "void client_b(void) { client_a(); }\n",
            "modelgated/manager/manager.c": "void manager_go(void) { }\nvoid manager_up(void) { client_a(); }\n",
        }
        for d in ("client", "manager"):
            os.makedirs(os.path.join(src, "modelgated", d))
        for name, text in sources.items():
            with open(os.path.join(src, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        calls = read_calls(src)
        assert calls["modelgated/client/client-a.c"] == ["modelgated/manager/manager.c"], calls
        assert calls["modelgated/client/client-b.c"] == [], calls
        assert any("calls modelgated/client/client-a.c" in p and "points up" in p for p in upward_calls(calls)), calls
        assert tangles(calls) == [["modelgated/client/client-a.c", "modelgated/manager/manager.c"]], tangles(calls)
        del calls["modelgated/manager/manager.c"]
        assert upward_calls(calls) == [] and tangles(calls) == [], calls
    stray_folder = dict(good, **{"modelgated/newfolder/a.c": []})
    assert any("in no layer" in p for p in check(stray_folder)), check(stray_folder)
    with tempfile.TemporaryDirectory() as src:
        # a pure folder, and a pure file of a folder that is not
        for name in ("api/r.c", "access/basic-auth.c", "access/access.c"):
            os.makedirs(os.path.join(src, "modelgated", os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(src, "modelgated", name), "w", encoding="utf-8") as fh:
                fh.write("#include <string.h>\n#include <systemd/sd-event.h>\n")
        found = impure(src)
        assert any("api/r.c" in p and "is pure" in p for p in found), found
        assert any("access/basic-auth.c" in p for p in found) and not any("access/access.c" in p for p in found), found
    print("self-test: an upward include or call, a circle between files or rooms (by includes, calls between "
          "modules or both) a file in no folder of the list and an event loop in a pure folder are each refused; files of one module call each other")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    problems = check(read_includes(sys.argv[1])) + impure(sys.argv[1])
    calls = read_calls(sys.argv[1])
    problems += upward_calls(calls)
    for group in tangles(calls):
        problems.append("files that call each other in a circle: " + ", ".join(group))
    for group in room_tangles(read_includes(sys.argv[1]), calls):
        problems.append("rooms that include and call each other in a circle: " + ", ".join(group))
    for p in problems:
        print(p)
    if problems:
        return 1
    print("%d files; every include points down the %d layers, no circle" %
          (len(read_includes(sys.argv[1])), len(LAYERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
