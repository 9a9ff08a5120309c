"""Transport and the Docker daemon on a real lab host.

Files reach the host by SFTP, so a policy past Linux's 128 KiB argument limit
applies, and no process ever carries it on its command line. The bootstrap
hardens Docker's daemon.json (keeping the lab's own ``dns`` key), restarts
Docker only when needed, and the agents survive it thanks to live-restore.
"""

from __future__ import annotations

import io
import json
import shlex
import time
from pathlib import Path

import pytest

from jackin.lab import Lab
from jackin.plan.fleet import user_name
from jackin.transport.ssh import connect

from .conftest import inv, module_lab, sh

LAB_DAEMON_JSON = {"dns": ["127.0.0.1"]}  # the lab image's own daemon.json (jackin/lab/recipe/customize.sh)
HARDENED = {"icc": False, "live-restore": True, "no-new-privileges": True, "userland-proxy": False}
FLEET = "xpd"
AGENTS = [user_name(FLEET, "a-1"), user_name(FLEET, "a-2")]


@pytest.fixture(scope="module")
def tlab():
    yield from module_lab("r", 1)



def daemon_json(lab: Lab) -> dict:
    return json.loads(sh(lab, "cat /etc/docker/daemon.json").stdout)


def dockerd(lab: Lab) -> tuple[str, str]:
    """dockerd's main PID and when docker.service last became active: both change on a restart."""
    out = sh(lab, "systemctl show docker -p MainPID -p ActiveEnterTimestamp --value").stdout.split("\n")
    return out[0].strip(), out[1].strip()


def live_restore(lab: Lab) -> str:
    return sh(lab, "docker info --format '{{.LiveRestoreEnabled}}'").stdout.strip()


def agent_pids(lab: Lab) -> dict[str, str]:
    """Each agent container's init PID, and that it runs (a restarted container has a new PID)."""
    out = sh(lab, "docker inspect -f '{{.Name}} {{.State.Running}} {{.State.Pid}}' " + " ".join(AGENTS)).stdout
    rows = [line.split() for line in out.splitlines()]
    assert all(running == "true" for _, running, _ in rows), out
    return {name.lstrip("/"): pid for name, _, pid in rows}


