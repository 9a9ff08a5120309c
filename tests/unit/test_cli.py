"""The CLI edge: exit codes from run results, and errors turned into one message
and a documented exit code."""

from __future__ import annotations

import io

import pytest
from invoke.exceptions import Exit
from rich.console import Console

from jackin.cli import edge as cli
from jackin.cli import render as ui
from jackin.engine import HostResult, RunResult
from jackin.errors import (
    BusyError,
    ConnectError,
    HostKeyError,
    JackinError,
    LabError,
    NotImplementedYet,
    RemoteCommandError,
    SpecError,
    worst,
)
from jackin.net.probes import Probe
from jackin.transport.remote import HostError

OK = HostResult(host="ok", connected=True, ops=3, changed=1)
UNREACHABLE = HostResult(host="down", connected=False, error="cannot reach root@10.0.0.9:22")
OP_FAILED = HostResult(host="bad", connected=True, ops=3, failed=1, error="apt: boom")


@pytest.mark.parametrize(
    ("hosts", "error", "code"),
    [
        ([], None, 0),
        ([OK], None, 0),
        ([OK, OK.model_copy(update={"host": "ok2"})], None, 0),
        ([OK, OP_FAILED], None, 1),
        ([OP_FAILED, UNREACHABLE], None, 1),  # an op failure outranks a connection failure
        ([OK], "engine exited 70", 1),
        ([], "engine exited 70", 1),
        ([UNREACHABLE], "engine exited 70", 1),
        ([UNREACHABLE], None, 3),
        ([OK, UNREACHABLE], None, 3),
    ],
)
def test_exit_code(hosts: list[HostResult], error: str | None, code: int) -> None:
    assert cli.exit_code(RunResult(hosts=hosts, error=error)) == code


