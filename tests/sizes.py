#!/usr/bin/python3
"""The sizes of src/, checked: no .c or .h file over 700 lines and no C function over 80 lines (from the
line its definition starts on to its closing brace at column 0). A function that grows past that is
split along its concepts, a file along its parts.

usage: sizes.py SRC_DIR [--allow FILE[:FUNCTION]]...   exit 0 when every size holds, 1 with each
                                                        offender listed; an allowed one is not
       sizes.py --self-test                             shows that a long file and a long function are
                                                        caught
"""

import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80

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


def check(files, allow):
    """every offender, as a line of text: files is {path: text}, allow a set of "path" and
    "path:function" that may stay over (the parts another change is about to split)"""
    problems = []
    for path in sorted(files):
        text = files[path]
        n = text.count("\n")
        if n > MAX_FILE_LINES and path not in allow:
            problems.append("%s: %d lines (at most %d)" % (path, n, MAX_FILE_LINES))
        if not path.endswith((".c", ".h")):
            continue
        for name, first, last in functions(text):
            length = last - first + 1
            if length > MAX_FUNCTION_LINES and "%s:%s" % (path, name) not in allow:
                problems.append("%s:%d: %s() is %d lines (at most %d)" %
                                (path, first, name, length, MAX_FUNCTION_LINES))
    return problems


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
    body = "".join("        x += %d;\n" % i for i in range(79))
    long_fn = "static int\nlong_one(int x,\n         int y) {\n" + body + "}\n"
    short_fn = "int short_one(void) {\n        return 0;\n}\n"
    init = "static const int table[] = {\n" + "        1,\n" * 100 + "};\n"
    braces = "void quoted(void) {\n        const char *s = \"}\";\n        char c = '{';\n        /* } */\n}\n"
    text = "#include <x.h>\n\nint proto(void);\n\n" + short_fn + "\n" + init + "\n" + long_fn + "\n" + braces
    found = functions(text)
    assert [f[0] for f in found] == ["short_one", "long_one", "quoted"], found
    assert found[1][2] - found[1][1] + 1 == 83, found
    assert check({"a.c": text}, set()) == ["a.c:%d: long_one() is 83 lines (at most 80)" % found[1][1]], \
        check({"a.c": text}, set())
    assert check({"a.c": text}, {"a.c:long_one"}) == []
    big = "\n" * 701
    assert check({"b.h": big}, set()) == ["b.h: 701 lines (at most 700)"], check({"b.h": big}, set())
    assert check({"b.h": big}, {"b.h"}) == []
    print("self-test: a file over %d lines and a function over %d are each refused, an allowed one is not, "
          "and braces in strings, comments and initializers are not taken for a body" %
          (MAX_FILE_LINES, MAX_FUNCTION_LINES))


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
    problems = check(files, allow)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("%d files; none over %d lines, no function over %d%s" %
          (len(files), MAX_FILE_LINES, MAX_FUNCTION_LINES,
           " (%d allowed to stay over for now)" % len(allow) if allow else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
