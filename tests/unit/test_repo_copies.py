from jackin.ledger import Ledger
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


def test_held_by_names_the_snapshots_with_an_agent_on_the_origin(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        for sid, host in (("s1", "h1"), ("s2", "h2")):
            ledger.record_snapshot({"id": sid, "fleet": "f", "created": sid, "kind": "manual"},
                                   [{"host": host, "instance": "c-1", "agent": "c", "size": 0, "added": 0,
                                     "files_new": 0, "files_changed": 0, "tiers": ["restic"]}])
        assert held_by(ledger, "f", "h1") == ["s1"]
        assert held_by(ledger, "f", "h3") == []
