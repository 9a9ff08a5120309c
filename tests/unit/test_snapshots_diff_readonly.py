"""snapshot.diff holds the fleet's lock and never creates a repository (no ``prepare``): a host where
the fleet has none is refused as that host's error. Hosts stubbed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jackin.errors import BusyError, JackinError
from jackin.store.ledger import Ledger
from jackin.snapshots import api
from jackin.snapshots import host as remote
from jackin.snapshots.models import AgentDiff, AgentSnapshot, SnapshotRecord
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "f1", "provider": "lab", "agents": [{"name": "coder", "count": 1}]}})


def rec(sid: str) -> SnapshotRecord:
    return SnapshotRecord(id=sid, fleet="f1", created="2026-12-03T08:00:00+00:00",
                          agents=[AgentSnapshot(host="h1", instance="coder-1", agent="coder", restic_id=f"r-{sid}",
                                                tiers=["restic"])])  # fmt: skip


def run_inline(targets, work):
    found = {}
    for t in targets:
        try:
            found[t.name] = work(None, t)
        except JackinError as error:
            found[t.name] = error
    return found


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):
    state = SimpleNamespace(repo="no", commands=[], ensured=0)

    def run(conn, command, *, host, what, timeout=60):
        state.commands.append(command)
        return state.repo + "\n"

    def ensure(conn, *, host):
        state.ensured += 1
        return "/r"

    monkeypatch.setattr(remote, "run", run)
    monkeypatch.setattr(remote, "ensure_restic", ensure)
    monkeypatch.setattr(remote, "ensure_repo", lambda *a, **k: pytest.fail("a diff must never create a repository"))
    monkeypatch.setattr(api, "prepare", lambda *a, **k: pytest.fail("a diff must never prepare"))
    monkeypatch.setattr(remote, "diff", lambda conn, r, fleet, a, b, *, host, instance, against: AgentDiff(
        host=host, instance=instance, against=against, added=[f"{a}->{b}"]))  # fmt: skip
    monkeypatch.setattr(api, "in_parallel", run_inline)
    return state


def test_a_diff_on_a_host_without_the_fleets_repository_is_refused_and_creates_nothing(host) -> None:
    first, second = rec("20261203-080000-aaaa"), rec("20261203-080001-bbbb")
    found = api._diff(INV, first, second, first.agents, [SimpleNamespace(name="h1")], None)
    assert found.agents == [] and [e.host for e in found.errors] == ["h1"]
    assert "fleet 'f1' has no snapshot repository on h1" in found.errors[0].error
    assert host.ensured == 0 and len(host.commands) == 1 and "/config" in host.commands[0]
    host.repo = "yes"  # positive control: the repository is there
    found = api._diff(INV, first, second, first.agents, [SimpleNamespace(name="h1")], None)
    assert found.errors == [] and found.agents[0].added == ["r-20261203-080000-aaaa->r-20261203-080001-bbbb"]


def test_a_host_the_diff_has_nothing_to_read_on_is_not_touched(host) -> None:
    first = rec("20261203-080000-aaaa")
    found = api._diff(INV, first, first, first.agents, [SimpleNamespace(name="h2")], None)
    assert found.errors == [] and found.agents == [] and host.commands == []


def test_diff_holds_the_fleets_lock(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    with Ledger() as ledger:
        ledger.record_snapshot({"id": "20261203-080000-aaaa", "fleet": "f1", "created": "2026-12-03T08:00:00+00:00"},
                               [rec("x").agents[0].model_dump(mode="json")])  # fmt: skip
        monkeypatch.setattr(api, "provider_for", lambda inv, led: SimpleNamespace(targets=lambda bring_up: []))
        assert api.diff(INV, "20261203-080000-aaaa", "20261203-080000-aaaa").errors == []  # free: it runs
        with ledger.lock("f1", "fleet.down"), pytest.raises(BusyError, match="fleet 'f1' is busy: fleet.down"):
            api.diff(INV, "20261203-080000-aaaa", "20261203-080000-aaaa")
