"""fleet.rollback --with-snapshots: which snapshot matches a target run on each host, from ledger rows alone."""

from __future__ import annotations

import json

import pytest

from jackin.lifecycle import rollback
from jackin.plan.applied import SpecDiff
from jackin.errors import JackinError, SpecError
from jackin.lifecycle.rollback import PlannedStep, Rollback, SnapshotMatch, match, match_step, snapshots_taken, window
from jackin.lifecycle.rollback_choice import SpecRun
from jackin.spec import Inventory

INV = Inventory.model_validate({"fleet": {"name": "demo", "provider": "lab", "agents": [{"name": "coder", "count": 2}]}})


def run(n: int, spec: str, started: float, finished: float | None, *, hosts=("h1", "h2"), failed=()) -> SpecRun:
    return SpecRun(run=n, action="fleet.up", status="failed" if failed else "ok", fleet_hash=spec, hosts=list(hosts),
                   results={h: "failed" if h in failed else "ok" for h in hosts}, started=started, finished=finished)


def snap(sid: str, kind: str, at: float, holds=(("h1", "coder-1"), ("h1", "coder-2"), ("h2", "coder-1"),
                                                ("h2", "coder-2"))) -> rollback.TakenSnapshot:  # fmt: skip
    return rollback.TakenSnapshot(id=sid, kind=kind, created=f"c{sid}", taken=at, holds=frozenset(holds))


# A (run 1, 100-110) -> B (run 3, 200-210) -> C (run 5, 300-310); run 4 re-applies B.
RUNS = [run(1, "A", 100, 110), run(3, "B", 200, 210), run(4, "B", 250, 260), run(5, "C", 300, 310)]


def ids(found: list[SnapshotMatch]) -> list[tuple[str, str]]:
    return [(m.instance, m.snapshot) for m in found]


def test_window_runs_from_the_target_finish_to_the_next_other_spec_finish() -> None:
    assert window(RUNS, 1, "h1") == (110, 210)
    assert window(RUNS, 3, "h1") == (210, 310)  # run 4 applied the same spec: not the end
    assert window(RUNS, 5, "h1") == (310, float("inf"))


def test_a_next_run_that_died_ends_the_window_where_it_started() -> None:
    runs = [run(1, "A", 100, 110), run(2, "B", 200, None, failed=("h1", "h2"))]
    assert window(runs, 1, "h1") == (110, 200)


def test_the_window_is_per_host() -> None:
    runs = [run(1, "A", 100, 110), run(2, "B", 200, 210, hosts=("h2",)), run(3, "C", 300, 310)]
    assert window(runs, 1, "h1") == (110, 310)
    assert window(runs, 1, "h2") == (110, 210)


def test_the_newest_in_the_window_wins_and_the_next_runs_auto_snapshot_counts() -> None:
    taken = [snap("m1", "manual", 150), snap("m2", "manual", 180), snap("auto-b", "auto", 205), snap("m3", "manual", 220)]
    found, missing = match(RUNS, taken, 1, "h1", ["coder-1", "coder-2"])
    assert ids(found) == [("coder-1", "auto-b"), ("coder-2", "auto-b")] and missing == []


def test_the_target_runs_own_auto_snapshot_holds_the_state_before_it() -> None:
    taken = [snap("auto-a", "auto", 105)]  # taken inside run 1: the spec before A
    assert match(RUNS, taken, 1, "h1", ["coder-1"]) == ([], ["coder-1"])
    taken.append(snap("m1", "manual", 111))  # positive control: just after run 1 finished
    assert ids(match(RUNS, taken, 1, "h1", ["coder-1"])[0]) == [("coder-1", "m1")]


def test_pre_restore_snapshots_never_match() -> None:
    taken = [snap("m1", "manual", 150), snap("pre", "pre-restore", 160)]
    assert ids(match(RUNS, taken, 1, "h1", ["coder-1"])[0]) == [("coder-1", "m1")]


