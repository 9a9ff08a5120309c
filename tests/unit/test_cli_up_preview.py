"""fleet.up at the CLI edge: the preview is the in-process host plan (what fleet.plan shows), the
launch contract is shown with the hosts' facts the preview read, and nothing is applied unless
confirmed (or --yes). ``fleet_api.up`` is faked: nothing reaches a host."""

from __future__ import annotations

import io
import json
import sys

import pytest
from rich.console import Console

from jackin.cli import fleet as cli
from jackin.plan import launch
from jackin.cli import render as ui
from jackin.plan import fleet as planning
from jackin.engine import HostResult, RunResult
from jackin.errors import JackinError, SpecError
from jackin.lifecycle.fleet import HostPlan, UpResult
from jackin.lifecycle.hostplan import Change, HostChanges
from jackin.store.ledger import Ledger
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [{"name": "coder"}]}})
FACTS = {"h1": {"kernel": "6.1.0", "apparmor": "N"}, "h2": {"kernel": "6.1.0", "apparmor": "N"}}
USERADD = "useradd --uid 60000 jk-demo--coder-1"


def _result(*, dry_run: bool, changes: bool) -> UpResult:
    plan = planning.build(INV.fleet, {"coder-1": 60000})
    planned = HostChanges(host="h1", changes=[Change(category="users", step="agent coder-1", lines=[USERADD])]
                          if changes else [])  # fmt: skip
    hosts = [HostResult(host="h1", connected=True, changed=1 if changes else 0), HostResult(host="h2", connected=True)]
    return UpResult(fleet="demo", run=RunResult(hosts=hosts, dry_run=dry_run), plan=plan,
                    unchanged=["h2"] if changes else ["h1", "h2"],
                    changes=[HostPlan(host="h1", changes=planned), HostPlan(host="h2", changes=HostChanges(host="h2"))]
                    if dry_run else [], terms=launch.gate(INV, host_facts=FACTS) if dry_run else None)  # fmt: skip


class Calls(list):
    changes = True  # whether the faked preview finds changes


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Calls:
    """Each ``up`` call's (dry_run, bring_up); a state dir of its own; the consoles captured."""
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    seen = Calls()

    def up(spec, *, dry_run, bring_up, **_):
        seen.append((dry_run, bring_up))
        return _result(dry_run=dry_run, changes=seen.changes)

    monkeypatch.setattr(cli.fleet_api, "load", lambda _: INV)
    monkeypatch.setattr(cli.fleet_api, "up", up)
    monkeypatch.setattr(ui, "out", Console(file=io.StringIO(), width=200, color_system=None))
    monkeypatch.setattr(ui, "err", Console(file=io.StringIO(), width=200, color_system=None))
    return seen


def _applied() -> None:
    """The contract the preview would show, recorded as the fleet's last applied one."""
    with Ledger() as ledger:
        run = ledger.start_run("demo", "fleet.up")
        launch.record(ledger, run, launch.gate(INV, host_facts=FACTS).contract)
        ledger.finish_run(run, "ok")


def up(**kw) -> int:
    return cli.fleet_up("x.yaml", **{"yes": False, "json": False, "dry_run": False, **kw})


def out() -> str:
    return ui.out.file.getvalue()  # type: ignore[attr-defined]


def test_dry_run_shows_the_in_process_plan_and_asks_nothing(calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "confirm", lambda q: pytest.fail("a dry run asks nothing"))
    assert up(dry_run=True) == 0
    assert calls == [(True, False)]  # one preview, the lab not brought up
    text = out()
    assert "h1: would change users" in text and f"    {USERADD}" in text
    assert "h2: unchanged (fleet.up would not touch it)" in text and "1 would change" in text
    assert "launch contract" not in text


def test_dry_run_json_is_one_document_with_the_plan_per_host(calls, capsys: pytest.CaptureFixture) -> None:
    assert up(dry_run=True, json=True) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(document) == ["changes", "fleet", "plan", "run", "snapshots", "unchanged"]
    assert document["run"]["dry_run"] is True and [h["changed"] for h in document["run"]["hosts"]] == [1, 0]
    assert [(h["host"], [c["lines"] for c in h["changes"]["changes"]]) for h in document["changes"]] == [
        ("h1", [[USERADD]]), ("h2", [])]


def test_interactive_previews_shows_the_read_contract_then_asks_and_applies(calls, monkeypatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", asked.append)
    assert up() == 0
    assert calls == [(True, True), (False, True)]
    assert asked == ["Apply these changes and the launch contract above?"]  # a first contract
    text = out()
    assert "h1: would change users" in text and "no launch contract was applied to this fleet before" in text
    assert "h1: no AppArmor on this host" in text  # the preview's host read, not "not checked"


def test_interactive_declined_applies_nothing(calls, monkeypatch: pytest.MonkeyPatch) -> None:
    def decline(question: str) -> None:
        raise JackinError("nothing changed: not confirmed")

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", decline)
    with pytest.raises(JackinError, match="not confirmed"):
        up()
    assert calls == [(True, True)]  # the preview only


def test_interactive_with_nothing_to_change_and_the_same_contract_asks_nothing(calls, monkeypatch) -> None:
    _applied()
    calls.changes = False
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", lambda q: pytest.fail("nothing to ask"))
    assert up() == 0 and calls == [(True, True)]


def test_interactive_with_the_same_contract_asks_the_plain_question(calls, monkeypatch) -> None:
    _applied()
    asked: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(cli, "confirm", asked.append)
    assert up() == 0 and asked == ["Apply these changes?"] and "changed since" not in out()


def test_no_terminal_without_yes_is_refused_before_any_preview(calls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    with pytest.raises(SpecError, match="no launch contract applied yet"):
        up()
    _applied()
    with pytest.raises(SpecError, match="no terminal to confirm on: pass --yes"):
        up()
    assert calls == []
    assert up(yes=True) == 0 and calls == [(False, True)]  # positive control: --yes applies, no preview