@pytest.fixture
def err(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Capture what the CLI prints to stderr."""
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=buffer, width=120, color_system=None))
    return buffer


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SpecError("bad inventory", problems=["f.yaml:1: x: wrong"]), 2),
        (ConnectError("cannot reach root@10.0.0.9:22", host="web-1"), 3),
        (HostKeyError("host key mismatch", host="web-1"), 3),
        (RemoteCommandError("command failed (exit 1): nft: boom", host="web-1"), 1),
        (LabError("docker import failed", hint="look at the engine"), 1),
        (BusyError("lab 'demo' is being changed by another run"), 1),
        (NotImplementedYet("snapshot.restore is not yet implemented"), 1),
        (JackinError("something failed"), 1),
    ],
)
def test_guard_maps_errors_to_exit_codes(error: JackinError, code: int, err: io.StringIO) -> None:
    with pytest.raises(Exit) as caught:
        with cli.guard():
            raise error
    assert caught.value.code == code == error.exit_code
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert err.getvalue().splitlines()[0] == f"error: {error}"


def test_guard_prints_problems_and_hint(err: io.StringIO) -> None:
    with pytest.raises(Exit):
        with cli.guard():
            raise SpecError("inventory invalid", problems=["a.yaml:3: hosts: x", "a.yaml:9: fleet: y"], hint="fix it")
    assert err.getvalue().splitlines() == [
        "error: inventory invalid",
        "  a.yaml:3: hosts: x",
        "  a.yaml:9: fleet: y",
        "hint: fix it",
    ]


def test_guard_names_the_host(err: io.StringIO) -> None:
    with pytest.raises(Exit):
        with cli.guard():
            raise ConnectError("cannot reach root@10.0.0.9:22", host="web-1")
    assert err.getvalue() == "error: web-1: cannot reach root@10.0.0.9:22\n"


@pytest.mark.parametrize("error", [ValueError("a bug"), RuntimeError("a bug"), KeyError("k"), OSError(5, "io")])
def test_guard_does_not_swallow_other_exceptions(error: Exception, err: io.StringIO) -> None:
    with pytest.raises(type(error)) as caught:
        with cli.guard():
            raise error
    assert caught.value is error
    assert err.getvalue() == ""


def test_guard_interrupt_exits_130(err: io.StringIO) -> None:
    with pytest.raises(Exit) as caught:
        with cli.guard():
            raise KeyboardInterrupt
    assert caught.value.code == 130
    assert err.getvalue() == "interrupted\n"


def test_guard_passes_success_through(err: io.StringIO) -> None:
    with cli.guard():
        value = 42
    assert value == 42
    assert err.getvalue() == ""


def test_not_yet_exits_1_with_hint(err: io.StringIO) -> None:
    with pytest.raises(Exit) as caught:
        with cli.guard():
            cli.not_yet("snapshot.restore", "snapshots")
    assert caught.value.code == 1
    assert err.getvalue().splitlines() == [
        "error: snapshot.restore is not yet implemented",
        "hint: it arrives with the snapshots issue",
    ]


@pytest.mark.parametrize(("value", "number"), [(None, None), ("", None), ("1", 1), ("64", 64), (3, 3), (" 7 ", 7)])
def test_count_parses(value: object, number: int | None) -> None:
    assert cli.count("--hosts", value) == number  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("two", "--hosts expects a whole number from 1 to 64, got 'two'"),
        ("2.5", "--hosts expects a whole number from 1 to 64, got '2.5'"),
        ("0", "--hosts expects a whole number from 1 to 64, got 0"),
        ("65", "--hosts expects a whole number from 1 to 64, got 65"),
        (-1, "--hosts expects a whole number from 1 to 64, got -1"),
    ],
)
def test_count_refuses_as_usage_error(value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        cli.count("--hosts", value)  # type: ignore[arg-type]
    assert caught.value.message == message
    assert caught.value.exit_code == 2


# --- tasks over several hosts: every host reported, one exit code --------------------


@pytest.mark.parametrize(
    ("codes", "code"),
    [([], 0), ([0, 0], 0), ([0, 3], 3), ([3, 3], 3), ([0, 1], 1), ([3, 1], 1), ([1, 3, 0], 1), ([2, 3], 2)],
)
def test_worst_exit_code_over_hosts(codes: list[int], code: int) -> None:
    assert worst(codes) == code


@pytest.mark.parametrize(
    ("result", "code"),
    [("reachable", 0), ("refused", 0), ("blocked", 0), ("unreachable", 3), ("error", 1)],
)
def test_probe_exit_codes(result: str, code: int) -> None:
    assert Probe(host="h", instance="c-1", target="10.0.0.1", port=443, result=result).exit_code == code


def test_host_errors_tell_unreachable_from_failed() -> None:
    down = HostError.of("web-1", ConnectError("cannot reach root@10.0.0.9:22", host="web-1"))
    failed = HostError.of("web-2", RemoteCommandError("command failed (exit 1)", host="web-2"))
    assert (down.unreachable, down.exit_code, failed.unreachable, failed.exit_code) == (True, 3, False, 1)
    assert down.error == "cannot reach root@10.0.0.9:22"


def test_host_errors_prints_every_host_and_adds_up(err: io.StringIO) -> None:
    errors = [HostError(host="web-1", error="cannot reach", unreachable=True),
              HostError(host="web-2", error="command failed (exit 1)", unreachable=False)]  # fmt: skip
    assert cli.host_errors(errors) == 1
    assert err.getvalue().splitlines() == ["error: web-1: unreachable: cannot reach",
                                           "error: web-2: failed: command failed (exit 1)"]  # fmt: skip
    assert cli.host_errors(errors[:1]) == 3 and cli.host_errors([]) == 0


# --- the one question: anything but yes changes nothing ---------------------------------


@pytest.mark.parametrize("typed", [EOFError(), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "n"])
def test_confirm_takes_an_end_of_input_or_undecodable_bytes_as_no(typed: object, err: io.StringIO,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from jackin.cli import ask

    def answer(*_: object, **__: object) -> str:
        if isinstance(typed, BaseException):
            raise typed
        return str(typed)

    monkeypatch.setattr("builtins.input", answer)
    with pytest.raises(JackinError, match="nothing changed: not confirmed") as caught:
        ask.confirm("Apply these changes?")
    assert caught.value.exit_code == 1
    monkeypatch.setattr("builtins.input", lambda *_: "y")  # the positive control
    ask.confirm("Apply these changes?")
