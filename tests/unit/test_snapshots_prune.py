"""snapshot.prune's retention per (host, instance) and kind, its handling of hosts that left the
fleet, and prune itself over a real ledger with the hosts stubbed (the lab test drives real ones)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jackin.snapshots import api, restore
from jackin.snapshots.models import AgentSnapshot, SnapshotRecord
from jackin.spec import Inventory

ALL = (("h1", "coder-1"), ("h1", "coder-2"), ("h1", "reviewer-1"))
CODER = (("h1", "coder-1"), ("h1", "coder-2"))


def rec(n: int, kind: str = "manual", holds=ALL, *, restic: bool = True) -> SnapshotRecord:
    sid = f"20261203-08{n // 60:02d}{n % 60:02d}-{n:04x}"
    return SnapshotRecord(id=sid, fleet="f1", created=f"2026-12-03T08:{n // 60:02d}:{n % 60:02d}+00:00", kind=kind,
                          agents=[AgentSnapshot(host=h, instance=i, agent=i.split("-")[0], tiers=["restic"],
                                                restic_id=f"r{n}{h}{i}" if restic else None) for h, i in holds])  # fmt: skip


def plan(records, keep=5, current=("h1",), copies=()):
    return restore.prune_plan(records, keep, set(current), list(copies))


def test_retention_keeps_the_newest_of_the_policys_count_and_drops_the_older() -> None:
    records = [rec(n) for n in range(7)]
    found = plan(records)
    assert found.kept == [r.id for r in records[2:]]
    assert found.forget == {"h1": [records[0].id, records[1].id]} and [r.id for r in found.removed] == found.forget["h1"]


def test_snapshots_of_one_agent_never_push_out_the_last_snapshot_of_another() -> None:
    everyone = rec(0)  # the only snapshot holding reviewer-1
    coders = [rec(n, holds=CODER) for n in range(1, 7)]  # six snapshot.create --agent coder
    found = plan([everyone, *coders])
    assert everyone.id in found.kept
    assert found.forget == {"h1": [coders[0].id]}  # coder-1 and coder-2 keep their newest five
    # the old rule (the newest five fleet snapshots) would have dropped it: the scenario is real
    assert everyone.id not in [r.id for r in [everyone, *coders][-5:]]


def test_automatic_and_pre_restore_snapshots_never_push_out_the_manual_one_restored_from() -> None:
    manual = rec(0, holds=(("h1", "coder-1"),))
    pre = [rec(n, "pre-restore", holds=(("h1", "coder-1"),)) for n in range(1, 8)]  # seven restores from it
    auto = [rec(n, "auto", holds=(("h1", "coder-1"),)) for n in range(8, 15)]
    found = plan([manual, *pre, *auto])
    assert manual.id in found.kept
    assert found.forget == {"h1": [pre[0].id, pre[1].id, auto[0].id, auto[1].id]}  # each kind keeps its own five
    positive = plan([manual, *[rec(n, holds=(("h1", "coder-1"),)) for n in range(1, 6)]])
    assert positive.forget == {"h1": [manual.id]}  # five newer manual ones do push it out


def test_retention_is_per_host() -> None:
    both = rec(0, holds=(("h1", "coder-1"), ("h2", "coder-1")))
    h1 = [rec(n, holds=(("h1", "coder-1"),)) for n in range(1, 6)]
    found = plan([both, *h1], current=("h1", "h2"))
    assert both.id in found.kept and not found.removed  # still h2's newest of coder-1


def test_final_snapshots_are_never_pruned() -> None:
    finals = [rec(n, "final") for n in range(8)]
    assert plan(finals, keep=1).kept == [r.id for r in finals] and not plan(finals, keep=1).removed


def test_a_dropped_snapshot_of_a_host_that_left_is_forgotten_from_the_ledger_when_no_copy_holds_it() -> None:
    old = [rec(n, holds=(("gone", "coder-1"),)) for n in range(3)]
    found = plan(old, keep=2)
    assert found.gone == {"gone": [old[0].id]} and found.forget == {}
    assert [r.id for r in found.removed] == [old[0].id]
    assert found.notes == [f"{old[0].id} on gone: gone is no longer a host of the fleet and no copy holds it: "
                           "forgotten from the ledger alone (a repository left on that host is not touched)"]


def test_a_dropped_snapshot_of_a_host_that_left_is_kept_for_its_copy_and_noted() -> None:
    old = [rec(n, holds=(("gone", "coder-1"), ("h1", "coder-1"))) for n in range(3)]
    copies = [{"origin": "gone", "place": "operator", "snapshots": [old[0].id]},
              {"origin": "h1", "place": "h2", "snapshots": [old[0].id]}]  # fmt: skip
    found = plan(old, keep=2, copies=copies)
    assert found.gone == {} and found.forget == {"h1": [old[0].id]}
    assert [[a.host for a in r.agents] for r in found.removed] == [["h1"]]  # only what it loses
    assert found.notes == [f"{old[0].id} on gone: gone is no longer a host of the fleet; kept for its copy at operator "
                           "(snapshot.push, snapshot.restore --from-host)"]
    alone = plan([rec(n, holds=(("gone", "coder-1"),)) for n in range(3)], keep=2,
                 copies=[{"origin": "gone", "place": "operator", "snapshots": [rec(0).id]}])  # fmt: skip
    assert not alone.removed and len(alone.notes) == 1  # nothing to ask about, nothing forgotten


# --- prune over a real ledger, hosts stubbed ------------------------------------------------------

INV = Inventory.model_validate({"fleet": {"name": "f1", "provider": "lab", "snapshots": {"keep": 1},
                                          "agents": [{"name": "coder", "count": 1}]}})  # fmt: skip


@pytest.fixture
def ledger(tmp_path, monkeypatch: pytest.MonkeyPatch):
    from jackin.store.ledger import Ledger

    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(restore, "provider_for", lambda inv, led: SimpleNamespace(
        targets=lambda bring_up: [SimpleNamespace(name="h1")]))  # fmt: skip
    with Ledger() as opened:
        yield opened


def record(ledger, r: SnapshotRecord) -> None:
    ledger.record_snapshot(r.model_dump(exclude={"agents"}), [a.model_dump(mode="json") for a in r.agents])


def test_prune_forgets_a_gone_hosts_uncopied_snapshots_once_and_then_succeeds(ledger, monkeypatch) -> None:
    worked: list[str] = []
    monkeypatch.setattr(api, "in_parallel", lambda targets, work: {t.name: worked.append(t.name) or 0 for t in targets})
    old = [rec(n, holds=(("gone", "coder-1"), ("h1", "coder-1"))) for n in range(3)]
    for r in old:
        record(ledger, r)
    result = restore.prune(INV)
    assert result.errors == [] and result.removed == [old[0].id, old[1].id] and worked == ["h1"]
    assert [r["id"] for r in ledger.snapshot_rows("f1")] == [old[2].id]
    again = restore.prune(INV)  # the next prune: nothing left to do, no error
    assert again.errors == [] and again.removed == [] and again.kept == [old[2].id]


def test_prune_keeps_a_gone_hosts_copied_snapshot_in_the_ledger_with_a_note(ledger, monkeypatch) -> None:
    monkeypatch.setattr(api, "in_parallel", lambda targets, work: {t.name: 0 for t in targets})
    old = [rec(n, holds=(("gone", "coder-1"),)) for n in range(2)]
    for r in old:
        record(ledger, r)
    ledger.record_copy("f1", "gone", "operator", "/x", [old[0].id])
    before = ledger.snapshot_rows("f1")
    asked: list = []
    result = restore.prune(INV, confirm=lambda removed: asked.append(removed) or True)
    assert result.errors == [] and result.removed == [] and asked == [] and len(result.notes) == 1
    assert ledger.snapshot_rows("f1") == before
