"""The system flavour's authorization: a private system bus (dbus-daemon, our bus policy included) with a
real polkitd that sees polkit/org.modelgate1.policy, and modelgated --system on it. Engines live in a
boxed user manager, as elsewhere. polkitd reads its actions and rules from fixed paths, so it runs in a
mount namespace of its own where those paths are bind mounts of this test's directories."""

import collections
import os
import shutil
import signal
import subprocess
import time

import pytest

from boxes import box_skip_reason, engines_conf, local_host
from conftest import MODELGATED, bus_config, free_port, host_conf, wait_for

POLKITD = "/usr/lib/polkit-1/polkitd"
UNITS = os.path.join(os.path.dirname(__file__), "../../units")
POLICY = os.path.join(os.path.dirname(__file__), "../../polkit/org.modelgate1.policy")
MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))
HOST_PATH = "/org/modelgate1/host/h"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def skip_reason():
    if box_skip_reason():
        return box_skip_reason()
    if not os.path.exists(POLKITD):
        return "polkitd is not installed (Debian: polkitd); tests/setup-and-test installs it"
    return None


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


SystemBus = collections.namedtuple("SystemBus", "env polkitd")


@pytest.fixture
def system_bus_daemons(tmp):
    d = os.path.join(tmp, "sysbus")
    actions, rules = os.path.join(d, "actions"), os.path.join(d, "rules.d")
    os.makedirs(actions)
    os.makedirs(rules)
    for f in os.listdir("/usr/share/polkit-1/actions"):
        shutil.copy(os.path.join("/usr/share/polkit-1/actions", f), actions)
    shutil.copy(POLICY, actions)
    # a local rule, as an administrator would write one: nobody may stop engines, nothing else
    with open(os.path.join(rules, "50-test.rules"), "w") as f:
        f.write('polkit.addRule(function(action, subject) {\n'
                '  if (action.id == "org.modelgate1.stop-engine" && subject.user == "nobody")\n'
                '    return polkit.Result.YES;\n'
                '});\n')
    for p in (d, actions, rules):
        os.chmod(p, 0o755)
    for p in os.listdir(actions) + os.listdir(rules):
        full = os.path.join(actions if p.endswith(".policy") else rules, p)
        os.chmod(full, 0o644)
    sock = os.path.join(d, "system_bus_socket")
    conf = bus_config(os.path.join(d, "bus.conf"), "unix:path=" + sock, "system",
                      "  <include>%s</include>\n" % os.path.abspath(os.path.join(UNITS, "dbus/org.modelgate1.conf")))
    os.chmod(d, 0o755)
    os.chmod(tmp, 0o711)  # polkitd runs as its own user and must reach the socket
    log = open(os.path.join(d, "daemons.log"), "w")
    bus = subprocess.Popen(["dbus-daemon", "--config-file=" + conf, "--nofork", "--nopidfile"],
                           stdout=log, stderr=log)
    wait_for(lambda: os.path.exists(sock), what="the private system bus")
    os.chmod(sock, 0o777)
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + sock)
    polkit = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount --bind %s /usr/share/polkit-1/actions && mount --bind %s /etc/polkit-1/rules.d "
                               "&& exec %s --no-debug" % (actions, rules, POLKITD)],
                              env=env, stdout=log, stderr=log)
    try:
        try:
            wait_for(lambda: "org.freedesktop.PolicyKit1" in subprocess.run(
                ["busctl", "--system", "list", "--acquired"], env=env, capture_output=True, text=True).stdout,
                what="polkitd on the private system bus")
        except AssertionError as e:
            log.flush()
            raise AssertionError("%s:\n%s" % (e, open(log.name).read())) from None
        yield SystemBus(env, polkit)
    finally:
        for p in (polkit, bus):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


@pytest.fixture
def system_bus(system_bus_daemons):
    return system_bus_daemons.env


