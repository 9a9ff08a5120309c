"""A restore onto another uid and onto a replaced host: the owner remap of the staged tree (run here,
as root, on a temporary tree), the read-only listing of a host's own repository, and the early
refusal when a host's repository does not hold the snapshot."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jackin.errors import JackinError
from jackin.snapshots import host as remote
from jackin.snapshots import moves, restore
from jackin.snapshots.models import AgentManifest, AgentSnapshot, SnapshotRecord

SID = "20261203-080000-abcd"


def test_no_remap_when_the_uid_is_the_same_or_unknown() -> None:
    assert remote.remap_commands(None) == ""
    assert remote.remap_commands((60000, 60000, 60000, 60000)) == ""
    script = remote.restore_script("/r", "f1", "coder-1", "abc", owner=(60000, 60000, 60001, 60001))
    order = [script.index(x) for x in ('[ "$(dev "$N")" = "$(dev "$H")" ]', "chown -R -h --from=60000 60001 -- \"$N\"",
                                       "chown -R -h --from=:60000 :60001", "echo staged", 'mv -T -- "$N" "$W"')]  # fmt: skip
    assert order == sorted(order)  # in the staging tree, after its checks, before the swap
    assert "chown" not in remote.restore_script("/r", "f1", "coder-1", "abc")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to other uids needs root")
def test_the_remap_changes_only_the_old_owner_and_never_follows_links(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text("root's")
    for path in (tree, tree / "sub", tree / "a"):
        path.touch() if not path.exists() else None
        os.chown(path, 60000, 60000)
    (tree / "other").touch()
    os.chown(tree / "other", 60005, 60005)  # another uid: not the snapshot's agent, left as it is
    (tree / "mixed").touch()
    os.chown(tree / "mixed", 60000, 0)  # the old uid with root's group: the uid alone changes
    (tree / "sub" / "link").symlink_to(outside)
    os.chown(tree / "sub" / "link", 60000, 60000, follow_symlinks=False)
    script = ("set -u\ncleanup() { :; }\nfail() { echo \"$*\" >&2; exit 1; }\nN=" + str(tree) + "\n"
              + remote.remap_commands((60000, 60000, 61000, 61000)))  # fmt: skip
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "remapped 60000:60000 61000:61000"

    def owner(p: Path) -> tuple[int, int]:
        st = p.lstat()
        return st.st_uid, st.st_gid

    assert owner(tree) == owner(tree / "sub") == owner(tree / "a") == owner(tree / "sub" / "link") == (61000, 61000)
    assert owner(tree / "other") == (60005, 60005) and owner(tree / "mixed") == (61000, 0)
    assert owner(outside) == (0, 0)  # the link's target, outside the tree, was never followed


def manifest(uid: int) -> AgentManifest:
    return AgentManifest.model_validate({
        "fleet": "f1", "snapshot": SID, "instance": "coder-1", "agent": "coder", "host": "h0", "uid": uid, "gid": uid,
        "user": "coder-1", "home": "/srv/jackin/f1/coder-1", "workspace": "/srv/jackin/f1/coder-1/workspace",
        "container": "c", "image": "i", "spec": {}, "network": {}, "firewall_hash": "x", "created": "2026",
        "tiers": ["restic"]})  # fmt: skip


def test_the_owner_changes_only_when_the_manifest_names_another_uid() -> None:
    item = AgentSnapshot(host="h0", instance="coder-1", agent="coder", restic_id="abc", tiers=["restic"])
    assert restore.owner_change(item, 60001) is None  # no manifest: nothing known to remap from
    item = item.model_copy(update={"manifest": manifest(60000)})
    assert restore.owner_change(item, 60000) is None and restore.owner_change(item, None) is None
    assert restore.owner_change(item, 60001) == (60000, 60000, 60001, 60001)


def test_the_own_listing_creates_nothing_and_lists_nothing_without_a_repository() -> None:
    script = remote.own_ids_script("f1")
    assert "--no-lock snapshots --json" in script and "--no-cache" in script and "init" not in script
    assert "echo '[]'" in script and "/var/lib/jackin/snapshots/f1/repo/config" in script


class FakeTarget:
    def __init__(self, name: str) -> None:
        self.name = name


def test_a_host_whose_repository_lacks_the_snapshot_is_refused_before_anything(monkeypatch) -> None:
    there: dict[tuple[str, str | None], set[str]] = {("h0", None): {"otherid0000"}, ("h1", None): {"h1id00000000"},
                                                     ("h1", "/imp/h9"): set()}  # fmt: skip
    monkeypatch.setattr(restore.api, "in_parallel", lambda targets, work: {t.name: work(None, t) for t in targets})
    monkeypatch.setattr(remote, "own_restic_ids", lambda conn, fleet, host, repo=None: there[(host, repo)])
    monkeypatch.setattr(restore, "_has_checkpoint", lambda *a: False)
    items = [AgentSnapshot(host=h, instance="coder-1", agent="coder", restic_id=f"{h}id", tiers=["restic"])
             for h in ("h0", "h1")]  # fmt: skip
    record = SnapshotRecord(id=SID, fleet="f1", created="2026", agents=items)
    found = moves.placements(items, snapshot=SID, current={"h0", "h1"}, pushed={})
    targets = [FakeTarget("h0"), FakeTarget("h1")]
    with pytest.raises(JackinError) as refused:
        restore._refuse_missing(record, targets, found, items)  # type: ignore[arg-type]
    assert f"snapshot {SID} is not in h0's repository (was h0 replaced?)" in refused.value.message
    assert f"snapshot.push {SID} --host h0" in (refused.value.hint or "")
    restore._refuse_missing(record, targets[1:], found[1:], items)  # type: ignore[arg-type]  # positive control
    there[("h0", None)].add("h0id-full")
    restore._refuse_missing(record, targets, found, items)  # type: ignore[arg-type]
    # a copy pushed onto a host and gone since (the fleet was torn down there): refused, with the push hint
    gone = [AgentSnapshot(host="h9", instance="coder-2", agent="coder", restic_id="h9id", tiers=["restic"])]
    placed = moves.placements(gone, snapshot=SID, current={"h1"}, pushed={"h9": "h1\0/imp/h9"})
    with pytest.raises(JackinError, match=r"the copy of h9's repository pushed onto h1 \(/imp/h9\) is gone"):
        restore._refuse_missing(record, targets[1:], placed, gone)  # type: ignore[arg-type]
    there[("h1", "/imp/h9")].add("h9id")
    restore._refuse_missing(record, targets[1:], placed, gone)  # type: ignore[arg-type]
