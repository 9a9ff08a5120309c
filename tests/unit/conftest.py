"""Unit tests never reach this machine's Docker engine: its socket, which the lab lookup asks before
the docker CLI (jackin.lab.docker.labelled_containers), is a path that does not exist, and the docker
CLI (jackin.lab.docker.docker) fails the test unless the test stubs it. tests/unit/test_lab_socket.py
serves a fake engine instead."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _integration_labs_drained() -> None:
    """When integration modules ran first in this process (a parallel worker), their background lab work
    ends before any unit test replaces the docker CLI it uses."""
    integration = sys.modules.get("tests.integration.conftest")
    if integration is not None:
        integration.drain()


@pytest.fixture(autouse=True)
def _no_local_docker_socket(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setattr("jackin.lab.docker.SOCKET", str(tmp_path_factory.getbasetemp() / "no-docker.sock"))

    def no_cli(*args: str, **_kw: object) -> None:
        raise AssertionError(f"a unit test ran the real docker CLI: docker {' '.join(args)}")

    monkeypatch.setattr("jackin.lab.docker.docker", no_cli)  # a test that needs it stubs its own


@pytest.fixture(autouse=True)
def _ctrl_c_reaches_python() -> Iterator[None]:
    """A Ctrl-C (SIGINT, ``_thread.interrupt_main``) is Python's KeyboardInterrupt in every test, as under a
    terminal, even when the suite runs as a background job of a shell that ignores SIGINT (inherited)."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
