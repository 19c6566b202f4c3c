#!/usr/bin/python3
"""meson install --destdir, for prefix /usr and /usr/local, and with -Dsystem-flavour=false: every file
lands where Debian's systemd, dbus-daemon, polkitd and man read it, asked of them where they can say
(systemctl --root, systemd-sysusers --root, dbus-daemon's system.conf, polkitd's binary), and nothing of
the system flavour is installed without it.

Usage: test-install.py SOURCE_ROOT"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failures.append(what)


def run(*args, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(args), r.returncode, r.stdout))
    return r.stdout


def dbus_policy_dirs():
    """The <includedir>s of dbus-daemon's system.conf, relative ones taken from its own directory"""
    conf = "/usr/share/dbus-1/system.conf"
    return {os.path.normpath(os.path.join(os.path.dirname(conf), e.text.strip()))
            for e in ET.parse(conf).getroot().iter("includedir")}


def polkit_action_dirs():
    """polkitd reads actions from its compiled-in PACKAGE_DATA_DIR/polkit-1/actions, and nowhere else"""
    for path in ("/usr/lib/polkit-1/polkitd", "/usr/libexec/polkitd"):
        if os.path.exists(path):
            data = open(path, "rb").read()
            return {m.decode() for m in re.findall(rb"(/[\w/.-]*/polkit-1/actions)\0", data)}
    sys.exit("polkitd is not installed (Debian's polkitd); tests/setup-and-test installs it")


# dbus-daemon's standard service directories (dbus 1.14, dbus-sysdeps-util-unix.c): the session bus
# reads $XDG_DATA_DIRS/dbus-1/services (unset: /usr/local/share:/usr/share), the system bus
# /usr/local/share, /usr/share and /lib's dbus-1/system-services
DBUS_SESSION_SERVICE_DIRS = {"/usr/local/share/dbus-1/services", "/usr/share/dbus-1/services"}
DBUS_SYSTEM_SERVICE_DIRS = {"/usr/local/share/dbus-1/system-services", "/usr/share/dbus-1/system-services",
                            "/lib/dbus-1/system-services"}
# man(1)'s MANDATORY_MANPATH on Debian (/etc/manpath.config)
MAN_DIRS = {"/usr/share/man", "/usr/local/share/man"}

SYSTEM_FLAVOUR = ["units/system/modelgate.service.in", "units/system/modelgate.socket",
                  "units/system/modelgate.sysusers", "units/dbus/org.modelgate1.system.service",
                  "units/dbus/org.modelgate1.conf", "polkit/org.modelgate1.policy",
                  "polkit/50-modelgate-engines.rules"]


def installed(destdir):
    """Every installed file, as its path on the target system"""
    out = set()
    for d, _, files in os.walk(destdir):
        for f in files:
            out.add("/" + os.path.relpath(os.path.join(d, f), destdir))
    return out


