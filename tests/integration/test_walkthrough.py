"""README.md's "Real hosts", followed as written: its configuration and its commands are read out of the
README, so that the test breaks when the README drifts. Two boxed hosts: the modelgate machine (the
installed user units, as "Installing the units" has them) and the GPU host, reached through ssh on
another loopback address, whose engines are units/examples/ as shipped, with the llama.cpp double in
llama-server's place. What is changed is only what the boxes need: the GPU host's address (192.0.2.20,
a documentation address, becomes 127.0.0.2), the ports (free ones), and ssh's key, known host and bus
path (SSHCommand=, BusPath=: the box's bus is not /run/user/$UID/bus)."""

import http.client
import json
import os
import re
import shutil
import subprocess

import pytest

from boxes import MODELGATECTL, Sshd, box_skip_reason, chat, installed_units
from conftest import DOUBLE, MODELGATED, PYTHON, free_port, post, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
GPU_HOST = "192.0.2.20"  # the README's and the examples' GPU host
ADDRESS = "127.0.0.2"    # the boxed GPU host's: another loopback address than modelgate's


def real_hosts():
    """README's "Real hosts": its ini block, its sh block and the log lines it promises"""
    text = open(os.path.join(SOURCE, "README.md")).read()
    start = text.index("\n## Real hosts\n")
    section = text[start:text.index("\n## ", start + 1)]
    ini = re.findall(r"^```ini\n(.*?)^```", section, re.S | re.M)
    sh = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)
    conf = [b for b in ini if b.startswith("[Host]")]
    presets = [b for b in ini if b.startswith("; ~/.config/llama/fork-models.ini")]
    assert len(conf) == 1 and len(sh) == 1, "README's Real hosts: one modelgate.conf and one sh block expected"
    assert len(presets) == 1, "README's Real hosts no longer shows the fork's fork-models.ini"
    logs = re.search(r"Each engine's start logs `(.*?)` and `(.*?)`", section, re.S)
    assert logs, "README's Real hosts no longer says what an engine's start logs"
    return conf[0], sh[0], [" ".join(l.split()) for l in logs.groups()], presets[0]


# llama-server's command line as units/examples/ give it, served by the double: the models of
# --models-dir (its *.gguf) or of --models-preset (its sections), named after the build it stands for
LLAMA_SERVER = """#!%(python)s
import argparse, configparser, os
p = argparse.ArgumentParser()
for o in ("--host", "--port", "--models-dir", "--models-preset", "--models-max", "-ngl"):
    p.add_argument(o)
a = p.parse_args()
if a.models_dir:
    models = sorted(f[:-len(".gguf")] for f in os.listdir(a.models_dir) if f.endswith(".gguf"))
else:
    c = configparser.ConfigParser()
    c.read(a.models_preset)
    models = [m for m in c.sections() if m != "*"]  # [*]: every model's defaults, no model
os.execv(%(python)r, [%(python)r, %(double)r, "--host", a.host, "--port", a.port, "--models", ",".join(models),
                      "--name", %(name)r])
"""


def gpu_home(box, presets):
    """the GPU host's ~: the two llama.cpp builds and their models where the examples look, the fork's
    presets the README's fork-models.ini"""
    home = os.path.join(box.dir, "home")
    for build, name in (("llama.cpp", "mainline"), ("llama.cpp-fork", "fork")):
        d = os.path.join(home, build, "build", "bin")
        os.makedirs(d)
        with open(os.path.join(d, "llama-server"), "w") as f:
            f.write(LLAMA_SERVER % {"python": PYTHON, "double": os.path.abspath(DOUBLE), "name": name})
        os.chmod(os.path.join(d, "llama-server"), 0o755)
    os.makedirs(os.path.join(home, "models"))
    for m in ("laguna-xs", "qwen3-8b"):
        open(os.path.join(home, "models", m + ".gguf"), "w").close()
    os.makedirs(os.path.join(home, ".config", "llama"))
    with open(os.path.join(home, ".config", "llama", "fork-models.ini"), "w") as f:
        f.write(presets)
    return home


