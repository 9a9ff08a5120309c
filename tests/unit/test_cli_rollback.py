"""fleet.rollback at the CLI edge: asks or refuses like fleet.up, previews without changing, renders the diff."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from jackin.cli import rollback as cli
from jackin.cli import render as ui
from jackin.cli.render import rollback as view
from jackin.lifecycle import rollback as rollback_api
from jackin.plan.applied import Change, SpecDiff
from jackin.engine import HostResult, RunResult
from jackin.errors import NotImplementedYet, SpecError
from jackin.lifecycle.fleet import UpResult
from jackin.plan.fleet import FleetPlan
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [{"name": "coder"}]}})
STEP = rollback_api.PlannedStep(to=3, from_run=5, hosts=["h1"], inventory=INV, diff=SpecDiff(
    agents_added=["docs"], agents_removed=["web"],
    agents_changed={"coder": [Change(field="network.mode", before="allowlist", after="none")]},
    fleet=[Change(field="ttl", before=3600, after=None)]))  # fmt: skip
CHOSEN = rollback_api.Rollback(fleet="demo", mode="step-back", steps=[STEP])


def _applied(inventory: Inventory) -> None:
    """Record ``inventory``'s launch contract as the fleet's last applied one (a finished ok run)."""
    from jackin.plan import launch
    from jackin.store.ledger import Ledger

    with Ledger() as ledger:
        run = ledger.start_run("demo", "fleet.up")
        launch.record(ledger, run, launch.current(inventory, ledger))
        ledger.finish_run(run, "ok")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list[bool]:
    """Each ``apply`` call's dry_run flag; nothing reaches a host. A ledger of its own whose last
    applied contract is the rollback target's (so the contract gate has nothing to ask by default)."""
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    _applied(INV)
    seen: list[bool] = []

    def apply(chosen, *, dry_run, **_):
        seen.append(dry_run)
        run = RunResult(hosts=[HostResult(host="h1", connected=True, ops=2, changed=1)], dry_run=dry_run)
        plan = FleetPlan(fleet="demo", uid_min=60000, uid_max=60999, agents=[])
        return [rollback_api.StepResult(step=STEP, up=UpResult(fleet="demo", run=run, plan=plan))]

    monkeypatch.setattr(cli.fleet_api, "load", lambda _: INV)
    monkeypatch.setattr(rollback_api, "prepare", lambda *a, **k: CHOSEN)
    monkeypatch.setattr(rollback_api, "apply", apply)
    monkeypatch.setattr(ui, "out", Console(file=io.StringIO(), width=200, color_system=None))
    monkeypatch.setattr(ui, "err", Console(file=io.StringIO(), width=200, color_system=None))
    return seen


def rollback(**kw) -> int:
    args = {"to": None, "host": None, "yes": False, "json": False, "dry_run": False, "with_snapshots": False, **kw}
    return cli.fleet_rollback("x.yaml", **args)