def test_each_instance_gets_the_newest_snapshot_that_holds_it() -> None:
    taken = [snap("all", "manual", 150), snap("one", "manual", 160, holds=(("h1", "coder-1"),))]
    found, _ = match(RUNS, taken, 1, "h1", ["coder-1", "coder-2"])
    assert ids(found) == [("coder-1", "one"), ("coder-2", "all")]
    found, _ = match(RUNS, taken, 1, "h2", ["coder-1", "coder-2"])
    assert ids(found) == [("coder-1", "all"), ("coder-2", "all")]


def step(to: int, hosts: list[str]) -> PlannedStep:
    return PlannedStep(to=to, from_run=5, hosts=hosts, diff=SpecDiff(), inventory=INV)


def test_a_host_without_a_match_refuses_the_step_naming_it() -> None:
    taken = [snap("m1", "manual", 150, holds=(("h1", "coder-1"), ("h1", "coder-2")))]
    with pytest.raises(SpecError) as caught:
        match_step(RUNS, taken, step(1, ["h1", "h2"]))
    assert "nothing was changed" in caught.value.message
    assert caught.value.problems == ["h2: no snapshot of coder-1, coder-2 was taken while run 1's spec was in place "
                                     "there (after it finished, before the next run with another spec did)"]
    assert [m.host for m in match_step(RUNS, taken, step(1, ["h1"]))] == ["h1", "h1"]  # positive control


def test_a_snapshot_that_would_also_restore_another_host_is_refused() -> None:
    taken = [snap("m1", "manual", 150)]  # holds h1 and h2
    with pytest.raises(SpecError) as caught:
        match_step(RUNS, taken, step(1, ["h1"]))
    assert caught.value.problems == ["snapshot m1 also holds coder-1 on h2, which this rollback does not restore "
                                     "from it (a restore takes an instance from every host it holds)",
                                     "snapshot m1 also holds coder-2 on h2, which this rollback does not restore "
                                     "from it (a restore takes an instance from every host it holds)"]  # fmt: skip
    assert len(match_step(RUNS, taken, step(1, ["h1", "h2"]))) == 4


def test_snapshots_taken_uses_the_create_runs_start_and_skips_agents_without_restic() -> None:
    rows = [{"id": "20261203-080000-aaaa", "kind": "manual", "created": "2026-12-03T08:00:00+00:00",
             "agents": [{"host": "h1", "instance": "coder-1", "restic_id": "abc"},
                        {"host": "h2", "instance": "coder-1", "restic_id": None}]},
            {"id": "20261203-090000-bbbb", "kind": "auto", "created": "2026-12-03T09:00:00+00:00", "agents": []}]
    runs = [{"id": 7, "action": "snapshot.create", "started": 1234.5,
             "detail": json.dumps({"snapshot": "20261203-090000-bbbb", "kind": "auto"})},
            {"id": 8, "action": "fleet.up", "started": 1.0, "detail": None}]  # fmt: skip
    taken = snapshots_taken(rows, runs)
    assert [(t.id, t.taken) for t in taken] == [("20261203-090000-bbbb", 1234.5), ("20261203-080000-aaaa", 1796284800.0)]
    assert taken[1].holds == frozenset({("h1", "coder-1")})


def test_apply_needs_the_matches_chosen_first() -> None:
    with pytest.raises(JackinError, match="the snapshots were not chosen"):
        rollback.apply(Rollback(fleet="demo", mode="to", steps=[step(1, ["h1"])]), with_snapshots=True)


