#!/usr/bin/python3
"""The man pages, README and example files agree on what they share: every example configuration
(modelgate.conf(5)'s EXAMPLE section, README's "Real hosts", units/modelgate.conf.example,
units/examples/modelgate.conf) passes modelgated --check-config; the example host's URL is the same
everywhere, and the example engines listen where it points; the listening address and the paths of the
configuration agree between the units, the man pages and the README.

Usage: doc-examples.py MODELGATED SOURCE_ROOT"""

import os
import re
import subprocess
import sys
import tempfile

failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failures.append(what)


def section(text, start, end_re):
    """text from the line `start` to the next heading matching end_re"""
    i = text.index(start)
    m = re.compile(end_re, re.M).search(text, i + len(start))
    return text[i:m.start() if m else len(text)]


def blocks(text, lang=""):
    return re.findall(r"^```%s\n(.*?)^```" % lang, text, re.S | re.M)


def check_config(modelgated, what, path, env=None):
    r = subprocess.run([modelgated, "--check-config", "--config=" + path], capture_output=True, text=True, env=env)
    check(r.returncode == 0, "modelgated --check-config accepts %s%s" % (what, "" if r.returncode == 0 else
                                                                          ":\n" + r.stdout + r.stderr))
    return r.stdout


def main():
    modelgated, src = sys.argv[1], sys.argv[2]
    read = lambda p: open(os.path.join(src, p)).read()
    conf5 = read("man/modelgate.conf.5.scd")
    readme = read("README.md")
    real_hosts = section(readme, "\n## Real hosts\n", r"^## ")

    with tempfile.TemporaryDirectory(prefix="modelgate-doc-") as tmp:
        configs = {}
        # the man page's examples build on each other (Fallback=cloud names the [Fallback] below): one file
        man = "\n".join(blocks(section(conf5, "\n# EXAMPLE\n", r"^# ")))
        check("[Host]" in man and "[Alias]" in man, "modelgate.conf(5)'s EXAMPLE has its configuration blocks")
        # what the machine gives it: a fallback's name is resolved when the file is read, and this machine has
        # no DNS; its key is a credential of the unit (LoadCredential=cloud-key:, as the page says)
        fallback_url = "URL=https://api.example.net\n"
        check(fallback_url in man, "modelgate.conf(5)'s fallback at " + fallback_url.strip())
        man = man.replace(fallback_url, "URL=https://127.0.0.1\n")
        credentials = os.path.join(tmp, "credentials")
        os.mkdir(credentials)
        open(os.path.join(credentials, "cloud-key"), "w").write("sk-example\n")
        # its modelgate.conf; the other ini block is the fork's fork-models.ini, llama-server's file
        readme_ini = [b for b in blocks(real_hosts, "ini") if not b.startswith("; ~/.config/llama/")]
        check(len(readme_ini) == 1, "README's Real hosts has one modelgate.conf block")
        for what, text in (("modelgate.conf(5)'s EXAMPLE", man), ("README's Real hosts", readme_ini[0]),
                           ("units/modelgate.conf.example", read("units/modelgate.conf.example")),
                           ("units/examples/modelgate.conf", read("units/examples/modelgate.conf"))):
            path = os.path.join(tmp, "%d.conf" % len(configs))
            open(path, "w").write(text)
            configs[what] = check_config(modelgated, what, path,
                                         env=dict(os.environ, CREDENTIALS_DIRECTORY=credentials))

    # one example GPU host, at one URL, everywhere it is shown
    url = re.search(r"^URL=(\S+)", read("units/examples/modelgate.conf"), re.M).group(1)
    for what, effective in configs.items():
        m = re.search(r"^\[Host\]\nName=3090\nURL=(\S+)", effective, re.M)
        check(m and m.group(1) == url, "%s: host 3090 at %s (%s)" % (what, url, m and m.group(1)))
    for page, shown in (("man/modelgatectl.1.scd", "3090 (%s)" % url),
                        ("man/org.modelgate1.5.scd", "readonly s URL = '%s'" % url)):
        check(shown in read(page), "%s shows %s" % (page, shown))
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    # ... where every example engine listens: a remote engine on 127.0.0.1 is out of modelgate's reach
    for unit in ("llama-mainline.service", "llama-fork.service", "llama-podman.service"):
        text = read("units/examples/" + unit)
        exec_start = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", text, re.M).group(1)
        published = re.search(r"-p (\S+):(\d+):\d+", exec_start)
        if published:
            where = published.groups()
        else:
            where = (re.search(r"--host (\S+)", exec_start).group(1), re.search(r"--port (\d+)", exec_start).group(1))
        check(where == (host, port), "units/examples/%s listens on %s:%s, where the URL points (%s:%s)"
              % (unit, where[0], where[1], host, port))

    # modelgate's own address: the sockets, the default of Listen=, the example's Listen=, the README
    listen = "127.0.0.1:8080"
    for p in ("units/modelgate.socket", "units/system/modelgate.socket"):
        check("ListenStream=%s\n" % listen in read(p), "%s listens on %s" % (p, listen))
    check("Default *%s*" % listen in section(conf5, "\n*Listen=*\n", r"^\*\w+="), "modelgate.conf(5): Listen= defaults to " + listen)
    check("Listen=%s\n" % listen in read("units/modelgate.conf.example"), "units/modelgate.conf.example: Listen=" + listen)
    check("enable --now modelgate.socket     # %s" % listen in readme, "README: the socket's address")

    # the configuration's paths
    for path in ("~/.config/modelgate/modelgate.conf", "/etc/modelgate/modelgate.conf"):
        for what, text in (("README.md", real_hosts), ("modelgate.conf(5)", conf5),
                           ("units/modelgate.conf.example", read("units/modelgate.conf.example"))):
            check(path in text.replace("_", "").replace("\\", ""), "%s names %s" % (what, path))

    if failures:
        sys.exit("\n%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))


if __name__ == "__main__":
    main()
