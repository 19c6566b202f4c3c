#!/usr/bin/python3
"""The request's parts, checked: each feature's part of the client's Request (client/request.h) is read
and written only by the file of that feature; every other file goes through that file's functions. The
Request's own fields, its Attempt, its answer, its alias and its waits are the core every file may read;
request.c, which makes and ends every part, is the one exception. client_record() (client-answer.c)
fills the request's record through the same functions.

usage: parts.py SRC_DIR        exit 0 when each part is read by its owner only, 1 with every violation
       parts.py --self-test    shows that a file reading another's part is caught
"""

import os
import re
import sys
import tempfile

# part (a member of Request) -> the files that may read it
OWNERS = {
    "usage": {"client-usage.c"},
    "id": {"client-answer.c"},
    "session": {"client-session.c"},
    "activity": {"client-activity.c"},
    "fallback": {"client-fallback.c"},
    "own": {"client-endpoints.c"},
    "stream": {"client-stream.c", "client-request.c"},
}
EVERY_PART = {"request.c"}

ACCESS = re.compile(r"\breq->(%s)\b" % "|".join(OWNERS))


def check(client_dir):
    problems = []
    for f in sorted(os.listdir(client_dir)):
        if not f.endswith(".c") or f in EVERY_PART:
            continue
        with open(os.path.join(client_dir, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                for part in ACCESS.findall(line):
                    if f not in OWNERS[part]:
                        problems.append("client/%s:%d reads the request's %s part, which is %s's" %
                                        (f, n, part, " and ".join(sorted(OWNERS[part]))))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "client-usage.c"), "w") as fh:
            fh.write("void f(Client *c) { c->req->usage.on = true; }\n")
        with open(os.path.join(d, "client-relay.c"), "w") as fh:
            fh.write("void g(Client *c) { c->req->attempt.mode = 0; }\n")
        assert check(d) == [], check(d)
        with open(os.path.join(d, "client-relay.c"), "a") as fh:
            fh.write("void h(Client *c) { Request *req = c->req; req->usage.body = false; }\n")
        found = check(d)
        assert len(found) == 1 and "client-relay.c:2" in found[0] and "usage" in found[0], found
    print("self-test: a file that reads another feature's part of the request is refused; the owner and the "
          "core are not")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    problems = check(os.path.join(sys.argv[1], "modelgated", "client"))
    for p in problems:
        print(p)
    if problems:
        return 1
    print("each part of the request is read by its own file (%d parts)" % len(OWNERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