def test_restore_matches_restores_per_snapshot_and_instance_on_hosts_that_succeeded(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from jackin.snapshots import restore as restoring
    from jackin.snapshots.models import AgentRestore, RestoreResult

    calls = []

    def fake(inventory, snapshot, agent, *, stop, confirm):
        calls.append((snapshot, agent, stop, confirm))
        return RestoreResult(snapshot=snapshot, pre_restore="pre", agents=[AgentRestore(host="h1", instance=agent,
                                                                                        restored=True)])  # fmt: skip

    monkeypatch.setattr(restoring, "restore", fake)
    planned = step(1, ["h1", "h2"])
    planned.snapshots = [SnapshotMatch(host=h, instance=i, snapshot="m1", kind="manual", created="c")
                         for h in ("h1", "h2") for i in ("coder-1", "coder-2")]  # fmt: skip
    logged: list[str] = []
    rollback.restore_matches(planned, ["h1", "h2"], logged.append)
    assert calls == [("m1", "coder-1", True, None), ("m1", "coder-2", True, None)]
    calls.clear()
    with pytest.raises(JackinError, match="coder-1 on h2: its spec rollback failed there"):
        rollback.restore_matches(planned, ["h1"], logged.append)
    assert calls == []  # a snapshot spanning a failed host is left alone


# --- prepare(with_snapshots=True) on a real (temporary) ledger ----------------------------------


def inventory(**fleet) -> Inventory:
    base = {"name": "demo", "provider": "lab", "agents": [{"name": "coder", "count": 2}]}
    return Inventory.model_validate({"fleet": {**base, **fleet}})


def record_up(ledger, inv: Inventory) -> int:
    from jackin.plan.applied import applied
    spec = applied(inv)
    run_id = ledger.start_run("demo", "fleet.up")
    ledger.record_spec(run_id, "demo", ["h1"], spec.spec, spec.hash, spec.fleet_hash)
    ledger.audit(run_id, "demo", "fleet.up", "ok", host="h1")
    ledger.finish_run(run_id, "ok")
    return run_id


def record_snapshot(ledger, sid: str, kind: str = "manual") -> None:
    run_id = ledger.start_run("demo", "snapshot.create", {"snapshot": sid, "kind": kind})
    agents = [{"host": "h1", "instance": i, "agent": "coder", "restic_id": f"r-{sid}-{i}", "tiers": ["restic"]}
              for i in ("coder-1", "coder-2")]  # fmt: skip
    ledger.record_snapshot({"id": sid, "fleet": "demo", "created": "2026-12-03T08:00:00+00:00", "kind": kind},
                           agents, run=run_id)  # fmt: skip
    ledger.finish_run(run_id, "ok", {"snapshot": sid})


@pytest.fixture
def ledger_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):
    from types import SimpleNamespace

    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(rollback.fleet_api, "targets", lambda inv, bring_up: [SimpleNamespace(name="h1")])
    return tmp_path


def test_prepare_chooses_the_snapshot_taken_under_the_target_spec(ledger_dir) -> None:
    from jackin.store.ledger import Ledger

    with Ledger() as ledger:
        run_a = record_up(ledger, inventory(ttl="1h"))
        record_snapshot(ledger, "20261203-080000-aaaa")
        record_up(ledger, inventory(ttl="2h"))
        record_snapshot(ledger, "20261203-080000-bbbb")  # under B: not A's
    chosen = rollback.prepare(inventory(ttl="2h"), to=run_a, with_snapshots=True)
    assert chosen.with_snapshots and chosen.steps[0].to == run_a
    assert ids(chosen.steps[0].snapshots) == [("coder-1", "20261203-080000-aaaa"), ("coder-2", "20261203-080000-aaaa")]
    assert rollback.prepare(inventory(ttl="2h"), to=run_a).steps[0].snapshots == []  # only when asked


def test_prepare_refuses_with_snapshots_when_none_matches_and_records_nothing(ledger_dir) -> None:
    from jackin.store.ledger import Ledger

    with Ledger() as ledger:
        run_a = record_up(ledger, inventory(ttl="1h"))
        record_up(ledger, inventory(ttl="2h"))
        record_snapshot(ledger, "20261203-080000-bbbb")
        before = ledger.runs("demo")
    with pytest.raises(SpecError, match="no matching snapshot for every agent of run"):
        rollback.prepare(inventory(ttl="2h"), to=run_a, with_snapshots=True)
    with Ledger() as ledger:
        assert ledger.runs("demo") == before