def run_commands(script, where, sshd, env, cwd):
    """the README's sh block, line by line, each where its comment says; returns what each printed"""
    out = []
    for line in script.splitlines():
        if line.startswith("# on the GPU host"):
            where = "gpu"
            continue
        if line.startswith("# on the modelgate machine"):
            where = "modelgate"
            continue
        if not line.strip() or line.startswith("#"):
            continue
        command = line.replace(GPU_HOST, ADDRESS).replace("gpu@", "root@")
        if command.startswith("loginctl enable-linger"):
            # the box's manager has no logind to linger for; it lives as long as the test
            print("walkthrough: not run in a box (no logind; the box's manager outlives every session): " + line)
            continue
        if command.startswith("ssh "):
            command = "%s -p %d %s" % (sshd.ssh_command, sshd.port, command[len("ssh "):])
        r = subprocess.run(["bash", "-ec", command], env=env[where], cwd=cwd, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, "README's %r failed (%d): %s%s" % (line, r.returncode, r.stdout, r.stderr)
        out.append((line, r.stdout))
    return out


def test_the_readme_real_hosts_walkthrough_works_as_written(make_box, tmp):
    ini, script, promised, presets = real_hosts()
    gate_box, gpu = make_box(), make_box()
    sshd = Sshd(tmp, address=ADDRESS)
    try:
        engine_port = free_port(host=ADDRESS)
        # the examples as shipped, in a checkout of their own, with the boxes' address and port
        checkout = os.path.join(tmp, "checkout")
        shutil.copytree(os.path.join(SOURCE, "units"), os.path.join(checkout, "units"))
        url = re.search(r"^URL=http://%s:(\d+)" % re.escape(GPU_HOST), ini, re.M)
        assert url, "README's [Host] no longer has URL=http://%s:PORT" % GPU_HOST
        example_port = url.group(1)
        for unit in ("llama-mainline.service", "llama-fork.service", "llama-podman.service"):
            path = os.path.join(checkout, "units", "examples", unit)
            text = open(path).read()
            assert "%s:%s" % (GPU_HOST, example_port) in text or \
                "--host %s --port %s" % (GPU_HOST, example_port) in text, \
                "units/examples/%s does not listen where README's URL= points" % unit
            text = text.replace("--host %s --port %s" % (GPU_HOST, example_port),
                                "--host %s --port %d" % (ADDRESS, engine_port))
            open(path, "w").write(text.replace("%s:%s:" % (GPU_HOST, example_port),
                                               "%s:%d:" % (ADDRESS, engine_port)))
        home = gpu_home(gpu, presets)
        gate_home = os.path.join(gate_box.dir, "home")
        env = {"gpu": dict(gpu.env, HOME=home, USER="root"), "modelgate": dict(os.environ, HOME=gate_home)}
        for e in env.values():
            e.pop("XDG_CONFIG_HOME", None)

        ran = run_commands(script, "modelgate", sshd, env, checkout)
        assert any(out.strip() == "ok" for line, out in ran if line.startswith("ssh ")), ran
        assert set(os.listdir(os.path.join(home, ".config", "systemd", "user"))) >= \
            {"llama-mainline.service", "llama-fork.service", "llama-podman.service"}
        assert gpu.systemctl("show", "-P", "LoadState", "llama-fork.service").strip() == "loaded"

        # ~/.config/modelgate/modelgate.conf on the modelgate machine, the README's
        conf = ini.replace("URL=http://%s:%s" % (GPU_HOST, example_port), "URL=http://%s:%d" % (ADDRESS, engine_port))
        conf = re.sub(r"^Bus=ssh:gpu@%s\b.*$" % re.escape(GPU_HOST),
                      "Bus=ssh:root@%s:%d\nSSHCommand=%s\nBusPath=unix:path=%s"
                      % (ADDRESS, sshd.port, sshd.ssh_command, gpu.bus), conf, flags=re.M)
        assert "BusPath=" in conf, "README's [Host] no longer has Bus=ssh:gpu@%s" % GPU_HOST
        os.makedirs(os.path.join(gate_home, ".config", "modelgate"))
        with open(os.path.join(gate_home, ".config", "modelgate", "modelgate.conf"), "w") as f:
            f.write(conf)
        # "modelgatectl check-config validates it and prints ... the command its bus runs": the command as the
        # README writes it, with this build's modelgated for the installed one (modelgatectl(1))
        said = re.search(r"`(modelgatectl check-config)` validates it", open(os.path.join(SOURCE, "README.md")).read())
        assert said, "README's Real hosts no longer says which command checks the configuration"
        check = subprocess.run(said.group(1).replace("modelgatectl", MODELGATECTL, 1).split() + ["--user"],
                               env=dict(env["modelgate"], MODELGATED=os.path.abspath(MODELGATED)),
                               capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check
        assert "# the bus runs: ssh " in check.stdout and "systemd-stdio-bridge" in check.stdout, check.stdout
        # "modelgatectl check (...) goes further and asks the hosts": through ssh to the GPU host's bus, its
        # engine units as the README had them copied; nothing is wrong, so nothing is said to be
        said = re.search(r"`(modelgatectl check)` \(`modelgated --check-config\s+--hosts`\) goes further",
                         open(os.path.join(SOURCE, "README.md")).read())
        assert said, "README's Real hosts no longer says which command checks the hosts"
        hosts = subprocess.run(said.group(1).replace("modelgatectl", MODELGATECTL, 1).split() + ["--user"],
                               env=dict(env["modelgate"], MODELGATED=os.path.abspath(MODELGATED)),
                               capture_output=True, text=True, timeout=60)
        assert hosts.returncode == 0 and "PROBLEM" not in hosts.stdout, hosts
        assert gpu.active_state("llama-fork.service") == "inactive"  # a check starts nothing

        # the installed user units, reading ~/.config/modelgate/modelgate.conf ("Installing the units")
        port = free_port()
        log = installed_units(gate_box, tmp, port, conf, exec_start="%s --user" % os.path.abspath(MODELGATED))

        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        r = post(c, "/v1/chat/completions", chat("3090-flint-40b"))
        body = r.read()
        assert r.status == 200 and r.getheader("X-Double") == "fork", (r.status, body, open(log).read())
        for text in promised:
            pattern = re.escape(text).replace(re.escape("2.3s"), r"[0-9.]+(ms|s)")
            wait_for(lambda: re.search(pattern, open(log).read()), timeout=30, what="the README's %r" % text)
        assert gpu.active_state("llama-fork.service") == "active"

        # the other engine: a switch on the GPU host, one engine at a time
        r = post(c, "/v1/chat/completions", chat("3090-laguna-xs"))
        body = r.read()
        assert r.status == 200 and r.getheader("X-Double") == "mainline", (r.status, body, open(log).read())
        assert gpu.active_state("llama-mainline.service") == "active"
        assert gpu.active_state("llama-fork.service") == "inactive"
        c.close()
        gate_box.systemctl("stop", "modelgate.service", "modelgate.socket")
        text = open(log).read()
        assert "Sanitizer" not in text and "runtime error:" not in text, text
    finally:
        sshd.stop()
