"""fanout.each_host: every host's outcome is data, in the hosts' order; a bug is raised after ``interrupted``."""

from __future__ import annotations

from pathlib import Path

import pytest

from jackin.errors import ConnectError, RemoteCommandError
from jackin.transport import fanout
from jackin.transport.target import SshTarget


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="127.0.0.1", port=1, known_hosts=Path("/nonexistent")) for n in names]


def test_one_bad_host_never_hides_the_others() -> None:
    def work(target: SshTarget) -> int:
        if target.name == "failing":
            raise RemoteCommandError("command failed (exit 1): no")
        if target.name == "reset":
            raise ConnectionResetError("reset by peer\n  twice")
        return len(target.name)

    found = fanout.each_host(targets("good", "failing", "reset", "fine"), work, faults=(OSError,))
    assert found.succeeded == {"good": 4, "fine": 4}
    assert list(found.failed) == ["failing", "reset"]
    assert found.failed["failing"].host == "failing"
    assert isinstance(found.failed["reset"], ConnectError)
    assert found.failed["reset"].message == "ConnectionResetError: reset by peer twice"
    assert list(found.by_host()) == ["good", "failing", "reset", "fine"]
    assert fanout.each_host([], work).by_host() == {}


def test_a_bug_runs_interrupted_once_and_is_raised() -> None:
    calls: list[str] = []

    def work(target: SshTarget) -> int:
        if target.name == "buggy":
            raise ValueError("a bug, not a host's fault")
        return 1

    with pytest.raises(ValueError, match="a bug"):
        fanout.each_host(targets("ok", "buggy"), work, interrupted=lambda: calls.append("interrupted"))
    assert calls == ["interrupted"]
