"""Strict SSH without a server: target formatting, and a refused loopback
connection reported as our ConnectError, fast."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pydantic
import pytest

from jackin.errors import ConnectError, HostKeyError
from jackin.ssh import SshTarget, connect


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


def test_connect_through_an_unreachable_jump_host(known_hosts: Path) -> None:
    port = closed_port()
    jump = SshTarget(name="bastion", address="127.0.0.1", port=port, known_hosts=known_hosts)
    target = SshTarget(name="web-1", address="10.0.0.1", known_hosts=known_hosts, jump=jump)
    with pytest.raises(ConnectError) as caught:
        connect(target, timeout=2)
    assert caught.value.host == "bastion"


def test_connect_with_missing_known_hosts_is_our_error(tmp_path: Path) -> None:
    target = SshTarget(name="web-1", address="127.0.0.1", port=closed_port(), known_hosts=tmp_path / "missing")
    with pytest.raises(ConnectError) as caught:
        connect(target, timeout=2)
    assert caught.value.host == "web-1"
