#!/usr/bin/python3
"""The rules the code cites, checked: every "rule:NAME" in the sources, tests, man pages, README.md,
SECURITY.md, bench/ and docs/ is a heading "### rule:NAME" of docs/rules.md, and nothing cites a section number
("§4") or a rule number ("rule 6") of a contract that is not in the repository. An RFC's sections
("RFC 9112 §6.1") are the RFC's and stay; docs/rules.md may say "SPEC §N" where a rule came from, and
nothing else.

usage: rules.py [--allow-sections] ROOT   exit 0 when every cite holds, 1 with each problem listed;
                                          --allow-sections: such a number is listed, but does not fail
       rules.py --list ROOT               each rule, with the files that cite it (those that implement it)
       rules.py --self-test               shows that a missing rule and a section cite are caught
"""

import os
import re
import sys
import tempfile

RULES = "docs/rules.md"
# where cites are looked for, relative to the root: directories are walked, files read
PLACES = ["src", "tests", "man", "bench", "docs", "README.md", "SECURITY.md"]
SKIP_DIRS = {"node_modules", "corpus", "__pycache__", ".git", "out"}  # out: bench/out, what bench/run built
SELF = "tests/rules.py"

HEADING = re.compile(r"^#{2,6}[ \t]+rule:([a-z0-9]+(?:-[a-z0-9]+)*)[ \t]*$", re.M)
CITE = re.compile(r"\brule:([a-z0-9]+(?:-[a-z0-9]+)*)")
# What may stand before a "§": the document it is a section of, then the sections already named
# ("RFC 9112 §6.3, §5.2", "RFC 9112 §2–§7", "SPEC §5 rule 11, §8"), across comment line breaks.
ANCHOR = r"(RFC\s+\d+|SPEC)"
REF = r"§[\d.]+(?:\s+rules?\s+\d+(?:\s*(?:[–,-]|and)\s*\d+)*)?"
SEP = r"(?:\s*(?:,|;|–|-|and)\s*|\s+)"
CHAIN = re.compile(ANCHOR + r"\s*(?:" + REF + SEP + r")*$")
CONTINUATION = re.compile(r"\n[ \t]*(?:\*(?!/)|#|//)?[ \t]*")
# a rule by the number it had in that contract ("(rule 6)"), not after a section ("RFC 9112 §6.3 rule 1")
NUMBERED = re.compile(r"\brules?\s+\d+")


def section_of(text, pos):
    """the document the "§" at pos cites a section of: "RFC", "SPEC", or None (no document named)"""
    before = CONTINUATION.sub(" ", text[max(0, pos - 240):pos])
    m = CHAIN.search(before)
    if not m:
        return None
    return "RFC" if m.group(1).startswith("RFC") else "SPEC"


def section_cites(text):
    """(line, document) of every "§" and every bare "rule N": document is "RFC", "SPEC" or None"""
    out = []
    for m in re.finditer("§", text):
        out.append((text.count("\n", 0, m.start()) + 1, section_of(text, m.start())))
    for m in NUMBERED.finditer(text):
        before = CONTINUATION.sub(" ", text[max(0, m.start() - 240):m.start()])
        if re.search(r"§[\d.]+\s*$", before):
            continue  # part of a "§" cite, judged above
        doc = "SPEC" if re.search(r"SPEC's\s*$", before) else None
        out.append((text.count("\n", 0, m.start()) + 1, doc))
    return sorted(out, key=lambda x: x[0])


def read_rules(root):
    """the rule names of docs/rules.md in order, and the ones that appear twice"""
    with open(os.path.join(root, RULES), encoding="utf-8") as f:
        names = HEADING.findall(f.read())
    seen, twice = set(), []
    for n in names:
        if n in seen:
            twice.append(n)
        seen.add(n)
    return names, twice


def files(root):
    """the text files to read, relative to root"""
    for place in PLACES:
        path = os.path.join(root, place)
        if os.path.isfile(path):
            yield place
            continue
        for d, dirs, names in os.walk(path):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), root)
                if rel != SELF:
                    yield rel


