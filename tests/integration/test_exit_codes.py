"""Exit codes over real SSH: an unreachable host is exit 3 in every task, and the other
host is still reported; a command that fails on a reachable host is exit 1.

One 2-host lab in a state dir of its own. The fleet reaches it as provider
``static`` (the lab's pinned keys written into the inventory), so no lab logic
resumes or replaces the host a test stops.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile

import pytest

from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.transport.ssh import connect

from .conftest import _engine_or_skip, inv, new_lab_name


@pytest.fixture(scope="module")
def elab():
    _engine_or_skip()
    saved = os.environ.get("JACKIN_STATE_DIR")
    with tempfile.TemporaryDirectory(prefix="jackin-exit-") as state:
        os.environ["JACKIN_STATE_DIR"] = state
        lab = Lab(new_lab_name("e"))
        try:
            lab.up(2)
            yield lab
        finally:
            lab.down()
            if saved is None:
                os.environ.pop("JACKIN_STATE_DIR", None)
            else:
                os.environ["JACKIN_STATE_DIR"] = saved


def static_inventory(tmp_path, lab: Lab, fleet: str, hosts: list) -> str:
    keys = {line.split()[0]: " ".join(line.split()[1:3]) for line in lab.known_hosts.read_text().splitlines()}
    lines = ["hosts:"]
    for host in hosts:
        lines.append(f"  - {{name: {host.name}, address: 127.0.0.1, port: {host.port}, key_file: {lab.key_file}, "
                     f"host_keys: [\"{keys[f'[127.0.0.1]:{host.port}']}\"]}}")  # fmt: skip
    lines += ["fleet:", f"  name: {fleet}", "  provider: static", "  agents: [{name: coder, role: demo, placement: each}]",
              "  network: {mode: none}"]  # fmt: skip
    path = tmp_path / f"{fleet}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_every_task_exits_3_for_a_stopped_host_and_reports_the_other(elab, tmp_path):
    first, second = elab.status().hosts
    fleet = f"x{secrets.token_hex(3)}"
    spec = static_inventory(tmp_path, elab, fleet, [first, second])
    inv("fleet.up", "-i", spec, "--yes", check=True)
    dk.docker("stop", "-t", "0", second.container)
    try:
        done = inv("fleet.status", "-i", spec, "--json")
        hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
        assert done.returncode == 3 and not hosts[second.name]["reachable"]
        assert hosts[first.name]["reachable"] and hosts[first.name]["agents"][0]["state"] == "running"

        done = inv("fleet.up", "-i", spec, "--yes", "--json")
        hosts = {h["host"]: h for h in json.loads(done.stdout)["run"]["hosts"]}
        assert done.returncode == 3, done.stderr
        assert hosts[first.name]["error"] is None and hosts[first.name]["connected"]
        assert not hosts[second.name]["connected"] and hosts[second.name]["error"]

        done = inv("agent.netcheck", "coder-1", first.lab_ip, "--port", "22", "-i", spec, "--json")
        probes = {p["host"]: p for p in json.loads(done.stdout)}
        assert done.returncode == 3, done.stderr
        assert probes[second.name]["result"] == "unreachable"
        assert probes[first.name]["result"] == "blocked"  # mode none: the host's sshd is denied, and answered

        done = inv("agent.denials", "coder-1", "-i", spec, "--json")
        report = json.loads(done.stdout)
        assert done.returncode == 3, done.stderr
        assert [(e["host"], e["unreachable"]) for e in report["errors"]] == [(second.name, True)]
        assert f"error: {second.name}: unreachable:" in done.stderr
        assert {d["host"] for d in report["denials"]} <= {first.name}  # the first host was read

        done = inv("fleet.gc", "-i", spec, "--yes")
        assert done.returncode == 3, done.stderr
        assert f"error: {second.name}: unreachable:" in done.stderr
        assert "no leftovers of unknown fleets" in done.stdout  # the first host was read: the fleet is up, not a leftover

        done = inv("fleet.down", "-i", spec, "--yes")
        assert done.returncode == 3, done.stdout + done.stderr
        assert first.name in done.stdout and second.name in done.stdout
        # The first host was torn down all the same: the stopped host did not stop the others.
        with connect(first.target()) as conn:
            left = conn.run(f"getent passwd | grep -c 'jackin/{fleet}/' || true; docker ps -aq "
                            f"--filter label=jackin.fleet={fleet} | wc -l", hide=True).stdout.split()  # fmt: skip
        assert left == ["0", "0"]
    finally:
        dk.docker("start", second.container)


def test_a_command_that_fails_on_a_reachable_host_is_exit_1_not_unreachable(elab, tmp_path):
    first = elab.status().hosts[0]
    fleet = f"x{secrets.token_hex(3)}"
    spec = static_inventory(tmp_path, elab, fleet, [first])
    # The fleet was never brought up: its policy's set does not exist, so `nft list set` fails on the host.
    done = inv("agent.denials", "coder-1", "-i", spec, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert [(e["host"], e["unreachable"]) for e in json.loads(done.stdout)["errors"]] == [(first.name, False)]
    assert f"error: {first.name}: failed: command failed" in done.stderr
    # Control: the same host answers a read that succeeds.
    done = inv("fleet.status", "-i", spec, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["hosts"][0]["reachable"]


def test_status_is_exit_1_naming_docker_when_a_hosts_engine_is_down(elab, tmp_path):
    first = elab.status().hosts[0]
    spec = static_inventory(tmp_path, elab, f"x{secrets.token_hex(3)}", [first])
    done = inv("fleet.status", "-i", spec, "--json")  # control: the engine answers
    assert done.returncode == 0 and json.loads(done.stdout)["hosts"][0]["error"] is None, done.stdout + done.stderr
    with connect(first.target()) as conn:
        conn.run("systemctl stop docker.socket docker.service", hide=True)
    try:
        done = inv("fleet.status", "-i", spec, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        host = json.loads(done.stdout)["hosts"][0]
        assert host["reachable"] and "Docker engine does not answer" in host["error"]
        done = inv("fleet.status", "-i", spec)
        assert done.returncode == 1 and "Docker engine does not answer" in done.stdout + done.stderr
    finally:
        with connect(first.target()) as conn:
            conn.run("systemctl start docker.service", hide=True)
