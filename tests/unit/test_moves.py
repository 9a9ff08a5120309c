"""moves' pure decisions: which origins a push copies, which local copy serves it, and where each
agent of a snapshot restores (its own host, or the host its gone origin was pushed to)."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from jackin.cli.render import snapshot as ui
from jackin.errors import JackinError, SpecError
from jackin.snapshots import moves
from jackin.snapshots.models import AgentSnapshot, SnapshotRecord

SID = "20261203-080000-abcd"
IMPORTED = "/var/lib/jackin/snapshots/f/imported/h0"


def item(host: str, instance: str = "coder-1") -> AgentSnapshot:
    return AgentSnapshot(host=host, instance=instance, agent="coder", restic_id=f"{host}-{instance}", tiers=["restic"])


def record(*items: AgentSnapshot) -> SnapshotRecord:
    return SnapshotRecord(id=SID, fleet="f", created="2026-12-03T08:00:00+00:00", agents=list(items))


def copy(origin: str, place: str, path: str, snapshots: list[str]) -> dict:
    return {"fleet": "f", "origin": origin, "place": place, "path": path, "at": 0.0, "snapshots": snapshots}


def test_a_push_copies_every_origin_but_the_destination() -> None:
    assert moves.origins_to_push(record(item("h0"), item("h1"), item("h2")), "h1") == ["h0", "h2"]
    assert moves.origins_to_push(record(item("h1")), "h1") == []


def test_the_local_copy_must_hold_the_snapshot_and_still_be_on_disk(tmp_path) -> None:
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "config").write_text("x")
    rows = [copy("h0", "operator", str(tmp_path / "new"), [SID])]
    assert moves.local_copy(rows, SID) == str(tmp_path / "new")
    assert moves.local_copy(rows, "20261203-090000-ffff") is None  # older than the snapshot: pull first
    assert moves.local_copy([copy("h0", "operator", str(tmp_path / "gone"), [SID])], SID) is None
    assert moves.local_copy([], SID) is None


def test_pushed_to_keeps_current_hosts_holding_the_snapshot_newest_first() -> None:
    rows = [copy("h0", "h2", "/p2", [SID]), copy("h0", "h1", "/p1", [SID]), copy("h3", "h1", "/p3", ["other"]),
            copy("h4", "gone", "/p4", [SID])]  # fmt: skip
    assert moves.pushed_to(rows, SID, {"h1", "h2"}) == {"h0": "h2\0/p2"}
    assert moves.pushed_to(rows, SID, {"h1"}) == {"h0": "h1\0/p1"}


def test_an_item_restores_on_its_own_host_while_that_host_is_in_the_fleet() -> None:
    found = moves.placements([item("h0"), item("h1")], snapshot=SID, current={"h0", "h1"}, pushed={})
    assert [(p.origin, p.host, p.repo) for p in found] == [("h0", "h0", None), ("h1", "h1", None)]


def test_a_gone_hosts_item_restores_where_its_repository_was_pushed() -> None:
    found = moves.placements([item("h0", "coder-2")], snapshot=SID, current={"h1"}, pushed={"h0": f"h1\0{IMPORTED}"})
    assert [(p.instance, p.origin, p.host, p.restic_id, p.repo) for p in found] == [
        ("coder-2", "h0", "h1", "h0-coder-2", IMPORTED)]


def test_a_gone_host_never_pushed_is_refused_with_the_push_hint() -> None:
    with pytest.raises(JackinError) as refused:
        moves.placements([item("h0"), item("h1")], snapshot=SID, current={"h1"}, pushed={})
    assert not isinstance(refused.value, SpecError)  # exit 1, as before snapshot.push existed
    assert "taken on h0, not a host of the fleet now" in refused.value.message
    assert f"snapshot.push {SID} --host HOST" in refused.value.hint and "--from-host h1" in refused.value.hint
    # positive control: h1's own item alone restores
    assert [p.host for p in moves.placements([item("h0"), item("h1")], snapshot=SID, current={"h1"}, pushed={},
                                             from_host="h1")] == ["h1"]  # fmt: skip


def test_two_items_restoring_onto_one_host_need_from_host() -> None:
    items = [item("h0"), item("h1"), item("h0", "coder-2")]
    pushed = {"h0": f"h1\0{IMPORTED}"}
    with pytest.raises(SpecError) as ambiguous:
        moves.placements(items, snapshot=SID, current={"h1"}, pushed=pushed)
    assert "holds coder-1 from 2 hosts that would all restore onto h1: h0, h1" in ambiguous.value.message
    assert ambiguous.value.hint == ("choose whose to restore: --from-host h0 (pushed onto h1); "
                                    "--from-host h1 (its own)")  # fmt: skip
    chosen = moves.placements(items, snapshot=SID, current={"h1"}, pushed=pushed, from_host="h0")
    assert [(p.instance, p.host, p.repo) for p in chosen] == [("coder-1", "h1", IMPORTED), ("coder-2", "h1", IMPORTED)]
    own = moves.placements(items, snapshot=SID, current={"h1"}, pushed=pushed, from_host="h1")
    assert [(p.instance, p.host, p.repo) for p in own] == [("coder-1", "h1", None)]


def test_from_host_must_name_an_origin_of_the_items() -> None:
    with pytest.raises(SpecError) as wrong:
        moves.placements([item("h0"), item("h1")], snapshot=SID, current={"h1"}, pushed={}, from_host="h9")
    assert wrong.value.hint == "--from-host expects one of: h0, h1"


def render(table) -> str:
    console = Console(file=StringIO(), width=160)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_pull_and_push_tables_say_what_happened_per_host() -> None:
    pulled = moves.PullResult(snapshot=SID, hosts=[
        moves.PulledHost(host="h1", status="pulled", path="/s/h1/repo", copied=3, copied_bytes=2048, skipped=1),
        moves.PulledHost(host="h0", status="already pulled", path="/s/h0/repo"),
        moves.PulledHost(host="h2", status="failed", error="unreachable")])  # fmt: skip
    text = render(ui.pull_table(pulled))
    assert "already pulled" in text and "3 (2.0KiB)" in text and "unreachable" in text
    pushed = moves.PushResult(snapshot=SID, host="h1", origins=[moves.PushedOrigin(origin="h0", path=IMPORTED,
                                                                                   pulled_first=True, copied=2)])  # fmt: skip
    text = render(ui.push_table(pushed))
    assert IMPORTED in text and "pulled first" in text and f"snapshot.restore {SID} --from-host ORIGIN" in text


def test_places_name_this_machine_first_then_the_hosts_pushed_onto() -> None:
    rows = [copy("h0", "h2", "/p", [SID]), copy("h0", "operator", "/o", [SID, "older"]), copy("h1", "operator", "/o1", [SID])]
    assert moves.places(rows) == {SID: ["operator", "h2"], "older": ["operator"]}


def test_a_replaced_origin_gets_its_own_copy_pushed_onto_itself() -> None:
    rec = record(item("h0"), item("h1"))
    assert moves.origins_to_push(rec, "h0", own_holds=True) == ["h1"]
    assert moves.origins_to_push(rec, "h0", own_holds=False) == ["h0", "h1"]
    assert moves.origins_to_push(record(item("h0")), "h0", own_holds=False) == ["h0"]
    assert moves.origins_to_push(record(item("h0")), "h2", own_holds=False) == ["h0"]  # h2 is no origin
    assert moves.restic_ids_of(record(item("h0"), item("h0", "coder-2")), "h0") == ["h0-coder-1", "h0-coder-2"]
    assert moves.holds({"abcdef0123"}, "abcdef") and moves.holds({"abcd"}, "abcdef0123")
    assert not moves.holds({"abcdef"}, "abc0ef") and not moves.holds(set(), "abc")


def test_pushed_to_prefers_a_copy_pushed_onto_the_origin_itself() -> None:
    rows = [copy("h0", "h1", "/p1", [SID]), copy("h0", "h0", "/self", [SID]), copy("h0", "h0", "/older", [SID])]
    assert moves.pushed_to(rows, SID, {"h0", "h1"}) == {"h0": "h0\0/self"}
    assert moves.pushed_to(rows[:1], SID, {"h0", "h1"}) == {"h0": "h1\0/p1"}  # positive control: no self-import


def test_a_current_origin_restores_from_its_self_import_when_there_is_one() -> None:
    found = moves.placements([item("h0")], snapshot=SID, current={"h0"}, pushed={"h0": f"h0\0{IMPORTED}"})
    assert [(p.host, p.repo) for p in found] == [("h0", IMPORTED)]
    # a copy pushed onto another host does not take a current origin away from its own repository
    found = moves.placements([item("h0")], snapshot=SID, current={"h0", "h1"}, pushed={"h0": f"h1\0{IMPORTED}"})
    assert [(p.host, p.repo) for p in found] == [("h0", None)]


def checkpoint_only(host: str) -> AgentSnapshot:
    return AgentSnapshot(host=host, instance="coder-1", agent="coder", restic_id=None, tiers=["checkpoint"])


def test_a_checkpoint_only_item_never_restores_from_a_pushed_copy() -> None:
    with pytest.raises(JackinError, match="holds coder-1 from h0 as a checkpoint only"):
        moves.placements([checkpoint_only("h0")], snapshot=SID, current={"h1"}, pushed={"h0": f"h1\0{IMPORTED}"})
    # on its own host it stays with its own checkpoint, self-import or not
    found = moves.placements([checkpoint_only("h0")], snapshot=SID, current={"h0"}, pushed={"h0": f"h0\0{IMPORTED}"})
    assert [(p.host, p.repo) for p in found] == [("h0", None)]
