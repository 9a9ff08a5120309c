"""gather over the system's OpenSSH client on a real lab host: multiplexed, and as strict as Fabric.

A master connection made under the right pin is never used for a target pinned otherwise: a changed
pin is refused as a host key mismatch while that master is alive, and an unpinned host is refused.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from jackin.transport import openssh
from jackin.errors import ConnectError, HostKeyError, RemoteCommandError
from jackin.transport.remote import gather
from jackin.transport.ssh import SshTarget

from .conftest import module_lab

OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@pytest.fixture(scope="module")
def olab():
    yield from module_lab("o", 1, shared=True)


@pytest.fixture
def host(olab) -> SshTarget:
    target = olab.status().hosts[0].target()
    assert openssh.usable(target)
    return target


def master_alive(target: SshTarget) -> bool:
    path = openssh.control_path(target)
    assert path is not None
    check = subprocess.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={path}", "-O", "check", "x"],
                           capture_output=True, text=True)  # fmt: skip
    return check.returncode == 0


def test_a_read_leaves_a_master_that_the_next_read_uses(host: SshTarget) -> None:
    first = gather([host], "hostname; echo to-stderr >&2", lambda out: out)[host.name]
    assert first == f"{host.name}\n"
    assert master_alive(host)
    assert gather([host], "echo $$", lambda out: out.strip())[host.name] != "", "the second read ran"
    assert master_alive(host)


def test_a_changed_pin_is_refused_while_a_master_for_the_right_one_is_alive(host: SshTarget, tmp_path) -> None:
    assert gather([host], "true", lambda out: "ok")[host.name] == "ok"  # control: the right pin, a master
    assert master_alive(host)
    entry = host.known_hosts.read_text().split()[0]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{entry} {OTHER_KEY}\n")
    found = gather([host.model_copy(update={"known_hosts": wrong})], "true", lambda out: "ran")[host.name]
    assert isinstance(found, HostKeyError), found
    assert found.message.startswith(f"host key mismatch for {host.endpoint}: got ssh-ed25519 SHA256:")
    unpinned = tmp_path / "unpinned"
    unpinned.write_text(f"[127.0.0.1]:1 {OTHER_KEY}\n")
    found = gather([host.model_copy(update={"known_hosts": unpinned})], "true", lambda out: "ran")[host.name]
    assert isinstance(found, HostKeyError) and found.message == f"no pinned host key for {host.endpoint} in {unpinned}"


def test_the_same_refusals_over_fabric(host: SshTarget, tmp_path, monkeypatch) -> None:
    """The two paths word a refusal alike (tests and operators read these messages)."""
    entry = host.known_hosts.read_text().split()[0]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{entry} {OTHER_KEY}\n")
    target = host.model_copy(update={"known_hosts": wrong})
    over_openssh = gather([target], "true", lambda out: "ran")[host.name]
    monkeypatch.setenv("JACKIN_SSH", "paramiko")
    over_fabric = gather([target], "true", lambda out: "ran")[host.name]
    assert isinstance(over_openssh, HostKeyError) and isinstance(over_fabric, HostKeyError)
    assert over_openssh.message == over_fabric.message


def test_a_failing_command_is_the_hosts_command_error_not_a_connection_error(host: SshTarget) -> None:
    for status in (3, 255):
        found = gather([host], f"echo nope >&2; exit {status}", lambda out: out)[host.name]
        assert type(found) is RemoteCommandError and found.message == f"command failed (exit {status}): nope"
    assert gather([host], "true", lambda out: "ok")[host.name] == "ok"


def test_a_wrong_key_file_is_refused_as_a_connection_failure(host: SshTarget, tmp_path) -> None:
    other = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    found = gather([host.model_copy(update={"key_file": other})], "true", lambda out: "ran")[host.name]
    assert type(found) is ConnectError and "Authentication failed" in found.message
    assert os.stat(host.known_hosts).st_size > 0
