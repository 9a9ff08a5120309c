"""The ledger: stable, unique uids; one run per fleet at a time; runs, audit and
agents recorded; a forgotten fleet loses its rows but keeps its history."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jackin.errors import BusyError
from jackin.store.ledger import Ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    db = Ledger(tmp_path / "l.sqlite3")
    yield db
    db.close()


# --- uids ------------------------------------------------------------------------


def test_allocate_uids_lowest_free_from_base(ledger: Ledger) -> None:
    assert ledger.allocate_uids("demo", ["coder-1", "coder-2", "reviewer-1"], 60000, 1000) == {
        "coder-1": 60000, "coder-2": 60001, "reviewer-1": 60002,
    }  # fmt: skip


def test_allocate_uids_stable_across_calls_and_ledgers(ledger: Ledger, tmp_path: Path) -> None:
    first = ledger.allocate_uids("demo", ["coder-1", "coder-2"], 60000, 1000)
    assert ledger.allocate_uids("demo", ["coder-2", "coder-1"], 60000, 1000) == first
    again = Ledger(tmp_path / "l.sqlite3")
    try:
        assert again.allocate_uids("demo", ["coder-1", "coder-2"], 60000, 1000) == first
    finally:
        again.close()


def test_allocate_uids_keeps_a_removed_instances_uid(ledger: Ledger) -> None:
    ledger.allocate_uids("demo", ["coder-1", "coder-2"], 60000, 1000)
    assert ledger.allocate_uids("demo", ["coder-2", "coder-3"], 60000, 1000) == {"coder-2": 60001, "coder-3": 60002}
    assert ledger.uids("demo") == {"coder-1": 60000, "coder-2": 60001, "coder-3": 60002}


def test_allocate_uids_unique_across_fleets(ledger: Ledger) -> None:
    demo = ledger.allocate_uids("demo", ["coder-1", "coder-2"], 60000, 1000)
    other = ledger.allocate_uids("other", ["coder-1", "coder-2"], 60000, 1000)
    assert other == {"coder-1": 60002, "coder-2": 60003}
    assert not set(demo.values()) & set(other.values())


def test_allocate_uids_fills_gaps_from_base(ledger: Ledger) -> None:
    ledger.allocate_uids("a", ["x-1", "x-2", "x-3"], 60000, 1000)
    ledger.forget_fleet("a")
    ledger.allocate_uids("b", ["y-1"], 60001, 1000)
    assert ledger.allocate_uids("c", ["z-1", "z-2", "z-3"], 60000, 1000) == {"z-1": 60000, "z-2": 60002, "z-3": 60003}


def test_allocate_uids_range_full(ledger: Ledger) -> None:
    ledger.allocate_uids("demo", ["a-1", "a-2"], 60000, 3)
    with pytest.raises(BusyError) as caught:
        ledger.allocate_uids("demo", ["a-3", "a-4"], 60000, 3)
    assert caught.value.message == "no free uid left in 60000..60002 for fleet 'demo'"
    assert caught.value.hint == "raise fleet.uid_base or remove old fleets (inv fleet.down)"
    # all or nothing: a-3 was not kept
    assert ledger.uids("demo") == {"a-1": 60000, "a-2": 60001}
    assert ledger.allocate_uids("demo", ["a-3"], 60000, 3) == {"a-3": 60002}


def test_allocate_uids_range_taken_by_another_fleet(ledger: Ledger) -> None:
    ledger.allocate_uids("demo", ["a-1", "a-2"], 60000, 2)
    with pytest.raises(BusyError, match=r"^no free uid left in 60000\.\.60001 for fleet 'other'$"):
        ledger.allocate_uids("other", ["a-1"], 60000, 2)
    assert ledger.allocate_uids("other", ["a-1"], 60002, 2) == {"a-1": 60002}


# --- lock ------------------------------------------------------------------------


def test_lock_refuses_a_second_holder(ledger: Ledger, tmp_path: Path) -> None:
    second = Ledger(tmp_path / "l.sqlite3")
    try:
        with ledger.lock("demo", "fleet.up"):
            with pytest.raises(BusyError) as caught:
                with second.lock("demo", "fleet.down"):
                    pytest.fail("the second holder got the lock")
        assert re.fullmatch(
            rf"fleet 'demo' is busy: fleet\.up by \S+ \(pid {os.getpid()}\) since \d\d:\d\d:\d\d", caught.value.message
        )
        assert caught.value.hint == "wait for that run to finish (or stop it), then try again"
        with second.lock("demo", "fleet.down"):  # released: the next run gets it
            pass
    finally:
        second.close()


def test_lock_is_per_fleet(ledger: Ledger, tmp_path: Path) -> None:
    second = Ledger(tmp_path / "l.sqlite3")
    try:
        with ledger.lock("demo", "fleet.up"), second.lock("other", "fleet.up"):
            pass
    finally:
        second.close()


def test_lock_is_released_on_error(ledger: Ledger, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ledger.lock("demo", "fleet.up"):
        raise RuntimeError("boom")
    second = Ledger(tmp_path / "l.sqlite3")
    try:
        with second.lock("demo", "fleet.up"):
            pass
    finally:
        second.close()


def test_lock_dir_is_private(ledger: Ledger, tmp_path: Path) -> None:
    with ledger.lock("demo", "fleet.up"):
        assert (tmp_path / "locks").stat().st_mode & 0o777 == 0o700


# --- runs and audit --------------------------------------------------------------


def test_runs(ledger: Ledger) -> None:
    run = ledger.start_run("demo", "fleet.up", {"hosts": ["web-1"]})
    other = ledger.start_run("other", "fleet.up")
    [row] = ledger.runs("demo")
    assert (row["id"], row["fleet"], row["action"], row["status"], row["finished"], row["detail"]) == (
        run, "demo", "fleet.up", "running", None, '{"hosts": ["web-1"]}',
    )  # fmt: skip
    ledger.finish_run(run, "ok")
    [row] = ledger.runs("demo")
    assert (row["status"], row["detail"]) == ("ok", '{"hosts": ["web-1"]}')  # detail kept when not given
    assert row["finished"] >= row["started"]
    ledger.finish_run(other, "failed", {"error": "x"})
    assert [(r["status"], r["detail"]) for r in ledger.runs("other")] == [("failed", '{"error": "x"}')]


def test_audit_trail(ledger: Ledger) -> None:
    run = ledger.start_run("demo", "fleet.up")
    ledger.audit(run, "demo", "fleet.up", "ok", host="web-1", detail={"changed": 2})
    ledger.audit(None, "other", "fleet.gc", "failed")
    ledger.audit(run, "demo", "clean-check", "dirty", host="web-2", detail=["users"])
    rows = [(r["run"], r["fleet"], r["action"], r["host"], r["result"], r["detail"]) for r in ledger.audit_trail("demo")]
    assert rows == [(run, "demo", "fleet.up", "web-1", "ok", '{"changed": 2}'),
                    (run, "demo", "clean-check", "web-2", "dirty", '["users"]')]  # fmt: skip
    assert [r["fleet"] for r in ledger.audit_trail()] == ["demo", "other", "demo"]
    assert all(r["who"] for r in ledger.audit_trail())


# --- fleets, hosts, agents -------------------------------------------------------

AGENT = {"instance": "coder-1", "agent": "coder", "uid": 60000, "user": "jk-demo--coder-1",
         "container": "jk-demo--coder-1", "network": "jk-demo--coder-1", "home": "/srv/jackin/demo/coder-1"}  # fmt: skip


def test_record_fleet_upserts(ledger: Ledger) -> None:
    ledger.record_fleet("demo", "lab", "inventory/lab.yaml", "up")
    created = ledger.fleet("demo")["created"]  # type: ignore[index]
    ledger.record_fleet("demo", "static", None, "up")
    row = ledger.fleet("demo")
    assert row is not None
    assert (row["provider"], row["inventory"], row["status"], row["created"]) == ("static", None, "up", created)
    assert ledger.fleets() == ["demo"]
    assert ledger.fleet("nope") is None


def test_record_agents_replaces_a_hosts_agents(ledger: Ledger) -> None:
    two = {**AGENT, "instance": "coder-2", "uid": 60001, "user": "jk-demo--coder-2"}
    ledger.record_agents("demo", "web-2", [AGENT])
    ledger.record_agents("demo", "web-1", [two, AGENT])
    assert [(a["host"], a["instance"]) for a in ledger.agents("demo")] == [
        ("web-1", "coder-1"), ("web-1", "coder-2"), ("web-2", "coder-1"),
    ]  # fmt: skip
    ledger.record_agents("demo", "web-1", [two])
    assert [(a["host"], a["instance"], a["uid"]) for a in ledger.agents("demo")] == [
        ("web-1", "coder-2", 60001), ("web-2", "coder-1", 60000),
    ]  # fmt: skip
    ledger.record_agents("demo", "web-2", [])
    assert [a["host"] for a in ledger.agents("demo")] == ["web-1"]


def test_forget_fleet_keeps_runs_and_audit(ledger: Ledger) -> None:
    for fleet in ("demo", "other"):
        ledger.record_fleet(fleet, "lab", None, "up")
        ledger.allocate_uids(fleet, ["coder-1"], 60000, 1000)
        ledger.record_host(fleet, "web-1", "192.0.2.10", 22, "ok")
        ledger.record_agents(fleet, "web-1", [AGENT])
        run = ledger.start_run(fleet, "fleet.up")
        ledger.audit(run, fleet, "fleet.up", "ok", host="web-1")
    ledger.forget_fleet("demo")
    assert (ledger.uids("demo"), ledger.agents("demo")) == ({}, [])
    assert ledger.db.execute("SELECT count(*) FROM hosts WHERE fleet = 'demo'").fetchone()[0] == 0
    assert ledger.fleet("demo")["status"] == "down"  # type: ignore[index]
    assert len(ledger.runs("demo")) == 1
    assert len(ledger.audit_trail("demo")) == 1
    # the other fleet is untouched, and demo's uid is free again
    assert ledger.uids("other") == {"coder-1": 60001}
    assert len(ledger.agents("other")) == 1
    assert ledger.fleet("other")["status"] == "up"  # type: ignore[index]
    assert ledger.allocate_uids("new", ["a-1"], 60000, 1000) == {"a-1": 60000}


# --- dry runs, kept data, labs ----------------------------------------------------


def test_preview_uids_stores_nothing(ledger: Ledger) -> None:
    ledger.allocate_uids("demo", ["coder-1"], 60000, 1000)
    before = ledger.db.execute("SELECT * FROM uids").fetchall()
    assert ledger.preview_uids("demo", ["coder-1", "coder-2"], 60000, 1000) == {"coder-1": 60000, "coder-2": 60001}
    assert ledger.db.execute("SELECT * FROM uids").fetchall() == before
    assert ledger.allocate_uids("demo", ["coder-1", "coder-2"], 60000, 1000) == {"coder-1": 60000, "coder-2": 60001}


def test_preview_uids_refuses_a_full_range_like_allocate(ledger: Ledger) -> None:
    ledger.allocate_uids("a", ["x-1", "x-2"], 60000, 2)
    with pytest.raises(BusyError, match=re.escape("no free uid left in 60000..60001 for fleet 'b'")):
        ledger.preview_uids("b", ["y-1"], 60000, 2)


def test_keep_fleet_records_what_is_kept_and_holds_its_uids(ledger: Ledger) -> None:
    ledger.record_fleet("demo", "lab", None, "up")
    ledger.allocate_uids("demo", ["coder-1"], 60000, 1000)
    ledger.record_host("demo", "web-1", "192.0.2.10", 22, "ok")
    ledger.record_agents("demo", "web-1", [AGENT])
    ledger.keep_fleet("demo", [("web-1", "192.0.2.10", 22), ("web-2", "192.0.2.11", 2222)], ["homes", "workspaces"])
    assert ledger.fleet("demo")["status"] == "kept"  # type: ignore[index]
    assert ledger.fleets_with_status("kept") == ["demo"] and ledger.fleets_with_status("up") == []
    assert [(k["fleet"], k["host"], k["address"], k["port"], k["what"]) for k in ledger.kept()] == [
        ("demo", "web-1", "192.0.2.10", 22, ["homes", "workspaces"]),
        ("demo", "web-2", "192.0.2.11", 2222, ["homes", "workspaces"]),
    ]  # fmt: skip
    assert ledger.agents("demo") == [] and ledger.uids("demo") == {"coder-1": 60000}
    assert ledger.allocate_uids("other", ["a-1"], 60000, 1000) == {"a-1": 60001}  # the kept data's uid stays taken


def test_kept_data_is_cleared_by_up_or_a_full_forget(ledger: Ledger) -> None:
    ledger.keep_fleet("demo", [("web-1", "192.0.2.10", 22)], ["homes"])
    ledger.keep_fleet("other", [("web-1", "192.0.2.10", 22)], ["homes"])
    ledger.record_fleet("demo", "lab", None, "up")
    assert [k["fleet"] for k in ledger.kept()] == ["other"]
    ledger.forget_fleet("other")
    assert ledger.kept() == []


def test_labs_record_creator_and_users(ledger: Ledger) -> None:
    assert ledger.lab("lab1") is None
    ledger.lab_created("lab1", "alpha")
    ledger.use_lab("lab1", "alpha")
    ledger.use_lab("lab1", "beta")
    ledger.use_lab("lab1", "beta")  # once per fleet
    record = ledger.lab("lab1")
    assert record is not None and (record["created_by"], record["users"]) == ("alpha", ["alpha", "beta"])
    ledger.leave_lab("lab1", "alpha")
    assert ledger.lab_users("lab1") == ["beta"]
    ledger.lab_created("lab1", None)  # recreated by hand: earlier users' hosts are gone
    assert (ledger.lab("lab1")["created_by"], ledger.lab_users("lab1")) == (None, [])  # type: ignore[index]
    ledger.forget_lab("lab1")
    assert ledger.lab("lab1") is None


def test_a_fleet_an_earlier_release_downed_with_keep_data_is_kept(tmp_path) -> None:
    """Earlier releases left such a fleet 'down' with its uids reserved: opening the ledger makes it
    'kept', so fleet.gc lists its data apart instead of removing it as a leftover."""
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as old:
        old.record_fleet("kept1", "static", None, "up")
        old.allocate_uids("kept1", ["a-1"], 60000, 1000)
        old.record_fleet("gone", "static", None, "up")
        old.allocate_uids("gone", ["a-1"], 61000, 1000)
        old.forget_fleet("gone")  # a full teardown: uids freed
        old.db.execute("UPDATE fleets SET status = 'down' WHERE name = 'kept1'")  # what the earlier release wrote
    with Ledger(path) as ledger:
        assert ledger.fleets_with_status("kept") == ["kept1"]
        assert ledger.fleets_with_status("down") == ["gone"]
# --- applied specs (fleet.rollback) ------------------------------------------------


def test_record_spec_and_read_runs_with_per_host_results(ledger: Ledger) -> None:
    first = ledger.start_run("demo", "fleet.up", {"hosts": ["h1", "h2"]})
    ledger.record_spec(first, "demo", ["h1", "h2"], '{"fleet":{}}', "a" * 64, "b" * 64)
    ledger.audit(first, "demo", "fleet.up", "ok", host="h1")
    ledger.audit(first, "demo", "fleet.up", "failed", host="h2")
    ledger.audit(first, "demo", "clean-check", "dirty", host="h2")  # another action of the run: not its result
    ledger.finish_run(first, "failed")
    down = ledger.start_run("demo", "fleet.down")
    other = ledger.start_run("other", "fleet.up")
    ledger.record_spec(other, "other", ["h1"], "{}", "c" * 64, "d" * 64)
    runs = ledger.spec_runs("demo")
    assert [(r["id"], r["action"], r["status"], r["results"], r["spec_hosts"], r["fleet_hash"]) for r in runs] == [
        (first, "fleet.up", "failed", {"h1": "ok", "h2": "failed"}, ["h1", "h2"], "b" * 64)]  # fmt: skip
    assert "spec" not in runs[0]
    one = ledger.run(first)
    assert one is not None and one["spec"] == '{"fleet":{}}' and one["hash"] == "a" * 64
    plain = ledger.run(down)
    assert plain is not None and plain["spec"] is None and plain["action"] == "fleet.down"
    assert ledger.run(9999) is None


def test_a_transaction_keeps_its_writes_together_or_none(ledger: Ledger, tmp_path: Path) -> None:
    """One commit for many writes (fleet.up's no-change record); an error inside keeps none of them."""
    with ledger.transaction():
        run = ledger.start_run("demo", "fleet.up")
        with ledger.transaction():  # nested: part of the outer one
            ledger.audit(run, "demo", "fleet.up", "ok", host="h1")
        assert ledger.db.in_transaction
        ledger.finish_run(run, "ok")
    assert not ledger.db.in_transaction
    with Ledger(ledger.path) as other:  # committed: another connection sees it
        assert [r["status"] for r in other.runs("demo")] == ["ok"] and len(other.audit_trail("demo")) == 1
    with pytest.raises(RuntimeError), ledger.transaction():
        ledger.start_run("demo", "fleet.up")
        raise RuntimeError("boom")
    assert len(ledger.runs("demo")) == 1 and not ledger.db.in_transaction


# --- how each snapshot's home was held -----------------------------------------------


def test_a_snapshot_records_how_each_home_was_held_and_an_old_ledger_gains_the_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)  # a ledger made before snapshots recorded their instant
    old.execute("CREATE TABLE snapshot_agents (snapshot TEXT NOT NULL, fleet TEXT NOT NULL, host TEXT NOT NULL, "
                "instance TEXT NOT NULL, agent TEXT NOT NULL, restic_id TEXT, size INTEGER NOT NULL DEFAULT 0, "
                "added INTEGER NOT NULL DEFAULT 0, files_new INTEGER NOT NULL DEFAULT 0, files_changed INTEGER NOT "
                "NULL DEFAULT 0, tiers TEXT NOT NULL, manifest TEXT, PRIMARY KEY (snapshot, host, instance))")  # fmt: skip
    old.execute("INSERT INTO snapshot_agents (snapshot, fleet, host, instance, agent, tiers) "
                "VALUES ('s0', 'f', 'h', 'c-1', 'c', '[\"restic\"]')")  # fmt: skip
    old.commit()
    old.close()
    with Ledger(path) as ledger:
        ledger.db.execute("INSERT INTO snapshots (id, fleet, created, kind) VALUES ('s0', 'f', '2026-01-01', 'manual')")
        ledger.record_snapshot({"id": "s1", "fleet": "f", "created": "2026-12-04T00:00:00+00:00"},
                               [{"host": "h", "instance": "c-1", "agent": "c", "restic_id": "r1", "tiers": ["restic"],
                                 "instant": "frozen", "frozen_ms": 412.5, "manifest": None}])  # fmt: skip
        rows = {r["id"]: r["agents"][0] for r in ledger.snapshot_rows("f")}
    assert (rows["s1"]["instant"], rows["s1"]["frozen_ms"]) == ("frozen", 412.5)
    assert (rows["s0"]["instant"], rows["s0"]["frozen_ms"]) == (None, None)  # recorded before: not known


def test_snapshots_of_one_second_are_listed_in_the_order_they_were_taken(tmp_path: Path) -> None:
    """Ids carry the second and a random suffix: retention's "newest" must not follow the suffix (snapshots
    now take well under a second; the prune test of the lab once kept the oldest of three)."""
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        for suffix in ("ffff", "0000", "8888"):
            ledger.record_snapshot({"id": f"20261205-094240-{suffix}", "fleet": "f", "kind": "manual",
                                    "created": "2026-12-05T09:42:40+00:00"}, [])  # fmt: skip
        ledger.record_snapshot({"id": "20261205-094239-9999", "fleet": "f", "kind": "manual",
                                "created": "2026-12-05T09:42:39+00:00"}, [])  # fmt: skip
        assert [r["id"][-4:] for r in ledger.snapshot_rows("f")] == ["9999", "ffff", "0000", "8888"]
