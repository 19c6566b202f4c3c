"""Boxed systemd user managers (one per GPU host) and a loopback sshd, for the engine tests.

A Box is a real `systemd --user` in its own cgroup, cgroup/mount/PID namespaces (box.sh,
../shared/TESTING.md). Its bus socket lives on the real filesystem, so modelgated (outside) reaches
it as Bus=local through DBUS_SESSION_BUS_ADDRESS, and an sshd (outside) through
systemd-stdio-bridge. Every process here is started by this file and stopped by its pid."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

# chat() is conftest's; the tests that import it from here still may
from conftest import DOUBLE, MODELGATED, PYTHON, chat, free_port, unit_for_tests, wait_for  # noqa: F401

BOX_SH = os.path.join(os.path.dirname(__file__), "box.sh")
UNITS = os.path.join(os.path.dirname(__file__), "../../units")
MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))


def box_skip_reason():
    if os.geteuid() != 0:
        return "boxed systemd user managers need root (cgroups, namespaces)"
    for d in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        if not os.path.isdir(d):
            return "%s is missing: not the cgroup layout TESTING.md describes" % d
    return None


class Box:
    def __init__(self):
        self.pid1_cgroup = open("/proc/1/cgroup").read()
        # the command inside prints the box's directory, then holds the box open until stdin closes
        self.proc = subprocess.Popen([BOX_SH, "sh", "-c", 'echo "$MODELGATE_BOX"; read x'],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            raise AssertionError("the box did not start: %s" % self.proc.stderr.read())
        self.dir = line
        self.bus = os.path.join(self.dir, "xdg", "bus")
        self.units = os.path.join(self.dir, "xdg", "systemd", "user")
        os.makedirs(self.units, exist_ok=True)
        # systemctl --user outside the box: its private socket refuses peers from another PID namespace,
        # so the tools go through the user bus instead (XDG_RUNTIME_DIR pointing nowhere)
        self.env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=" + self.bus,
                        XDG_RUNTIME_DIR="/nonexistent")

    def run(self, *argv, check=True):
        out = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise AssertionError("%s failed (%d): %s%s" % (" ".join(argv), out.returncode, out.stdout, out.stderr))
        return out.stdout

    def systemctl(self, *args, check=True):
        return self.run("systemctl", "--user", *args, check=check)

    def enable(self, unit):
        # systemctl outside the box would edit files itself (systemd is not "booted" there); the manager does
        self.run("busctl", "--user", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                 "org.freedesktop.systemd1.Manager", "EnableUnitFiles", "asbb", "1", unit, "false", "false")

    def active_state(self, unit):
        return self.systemctl("show", "-P", "ActiveState", unit).strip()

    def add_unit(self, name, text):
        with open(os.path.join(self.units, name), "w") as f:
            f.write(text)

    def reload(self):
        self.systemctl("daemon-reload")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert open("/proc/1/cgroup").read() == self.pid1_cgroup, "PID 1's cgroup changed"


def installed_units(box, tmp, port, conf_text, exec_start=None, state_in_tmp=True):
    """units/modelgate.{service,socket} as installed, with this build's binaries, tmp/modelgate.conf holding
    conf_text, the socket on port and the daemon's stderr in the returned log file; exec_start replaces the
    daemon; the state files go to tmp unless state_in_tmp is false (then where the unit puts them). The socket
    is started."""
    conf = os.path.join(tmp, "modelgate.conf")
    with open(conf, "w") as f:
        f.write(conf_text)
    log = os.path.join(tmp, "activated.log")
    service = open(os.path.join(UNITS, "modelgate.service.in")).read()
    service = service.replace("@libexecdir@/modelgated --user",
                              exec_start or "%s --user --config=%s" % (os.path.abspath(MODELGATED), conf))
    service = service.replace("ExecReload=@bindir@/modelgatectl --user reload",
                              "ExecReload=%s --user reload" % os.path.abspath(MODELGATECTL))
    service = service.replace("[Service]\n", "[Service]\nStandardError=append:%s\n" % log +
                              ("Environment=STATE_DIRECTORY=%s\n" % tmp if state_in_tmp else ""))
    box.add_unit("modelgate.service", unit_for_tests(service))
    box.add_unit("modelgate.socket", open(os.path.join(UNITS, "modelgate.socket")).read().replace(
        "ListenStream=127.0.0.1:8080", "ListenStream=127.0.0.1:%d" % port))
    box.reload()
    box.systemctl("start", "modelgate.socket")
    return log


def engine_unit(name, port, models, conflicts=(), extra_service="", extra_unit="", double_args=""):
    """An engine unit running the llama.cpp double, as units/examples/ shows for llama-server."""
    conf = "".join("Conflicts=%s\nAfter=%s\n" % (c, c) for c in conflicts)
    return """[Unit]
