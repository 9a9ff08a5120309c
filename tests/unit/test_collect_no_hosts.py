"""fleet.collect on a fleet with no host up is an error (exit 1), not "0 collected", and records nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jackin.work import collect
from jackin.errors import JackinError


class _Ledger:
    recorded: list = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record_collection(self, *args, **kwargs):
        self.recorded.append((args, kwargs))


def _patch(monkeypatch: pytest.MonkeyPatch, hosts: list) -> None:
    plan = SimpleNamespace(fleet="demo", agents=[])
    monkeypatch.setattr(collect, "Ledger", _Ledger)
    monkeypatch.setattr(collect, "make_plan", lambda inventory, ledger, store: plan)
    monkeypatch.setattr(collect, "targets", lambda inventory, bring_up: hosts)


def test_collect_with_no_host_up_fails_saying_so_and_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _Ledger.recorded = []
    _patch(monkeypatch, hosts=[])
    with pytest.raises(JackinError, match="fleet demo has no host up: nothing to collect") as raised:
        collect.collect(SimpleNamespace())
    assert raised.value.exit_code == 1
    assert _Ledger.recorded == []


def test_collect_with_a_host_up_and_no_agent_chosen_reports_an_empty_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    # the positive control: the same fake fleet with a host up is not refused
    _Ledger.recorded = []
    _patch(monkeypatch, hosts=[SimpleNamespace(name="h1")])
    monkeypatch.setattr(collect, "_host", lambda target, inventory, agents, into, asked: [])
    report = collect.collect(SimpleNamespace())
    assert report.fleet == "demo" and report.agents == [] and report.unreachable == {}
