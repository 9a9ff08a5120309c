"""fleet.down's teardown from its own state read (``jackin.teardown``): which read each host is torn
down from, the script it gets, and how every host's outcome is recorded (no SSH: gather is faked)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from jackin import teardown
from jackin.errors import ConnectError, JackinError, RemoteCommandError
from jackin.ledger import Ledger
from jackin.operations.fleet import teardown_commands
from jackin.plan import build
from jackin.snapshots.final import FinalHost
from jackin.spec import parse_inventory
from jackin.ssh import SshTarget
from jackin.state import Container, HostState

INVENTORY = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
"""
PLAN = build(parse_inventory(INVENTORY, "f.yaml").fleet, {"coder-1": 60000, "coder-2": 60001})
UP = HostState(containers={"jk-demo--coder-1": Container(name="jk-demo--coder-1", status="running", running=True)},
               marker=True)  # fmt: skip


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="192.0.2.1", known_hosts=Path("/nonexistent")) for n in names]


def test_script_is_the_builders_commands_in_one_set_e_script() -> None:
    assert teardown.script(PLAN, UP, keep_data=False) == "\n".join(
        ["set -e", *teardown_commands(PLAN, UP, keep_data=False)]) + "\n"  # fmt: skip
    assert teardown.script(PLAN, HostState(), keep_data=False) is None  # nothing of the fleet there


def test_a_host_nothing_was_done_to_is_torn_down_from_the_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only hosts the final snapshot touched (stopped, snapshotted, pulled) or did not read are read again."""
    asked: list[list[str]] = []

    def fake(hosts, command, parse, *, timeout):
        asked.append([h.name for h in hosts])
        return {h.name: HostState(marker=True) for h in hosts}

    monkeypatch.setattr(teardown, "gather", fake)
    read = {"a": UP, "b": UP, "c": UP}
    final = [FinalHost(host="a", stage="nothing"), FinalHost(host="b", stage="done", copy_path="/x"),
             FinalHost(host="c", stage="nothing", stopped=["jk-demo--coder-1"])]  # fmt: skip
    states = teardown.fresh_states(PLAN, targets("a", "b", "c", "d"), read, final)
    assert asked == [["b", "c", "d"]]
    assert states == {"a": UP, "b": HostState(marker=True), "c": HostState(marker=True), "d": HostState(marker=True)}


def test_every_host_is_run_and_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One host torn down, one whose script failed, one with nothing there (no script run), one not
    read (not run: unreachable stays unreachable): each is its own result, audit entry and events."""
    ran: dict[str, str] = {}

    def fake(hosts, command, parse, *, timeout):
        (host,) = hosts
        ran[host.name] = command
        return {host.name: "" if host.name == "ok" else RemoteCommandError("command failed (exit 1): boom",
                                                                             host=host.name)}  # fmt: skip

    monkeypatch.setattr(teardown, "gather", fake)
    states = {"ok": UP, "bad": UP, "empty": HostState(), "gone": ConnectError("cannot reach", host="gone")}
    events: list[tuple[str, str | None]] = []
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        run_id, result = teardown.run(ledger, PLAN, targets("ok", "bad", "empty", "gone"), states, keep_data=False,
                                      detail={"keep_data": False}, on_event=lambda e: events.append((e.event, e.host)))  # fmt: skip
        audits = {a["host"]: a["result"] for a in ledger.audit_trail("demo") if a["run"] == run_id}
        status = ledger.runs("demo")[-1]["status"]
    assert set(ran) == {"ok", "bad"} and ran["ok"] == "sh -c " + shlex.quote(teardown.script(PLAN, UP, keep_data=False))
    by_host = {h.host: h for h in result.hosts}
    assert [h.host for h in result.hosts] == ["ok", "bad", "empty", "gone"]
    assert by_host["ok"].ok and by_host["ok"].changed == 1
    assert not by_host["bad"].ok and by_host["bad"].error == "remove fleet demo: command failed (exit 1): boom"
    assert by_host["empty"].ok and by_host["empty"].changed == 0
    assert not by_host["gone"].connected and "its state read failed: cannot reach" in (by_host["gone"].error or "")
    assert audits == {"ok": "ok", "bad": "failed", "empty": "ok", "gone": "failed"}
    assert status == "failed"
    assert events[0] == ("start", None) and events[-1] == ("done", None)
    assert ("op_error", "bad") in events and ("host_done", "gone") in events


def test_an_unreadable_host_that_answered_fails() -> None:
    result = teardown._unread("h", JackinError("malformed", host="h"))
    assert result.connected and result.failed == 1 and not result.ok


def test_a_host_not_reached_by_its_script_is_unreachable_not_failed() -> None:
    """Exit 3, not 1 (``cli.exit_code``): no operation failed, the connection did."""
    result = teardown._result("h", "remove fleet demo", ConnectError("cannot reach h", host="h"), elapsed=1.0)
    assert not result.connected and result.failed == 0 and result.error == "remove fleet demo: cannot reach h"
