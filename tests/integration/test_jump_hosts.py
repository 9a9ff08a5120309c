"""Jump hosts over real SSH: a lab host reachable only through another lab host.

One 2-host lab for the module. Host 1 is ``gate`` (127.0.0.1 and its published
port); host 2 is ``inner``, at its address on the lab network, with ``jump: gate``.
Inside inner an nft table of the test's own drops SSH from anything but gate's
address, so a connection that reaches inner's sshd came through the hop. What
inner's sshd accepted is read from its journal with ``docker exec``, which
makes no SSH connection of its own.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jackin.engine import EngineRequest, run
from jackin.errors import ConnectError
from jackin.lab import Lab, LabHost
from jackin.lab import docker as dk
from jackin.lab.keys import write_keypair
from jackin.paths import state_dir
from jackin.transport.ssh import SshTarget, connect, wait_ready

from .conftest import ROOT, _engine_or_skip, new_lab_name

ACCEPTED = re.compile(r"Accepted publickey for root from (\S+) port ")


@dataclass(frozen=True)
class JumpLab:
    lab: Lab
    gate: LabHost
    inner: LabHost

    def host_key(self, host: LabHost) -> str:
        return " ".join((self.lab.dir / "hosts" / host.name / "ssh_host_ed25519_key.pub").read_text().split()[:2])

    @property
    def gate_ip(self) -> str:
        assert self.gate.lab_ip
        return self.gate.lab_ip

    def inner_via_gate(self, known_hosts: Path) -> SshTarget:
        """inner as the fleet tasks resolve it: its lab address, through gate."""
        gate = SshTarget(name="gate", address="127.0.0.1", port=self.gate.port, key_file=self.lab.key_file,
                         known_hosts=known_hosts)  # fmt: skip
        assert self.inner.lab_ip
        return SshTarget(name="inner", address=self.inner.lab_ip, key_file=self.lab.key_file,
                         known_hosts=known_hosts, jump=gate)  # fmt: skip

    def journal_cursor(self) -> str:
        """Where inner's journal ends now: later reads see only what comes after it."""
        out = dk.docker("exec", self.inner.container, "journalctl", "-n", "0", "--show-cursor", "--no-pager")
        return out.rsplit("-- cursor: ", 1)[1].strip()

    def accepted_since(self, cursor: str, *, at_least: int = 0) -> list[str]:
        """Source addresses of the SSH logins inner's sshd accepted after ``cursor``; polls
        briefly for ``at_least`` of them, as sshd's lines reach the journal asynchronously."""
        deadline = time.monotonic() + 10
        while True:
            log = dk.docker("exec", self.inner.container, "journalctl", "-u", "ssh", f"--after-cursor={cursor}",
                            "-o", "cat", "--no-pager")  # fmt: skip
            found = ACCEPTED.findall(log)
            if len(found) >= at_least or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


@pytest.fixture(scope="module")
def jump_lab() -> Iterator[JumpLab]:
    _engine_or_skip()
    lab = Lab(new_lab_name("j"))
    try:
        lab.up(2)
        gate, inner = lab.status().hosts
        wait_ready(inner.target(), timeout=60)  # positive control: without the rule, inner answers directly
        rules = (
            "add table inet jumptest\n"
            "add chain inet jumptest input { type filter hook input priority -50; policy accept; }\n"
            f"add rule inet jumptest input tcp dport 22 ip saddr != {gate.lab_ip} counter drop\n"
            "add rule inet jumptest input tcp dport 2222 drop\n"  # a black hole: a hop that never answers
        )
        dk.docker("exec", "-i", inner.container, "nft", "-f", "-", input=rules.encode())
        yield JumpLab(lab, gate, inner)
    finally:
        lab.down()


def inventory(tmp_path: Path, jl: JumpLab, fleet: str, *, gate_key: str | None = None,
              inner_key: str | None = None) -> Path:  # fmt: skip
    """A static inventory: gate at 127.0.0.1, inner behind it; both pinned."""
    key = jl.lab.key_file
    path = tmp_path / f"{fleet}.yaml"
    path.write_text(
        "hosts:\n"
        f"  - {{name: gate, address: 127.0.0.1, port: {jl.gate.port}, key_file: '{key}',\n"
        f"     host_keys: ['{gate_key or jl.host_key(jl.gate)}']}}\n"
        f"  - {{name: inner, address: {jl.inner.lab_ip}, jump: gate, key_file: '{key}',\n"
        f"     host_keys: ['{inner_key or jl.host_key(jl.inner)}']}}\n"
        f"fleet:\n  name: {fleet}\n  provider: static\n  hosts: [inner]\n"
        "  agents:\n    - {name: coder, role: demo}\n"
    )
    return path


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI as an operator whose HOME is ``home``."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "250", "HOME": str(home)},
    )  # fmt: skip


def fleet_name(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(2)}"