def wait_running(lab: Lab, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sh(lab, "docker inspect -f '{{.State.Running}}' " + " ".join(AGENTS), warn=True)
        if out.ok and out.stdout.split() == ["true"] * len(AGENTS):
            return
        time.sleep(0.5)
    raise AssertionError("agent containers did not come back")


def up(spec: str) -> dict:
    done = inv("fleet.up", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["run"]["hosts"][0]


@pytest.fixture(scope="module")
def small(tlab, tmp_path_factory):
    path = tmp_path_factory.mktemp("tr") / "tr.yaml"
    path.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": tlab.name, "hosts": 1},
        "agents": [{"name": "a", "count": 2, "network": {"mode": "none"}}],
        "resources": {"memory": "64m", "cpus": 0.2, "pids": 32},
    }}))  # fmt: skip
    yield str(path)
    inv("fleet.down", "-i", str(path), "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup


def test_daemon_json_is_hardened_keeping_the_labs_keys_and_a_rerun_does_not_restart_docker(tlab, small):
    assert json.loads(sh(tlab, "cat /etc/docker/daemon.json").stdout) == LAB_DAEMON_JSON  # before: the lab's own
    assert live_restore(tlab) == "false"
    assert up(small)["failed"] == 0
    assert daemon_json(tlab) == {**LAB_DAEMON_JSON, **HARDENED}
    assert sh(tlab, "stat -c '%a %U:%G' /etc/docker/daemon.json").stdout.strip() == "644 root:root"
    assert live_restore(tlab) == "true"
    assert sh(tlab, "ls -A /run/jackin-upload 2>&1 || true").stdout.strip().endswith("No such file or directory")

    before, pids = dockerd(tlab), agent_pids(tlab)
    again = up(small)
    assert (again["changed"], again["failed"]) == (0, 0)
    assert dockerd(tlab) == before  # Docker was not restarted (nor started anew)
    assert agent_pids(tlab) == pids


def test_agents_survive_a_forced_docker_restart(tlab, small):
    pids, daemon = agent_pids(tlab), dockerd(tlab)  # running before: agent_pids asserts it
    sh(tlab, "systemctl reset-failed docker; systemctl restart docker")
    assert dockerd(tlab)[0] != daemon[0]  # the restart did happen
    assert agent_pids(tlab) == pids  # same processes, never stopped


def test_first_hardening_reloads_live_restore_before_the_restart_so_running_agents_survive(tlab, small):
    # A host as the previous version left it: the lab's daemon.json, live-restore off, agents running.
    # (A reload changes only the keys the file names, so live-restore is turned off by naming it.)
    off = json.dumps({**LAB_DAEMON_JSON, "live-restore": False})
    sh(tlab, f"printf '%s\\n' {shlex.quote(off)} > /etc/docker/daemon.json; systemctl reload docker")
    deadline = time.monotonic() + 20
    while live_restore(tlab) != "false" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert live_restore(tlab) == "false"
    # Control: without live-restore a Docker restart does stop the agents (they come back as new processes).
    pids = agent_pids(tlab)
    sh(tlab, "systemctl reset-failed docker; systemctl restart docker")
    wait_running(tlab)
    restarted = agent_pids(tlab)
    assert all(restarted[name] != pids[name] for name in AGENTS)
    sh(tlab, f"printf '%s\\n' {shlex.quote(json.dumps(LAB_DAEMON_JSON))} > /etc/docker/daemon.json")

    daemon = dockerd(tlab)
    result = up(small)
    assert result["failed"] == 0 and result["changed"] >= 1
    assert daemon_json(tlab) == {**LAB_DAEMON_JSON, **HARDENED}
    assert live_restore(tlab) == "true"
    assert dockerd(tlab)[0] != daemon[0]  # restarted once for icc, no-new-privileges, userland-proxy
    assert agent_pids(tlab) == restarted  # and the agents ran through it
    log = sh(tlab, "journalctl -u docker --no-pager -o cat | grep -c 'Got signal to reload configuration'").stdout
    assert int(log) >= 2  # our reload (and the test's own) happened


def test_a_daemon_json_that_is_not_an_object_fails_the_host_clearly_and_is_left_alone(tlab, small):
    sh(tlab, "cp /etc/docker/daemon.json /root/daemon.json.good; printf '[1, 2]\\n' > /etc/docker/daemon.json")
    try:
        done = inv("fleet.up", "-i", small, "--yes", "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        host = json.loads(done.stdout)["run"]["hosts"][0]
        assert "/etc/docker/daemon.json is a JSON list, not an object" in host["error"]
        assert sh(tlab, "cat /etc/docker/daemon.json").stdout == "[1, 2]\n"
    finally:
        sh(tlab, "cp /root/daemon.json.good /etc/docker/daemon.json")


# --- 150 agents on one host --------------------------------------------------------------------

SAMPLER = """
import json, os, sys, time
out, stop = sys.argv[1], sys.argv[2]
largest, command, apply_seen, samples = 0, "", 0, 0
while not os.path.exists(stop):
    samples += 1
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"nft -c -f /etc/jackin/nft/xport.nft" in data:
            apply_seen = max(apply_seen, len(data))
        if len(data) > largest:
            largest, command = len(data), data[:120].decode(errors="replace")
    time.sleep(0.03)  # the apply runs in one shell through both nft runs: it stays in sight for several samples
with open(out, "w") as f:
    json.dump({"largest": largest, "command": command, "apply_seen": apply_seen, "samples": samples}, f)
"""


def big_spec(lab: Lab, path: Path) -> str:
    path.write_text(json.dumps({"fleet": {
        "name": "xport", "provider": "lab", "lab": {"name": lab.name, "hosts": 1}, "uid_base": 62000,
        "address_pools": [{"base": "10.213.0.0/16", "size": 24}],  # Docker's default pools hold ~30 networks
        "network": {"mode": "allowlist", "dns": ["9.9.9.9"],
                    "allow": ["10.1.0.0/16:5432", "1.2.3.4", "203.0.113.0/24:443"]},
        # The idle busybox image: 150 demo agents would each run a heartbeat and a Docker healthcheck (an exec
        # every 10 s), which is not what this test measures and swamps a small machine.
        "agents": [{"name": n, "count": c, "image": "jackin/agent:busybox"} for n, c in (("a", 64), ("b", 64), ("c", 22))],
        "resources": {"memory": "16m", "cpus": 0.1, "pids": 16},
    }}))  # fmt: skip
    return str(path)


def sampled(lab: Lab, action) -> dict:
    """Run ``action`` while a sampler on the host records the largest command line of any process."""
    with connect(lab.status().hosts[0].target()) as conn:
        conn.run("rm -f /root/argv.out /root/argv.stop", hide=True)
        conn.put(io.StringIO(SAMPLER), "/root/argv-sampler.py")
        conn.run("setsid python3 /root/argv-sampler.py /root/argv.out /root/argv.stop </dev/null >/dev/null 2>&1 &",
                 hide=True)  # fmt: skip
        time.sleep(1)
        try:
            action()
        finally:
            conn.run("touch /root/argv.stop; for i in $(seq 100); do [ -s /root/argv.out ] && break; sleep 0.1; done",
                     hide=True)  # fmt: skip
        return json.loads(conn.run("cat /root/argv.out", hide=True).stdout)


def chains(ruleset: str) -> set[str]:
    return {line.split()[1] for line in ruleset.splitlines() if line.strip().startswith("chain ")}


def test_150_agents_on_one_host_come_up_with_their_policy_and_no_process_carries_it(tlab, tmp_path):
    spec = big_spec(tlab, tmp_path / "xport.yaml")
    results: list[dict] = []
    try:
        seen = sampled(tlab, lambda: results.append(up(spec)))
        print("argv sampler:", seen)  # shown with pytest -rP
        assert results[0]["failed"] == 0
        policy = sh(tlab, "cat /etc/jackin/nft/xport.nft").stdout
        assert len(policy) > 128 * 1024  # past what one command-line argument may hold
        # Control: that policy as a command-line argument (the old printf) cannot even be executed.
        assert not sh(tlab, f"printf '%s' {shlex.quote(policy)} > /dev/null", warn=True).ok
        assert seen["samples"] > 10 and seen["apply_seen"] > 0, seen  # the sampler watched the apply's script
        assert seen["largest"] < 16 * 1024, seen  # no command line anywhere near the policy's size

        loaded = chains(sh(tlab, "nft list table inet jackin-xport").stdout)
        assert len(chains(policy)) == 3 + 3 * 150 and loaded == chains(policy)  # every agent's: not the lockdown
        running = sh(tlab, "docker ps -q --filter label=jackin.fleet=xport --filter status=running | wc -l").stdout
        assert running.strip() == "150"

        again = up(spec)
        assert (again["changed"], again["failed"]) == (0, 0)
    finally:  # no final snapshot: 150 restic backups (170 s) prove nothing of the large-table path
        down = inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--no-final-snapshot")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "jackin-xport" not in sh(tlab, "nft list tables").stdout