def call(env, *args, user=None):
    return subprocess.run((user or []) + ["busctl", "--system"] + list(args), env=env, capture_output=True,
                          text=True, timeout=60)


def test_polkit_guards_the_methods_on_the_system_bus(box, make_gate, system_bus):
    port = free_port()
    env = dict(system_bus, DBUS_SESSION_BUS_ADDRESS="unix:path=" + box.bus)
    g = make_gate(local_host("h", port) + engines_conf(box, "h", port), extra_args=["--system"], env=env)
    wait_for(lambda: 'State s "idle"' in "State " + call(
        env, "get-property", "org.modelgate1", HOST_PATH, "org.modelgate1.Host", "State").stdout,
        what="host h idle")

    # everyone may read
    out = call(env, "get-property", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager", "Version",
               user=NOBODY)
    assert out.returncode == 0 and out.stdout.strip() == 's "0.1"', out

    # an unprivileged caller is refused SwitchEngine (auth_admin, and no agent to ask), nothing starts
    for interactive in ("yes", "no"):
        out = call(env, "--allow-interactive-authorization=" + interactive, "call", "org.modelgate1", HOST_PATH,
                   "org.modelgate1.Host", "SwitchEngine", "s", "fork", user=NOBODY)
        assert out.returncode != 0, out
        assert "interactive authentication is required" in out.stderr or "polkit denied it" in out.stderr, out
    ctl = subprocess.run(NOBODY + [MODELGATECTL, "--system", "switch", "h", "fork"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert ctl.returncode == 5, ctl
    out = call(env, "call", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager", "Reload", user=NOBODY)
    assert out.returncode != 0, out
    assert box.active_state("llama-fork.service") == "inactive"
    g.log_mark("after-the-refusals")  # a reload begun on a refused call is in the log file then
    assert "Reloading" not in g.logtext()

    # root is allowed
    out = call(env, "--timeout=60", "call", "org.modelgate1", HOST_PATH, "org.modelgate1.Host", "SwitchEngine",
               "s", "fork")
    assert out.returncode == 0, out
    assert box.active_state("llama-fork.service") == "active"

    # and polkit's own answer counts: the local rule lets nobody stop engines
    out = call(env, "call", "org.modelgate1", HOST_PATH, "org.modelgate1.Host", "StopEngine", user=NOBODY)
    assert out.returncode == 0, out
    g.wait_log("host h: engine fork stopped on request")


def test_every_clients_requests_and_usage_are_the_operators_on_the_system_bus(make_gate, make_double,
                                                                              system_bus, tmp):
    """the bus policy the build installs lets every local user call the Manager's methods: GetActivity() (every
    request, key and client address of /activity, an Activity=yes tier's alone over HTTP) and ListKeyUsage()
    (every key's and address's counts) are root's, or polkit's org.modelgate1.view-activity, as the methods
    that change anything are"""
    d = make_double("--models", "m", "--loaded", "m")
    keys = os.path.join(tmp, "keys")
    open(keys, "w").close()
    g = make_gate("[Access]\nKeysFile=%s\nAnonymousDailyRequests=10\n" % keys + host_conf("h", d.url),
                  extra_args=["--system"], env=system_bus)
    wait_for(lambda: call(system_bus, "status", "org.modelgate1").returncode == 0, what="org.modelgate1 on the bus")
    c = g.conn()
    c.request("POST", "/v1/chat/completions", b'{"model":"h-m","messages":[]}', {"Content-Type": "application/json"})
    c.getresponse().read()
    c.close()
    for method in ("GetActivity", "ListKeyUsage"):
        for interactive in ("yes", "no"):
            out = call(system_bus, "--allow-interactive-authorization=" + interactive, "call", "org.modelgate1",
                       "/org/modelgate1", "org.modelgate1.Manager", method, user=NOBODY)
            assert out.returncode != 0, (method, out)
            assert "127.0.0.1" not in out.stdout and "h-m" not in out.stdout, out
            assert "interactive authentication is required" in out.stderr or "polkit denied it" in out.stderr, out
        # root may
        out = call(system_bus, "call", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager", method)
        assert out.returncode == 0, (method, out)
    assert "h-m" in call(system_bus, "call", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager",
                         "GetActivity").stdout
    assert "127.0.0.1" in call(system_bus, "call", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager",
                               "ListKeyUsage").stdout
    # modelgatectl says it is a refusal (exit 5), for top and key usage alike
    for verb in (["top", "--once"], ["key", "usage"]):
        ctl = subprocess.run(NOBODY + [MODELGATECTL, "--system"] + verb, env=system_bus, capture_output=True,
                             text=True, timeout=60)
        assert ctl.returncode == 5, (verb, ctl)
    # what everyone may still read: properties and the host list
    out = call(system_bus, "call", "org.modelgate1", "/org/modelgate1", "org.modelgate1.Manager", "ListHosts",
               user=NOBODY)
    assert out.returncode == 0 and '"h"' in out.stdout, out


def test_pkaction_reads_the_policy(system_bus):
    for action in ("org.modelgate1.switch-engine", "org.modelgate1.stop-engine", "org.modelgate1.reload",
                   "org.modelgate1.view-activity"):
        out = subprocess.run(["pkaction", "--verbose", "--action-id", action], env=system_bus,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out
        assert "implicit any:      auth_admin\n" in out.stdout, out.stdout
        assert "implicit active:   auth_admin_keep\n" in out.stdout, out.stdout


def test_a_polkit_that_does_not_answer_gets_the_caller_an_error(make_gate, make_double, system_bus_daemons):
    """polkitd stopped (SIGSTOP: it holds its name and never answers): the caller is told so when the check's
    bound passes (the bus's method call timeout, here $SYSTEMD_BUS_TIMEOUT=3s, at most 20 s), not left to its
    own timeout; and the loop goes on meanwhile"""
    d = make_double("--models", "m")
    env = dict(system_bus_daemons.env, SYSTEMD_BUS_TIMEOUT="3s")
    g = make_gate(host_conf("h", d.url), extra_args=["--system"], env=env)
    bus_env = system_bus_daemons.env
    wait_for(lambda: call(bus_env, "status", "org.modelgate1").returncode == 0, what="org.modelgate1 on the bus")
    polkitd = system_bus_daemons.polkitd
    polkitd.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        caller = subprocess.Popen(NOBODY + ["busctl", "--system", "--allow-interactive-authorization=no",
                                            "--timeout=40", "call", "org.modelgate1", "/org/modelgate1",
                                            "org.modelgate1.Manager", "Reload"],
                                  env=bus_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # requests are answered while the check waits
        answered_meanwhile = 0
        while caller.poll() is None and time.monotonic() - t0 < 60:
            c = g.conn(timeout=10)
            c.request("GET", "/health")
            assert c.getresponse().status == 200
            c.close()
            if caller.poll() is None:
                answered_meanwhile += 1
        _, err = caller.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        polkitd.send_signal(signal.SIGCONT)
    assert caller.returncode != 0, err
    assert "polkit did not answer within 3s" in err, err
    assert took < 20, took  # 3 s, far from the caller's own 40 s
    assert answered_meanwhile > 0
    g.wait_log("polkit did not answer the check of org.modelgate1.reload within 3s")
    g.log_mark("after-the-timeout")  # a reload begun on the refused call is in the log file then
    assert "Reloading" not in g.logtext()

    # polkit back: its own answer counts again (auth_admin, and nobody to authenticate)
    out = call(bus_env, "--allow-interactive-authorization=no", "call", "org.modelgate1", "/org/modelgate1",
               "org.modelgate1.Manager", "Reload", user=NOBODY)
    assert out.returncode != 0 and "interactive authentication is required" in out.stderr, out
