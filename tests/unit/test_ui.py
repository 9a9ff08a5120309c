"""Rendering: tables and error messages printed into fixed-width consoles,
compared as exact text."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from jackin.cli import render as ui
from jackin.cli.render.fleet import up_table
from jackin.cli.render.lab import lab_table
from jackin.engine import Event, HostResult, RunResult
from jackin.errors import ConnectError, LabError, SpecError
from jackin.lab import LabHost, LabService, LabStatus


def render(renderable: object, width: int = 120) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


# --- up_table text ------------------------------------------------------------


def test_up_table_text_is_not_markup() -> None:
    result = RunResult(hosts=[HostResult(host="h", connected=True, failed=1, error="[/etc/x] [bold]not bold")])
    lines = render(up_table(result, title="t"))
    assert any("[/etc/x] [bold]not bold" in line for line in lines)


# --- lab_table ------------------------------------------------------------------

DIR = Path("/state/labs/demo")


def lab_host(index: int, state: str, ip: str | None) -> LabHost:
    return LabHost(name=f"demo-{index}", container=f"jackin-lab-demo-{index}", state=state, port=40000 + index,
                   key_file=DIR / "id_ed25519", known_hosts=DIR / "known_hosts", lab_ip=ip)  # fmt: skip


def lab_status(service: LabService | None) -> LabStatus:
    return LabStatus(
        name="demo", image="jackin/lab-host:0123456789ab", network="jackin-lab-demo", directory=DIR,
        hosts=[lab_host(1, "running", "172.18.0.2"), lab_host(2, "exited", None)], service=service,
    )  # fmt: skip


def test_lab_table() -> None:
    status = lab_status(LabService(container="jackin-lab-demo-svc", state="running", address="172.18.0.4"))
    assert render(lab_table(status)) == [
        "lab demo  (jackin/lab-host:0123456789ab)",
        "┏━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ host           ┃ container           ┃ state   ┃ ssh                  ┃ lab address          ┃",
        "┡━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ demo-1         │ jackin-lab-demo-1   │ running │ root@127.0.0.1:40001 │ 172.18.0.2           │",
        "│ demo-2         │ jackin-lab-demo-2   │ exited  │ root@127.0.0.1:40002 │ -                    │",
        "│ (test service) │ jackin-lab-demo-svc │ running │ -                    │ 172.18.0.4:8080,8081 │",
        "└────────────────┴─────────────────────┴─────────┴──────────────────────┴──────────────────────┘",
        "           key /state/labs/demo/id_ed25519 · known_hosts /state/labs/demo/known_hosts",
    ]


def test_lab_table_without_service() -> None:
    lines = render(lab_table(lab_status(None)))
    assert not any("(test service)" in line for line in lines)
    assert len(lines) == 8


def test_lab_table_stopped_service_has_no_address() -> None:
    status = lab_status(LabService(container="jackin-lab-demo-svc", state="exited", address=None))
    row = next(line for line in render(lab_table(status)) if "(test service)" in line)
    assert "None" not in row


# --- error ----------------------------------------------------------------------


@pytest.fixture
def err(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """A narrow stderr console: 40 columns, so any wrapping would show."""
    buffer = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=buffer, width=40, color_system=None))
    return buffer


def test_error_problems_one_line_each_never_wrapped(err: io.StringIO) -> None:
    long = "inventory/lab.yaml:3: hosts[0].name: " + " ".join(["word"] * 60)
    assert len(long) > 280
    problems = [long, "inventory/lab.yaml:9: fleet.agents[0].role: unknown role 'x'", "b.yaml:1: [x]: y"]
    ui.error(SpecError("inventory/lab.yaml is invalid (3 problems)", problems=problems, hint="fix and run again"))
    assert err.getvalue().splitlines() == [
        "error: inventory/lab.yaml is invalid (3 problems)",
        *(f"  {p}" for p in problems),
        "hint: fix and run again",
    ]


def test_error_message_and_hint_are_not_wrapped(err: io.StringIO) -> None:
    message = "cannot reach root@10.0.0.2:22: " + "x " * 40
    hint = "check the address and that sshd listens; " * 3
    ui.error(ConnectError(message, host="web-2", hint=hint))
    assert err.getvalue().splitlines() == [f"error: web-2: {message}", f"hint: {hint}"]


def test_error_without_hint_or_problems(err: io.StringIO) -> None:
    ui.error(LabError("docker import failed: [/x] no space"))
    assert err.getvalue() == "error: docker import failed: [/x] no space\n"


# --- markup in engine and lab text ---------------------------------------------


def test_progress_keeps_bracketed_error_text() -> None:
    view = ui.Progress(["web-1"])
    error = "1 validation error for Fleet name Field required [type=missing, input_value={}, input_type=dict]"
    view.update(Event(event="op_error", t=0.0, host="web-1", op="prepare", error=error))
    assert "[type=missing, input_value={}, input_type=dict]" in "\n".join(render(view, width=200))


def test_progress_renders_error_with_closing_bracket() -> None:
    view = ui.Progress(["web-1"])
    view.update(Event(event="connect_error", t=0.0, host="web-1", error="cannot read [/etc/ssh/x]"))
    assert "cannot connect: cannot read [/etc/ssh/x]" in "\n".join(render(view, width=200))


def test_log_prints_bracketed_text(err: io.StringIO) -> None:
    ui.log("demo-1: replacing (could not be resumed ([/var/lib/docker] busy))")
    assert "[/var/lib/docker] busy" in err.getvalue()


def test_progress_lines() -> None:
    view = ui.Progress(["web-1"])
    view.update(Event(event="start", t=0.0, data={"hosts": ["web-1", "web-2"]}))
    view.update(Event(event="op_ok", t=0.0, host="web-1", op="apt.packages"))
    view.update(Event(event="host_done", t=0.0, host="web-2",
                      result=HostResult(host="web-2", connected=True)))  # fmt: skip
    assert render(view) == ["web-1  apt.packages ok", "web-2  done"]