def unit_files(destdir, scope):
    r = subprocess.run(["systemctl", scope, "--root=" + destdir, "list-unit-files", "--no-legend", "modelgate.*"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    units = {line.split()[0] for line in r.stdout.splitlines() if line.strip()}
    # it exits 1 when it lists none
    if r.returncode != 0 and (units or r.returncode != 1):
        sys.exit("systemctl %s --root=%s list-unit-files failed (%d):\n%s" % (scope, destdir, r.returncode, r.stdout))
    return units


def in_dirs(files, name, dirs):
    return [f for f in files if os.path.basename(f) == name and os.path.dirname(f) in dirs]


def check_layout(destdir, prefix, system):
    files = installed(destdir)
    print("\n# prefix %s, system flavour %s: %d files" % (prefix, "on" if system else "off", len(files)))
    for f in sorted(files):
        print("  " + f)
    tag = "[%s%s] " % (prefix, "" if system else ", -Dsystem-flavour=false")

    check(prefix + "/bin/modelgatectl" in files, tag + "modelgatectl in %s/bin" % prefix)
    check(prefix + "/libexec/modelgated" in files, tag + "modelgated in %s/libexec" % prefix)
    # the user flavour: systemd's --global search path finds both units, the session bus the activation file
    check(unit_files(destdir, "--global") == {"modelgate.service", "modelgate.socket"},
          tag + "systemctl --global --root finds the user units")
    user_units = [f for f in files if "/systemd/user/" in f]
    check(user_units and all(f.startswith(prefix + "/") for f in user_units),
          tag + "the user units are under the prefix: %s" % user_units)
    for f in user_units:
        if f.endswith(".service"):
            exe = re.search(r"^ExecStart=(\S+)", open(destdir + f).read(), re.M).group(1)
            check(exe in files, tag + "the user unit runs the installed %s" % exe)
    check(len(in_dirs(files, "org.modelgate1.service", DBUS_SESSION_SERVICE_DIRS)) == 1
          and in_dirs(files, "org.modelgate1.service", DBUS_SESSION_SERVICE_DIRS)[0].startswith(prefix + "/"),
          tag + "the session bus activation file in the session bus's service directories, under the prefix")
    check(all(os.path.dirname(os.path.dirname(f)) in MAN_DIRS for f in files if "/man/man" in f),
          tag + "man pages where man looks")
    # modelgated is on no PATH: its man page and modelgatectl check-config name where it is
    page = [f for f in files if os.path.basename(f) == "modelgated.8"]
    check(len(page) == 1 and (r"\fB%s/libexec/modelgated\fR" % prefix) in open(destdir + page[0]).read(),
          tag + "modelgated(8)'s SYNOPSIS names %s/libexec/modelgated" % prefix)
    r = subprocess.run([destdir + prefix + "/bin/modelgatectl", "--user", "check-config"], capture_output=True,
                       text=True, env={k: v for k, v in os.environ.items() if k != "MODELGATED"})
    check(r.returncode == 1 and "Cannot run %s/libexec/modelgated:" % prefix in r.stderr,
          tag + "modelgatectl check-config runs %s/libexec/modelgated: %r" % (prefix, r.stderr))

    system_units = unit_files(destdir, "--system")
    sysusers = run("systemd-sysusers", "--root=" + destdir, "--cat-config")
    policies = in_dirs(files, "org.modelgate1.conf", dbus_policy_dirs())
    system_services = in_dirs(files, "org.modelgate1.service", DBUS_SYSTEM_SERVICE_DIRS)
    actions = in_dirs(files, "org.modelgate1.policy", polkit_action_dirs())
    if system:
        check(system_units == {"modelgate.service", "modelgate.socket"},
              tag + "systemctl --system --root finds the system units")
        check(all(f.startswith(prefix + "/") for f in files if "/systemd/system/" in f),
              tag + "the system units are under the prefix")
        for f in files:
            if "/systemd/system/" in f and f.endswith(".service"):
                exe = re.search(r"^ExecStart=(\S+)", open(destdir + f).read(), re.M).group(1)
                check(exe in files, tag + "the system unit runs the installed %s" % exe)
        check(re.search(r"^u modelgate ", sysusers, re.M) is not None and
              (prefix + "/lib/sysusers.d/modelgate.conf") in sysusers,
              tag + "systemd-sysusers --root reads %s/lib/sysusers.d/modelgate.conf" % prefix)
        check(len(policies) == 1, tag + "the bus policy in one of dbus-daemon's system.d: %s" % policies)
        check(len(system_services) == 1 and system_services[0].startswith(prefix + "/"),
              tag + "the system bus activation file in the system bus's service directories, under the prefix")
        check(len(actions) == 1, tag + "the polkit action where polkitd reads it: %s" % actions)
        check(prefix + "/share/doc/modelgate/examples/50-modelgate-engines.rules" in files,
              tag + "the engine rules example")
    else:
        check(not system_units, tag + "no system unit: %s" % system_units)
        check("modelgate" not in sysusers, tag + "no sysusers.d file")
        check(not policies and not system_services and not actions
              and not any(f.endswith(".rules") for f in files),
              tag + "no bus policy, system bus activation file, polkit action or rules")
    # outside the prefix only what its reader reads nowhere else
    outside = {f for f in files if not f.startswith(prefix + "/")}
    check(outside <= set(policies + actions), tag + "nothing else outside the prefix: %s" % sorted(outside))


def readme_system_steps(source):
    """the README's system-flavour commands (Installing the units, the block after "As root:")"""
    text = open(os.path.join(source, "README.md")).read()
    m = re.search(r"As root:\n\n```sh\n(.*?)^```", text[text.index("\n## Installing the units\n"):], re.S | re.M)
    assert m, "README's Installing the units no longer has the system flavour's commands after 'As root:'"
    return m.group(1)


def check_readme_steps(source, destdir):
    """the files the README's system-flavour commands name are installed (prefix /usr, as they set up),
    and its systemd-sysusers line makes the user the bus policy names"""
    steps = readme_system_steps(source)
    files = installed(destdir)
    for path in sorted(set(re.findall(r"(/usr/\S+[^/\s])(?=\s|$)", steps))):
        check(path in files, "[README] %s is installed" % path)
    sysusers = re.search(r"^systemd-sysusers (\S+)", steps, re.M)
    check(sysusers is not None, "[README] runs systemd-sysusers")
    if sysusers:
        os.makedirs(os.path.join(destdir, "etc"), exist_ok=True)
        run("systemd-sysusers", "--root=" + destdir, sysusers.group(1))
        passwd = open(os.path.join(destdir, "etc/passwd")).read()
        policy = open(os.path.join(source, "units/dbus/org.modelgate1.conf")).read()
        user = re.search(r'<policy user="(?!root)([^"]+)"', policy).group(1)
        check(re.search(r"^%s:x:\d+:\d+:[^:]*:/var/lib/modelgate:" % user, passwd, re.M) is not None,
              "[README] %s makes the user %s of the bus policy, at home in /var/lib/modelgate"
              % (sysusers.group(0), user))


def main():
    source = sys.argv[1]
    for f in SYSTEM_FLAVOUR:
        assert os.path.exists(os.path.join(source, f)), f
    meson = shutil.which("meson")
    with tempfile.TemporaryDirectory(prefix="modelgate-install-") as tmp:
        build = os.path.join(tmp, "build")
        # one build: the prefix reaches only the units, the man pages, the install paths and modelgatectl's
        # path to modelgated, so that changing it with meson configure compiles one file again
        run(meson, "setup", "-Dtests=false", "--prefix=/usr", build, source)
        run("ninja", "-C", build)
        for n, (prefix, system) in enumerate([("/usr", True), ("/usr/local", True), ("/usr/local", False)]):
            run(meson, "configure", "--prefix=" + prefix, "-Dsystem-flavour=" + str(system).lower(), build)
            destdir = os.path.join(tmp, "dest%d" % n)
            run(meson, "install", "-C", build, "--destdir", destdir, "--quiet")
            check_layout(destdir, prefix, system)
            if prefix == "/usr" and system:
                check_readme_steps(source, destdir)
    if failures:
        sys.exit("\n%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))


if __name__ == "__main__":
    main()
