"""Strict SSH without a server: target formatting, and a refused loopback
connection reported as our ConnectError, fast."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pydantic
import pytest

from jackin.errors import ConnectError, HostKeyError
from fabric import Config, Connection

from jackin.transport.ssh import SshTarget, auth_kwargs, connect, connection


def closed_port() -> int:
    """A loopback port nothing listens on: bound once to get it, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def known_hosts(tmp_path: Path) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("")
    return path


def test_endpoint(known_hosts: Path) -> None:
    assert SshTarget(name="a", address="10.0.0.1", known_hosts=known_hosts).endpoint == "root@10.0.0.1:22"
    target = SshTarget(name="a", address="127.0.0.1", port=40001, user="admin", known_hosts=known_hosts)
    assert target.endpoint == "admin@127.0.0.1:40001"


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_port_range(port: int, known_hosts: Path) -> None:
    with pytest.raises(pydantic.ValidationError):
        SshTarget(name="a", address="10.0.0.1", port=port, known_hosts=known_hosts)


def test_target_is_frozen(known_hosts: Path) -> None:
    target = SshTarget(name="a", address="10.0.0.1", known_hosts=known_hosts)
    with pytest.raises(pydantic.ValidationError):
        target.port = 2222  # type: ignore[misc]


def test_connect_to_closed_port_is_a_connect_error(known_hosts: Path) -> None:
    port = closed_port()
    target = SshTarget(name="web-1", address="127.0.0.1", port=port, known_hosts=known_hosts)
    started = time.monotonic()
    with pytest.raises(ConnectError) as caught:
        connect(target, timeout=2)
    assert time.monotonic() - started < 5
    error = caught.value
    assert not isinstance(error, HostKeyError)
    assert error.host == "web-1"
    assert error.exit_code == 3
    assert error.message.startswith(f"cannot reach root@127.0.0.1:{port}: ")
    assert str(error).startswith(f"web-1: cannot reach root@127.0.0.1:{port}: ")


def test_connect_through_an_unreachable_jump_host_names_the_hop(known_hosts: Path) -> None:
    port = closed_port()
    jump = SshTarget(name="bastion", address="127.0.0.1", port=port, known_hosts=known_hosts)
    target = SshTarget(name="web-1", address="10.0.0.1", known_hosts=known_hosts, jump=jump)
    started = time.monotonic()
    with pytest.raises(ConnectError) as caught:
        connect(target, timeout=2)
    assert time.monotonic() - started < 5
    assert caught.value.host == "web-1"  # reported for the host the work was for
    assert caught.value.message.startswith(f"through jump host bastion: cannot reach root@127.0.0.1:{port}: ")


def test_hops_are_listed_outermost_first(known_hosts: Path) -> None:
    outer = SshTarget(name="outer", address="10.0.0.1", known_hosts=known_hosts)
    inner = SshTarget(name="inner", address="10.0.1.1", known_hosts=known_hosts, jump=outer)
    target = SshTarget(name="web-1", address="10.0.2.1", known_hosts=known_hosts, jump=inner)
    assert [h.name for h in target.hops] == ["outer", "inner"]
    assert outer.hops == []


def test_connect_with_missing_known_hosts_is_our_error(tmp_path: Path) -> None:
    target = SshTarget(name="web-1", address="127.0.0.1", port=closed_port(), known_hosts=tmp_path / "missing")
    with pytest.raises(ConnectError) as caught:
        connect(target, timeout=2)
    assert caught.value.host == "web-1"


# --- the operator's own configuration changes nothing ---------------------------------


@pytest.fixture
def operator_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose ssh and Fabric configs would redirect 10.0.0.7, add a key, a gateway
    and agent forwarding, if anything read them."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        "Host 10.0.0.7\n  HostName 10.9.9.9\n  Port 2222\n  User mallory\n"
        f"  IdentityFile {home}/.ssh/id_mallory\n  ProxyJump mallory@10.9.9.1\n  ForwardAgent yes\n"
    )
    (home / ".fabric.yaml").write_text(
        "forward_agent: true\ngateway: nc 10.9.9.1 22\nuser: mallory\nport: 2222\n"
        "connect_kwargs: {key_filename: /tmp/id_mallory}\ntimeouts: {connect: 300}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    return home


def test_operator_ssh_and_fabric_configs_change_nothing(operator_home: Path, known_hosts: Path) -> None:
    target = SshTarget(name="web-1", address="10.0.0.7", known_hosts=known_hosts)
    conn = connection(target, timeout=4)
    assert (conn.host, conn.port, conn.user) == ("10.0.0.7", 22, "root")
    assert conn.gateway is None and conn.forward_agent is False and conn.connect_timeout == 4
    assert "proxyjump" not in conn.ssh_config and "identityfile" not in conn.ssh_config
    assert conn.connect_kwargs == {"look_for_keys": False, "allow_agent": True, "banner_timeout": 4, "auth_timeout": 4}


def test_operator_configs_would_apply_to_fabric_defaults(operator_home: Path) -> None:
    """Control: the HOME above does redirect a Fabric connection built with its defaults."""
    conn = Connection("10.0.0.7", config=Config())
    assert (conn.host, conn.port, conn.user) == ("10.9.9.9", 2222, "mallory")
    assert conn.ssh_config["proxyjump"] == "mallory@10.9.9.1"
    assert conn.forward_agent is True
    assert conn.connect_timeout == 300  # from ~/.fabric.yaml


def test_auth_uses_only_the_inventory_key(known_hosts: Path) -> None:
    target = SshTarget(name="a", address="10.0.0.1", key_file=Path("~/k"), known_hosts=known_hosts)
    assert auth_kwargs(target, timeout=3) == {
        "look_for_keys": False, "allow_agent": False, "banner_timeout": 3, "auth_timeout": 3,
        "key_filename": str(Path("~/k").expanduser()),
    }  # fmt: skip


def test_a_pinned_key_that_does_not_decode_is_a_host_key_error_not_a_traceback(tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{closed_port()} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDocumentationOnly0\n")
    target = SshTarget(name="web-1", address="127.0.0.1", port=closed_port(), known_hosts=known_hosts)
    with pytest.raises(HostKeyError) as caught:
        connect(target, timeout=2)
    assert caught.value.host == "web-1" and caught.value.exit_code == 3
    assert caught.value.message.startswith(f"a pinned host key in {known_hosts} is not a valid key: [127.0.0.1]:")
