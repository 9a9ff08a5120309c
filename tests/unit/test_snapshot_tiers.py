"""The two snapshot tiers as one feature, pure parts: the order and independence of the tiers in a
snapshot, the choice of tier in a restore, prune's checkpoint deletion, the restic staging on a
btrfs home, and the restore table. Hosts are stubbed here (the lab tests drive real ones)."""

from __future__ import annotations

import io
import subprocess

import pytest
from rich.console import Console

from jackin.cli.render import snapshot as ui
from jackin.errors import RemoteCommandError
from jackin.snapshots import api, cow, restore
from jackin.snapshots import host as remote
from jackin.snapshots.models import AgentManifest, AgentRestore, AgentSnapshot, BackupSummary, RestoreResult

ID = "20261203-080000-abcd"


def manifest() -> AgentManifest:
    return AgentManifest(fleet="f1", snapshot=ID, instance="coder-1", agent="coder", host="h1", uid=20001, gid=20001,
                         user="jk-f1--coder-1", home="/srv/jackin/f1/coder-1", workspace="/srv/jackin/f1/coder-1/workspace",
                         container="jk-f1--coder-1", image="img", spec={}, network={}, firewall_hash="x",
                         created="2026-12-03T08:00:00+00:00")  # fmt: skip


class Host:
    """Stubs of the host calls the tiers make, recording their order; ``fail`` names calls that raise."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, supported: bool = True, fail: tuple[str, ...] = (),
                 there: tuple[str, ...] = ()):  # fmt: skip
        self.calls: list[str] = []
        self.manifests: list[AgentManifest] = []
        fail = (*fail, "restore_checkpoint") if "refused" in fail else fail

        def call(name: str, result: object = None, error: Exception | None = None):
            def fn(*args: object, **kwargs: object) -> object:
                self.calls.append(name)
                if name in fail:
                    raise error or RemoteCommandError(f"{name} broke")
                return result(*args) if callable(result) else result

            return fn

        monkeypatch.setattr(cow, "supported", call("supported", supported))
        taken = cow.CheckpointTaken(checkpoint=cow.Checkpoint(fleet="f1", instance="coder-1", snapshot_id=ID),
                                    took_ms=1.0, wall_ms=2.0, frozen_ms=3.0)  # fmt: skip
        monkeypatch.setattr(cow, "checkpoint", call("checkpoint", taken))
        monkeypatch.setattr(cow, "list_checkpoints", call("list", [cow.Checkpoint(fleet="f1", instance="coder-1",
                                                                                  snapshot_id=i) for i in there]))  # fmt: skip
        refused = cow.CheckpointRefused("agent coder-1 is running") if "refused" in fail else None
        monkeypatch.setattr(cow, "restore_checkpoint", call("restore_checkpoint", error=refused))
        monkeypatch.setattr(cow, "delete_checkpoint", call("delete", True))
        monkeypatch.setattr(remote, "write_manifest", call("write_manifest", lambda _c, m: self.manifests.append(m)))
        self.backups: list[dict] = []

        def backup(*_args: object, **kwargs: object) -> BackupSummary:
            self.calls.append("backup")
            self.backups.append(kwargs)
            if "backup" in fail:
                raise RemoteCommandError("backup broke")
            held = "checkpoint" if kwargs.get("checkpoint") else "frozen"
            return BackupSummary(snapshot_id="r1", total_bytes=9, instant=held,
                                 frozen_ms=None if kwargs.get("checkpoint") else 400.0)  # fmt: skip

        monkeypatch.setattr(remote, "backup", backup)
        monkeypatch.setattr(remote, "restore", call("restore"))


# --- snapshot: both tiers, checkpoint first, each independent -------------------------------


def test_the_checkpoint_is_taken_first_then_restic_and_both_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch)
    taken, errors = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert host.calls == ["supported", "checkpoint", "write_manifest", "backup"] and errors == []
    assert taken is not None and taken.tiers == ["checkpoint", "restic"] and taken.restic_id == "r1"
    assert taken.manifest is not None and taken.manifest.tiers == ["checkpoint", "restic"]
    assert host.manifests[0].tiers == ["checkpoint", "restic"]  # the manifest restic backs up says so too


def test_restic_reads_the_checkpoint_just_taken_and_the_agent_is_frozen_only_for_the_checkpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    host = Host(monkeypatch)
    taken, _ = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert host.backups[0]["checkpoint"] == cow.checkpoint_path("f1", "coder-1", ID)
    assert taken is not None and (taken.instant, taken.frozen_ms) == ("checkpoint", 3.0)


def test_without_a_checkpoint_restic_reads_the_home_with_the_agent_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, supported=False)
    taken, _ = api._both_tiers(None, "/r", manifest(), host="h1", max_freeze=42)  # type: ignore[arg-type]
    assert host.backups[0]["checkpoint"] is None and host.backups[0]["max_freeze"] == 42
    assert taken is not None and (taken.instant, taken.frozen_ms) == ("frozen", 400.0)


def test_a_host_without_the_tier_takes_restic_alone_without_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, supported=False)
    taken, errors = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert host.calls == ["supported", "write_manifest", "backup"] and errors == []
    assert taken is not None and taken.tiers == ["restic"] and taken.manifest.tiers == ["restic"]  # type: ignore[union-attr]


def test_a_failed_checkpoint_does_not_stop_the_restic_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, fail=("checkpoint",))
    taken, errors = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert host.calls[-1] == "backup" and taken is not None and taken.tiers == ["restic"] and taken.restic_id == "r1"
    assert errors == ["coder-1: checkpoint tier: checkpoint broke"]


def test_a_failed_restic_backup_keeps_the_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, fail=("backup",))
    taken, errors = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert taken is not None and taken.tiers == ["checkpoint"] and taken.restic_id is None
    assert taken.manifest is not None and taken.manifest.tiers == ["checkpoint"]
    assert errors == ["coder-1: backup broke"]


def test_restic_that_could_not_be_prepared_still_leaves_the_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch)
    taken, errors = api._both_tiers(None, None, manifest(), host="h1",  # type: ignore[arg-type]
                                    unprepared=RemoteCommandError("restic upload failed"))  # fmt: skip
    assert "backup" not in host.calls and taken is not None and taken.tiers == ["checkpoint"]
    assert errors == ["coder-1: restic upload failed"]


def test_when_both_tiers_fail_nothing_is_recorded_and_both_errors_are_told(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, fail=("checkpoint", "backup"))
    taken, errors = api._both_tiers(None, "/r", manifest(), host="h1")  # type: ignore[arg-type]
    assert taken is None and len(errors) == 2


# --- restore: the checkpoint while it exists, else restic ---------------------------------------


def item(*tiers: str, restic_id: str | None = "r1") -> AgentSnapshot:
    return AgentSnapshot(host="h1", instance="coder-1", agent="coder", restic_id=restic_id, tiers=list(tiers))  # type: ignore[arg-type]


def never() -> str:
    raise AssertionError("restic was prepared although no restic restore was needed")


def test_restore_uses_the_checkpoint_when_it_is_still_there(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, there=(ID,))
    done = restore.restore_one(None, "f1", ID, item("checkpoint", "restic"), host="h1", restic_bin=never)  # type: ignore[arg-type]
    assert (done.restored, done.tier, done.note, done.error) == (True, "checkpoint", None, None)
    assert host.calls == ["supported", "list", "restore_checkpoint"]


def test_restore_falls_back_to_restic_when_the_checkpoint_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, there=("20261203-070000-0000",))
    done = restore.restore_one(None, "f1", ID, item("checkpoint", "restic"), host="h1", restic_bin=lambda: "/r")  # type: ignore[arg-type]
    assert (done.restored, done.tier) == (True, "restic") and host.calls[-1] == "restore"
    assert done.note == f"checkpoint {ID} of coder-1 is no longer on h1"


def test_restore_falls_back_to_restic_when_the_fleet_has_no_tier_there_now(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, supported=False, there=(ID,))
    done = restore.restore_one(None, "f1", ID, item("checkpoint", "restic"), host="h1", restic_bin=lambda: "/r")  # type: ignore[arg-type]
    assert (done.restored, done.tier) == (True, "restic") and "list" not in host.calls


def test_a_failed_checkpoint_restore_falls_back_to_restic(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, there=(ID,), fail=("restore_checkpoint",))
    done = restore.restore_one(None, "f1", ID, item("checkpoint", "restic"), host="h1", restic_bin=lambda: "/r")  # type: ignore[arg-type]
    assert (done.restored, done.tier) == (True, "restic")
    assert done.note == "the checkpoint tier failed: restore_checkpoint broke"


def test_a_refused_checkpoint_restore_is_not_worked_around(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, there=(ID,), fail=("refused",))
    done = restore.restore_one(None, "f1", ID, item("checkpoint", "restic"), host="h1", restic_bin=never)  # type: ignore[arg-type]
    assert not done.restored and done.tier is None and "is running" in (done.error or "")
    assert "restore" not in host.calls


def test_a_checkpoint_only_snapshot_whose_checkpoint_is_gone_is_not_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch)
    done = restore.restore_one(None, "f1", ID, item("checkpoint", restic_id=None), host="h1", restic_bin=never)  # type: ignore[arg-type]
    assert not done.restored and "no restic tier to fall back on" in (done.error or "")


def test_a_restic_only_snapshot_never_asks_the_checkpoint_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch, there=(ID,))
    done = restore.restore_one(None, "f1", ID, item("restic"), host="h1", restic_bin=lambda: "/r")  # type: ignore[arg-type]
    assert (done.restored, done.tier) == (True, "restic") and host.calls == ["restore"]


def test_a_failed_restic_restore_is_that_agents_error(monkeypatch: pytest.MonkeyPatch) -> None:
    Host(monkeypatch, fail=("restore",))
    done = restore.restore_one(None, "f1", ID, item("restic"), host="h1", restic_bin=lambda: "/r")  # type: ignore[arg-type]
    assert not done.restored and done.error == "restore broke"


# --- prune ---------------------------------------------------------------------------------------


def test_prune_deletes_checkpoints_only_where_the_fleet_has_the_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(monkeypatch)
    assert restore.delete_checkpoints(None, "f1", [("coder-1", ID), ("coder-2", ID)]) == 2  # type: ignore[arg-type]
    assert host.calls == ["supported", "delete", "delete"]
    assert restore.delete_checkpoints(None, "f1", []) == 0  # type: ignore[arg-type]
    gone = Host(monkeypatch, supported=False)
    assert restore.delete_checkpoints(None, "f1", [("coder-1", ID)]) == 0  # type: ignore[arg-type]
    assert gone.calls == ["supported"]


# --- the restic restore's staging on a btrfs home ---------------------------------------------


def test_restic_staging_moves_inside_a_home_that_is_its_own_filesystem() -> None:
    script = remote.restore_script("/r", "f1", "coder-1", "abc123")
    assert remote.in_home_staging("f1", "coder-1") == "/srv/jackin/f1/coder-1/.restore"
    assert 'if [ "$(dev "$H")" != "$(dev "$(dirname "$H")")" ]; then\n  S=/srv/jackin/f1/coder-1/.restore' in script
    assert "--target /srv/jackin/f1/coder-1/.restore/tree --verify" in script
    assert "--target /srv/jackin/f1/.restore/coder-1/tree --verify" in script  # a plain home: as before
    # the parent of the in-home staging dir is the home: never re-created (its mode and owner stay)
    assert 'install -d -m 0700 -o root -g root "$(dirname "$S")"' in script.split("else\n", 1)[1].split("fi\n", 1)[0]
    check = script.index('[ "$(dev "$N")" = "$(dev "$H")" ] || { cleanup; fail "the staged tree is not on')
    assert check < script.index("echo staged") < script.index('mv -T -- "$W" "$S/old"')
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0


# --- what the operator sees -----------------------------------------------------------------------


def test_the_restore_table_says_which_tier_each_agent_came_back_from() -> None:
    result = RestoreResult(snapshot=ID, pre_restore="20261203-080001-0000", agents=[
        AgentRestore(host="h1", instance="coder-1", restored=True, tier="checkpoint", restarted=True),
        AgentRestore(host="h1", instance="coder-2", restored=True, tier="restic", note="checkpoint gone"),
        AgentRestore(host="h1", instance="coder-3", restored=False, error="boom")])  # fmt: skip
    console = Console(file=io.StringIO(), width=160)
    console.print(ui.restore_table(result))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert any("tier" in line for line in lines)
    row = {w.split()[1]: w.split()[2:] for w in lines if " coder-" in w for w in [w.replace("│", " ")]}
    assert row["coder-1"][:3] == ["restored", "checkpoint", "container"]
    assert row["coder-2"][:4] == ["restored", "restic", "checkpoint", "gone"]
    assert row["coder-3"][:4] == ["NOT", "restored", "-", "boom"]
