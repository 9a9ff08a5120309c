"""The automatic snapshot before fleet.up records what the agents run now: its manifests come from
the fleet spec in place on each host (the last run that succeeded there), not from the spec being
applied. Ledger real (temporary), hosts and api.take stubbed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jackin.plan.applied import applied
from jackin.store.ledger import Ledger
from jackin.snapshots import api, auto
from jackin.snapshots.auto import AutoSnapshot, Change
from jackin.snapshots.models import AgentSnapshot, CreateResult, SnapshotRecord
from jackin.spec import Inventory


def inventory(**fleet) -> Inventory:
    base = {"name": "demo", "provider": "lab", "agents": [{"name": "coder", "count": 2}]}
    return Inventory.model_validate({"fleet": {**base, **fleet}})


OLD, NEW = inventory(ttl="1h"), inventory(ttl="2h")


def record_up(ledger: Ledger, inv: Inventory, hosts: list[str]) -> None:
    spec = applied(inv)
    run = ledger.start_run("demo", "fleet.up")
    ledger.record_spec(run, "demo", hosts, spec.spec, spec.hash, spec.fleet_hash)
    for host in hosts:
        ledger.audit(run, "demo", "fleet.up", "ok", host=host)
    ledger.finish_run(run, "ok")


@pytest.fixture
def taken(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Each api.take call: (the fleet spec's ttl, hosts, instances)."""
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    calls: list[tuple] = []

    def take(ledger, inv, targets, instances, *, label, kind):
        calls.append((inv.fleet.ttl, sorted(t.name for t in targets), list(instances)))
        agents = [AgentSnapshot(host=t.name, instance=i, agent="coder", restic_id="r") for t in targets for i in instances]
        return CreateResult(snapshot=SnapshotRecord(id="20261203-080000-aaaa", fleet="demo", kind=kind,
                                                    created="2026-12-03T08:00:00+00:00", agents=agents))  # fmt: skip

    monkeypatch.setattr(api, "take", take)
    return calls


def up(ledger: Ledger, monkeypatch: pytest.MonkeyPatch, hosts: list[str], spec: Inventory = NEW,
       instance: str = "coder-1") -> None:  # fmt: skip
    found = [AutoSnapshot(host=h, changes=[Change(instance=instance, action="recreate", why="image changed")])
             for h in hosts]  # fmt: skip
    monkeypatch.setattr(auto, "plan_snapshots", lambda plan, targets, known, *_: (found, {}))
    auto.snapshot_before_up(ledger, spec, SimpleNamespace(fleet="demo"), [SimpleNamespace(name=h) for h in hosts],
                            action="fleet.up", dry_run=False, log=lambda _: None)  # fmt: skip


def test_the_manifests_come_from_the_spec_in_place_not_the_one_being_applied(taken, monkeypatch) -> None:
    with Ledger() as ledger:
        record_up(ledger, OLD, ["h1", "h2"])
        up(ledger, monkeypatch, ["h1", "h2"])
    assert taken == [(3600, ["h1", "h2"], ["coder-1"])]  # one snapshot, under the spec the agents run


def test_hosts_under_different_specs_get_their_own_snapshot(taken, monkeypatch) -> None:
    with Ledger() as ledger:
        record_up(ledger, OLD, ["h1", "h2"])
        record_up(ledger, inventory(ttl="3h"), ["h2"])  # h2 moved on (a repair, a --host rollback)
        up(ledger, monkeypatch, ["h1", "h2", "h3"])  # h3: no run in place, the applied spec stands in
    assert sorted(taken) == [(3600, ["h1"], ["coder-1"]), (7200, ["h3"], ["coder-1"]), (10800, ["h2"], ["coder-1"])]


def test_the_applied_spec_stands_in_when_the_spec_in_place_runs_elsewhere_or_cannot_describe_the_agent(
        taken, monkeypatch) -> None:  # fmt: skip
    with Ledger() as ledger:
        record_up(ledger, inventory(ttl="1h", lab={"name": "elsewhere"}), ["h1"])
        up(ledger, monkeypatch, ["h1"])
        record_up(ledger, inventory(ttl="1h", agents=[{"name": "coder", "count": 1}]), ["h1"])
        up(ledger, monkeypatch, ["h1"], instance="coder-2")  # not in that spec, no ledger row of it
        up(ledger, monkeypatch, ["h1"], instance="coder-1")  # positive control: it names coder-1
    assert taken == [(7200, ["h1"], ["coder-1"]), (7200, ["h1"], ["coder-2"]), (3600, ["h1"], ["coder-1"])]