def known_hosts_files(home: Path, jl: JumpLab) -> dict[str, bytes | None]:
    """Every known_hosts a run could write to, with its bytes (None: absent)."""
    paths = [home / ".ssh" / "known_hosts", Path.home() / ".ssh" / "known_hosts", jl.lab.known_hosts,
             *sorted((state_dir() / "fleets").glob("*/known_hosts"))]  # fmt: skip
    return {str(p): p.read_bytes() if p.exists() else None for p in paths}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


# --- the lab itself ----------------------------------------------------------------


def test_inner_answers_only_through_gate(jump_lab: JumpLab, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{jump_lab.gate.port} {jump_lab.host_key(jump_lab.gate)}\n"
                  f"{jump_lab.inner.lab_ip} {jump_lab.host_key(jump_lab.inner)}\n")  # fmt: skip
    direct = jump_lab.inner_via_gate(kh).model_copy(update={"jump": None})
    with pytest.raises(ConnectError):
        connect(direct, timeout=3)  # control: from this machine, inner's lab address is dropped
    with pytest.raises(ConnectError):
        connect(jump_lab.inner.target(), timeout=3)  # and so is its published port
    with connect(jump_lab.inner_via_gate(kh)) as conn:
        seen = conn.run("echo $SSH_CONNECTION", hide=True).stdout.split()
    assert seen[0] == jump_lab.gate_ip and seen[2:] == [jump_lab.inner.lab_ip, "22"]


# --- the fleet tasks through the jump host --------------------------------------------


