"""remote.gather: every host's outcome is data; one host's bad output never hides the others; a Ctrl-C
is not held up by a host that has not answered."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from jackin.transport import interrupts
from jackin.transport import remote
from jackin.errors import JackinError, RemoteCommandError
from jackin.transport.ssh import SshTarget


class FakeConnection:
    def __init__(self, outputs: dict[str, tuple[int, str]], name: str):
        self.exited, self.stdout = outputs[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, command: str, **kwargs: object) -> SimpleNamespace:
        return SimpleNamespace(exited=self.exited, stdout=self.stdout, stderr="boom" if self.exited else "")


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="192.0.2.1", known_hosts=Path("/nonexistent")) for n in names]


def parse(out: str) -> str:
    if out.startswith("bad"):
        raise JackinError("unexpected output in the state read")
    return out.strip()


def test_a_parse_error_is_that_hosts_error_and_the_others_are_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = {"good": (0, "fine\n"), "forged": (0, "bad\n"), "failing": (2, "")}
    monkeypatch.setattr(remote, "connect", lambda target, **kw: FakeConnection(outputs, target.name))
    found = remote.gather(targets("good", "forged", "failing"), "true", parse)
    assert found["good"] == "fine"
    assert isinstance(found["forged"], JackinError) and found["forged"].host == "forged"
    assert str(found["forged"]) == "forged: unexpected output in the state read"
    assert isinstance(found["failing"], RemoteCommandError)


def test_a_ctrl_c_is_raised_at_once_not_after_the_reads_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ThreadPoolExecutor's shutdown (and the interpreter's exit) would wait for the stuck read."""
    release = threading.Event()

    class Stuck(FakeConnection):
        def run(self, command: str, **kwargs: object) -> SimpleNamespace:
            _thread.interrupt_main()  # the operator's Ctrl-C, while this host has not answered
            release.wait(10)
            return super().run(command, **kwargs)

    monkeypatch.setattr(remote, "connect", lambda target, **kw: Stuck({"slow": (0, "late\n")}, target.name))
    monkeypatch.setattr(interrupts, "_interrupted", [])  # this Ctrl-C is the test's: no task's guard ends pytest
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        remote.gather(targets("slow"), "true", parse)
    assert time.monotonic() - started < 1
    release.set()