Description=test engine %(name)s
%(conf)s%(extra_unit)s
[Service]
Type=exec
ExecStart=%(python)s %(double)s --port %(port)d --name %(name)s --models %(models)s --loaded %(models)s %(args)s
Restart=no
%(extra_service)s
""" % {"name": name, "conf": conf, "extra_unit": extra_unit, "python": PYTHON, "double": os.path.abspath(DOUBLE),
       "port": port, "models": models, "args": double_args, "extra_service": extra_service}


class Sshd:
    """sshd on 127.0.0.1 (or another loopback address) with keys of its own; `ssh_command` reaches it as
    root without prompts."""

    def __init__(self, tmp, address="127.0.0.1"):
        self.dir = tempfile.mkdtemp(prefix="sshd.", dir=tmp)
        self.address = address
        self.port = free_port(host=address)
        d = self.dir
        for k in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, k)], check=True)
        shutil.copy(os.path.join(d, "client.pub"), os.path.join(d, "authorized_keys"))
        with open(os.path.join(d, "known_hosts"), "w") as f:
            f.write("[%s]:%d %s" % (address, self.port, open(os.path.join(d, "host.pub")).read()))
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write("""ListenAddress %s
Port %d
HostKey %s/host
AuthorizedKeysFile %s/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
""" % (address, self.port, d, d))
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        self.ssh_command = "ssh -i %s/client -oUserKnownHostsFile=%s/known_hosts -oStrictHostKeyChecking=yes" % (d, d)
        self.proc = None
        self.start()

    def start(self):
        self.log = open(os.path.join(self.dir, "sshd.log"), "a")
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", os.path.join(self.dir, "sshd_config")],
                                     stdout=self.log, stderr=self.log)

        def listening():
            if self.proc.poll() is not None:
                raise AssertionError("sshd exited: " + open(os.path.join(self.dir, "sshd.log")).read())
            try:
                socket.create_connection((self.address, self.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(listening, what="sshd to listen")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


def children(pid):
    """pids whose parent is pid"""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = open("/proc/%s/stat" % p).read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(p))
    return out


def two_engines(box, port, startup_delay=0.0, extra="", double_args=""):
    """engines 'mainline' (serves laguna-*) and 'fork' (flint-*) on one port, conflicting both ways"""
    args = "--startup-delay %g %s" % (startup_delay, double_args)
    box.add_unit("llama-mainline.service", engine_unit("mainline", port, "laguna-xs", ["llama-fork.service"],
                                                       double_args=args))
    box.add_unit("llama-fork.service", engine_unit("fork", port, "flint-40b", ["llama-mainline.service"],
                                                   double_args=args))
    box.reload()
    return """
[Engine]
Host=%(host)s
Name=mainline
Unit=llama-mainline.service
Models=laguna-*
StartTimeoutSec=30s
%(extra)s
[Engine]
Host=%(host)s
Name=fork
Unit=llama-fork.service
Models=flint-*
StartTimeoutSec=30s
%(extra)s
"""


def local_host(name, port, extra=""):
    return "[Host]\nName=%s\nURL=http://127.0.0.1:%d\nBus=local\n%s" % (name, port, extra)


def engines_conf(box, host, port, **kw):
    return two_engines(box, port, **kw) % {"host": host, "extra": ""}


def host_prop(box, host, name):
    """a property of modelgated's Host object for host, as the box's bus reads it"""
    out = box.run("busctl", "--user", "-j", "get-property", "org.modelgate1", "/org/modelgate1/host/" + host,
                  "org.modelgate1.Host", name)
    return json.loads(out)["data"]


def ctl(box, *args, timeout=120):
    """modelgatectl --user on the box's bus"""
    return subprocess.run([MODELGATECTL, "--user"] + list(args), env=box.env, capture_output=True, text=True,
                          timeout=timeout)


def gate_env(box):
    return dict(os.environ, DBUS_SESSION_BUS_ADDRESS="unix:path=" + box.bus)