def test_fleet_up_status_down_on_a_host_behind_a_jump_host(jump_lab: JumpLab, tmp_path: Path, home: Path) -> None:
    name = fleet_name("jmp")
    spec = str(inventory(tmp_path, jump_lab, name))
    since = jump_lab.journal_cursor()
    try:
        up = cli(home, "fleet.up", "-i", spec, "--yes", "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        (host,) = json.loads(up.stdout)["run"]["hosts"]
        assert host["host"] == "inner" and host["connected"] and host["error"] is None
        assert host["facts"]["distro"] == "Debian 12"
        after_up = jump_lab.accepted_since(since, at_least=1)
        assert after_up and set(after_up) == {jump_lab.gate_ip}  # the engine (pyinfra) came through gate

        again = cli(home, "fleet.up", "-i", spec, "--yes", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        assert [h["changed"] for h in json.loads(again.stdout)["run"]["hosts"]] == [0]

        status = cli(home, "fleet.status", "-i", spec, "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        (row,) = json.loads(status.stdout)["hosts"]
        assert row["reachable"] and [a["state"] for a in row["agents"]] == ["running"]
        after_status = jump_lab.accepted_since(since, at_least=len(after_up) + 1)
        assert len(after_status) > len(after_up) and set(after_status) == {jump_lab.gate_ip}  # Fabric too

        probe = cli(home, "agent.netcheck", "coder-1", jump_lab.gate_ip, "--port", "22", "-i", spec, "--json")
        assert probe.returncode == 0, probe.stdout + probe.stderr
        assert [(p["host"], p["result"]) for p in json.loads(probe.stdout)] == [("inner", "blocked")]  # mode none
    finally:
        down = cli(home, "fleet.down", "-i", spec, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "clean" in down.stdout
    assert not (home / ".ssh").exists()


def test_engine_commands_run_with_gate_as_their_source(jump_lab: JumpLab, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{jump_lab.gate.port} {jump_lab.host_key(jump_lab.gate)}\n"
                  f"{jump_lab.inner.lab_ip} {jump_lab.host_key(jump_lab.inner)}\n")  # fmt: skip
    deploy = tmp_path / "where_from.py"
    deploy.write_text(
        "from pyinfra.operations import server\n"
        "server.shell(name='record the SSH source', commands=['echo \"$SSH_CONNECTION\" > /run/jackin-jump-test'])\n"
    )
    result = run(EngineRequest(deploy=str(deploy), targets=[jump_lab.inner_via_gate(kh)], connect_timeout=10))
    assert result.hosts[0].ok, result.hosts[0].error
    seen = dk.docker("exec", jump_lab.inner.container, "cat", "/run/jackin-jump-test").split()
    assert seen[0] == jump_lab.gate_ip and seen[2:] == [jump_lab.inner.lab_ip, "22"]


def test_a_target_the_jump_host_cannot_reach_fails_within_the_timeout(jump_lab: JumpLab, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{jump_lab.gate.port} {jump_lab.host_key(jump_lab.gate)}\n")
    hole = jump_lab.inner_via_gate(kh).model_copy(update={"port": 2222})  # dropped silently by inner
    started = time.monotonic()
    with pytest.raises(ConnectError) as caught:
        connect(hole, timeout=3)
    assert time.monotonic() - started < 8
    assert caught.value.host == "inner"
    assert caught.value.message.startswith(f"through jump host gate: cannot reach root@{jump_lab.inner.lab_ip}:2222: ")

    started = time.monotonic()
    result = run(EngineRequest(deploy=str(ROOT / "deploys" / "fleet.py"), targets=[hole], connect_timeout=3))
    assert time.monotonic() - started < 15
    (host,) = result.hosts
    assert not host.connected
    assert host.error == (f"through jump host gate: cannot reach root@{jump_lab.inner.lab_ip}:2222: "
                          "Timeout opening channel.")


# --- every hop is pinned -----------------------------------------------------------


@pytest.mark.parametrize("hop", ["gate", "inner"])
def test_a_wrong_pinned_key_on_either_hop_is_refused(jump_lab: JumpLab, tmp_path: Path, home: Path,
                                                     hop: str) -> None:  # fmt: skip
    gate_key, inner_key = jump_lab.host_key(jump_lab.gate), jump_lab.host_key(jump_lab.inner)
    swapped = {"gate_key": inner_key} if hop == "gate" else {"inner_key": gate_key}
    name = fleet_name("jk")
    spec = str(inventory(tmp_path, jump_lab, name, **swapped))
    expected = (f"through jump host gate: host key mismatch for root@127.0.0.1:{jump_lab.gate.port}" if hop == "gate"
                else f"host key mismatch for root@{jump_lab.inner.lab_ip}:22")  # fmt: skip
    before = known_hosts_files(home, jump_lab)
    since = jump_lab.journal_cursor()

    status = cli(home, "fleet.status", "-i", spec, "--json")
    assert status.returncode == 3, status.stdout + status.stderr
    (row,) = json.loads(status.stdout)["hosts"]
    assert not row["reachable"] and row["error"].startswith(expected)

    up = cli(home, "fleet.up", "-i", spec, "--yes", "--json")
    assert up.returncode == 3, up.stdout + up.stderr
    (host,) = json.loads(up.stdout)["run"]["hosts"]
    assert not host["connected"] and "host key" in host["error"].lower()
    if hop == "gate":
        assert expected in host["error"]  # after "not changed: its state read ... failed: "

    status = cli(home, "fleet.status", "-i", spec)
    assert status.returncode == 3 and expected in " ".join(status.stdout.split())

    after = known_hosts_files(home, jump_lab)
    fleet_file = str(state_dir() / "fleets" / name / "known_hosts")
    pinned = after.pop(fleet_file)  # written from the inventory by each run, before it connects
    assert pinned is not None and pinned.decode() == (
        f"[127.0.0.1]:{jump_lab.gate.port} {swapped.get('gate_key', gate_key)}\n"
        f"{jump_lab.inner.lab_ip} {swapped.get('inner_key', inner_key)}\n"
    )
    assert after == before  # nothing learned anywhere
    if hop == "gate":
        assert jump_lab.accepted_since(since) == []  # refused at gate: inner never saw a login


# --- the operator's own ssh config -------------------------------------------------


def test_operator_ssh_config_changes_nothing(jump_lab: JumpLab, tmp_path: Path, home: Path) -> None:
    """An ~/.ssh/config that sends both names elsewhere, through a jump host of its own,
    with its own key, accept-anything host keys, agent forwarding and a ``Match exec``."""
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    write_keypair(ssh / "id_mallory", comment="not authorized anywhere")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    (ssh / "config").write_text(
        f"Host gate inner 127.0.0.1 {jump_lab.inner.lab_ip}\n"
        f"  HostName 127.0.0.2\n  Port {closed}\n  User mallory\n  IdentityFile {ssh}/id_mallory\n"
        f"  ProxyJump mallory@127.0.0.1:{closed}\n  StrictHostKeyChecking no\n"
        f"  UserKnownHostsFile {ssh}/learned\n  ForwardAgent yes\n"
        f'Match exec "touch {home}/match-exec-ran"\n  User mallory\n'
    )
    config_before = (ssh / "config").read_bytes()
    name = fleet_name("jcf")
    spec = str(inventory(tmp_path, jump_lab, name))
    since = jump_lab.journal_cursor()
    try:
        up = cli(home, "fleet.up", "-i", spec, "--yes", "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        assert json.loads(up.stdout)["run"]["hosts"][0]["connected"]
        status = cli(home, "fleet.status", "-i", spec, "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        assert json.loads(status.stdout)["hosts"][0]["reachable"]
    finally:
        down = cli(home, "fleet.down", "-i", spec, "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert set(jump_lab.accepted_since(since, at_least=1)) == {jump_lab.gate_ip}
    assert sorted(p.name for p in home.iterdir()) == [".ssh"]  # no Match exec ran
    assert sorted(p.name for p in ssh.iterdir()) == ["config", "id_mallory", "id_mallory.pub"]  # nothing learned
    assert (ssh / "config").read_bytes() == config_before