def test_no_terminal_and_no_yes_refuses_before_any_run(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    with pytest.raises(SpecError, match="no terminal to confirm on: pass --yes"):
        rollback()
    assert calls == []
    assert rollback(yes=True) == 0  # positive control: --yes goes ahead
    assert calls == [False]


def test_json_needs_yes_or_dry_run(calls: list[bool]) -> None:
    with pytest.raises(SpecError, match="--json needs --yes or --dry-run"):
        rollback(json=True)
    assert calls == []


def test_dry_run_previews_only(calls: list[bool]) -> None:
    assert rollback(dry_run=True) == 0
    assert calls == [True]
    assert "plan of the rollback to run 3" in ui.out.file.getvalue()


def test_yes_applies_once_and_says_the_file_is_kept(calls: list[bool]) -> None:
    assert rollback(yes=True) == 0
    assert calls == [False]
    assert view.INVENTORY_KEPT in ui.out.file.getvalue()


def test_interactive_previews_then_asks(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", lambda q: None)
    assert rollback() == 0
    assert calls == [True, False]


def test_with_snapshots_refused_before_anything(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rollback_api, "restore_snapshots", None)
    with pytest.raises(NotImplementedYet, match="--with-snapshots is not available"):
        rollback(yes=True, with_snapshots=True)
    assert calls == []


def test_bad_to_is_a_usage_error(calls: list[bool]) -> None:
    with pytest.raises(SpecError, match="--to expects a whole number"):
        rollback(yes=True, to="abc")
    assert calls == []


def test_rollback_view_renders_the_change() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(view.rollback_view(STEP, fleet="demo"))
    assert [line.rstrip() for line in console.file.getvalue().splitlines()] == [
        "fleet demo: from run 5's spec back to run 3's, on h1",
        "  + agent docs",
        "  - agent web (its container and network go; its user, home and workspace stay)",
        "  ~ agent coder: network.mode: allowlist -> none",
        "  ~ fleet ttl: 3600 -> null",
    ]


def test_with_snapshots_lists_each_hosts_snapshot_before_asking(calls: list[bool],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    seen = {}
    step = STEP.model_copy(update={"snapshots": [rollback_api.SnapshotMatch(
        host="h1", instance="coder-1", snapshot="20261203-080000-abcd", kind="auto", created="2026-12-03T08:00:00+00:00")]})
    chosen = rollback_api.Rollback(fleet="demo", mode="to", steps=[step], with_snapshots=True)
    monkeypatch.setattr(rollback_api, "prepare", lambda *a, **k: seen.update(k) or chosen)
    assert rollback(dry_run=True, with_snapshots=True) == 0
    assert seen["with_snapshots"] is True and calls == [True]
    assert "  snapshot 20261203-080000-abcd (auto, 2026-12-03T08:00:00+00:00) -> coder-1 on h1" in ui.out.file.getvalue()


# --- the launch contract gate (cli.rollback_gate) ----------------------------------------------

NEWER = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [
    {"name": "coder", "network": {"mode": "allowlist", "allow": ["1.1.1.1/32:443"]}}]}})  # fmt: skip
CHANGE = "coder-1 network: mode allowlist -> none"


def test_a_changed_contract_without_terminal_is_refused_naming_it(calls: list[bool],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _applied(NEWER)  # the fleet runs the newer spec; rolling back to INV changes its contract
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    with pytest.raises(SpecError, match=r"launch contract \(run 3's spec\) changed \(\d+ difference") as refused:
        rollback()
    assert CHANGE in refused.value.problems and "--yes" in refused.value.message
    assert calls == []
    assert CHANGE in ui.out.file.getvalue()  # shown before the refusal
    assert rollback(yes=True) == 0 and calls == [False]  # positive control: --yes goes ahead


def test_a_changed_contract_is_asked_about_in_the_question(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    _applied(NEWER)
    asked: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", asked.append)
    assert rollback() == 0
    assert asked == ["Roll back, applying the launch contract above?"] and calls == [True, False]
    assert "the launch contract changed since the last fleet.up" in ui.out.file.getvalue()


def test_an_unchanged_contract_asks_the_plain_question(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", asked.append)
    assert rollback() == 0
    assert asked == ["Roll back?"] and "changed since" not in ui.out.file.getvalue()


def test_dry_run_shows_the_contract_change_without_asking(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    _applied(NEWER)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert rollback(dry_run=True) == 0 and calls == [True]
    assert CHANGE in ui.out.file.getvalue()


def test_json_puts_the_contract_on_stderr(calls: list[bool]) -> None:
    _applied(NEWER)
    assert rollback(yes=True, json=True) == 0
    assert CHANGE in ui.err.file.getvalue() and CHANGE not in ui.out.file.getvalue()


def test_each_step_is_compared_with_the_one_before(calls: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    second = STEP.model_copy(update={"to": 4, "inventory": NEWER})
    monkeypatch.setattr(rollback_api, "prepare", lambda *a, **k: CHOSEN.model_copy(update={"steps": [STEP, second]}))
    gates = cli.rollback_gate(rollback_api.prepare(), yes=True, json=False)
    assert [g.differs for g in gates] == [False, True]  # step 1 = last applied; step 2 differs from step 1
    assert "coder-1 network: mode none -> allowlist" in gates[1].changes