def read_text(root, rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None  # not text (a fuzz input, an image): it cites nothing


def scan(root):
    """({rule: [files citing it]}, [unknown-rule problem], [section-cite problem])"""
    names, twice = read_rules(root)
    known = set(names)
    cited = {n: [] for n in names}
    unknown = ["%s: rule:%s is a heading twice" % (RULES, n) for n in twice]
    sections = []
    for rel in files(root):
        text = read_text(root, rel)
        if text is None:
            continue
        for m in CITE.finditer(text):
            name = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            if name not in known:
                unknown.append("%s:%d: rule:%s is not a rule of %s" % (rel, line, name, RULES))
            elif rel != RULES and rel not in cited[name]:
                cited[name].append(rel)
        for line, doc in section_cites(text):
            if doc == "RFC" or (doc == "SPEC" and rel == RULES):
                continue
            sections.append("%s:%d: a \"§\" or \"rule N\" cite of a document not in the repository; cite "
                            "the rule by its name (rule:NAME, %s)" % (rel, line, RULES))
    return cited, unknown, sections


def self_test():
    """the checks themselves, on a made-up tree: each broken cite must be refused"""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)

        write(RULES, "# Rules\n\n## Switching (SPEC §5 rules 1–6, §7)\n\n### rule:hold-down\n\ntext\n\n"
                     "### rule:idle-stop\n\nsee rule:hold-down\n")
        write("src/a.c", "/* rule:hold-down: a fresh engine keeps the GPU (RFC 9112 §6.3,\n"
                         " * §5.2; RFC 9110 §2–§7) */\n")
        write("tests/t.py", '"""RFC 9112 §6.3 rule 1"""\n')
        write("tests/corpus/bin", "rule:nothing §1")  # skipped: a fuzz corpus
        cited, unknown, sections = scan(root)
        assert unknown == [] and sections == [], (unknown, sections)
        assert cited == {"hold-down": ["src/a.c"], "idle-stop": []}, cited

        write("src/b.h", "/* SPEC §4: hosts that are down are left out; rule:no-such-rule. */\n")
        write("README.md", "`route` (the model, §2)\n")
        write("man/x.scd", "(SPEC §5 rule 5,\n§6)\n")
        write("src/c.c", "/* 2. rule 6: one abandoned switch; SPEC's rule 10 */\n")
        cited, unknown, sections = scan(root)
        assert unknown == ["src/b.h:1: rule:no-such-rule is not a rule of %s" % RULES], unknown
        assert [s.split(":")[0] + ":" + s.split(":")[1] for s in sections] == \
            ["src/b.h:1", "src/c.c:1", "src/c.c:1", "man/x.scd:1", "man/x.scd:2", "README.md:1"], sections

        write(RULES, "### rule:hold-down\n\n### rule:hold-down\n\nbare §3, SPEC's rule 10 (SPEC §5 rule 11)\n")
        os.remove(os.path.join(root, "src/b.h"))
        os.remove(os.path.join(root, "src/c.c"))
        cited, unknown, sections = scan(root)
        assert any("heading twice" in u for u in unknown), unknown
        ours = [s for s in sections if s.startswith(RULES + ":")]
        assert len(ours) == 1 and ours[0].startswith(RULES + ":5:"), sections
    print("self-test: an unknown rule, a rule named twice, a \"§\" cite of SPEC (bare, in a chain, across lines) "
          "and a bare \"rule N\" are each refused; RFC sections and SPEC's in docs/rules.md pass")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    allow = "--allow-sections" in argv
    listing = "--list" in argv
    args = [a for a in argv if a not in ("--allow-sections", "--list")]
    if len(args) != 1:
        print(__doc__.strip())
        return 2
    cited, unknown, sections = scan(args[0])
    if listing:
        for name, where in cited.items():
            print("rule:%s" % name)
            for f in where:
                print("    %s" % f)
            if not where:
                print("    (cited nowhere)")
        return 1 if unknown else 0
    for p in unknown:
        print(p)
    for p in sections:
        print(("allowed for now: " if allow else "") + p)
    if unknown or (sections and not allow):
        return 1
    print("%d rules; every rule:NAME cited names one of them%s" %
          (len(cited), ", %d \"§\" cites left (--allow-sections)" % len(sections) if sections else
           ", no \"§\" cite of a document outside the repository"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
