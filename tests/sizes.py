#!/usr/bin/python3
"""The sizes of src/, checked. A .c or .h file over 700 lines or a C function over 80 lines (from the
line its definition starts on to its closing brace at column 0) is printed as a warning: it is time to
split it along its parts, or the function along its concepts, but the work that grew it need not stop
there. Only a file over 1000 lines or a function over 120 fails the check. The soft size is a signal
rather than a wall, so that files do not pile up just under it with their next part squeezed in.

usage: sizes.py SRC_DIR [--allow FILE[:FUNCTION]]...   exit 0 when every size is under its hard limit
                                                        (warnings printed), 1 with each offender
                                                        listed; an allowed one is not
       sizes.py --self-test                             shows that a long file and a long function are
                                                        warned of, and a longer one refused
"""

import os
import re
import sys

WARN_FILE_LINES = 700
WARN_FUNCTION_LINES = 80
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 120

# comments, strings and character literals: their braces are not the code's
NOT_CODE = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
NAME = re.compile(r"\b([A-Za-z_]\w*)\s*\($")


def blank(m):
    """a comment or literal as spaces, its newlines kept, so that line numbers stay"""
    return re.sub(r"[^\n]", " ", m.group(0))


def functions(text):
    """[(name, first line, last line)] of every function defined in a C text, lines counted from 1"""
    lines = NOT_CODE.sub(blank, text).split("\n")
    out = []
    depth = 0
    start = None  # the line (index) of the top-level declaration being read
    body = None  # (name, first line) of the function whose body is open
    for i, line in enumerate(lines):
        if depth == 0 and start is None and re.match(r"[A-Za-z_]", line):
            start = i
        for pos, ch in enumerate(line):
            if ch == "{":
                if depth == 0:
                    body = None
                    head = " ".join(lines[start:i] + [line[:pos]]) if start is not None else ""
                    paren = head.find("(")
                    # a definition has its parameter list before the brace and no '=' before that list
                    # (an initializer's braces are not a body)
                    if paren >= 0 and "=" not in head[:paren]:
                        m = NAME.search(head[:paren + 1])
                        body = (m.group(1) if m else "?", start + 1)
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    if body is not None and pos == 0:
                        out.append((body[0], body[1], i + 1))
                    body = start = None
        if depth == 0 and start is not None and (line.rstrip().endswith(";") or not line.strip()):
            start = None  # a prototype or a declaration ends here
    return out


def weigh(what, n, soft, hard, may_stay):
    """("problem"|"warning"|None, line of text) for one file or function of n lines"""
    if n > hard and not may_stay:
        return "problem", "%s is %d lines (at most %d)" % (what, n, hard)
    if n > soft:
        return "warning", "%s is %d lines (over %d: time to split it)" % (what, n, soft)
    return None, None


def sizes(files, allow):
    """(problems, warnings), each a list of lines of text: files is {path: text}, allow a set of "path"
    and "path:function" that may stay over the hard limit (the parts another change is about to split);
    a problem is over the hard limit, a warning over the soft size only"""
    out = {"problem": [], "warning": [], None: []}
    for path in sorted(files):
        text = files[path]
        kind, line = weigh(path, text.count("\n"), WARN_FILE_LINES, MAX_FILE_LINES, path in allow)
        out[kind].append(line)
        if not path.endswith((".c", ".h")):
            continue
        for name, first, last in functions(text):
            kind, line = weigh("%s:%d: %s()" % (path, first, name), last - first + 1, WARN_FUNCTION_LINES,
                               MAX_FUNCTION_LINES, "%s:%s" % (path, name) in allow)
            out[kind].append(line)
    return out["problem"], out["warning"]


def check(files, allow):
    """every offender over the hard limit, as a line of text (see sizes())"""
    return sizes(files, allow)[0]


def read_sources(src):
    """{path relative to src: text} of every .c and .h under src"""
    files = {}
    for root, _, names in os.walk(src):
        for f in names:
            if f.endswith((".c", ".h")):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    files[os.path.relpath(os.path.join(root, f), src)] = fh.read()
    return files


def self_test():
    """the check itself: each offender must be found, and nothing else"""
    def long_fn(name, n):
        body = "".join("        x += %d;\n" % i for i in range(n - 4))
        return "static int\n%s(int x,\n         int y) {\n" % name + body + "}\n"
    short_fn = "int short_one(void) {\n        return 0;\n}\n"
    init = "static const int table[] = {\n" + "        1,\n" * 100 + "};\n"
    braces = "void quoted(void) {\n        const char *s = \"}\";\n        char c = '{';\n        /* } */\n}\n"
    text = ("#include <x.h>\n\nint proto(void);\n\n" + short_fn + "\n" + init + "\n" + long_fn("long_one", 83) +
            "\n" + braces + "\n" + long_fn("longer_one", 123))
    found = functions(text)
    assert [f[0] for f in found] == ["short_one", "long_one", "quoted", "longer_one"], found
    assert found[1][2] - found[1][1] + 1 == 83, found
    assert found[3][2] - found[3][1] + 1 == 123, found
    # over the soft size: a warning only; over the hard limit: refused, unless allowed (then warned of)
    got = sizes({"a.c": text}, set())
    assert got == (["a.c:%d: longer_one() is 123 lines (at most 120)" % found[3][1]],
                   ["a.c:%d: long_one() is 83 lines (over 80: time to split it)" % found[1][1]]), got
    got = sizes({"a.c": text}, {"a.c:longer_one"})
    assert got[0] == [] and len(got[1]) == 2, got
    got = sizes({"b.h": "\n" * 701}, set())
    assert got == ([], ["b.h is 701 lines (over 700: time to split it)"]), got
    got = sizes({"b.h": "\n" * 1001}, set())
    assert got == (["b.h is 1001 lines (at most 1000)"], []), got
    assert check({"b.h": "\n" * 1001}, {"b.h"}) == []
    assert sizes({"c.c": short_fn}, set()) == ([], [])
    print("self-test: a file over %d lines and a function over %d are each warned of, one over %d and %d "
          "refused, an allowed one is not, and braces in strings, comments and initializers are not taken for "
          "a body" % (WARN_FILE_LINES, WARN_FUNCTION_LINES, MAX_FILE_LINES, MAX_FUNCTION_LINES))


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    src, allow, rest = argv[0], set(), argv[1:]
    while rest:
        if rest[0] != "--allow" or len(rest) < 2:
            print(__doc__)
            return 2
        allow.add(rest[1])
        rest = rest[2:]
    files = read_sources(src)
    problems, warnings = sizes(files, allow)
    for w in warnings:
        print("warning: " + w)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("%d files; none over %d lines, no function over %d%s; %d over the soft size of %d and %d" %
          (len(files), MAX_FILE_LINES, MAX_FUNCTION_LINES,
           " (%d allowed to stay over for now)" % len(allow) if allow else "", len(warnings),
           WARN_FILE_LINES, WARN_FUNCTION_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
