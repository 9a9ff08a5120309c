"""snapshot.restore at the CLI edge: --json prints one JSON document of the result, nothing else on stdout."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from jackin.cli import snapshot as cli
from jackin.cli import render as ui
from jackin.snapshots import restore as restoring
from jackin.snapshots.models import AgentRestore, RestoreResult
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [{"name": "coder"}]}})


@pytest.fixture
def consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.fleet_api, "load", lambda _: INV)
    monkeypatch.setattr(ui, "out", Console(file=io.StringIO(), width=200, color_system=None))
    monkeypatch.setattr(ui, "err", Console(file=io.StringIO(), width=200, color_system=None))


def fake_restore(restored: bool):
    def restore(spec, snapshot, agent, *, stop, confirm, from_host):
        assert confirm(restoring.DiffResult(snapshot=snapshot, against="live"))
        return RestoreResult(snapshot=snapshot, pre_restore="20261203-000000-abcd",
                             agents=[AgentRestore(host="h1", instance="coder-1", restored=restored, tier="restic",
                                                  error=None if restored else "boom")])  # fmt: skip
    return restore


@pytest.mark.parametrize(("restored", "code"), [(True, 0), (False, 1)])
def test_restore_json_prints_the_result_alone(consoles, monkeypatch, capsys, restored, code) -> None:
    monkeypatch.setattr(restoring, "restore", fake_restore(restored))
    assert cli.snapshot_restore(None, "20261203-010101-beef", agent=None, stop=False, yes=True, json=True) == code
    printed = json.loads(capsys.readouterr().out)  # stdout holds the one document, nothing else
    assert ui.out.file.getvalue() == ""
    assert printed["pre_restore"] == "20261203-000000-abcd"
    assert [(a["instance"], a["restored"], a["tier"]) for a in printed["agents"]] == [("coder-1", restored, "restic")]


def test_restore_without_json_prints_the_preview_and_the_table(consoles, monkeypatch) -> None:
    monkeypatch.setattr(restoring, "restore", fake_restore(True))
    assert cli.snapshot_restore(None, "20261203-010101-beef", agent=None, stop=False, yes=True) == 0
    assert "restore of 20261203-010101-beef" in ui.out.file.getvalue()
