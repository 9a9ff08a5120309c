"""The OpenSSH path of gather without a server: its command line is as strict as jackin.transport.ssh, it
steps aside (to Fabric) where it cannot be, its master socket is named by what was checked, and
ssh's failures read as ours. A refused loopback connection is the only socket touched."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jackin.transport import openssh
from jackin.errors import ConnectError, HostKeyError
from jackin.transport.remote import gather
from jackin.transport.ssh import SshTarget

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client here")


@pytest.fixture(autouse=True)
def state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state dir with a short path (a master socket's path must fit in 108 bytes; a worker's tmp_path
    under pytest-xdist is longer than that allows)."""
    short = Path(tempfile.mkdtemp(prefix="jk-", dir="/tmp"))
    monkeypatch.setenv("JACKIN_STATE_DIR", str(short / "state"))
    monkeypatch.delenv("JACKIN_SSH", raising=False)
    yield short / "state"
    shutil.rmtree(short, ignore_errors=True)


def target(tmp_path: Path, **changes: object) -> SshTarget:
    known = tmp_path / "known_hosts"
    if not known.exists():
        known.write_text("[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    key = tmp_path / "id_ed25519"
    key.write_text("not read here")
    fields: dict[str, object] = {"name": "web-1", "address": "127.0.0.1", "port": 2222, "key_file": key,
                                 "known_hosts": known}  # fmt: skip
    return SshTarget(**{**fields, **changes})  # type: ignore[arg-type]


def options(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-o")


def test_the_command_line_reads_no_config_trusts_only_the_pin_and_forwards_nothing(tmp_path: Path) -> None:
    t = target(tmp_path)
    args = openssh.argv(t, "docker ps")
    assert args is not None
    assert args[:3] == ["ssh", "-F", "/dev/null"] and args[-3:] == ["--", "127.0.0.1", "docker ps"]
    assert args[args.index("-i") + 1] == str(t.key_file) and args[args.index("-p") + 1] == "2222"
    opts = options(args)
    assert {k: opts[k] for k in ("StrictHostKeyChecking", "UserKnownHostsFile", "GlobalKnownHostsFile", "BatchMode",
                                 "IdentitiesOnly", "ForwardAgent", "UpdateHostKeys", "ProxyJump", "ProxyCommand",
                                 "PasswordAuthentication", "ClearAllForwardings")} == {
        "StrictHostKeyChecking": "yes", "UserKnownHostsFile": str(t.known_hosts), "GlobalKnownHostsFile": "/dev/null",
        "BatchMode": "yes", "IdentitiesOnly": "yes", "ForwardAgent": "no", "UpdateHostKeys": "no",
        "ProxyJump": "none", "ProxyCommand": "none", "PasswordAuthentication": "no", "ClearAllForwardings": "yes",
    }  # fmt: skip
    assert (opts["ControlMaster"], opts["ControlPersist"]) == ("auto", "60")


def test_the_master_socket_sits_in_a_private_dir_and_a_changed_pin_or_key_never_reuses_it(tmp_path: Path,
                                                                                         state: Path) -> None:
    t = target(tmp_path)
    first = openssh.control_path(t)
    assert first is not None and Path(first).parent == state / "ssh"
    assert (state / "ssh").stat().st_mode & 0o777 == 0o700
    assert openssh.control_path(t) == first  # the same connection, checked against the same things
    t.known_hosts.write_text(t.known_hosts.read_text().replace("AAAAIOMq", "AAAAIOMr"))
    assert openssh.control_path(t) not in (None, first)  # a changed pin: a new connection, checked anew
    other_key = tmp_path / "other_key"
    other_key.write_text("x")
    assert openssh.control_path(target(tmp_path, key_file=other_key)) not in (None, first)
    assert openssh.control_path(target(tmp_path, port=2223)) not in (None, first)


def test_a_state_dir_too_deep_for_a_socket_keeps_the_client_strict_without_a_master(tmp_path: Path,
                                                                                    monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / ("d" * 120)))
    opts = options(openssh.argv(target(tmp_path), "true") or [])
    assert (opts["ControlMaster"], opts["ControlPath"], opts["StrictHostKeyChecking"]) == ("no", "none", "yes")


@pytest.mark.parametrize("why", ["jump", "no key", "percent", "space", "unreadable pin", "forced"])
def test_fabric_serves_what_this_path_cannot(tmp_path: Path, monkeypatch, why: str) -> None:
    assert openssh.usable(target(tmp_path))  # control: an ordinary target is served here
    changes: dict[str, object] = {
        "jump": {"jump": target(tmp_path, name="gate")}, "no key": {"key_file": None},
        "percent": {"key_file": tmp_path / "k%h"}, "space": {"known_hosts": tmp_path / "known hosts"},
        "unreadable pin": {"known_hosts": tmp_path / "missing"}, "forced": {},
    }[why]  # fmt: skip
    if why == "space":
        (tmp_path / "known hosts").write_text("")
    if why == "forced":
        monkeypatch.setenv("JACKIN_SSH", "paramiko")
    t = target(tmp_path, **changes)
    assert not openssh.usable(t) and openssh.argv(t, "true") is None


CHANGED = """@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:HjoKIVNuKOdCch+yMO44Yta0d0vM8K2RNVuM0bPlSgY.
Please contact your system administrator.
Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.
Host key verification failed.
"""


def test_ssh_failures_read_as_ours(tmp_path: Path) -> None:
    t = target(tmp_path)
    changed = openssh.ssh_failure(t, CHANGED)
    assert isinstance(changed, HostKeyError) and changed.message == (
        "host key mismatch for root@127.0.0.1:2222: got ssh-ed25519 SHA256:HjoKIVNuKOdCch+yMO44Yta0d0vM8K2RNVuM0bPlSgY, "
        f"not the key pinned in {t.known_hosts}")  # fmt: skip
    unknown = openssh.ssh_failure(t, "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested "
                                     "strict checking.\nHost key verification failed.\n")  # fmt: skip
    assert isinstance(unknown, HostKeyError) and unknown.message == f"no pinned host key for root@127.0.0.1:2222 in {t.known_hosts}"
    refused = openssh.ssh_failure(t, "ssh: connect to host 127.0.0.1 port 2222: Connection refused\n")
    assert type(refused) is ConnectError and refused.message.startswith("cannot reach root@127.0.0.1:2222: ")
    denied = openssh.ssh_failure(t, "root@127.0.0.1: Permission denied (publickey).\n")
    assert type(denied) is ConnectError and "Authentication failed" in denied.message
    assert openssh.ssh_failure(t, "") is None  # exit 255 with no word from ssh: the remote command's own status
    assert openssh.ssh_failure(t, "tar: fatal\n") is None


def test_gather_over_openssh_reports_a_refused_port_as_that_hosts_connect_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t = target(tmp_path, port=port)
    assert openssh.usable(t)
    found = gather([t], "true", lambda out: out, timeout=3)["web-1"]
    assert type(found) is ConnectError and found.host == "web-1"
    assert found.message.startswith(f"cannot reach root@127.0.0.1:{port}: ") and "refused" in found.message
