from jackin.store.ledger import Ledger
from jackin.snapshots.copies import held_by


def test_a_copy_is_recorded_with_its_snapshots_and_replaced_by_the_next(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_copy("f", "h1", "operator", "/x/repo", ["b", "a", "a"])
        assert [(c["place"], c["snapshots"]) for c in ledger.copies("f")] == [("operator", ["a", "b"])]
        ledger.record_copy("f", "h1", "operator", "/x/repo", ["a", "b", "c"])
        ledger.record_copy("f", "h1", "h2", "/var/lib/jackin/snapshots/f/imported/h1", ["a"])
        assert len(ledger.copies("f")) == 2
        assert ledger.copies("f", place="operator")[0]["snapshots"] == ["a", "b", "c"]
        assert ledger.copies("f", origin="h9") == [] and ledger.copies("g") == []
        ledger.forget_copy("f", "h1", "h2")
        assert [c["place"] for c in ledger.copies("f")] == ["operator"]


def _snap(ledger: Ledger, sid: str, host: str, restic_id: str | None, tiers: list[str]) -> None:
    ledger.record_snapshot({"id": sid, "fleet": "f", "created": sid, "kind": "manual"},
                           [{"host": host, "instance": "c-1", "agent": "c", "size": 0, "added": 0, "restic_id": restic_id,
                             "files_new": 0, "files_changed": 0, "tiers": tiers}])  # fmt: skip


def test_held_by_names_the_snapshots_with_a_restic_snapshot_on_the_origin(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        _snap(ledger, "s1", "h1", "r1aaaa", ["restic"])
        _snap(ledger, "s2", "h2", "r2aaaa", ["restic"])
        _snap(ledger, "s3", "h1", None, ["checkpoint"])  # a checkpoint alone never leaves the host
        assert held_by(ledger, "f", "h1") == ["s1"]
        assert held_by(ledger, "f", "h3") == []


def test_held_by_a_copy_is_what_its_restic_listing_holds(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        _snap(ledger, "s1", "h1", "r1aaaa", ["restic"])  # the first lifecycle's repository
        _snap(ledger, "s2", "h1", "r2bbbb", ["restic"])  # the repository made anew
        assert held_by(ledger, "f", "h1", {"r2bbbbffff"}) == ["s2"]  # a short id matches its full id
        assert held_by(ledger, "f", "h1", {"r1aaaa0000", "r2bbbb0000"}) == ["s1", "s2"]
        assert held_by(ledger, "f", "h1", set()) == []


def test_several_copies_of_one_origin_at_one_place_are_kept_apart_by_path(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_copy("f", "h1", "operator", "/p/h1/repo", ["s1"])
        ledger.move_copy("f", "h1", "operator", "/p/h1/repo", "/p/h1/repo-0123")
        ledger.record_copy("f", "h1", "operator", "/p/h1/repo", ["s2"])
        assert sorted((c["path"], tuple(c["snapshots"])) for c in ledger.copies("f", origin="h1")) == [
            ("/p/h1/repo", ("s2",)), ("/p/h1/repo-0123", ("s1",))]
        ledger.forget_copy("f", "h1", "operator", "/p/h1/repo-0123")
        assert [c["path"] for c in ledger.copies("f")] == ["/p/h1/repo"]


def test_a_ledger_made_before_paths_were_keyed_is_migrated_with_its_rows(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "l.sqlite3")
    db.execute("CREATE TABLE repo_copies (fleet TEXT NOT NULL, origin TEXT NOT NULL, place TEXT NOT NULL, "
               "path TEXT NOT NULL, at REAL NOT NULL, snapshots TEXT NOT NULL, PRIMARY KEY (fleet, origin, place))")
    db.execute("INSERT INTO repo_copies VALUES ('f', 'h1', 'operator', '/p/h1/repo', 1.0, '[\"s1\"]')")
    db.commit()
    db.close()
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert [c["snapshots"] for c in ledger.copies("f")] == [["s1"]]
        ledger.record_copy("f", "h1", "operator", "/p/h1/repo-x", ["s0"])
        assert len(ledger.copies("f", origin="h1")) == 2
