"""fleet.rollback whose later step cannot run (its fleet.up raises): the steps already applied are
reported with the failure, never dropped, and the later steps are not run. fleet.up is faked."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from jackin.cli import rollback as cli
from jackin.cli import render as ui
from jackin.lifecycle import rollback as rollback_api
from jackin.plan.applied import SpecDiff
from jackin.engine import HostResult, RunResult
from jackin.errors import BusyError, JackinError
from jackin.lifecycle.fleet import UpResult
from jackin.plan.fleet import FleetPlan
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [{"name": "coder"}]}})


def step(to: int, hosts: list[str]) -> rollback_api.PlannedStep:
    return rollback_api.PlannedStep(to=to, from_run=9, hosts=hosts, inventory=INV, diff=SpecDiff())


CHOSEN = rollback_api.Rollback(fleet="demo", mode="repair", steps=[step(3, ["h1"]), step(5, ["h2"]), step(7, ["h3"])])


@pytest.fixture
def ups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each fake fleet.up's step (``to``); the one for run 5 raises like a failed automatic snapshot."""
    seen: list[int] = []

    def up(inventory, *, dry_run, detail, only, **_):
        seen.append(detail["to"])
        if detail["to"] == 5:
            raise JackinError("the automatic snapshot failed on h2 (disk full); nothing was changed")
        run = RunResult(hosts=[HostResult(host=h, connected=True, ops=2, changed=1) for h in only], dry_run=dry_run)
        return UpResult(fleet="demo", run=run, plan=FleetPlan(fleet="demo", uid_min=60000, uid_max=60999, agents=[]))

    monkeypatch.setattr(rollback_api.fleet_api, "up", up)
    return seen


def test_a_later_step_that_raises_stops_the_rollback_and_reports_the_applied_steps(ups: list[int]) -> None:
    with pytest.raises(rollback_api.RollbackStopped) as stopped:
        rollback_api.apply(CHOSEN)
    assert ups == [3, 5]  # step 3 (run 7) never ran
    assert [r.step.to for r in stopped.value.results] == [3] and stopped.value.exit_code == 1
    message = stopped.value.message
    assert message.startswith("fleet.rollback stopped at step 2 of 3 (run 5's spec on h2), which failed: the automatic")
    assert "Applied before it, and still in place: step 1 (run 3's spec on h1): h1 ok; 1 later step(s) not run" in message


def test_a_first_step_that_raises_is_its_own_error_since_nothing_was_applied(ups: list[int]) -> None:
    first = rollback_api.Rollback(fleet="demo", mode="to", steps=[step(5, ["h2"]), step(3, ["h1"])])
    with pytest.raises(JackinError, match="^the automatic snapshot failed") as raised:
        rollback_api.apply(first)
    assert not isinstance(raised.value, rollback_api.RollbackStopped) and ups == [5]


def test_a_dry_run_that_raises_is_its_own_error(ups: list[int]) -> None:
    with pytest.raises(JackinError) as raised:
        rollback_api.apply(CHOSEN, dry_run=True)
    assert not isinstance(raised.value, rollback_api.RollbackStopped) and ups == [3, 5]


def test_every_step_running_returns_every_result(ups: list[int]) -> None:  # positive control
    chosen = rollback_api.Rollback(fleet="demo", mode="repair", steps=[step(3, ["h1"]), step(7, ["h3"])])
    assert [r.step.to for r in rollback_api.apply(chosen)] == [3, 7] and ups == [3, 7]


def test_a_busy_lock_at_a_later_step_is_reported_the_same_way(monkeypatch: pytest.MonkeyPatch, ups) -> None:
    real = rollback_api.fleet_api.up

    def busy(inventory, **kw):
        if kw["detail"]["to"] == 5:
            raise BusyError("fleet 'demo' is busy: snapshot.create")
        return real(inventory, **kw)

    monkeypatch.setattr(rollback_api.fleet_api, "up", busy)
    with pytest.raises(rollback_api.RollbackStopped, match="which failed: fleet 'demo' is busy"):
        rollback_api.apply(CHOSEN)


def test_the_cli_shows_the_applied_steps_then_fails_with_exit_1(ups: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    out = Console(file=io.StringIO(), width=300, color_system=None)
    monkeypatch.setattr(cli.fleet_api, "load", lambda _: INV)
    monkeypatch.setattr(rollback_api, "prepare", lambda *a, **k: CHOSEN)
    monkeypatch.setattr(ui, "out", out)
    monkeypatch.setattr(ui, "err", Console(file=io.StringIO(), width=300, color_system=None))
    printed: list = []
    monkeypatch.setattr(ui, "print_json", printed.append)
    with pytest.raises(rollback_api.RollbackStopped):
        cli.fleet_rollback("x.yaml", to=None, host=None, yes=True, json=True, dry_run=False, with_snapshots=False)
    assert [s["to"] for s in printed[0]["steps"]] == [3] and "stopped at step 2 of 3" in printed[0]["stopped"]
    json.dumps(printed[0])
    with pytest.raises(rollback_api.RollbackStopped):
        cli.fleet_rollback("x.yaml", to=None, host=None, yes=True, json=False, dry_run=False, with_snapshots=False)
    assert "rollback to run 3" in out.file.getvalue() and "rollback to run 5" not in out.file.getvalue()  # type: ignore[attr-defined]
