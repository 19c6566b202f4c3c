"""modelgated --check-config --hosts and modelgatectl check: the configuration against the hosts it names
(rule:check-hosts): their buses, the engine units (rule:engine-unit-checks), the running engine's URL, and
each Models= glob against what the host lists or listed (models-seen.json)."""

import json
import os
import subprocess

import pytest

from boxes import box_skip_reason, chat, engine_unit, gate_env, local_host, two_engines
from conftest import MODELGATED, free_port, post, wait_for

MODELGATECTL = os.environ.get("MODELGATECTL", os.path.join(os.path.dirname(MODELGATED), "modelgatectl"))

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))


def check(cmd, conf, env):
    return subprocess.run(cmd + ["--config=" + conf], env=env, capture_output=True, text=True, timeout=120)


def test_check_reports_what_is_wrong_on_the_hosts_in_one_report(box, make_gate, sshd, tmp):
    port = free_port()
    conf = local_host("3090", port) + two_engines(box, port) % {"host": "3090", "extra": ""}
    # the typo of the issue: a name mainline does not have, in its Models=
    conf = conf.replace("Models=laguna-*", "Models=laguna-* ghost-7b")
    box.add_unit("llama-again.service", engine_unit("again", free_port(), "x", ["llama-mainline.service",
                                                                               "llama-fork.service"],
                                                    extra_service="[Install]\nWantedBy=default.target\n")
                 .replace("Restart=no", "Restart=always"))
    box.reload()
    box.enable("llama-again.service")
    conf += "[Engine]\nHost=3090\nName=again\nUnit=llama-again.service\nModels=x\n"
    conf += "[Engine]\nHost=3090\nName=nounit\nUnit=llama-nosuch.service\nModels=y\n"
    # a host whose ssh cannot connect
    conf += "[Host]\nName=gone\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n" \
        "[Engine]\nHost=gone\nName=z\nUnit=z.service\nModels=*\n" % (free_port(), free_port(), sshd.ssh_command)
    g = make_gate("[Proxy]\nHoldDownSec=1s\n" + conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    # mainline runs once: its list is read and kept
    r = post(g.conn(), "/v1/chat/completions", chat("3090-laguna-xs"))
    assert r.status == 200, r.read()
    r.read()
    state = os.path.join(tmp, "state-%d" % id(g))
    wait_for(lambda: os.path.exists(os.path.join(state, "models-seen.json")) and
             "laguna-xs" in open(os.path.join(state, "models-seen.json")).read(), what="models-seen.json")
    env = dict(gate_env(box), STATE_DIRECTORY=state)

    out = check([MODELGATED, "--check-config", "--hosts"], g.conf, env)
    text = out.stdout
    assert out.returncode == 1, (out.returncode, text, out.stderr)
    problems = [l for l in text.splitlines() if l.startswith("PROBLEM: ")]
    assert "PROBLEM: host 3090: engine mainline: Models=ghost-7b matches nothing host 3090 lists or listed " \
        "(engine mainline listed: laguna-xs)" in problems, text
    assert any("engine unit llama-again.service is enabled" in p for p in problems), text
    assert any("engine unit llama-again.service has Restart=always" in p for p in problems), text
    assert any("engine unit llama-nosuch.service is not-found" in p for p in problems), text
    assert any("engine unit llama-mainline.service lacks Conflicts=llama-again.service" in p for p in problems), text
    assert any(p.startswith("PROBLEM: host gone: the bus cannot be reached: ssh:") for p in problems), text
    # what is right is not a problem: mainline's glob matches, fork never ran (not known to be wrong)
    assert not any("Models=laguna-*" in p for p in problems), text
    assert "host 3090: engine fork: Models=flint-* matches nothing its host lists or listed; not known to be " \
        "wrong: engine fork has not been seen running" in text
    assert "host 3090: engine mainline runs; http://127.0.0.1:%d/models lists 1 model" % port in text, text
    assert text.rstrip().endswith("%d problems found." % len(problems)), text
    # the check moved nothing
    assert box.active_state("llama-mainline.service") == "active"
    assert box.active_state("llama-fork.service") == "inactive"

    # modelgatectl check runs the same check
    ctl = check([MODELGATECTL, "check"], g.conf, env)
    assert ctl.returncode == 1 and ctl.stdout == text, (ctl.stdout, ctl.stderr)


def test_check_of_a_right_configuration_finds_nothing(box, make_gate, make_double):
    port = free_port()
    plain = make_double("--models", "qwen3-8b,gemma")
    conf = local_host("3090", port) + two_engines(box, port) % {"host": "3090", "extra": ""}
    # a host without engines: its URL is all there is
    conf += "[Host]\nName=plain\nURL=%s\n" % plain.url
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host 3090 up")
    out = check([MODELGATED, "--check-config", "--hosts"], g.conf, gate_env(box))
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "host 3090: bus up (user bus)" in out.stdout
    assert "host 3090: no engine runs; its URL is asked when one does" in out.stdout
    assert "host plain: %s/models lists 2 models" % plain.url in out.stdout, out.stdout
    assert out.stdout.rstrip().endswith("No problems found."), out.stdout
    # the same host gone: its URL not answering is a problem
    plain.stop()
    out = check([MODELGATED, "--check-config", "--hosts"], g.conf, gate_env(box))
    assert out.returncode == 1
    assert "PROBLEM: host plain: %s/models cannot be read: Connection refused" % plain.url in out.stdout, \
        out.stdout


def test_logs_runs_journalctl_for_the_engine_units_where_they_run(make_box, sshd, tmp):
    """rule:engine-logs: modelgatectl logs HOST [ENGINE] runs journalctl for the engine's unit on its host:
    through the host's own ssh command for an ssh host, here for a local one. (The boxes run no journald, so
    journalctl finds no entries; that it ran there, with the units, is what is checked.)"""
    local, remote = make_box(), make_box()
    lport, rport = free_port(), free_port()
    conf = local_host("3090", lport) + two_engines(local, lport) % {"host": "3090", "extra": ""}
    conf += ("[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
             "BusPath=unix:path=%s\n" % (rport, sshd.port, sshd.ssh_command, remote.bus)) + \
        two_engines(remote, rport) % {"host": "a9", "extra": ""}
    path = os.path.join(tmp, "logs.conf")
    with open(path, "w") as f:
        f.write(conf)
    env = gate_env(local)

    out = check([MODELGATECTL, "logs", "a9", "fork"], path, env)
    said = out.stderr.splitlines()[0]
    # the host's own ssh command, then journalctl there, quoted for the remote shell
    assert said.startswith(sshd.ssh_command.split()[0]) and "-- root@127.0.0.1 'journalctl' '--user' " \
        "'-u' 'llama-fork.service' '-n' '200' '--no-pager'" in said, out.stderr
    assert "-p %d" % sshd.port in said
    # journalctl's own words, from the remote end
    assert "No journal files were found" in out.stderr + out.stdout or "-- No entries --" in out.stdout, out

    out = check([MODELGATECTL, "logs", "3090"], path, env)
    assert out.stderr.splitlines()[0] == "journalctl --user -u llama-mainline.service -u llama-fork.service " \
        "-n 200 --no-pager", out.stderr

    out = check([MODELGATECTL, "logs", "nosuch"], path, env)
    assert out.returncode == 4 and "No host 'nosuch' in the configuration; its hosts: 3090, a9" in out.stderr
    out = check([MODELGATECTL, "logs", "a9", "ghost"], path, env)
    assert out.returncode == 4 and "Host 'a9' has no engine 'ghost'; its engines: mainline, fork" in out.stderr


def test_a_host_whose_bus_fails_at_once_does_not_end_the_wait_for_the_next(box, sshd, tmp):
    """the first host's bus fails inside its connect (its socket is not there), before the second host is even
    set up: the second, reached through ssh, still gets its time and is checked, not reported unreached"""
    rport = free_port()
    conf = ("[Host]\nName=first\nURL=http://127.0.0.1:%d\nBus=local\n"
            "[Engine]\nHost=first\nName=e\nUnit=llama-e.service\nModels=*\n" % free_port())
    conf += ("[Host]\nName=a9\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=%s\n"
             "BusPath=unix:path=%s\n" % (rport, sshd.port, sshd.ssh_command, box.bus)) + \
        two_engines(box, rport) % {"host": "a9", "extra": ""}
    path = os.path.join(tmp, "early.conf")
    with open(path, "w") as f:
        f.write(conf)
    env = dict(gate_env(box), DBUS_SESSION_BUS_ADDRESS="unix:path=" + os.path.join(tmp, "no-bus-here"),
               STATE_DIRECTORY=os.path.join(tmp, "state-early"))
    out = check([MODELGATED, "--check-config", "--hosts"], path, env)
    text = out.stdout
    assert any(l.startswith("PROBLEM: host first: the bus cannot be reached") for l in text.splitlines()), text
    assert "host a9: bus up" in text, (text, out.stderr)
    assert "host a9: the bus did not come up" not in text, text
