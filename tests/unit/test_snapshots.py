"""Snapshots, pure parts: restic command builders and parsers, models, the selector, the ledger tables."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from types import SimpleNamespace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jackin.errors import RemoteCommandError, SpecError
from jackin.store.ledger import Ledger
from jackin.snapshots import api, restic
from jackin.snapshots import host
from jackin.snapshots.host import restore_script
from jackin.snapshots.models import AgentSnapshot, SnapshotRecord, new_id
from jackin.spec.models import Inventory

R = "/usr/bin/restic"
BASE = [R, "--repo", "/var/lib/jackin/snapshots/f1/repo", "--password-file", "/var/lib/jackin/snapshots/f1/password",
        "--cache-dir", "/var/lib/jackin/snapshots/f1/cache"]  # fmt: skip


def test_paths_follow_the_shared_contract() -> None:
    assert restic.repo_path("f1") == "/var/lib/jackin/snapshots/f1/repo"
    assert restic.password_path("f1") == "/var/lib/jackin/snapshots/f1/password"
    assert restic.staging_path("f1", "coder-1") == "/srv/jackin/f1/.restore/coder-1"
    assert restic.home_path("f1", "coder-1") == "/srv/jackin/f1/coder-1"
    assert restic.UPLOADED_RESTIC == "/usr/local/lib/jackin/restic"


def test_backup_tags_host_and_paths_and_no_password_in_argv() -> None:
    argv = restic.backup_argv(R, "f1", "host-1", "20260101-000000-abcd", "coder-1")
    assert argv == [*BASE, "--quiet", "backup", "--json", "--host", "host-1", "--tag", "jackin",
                    "--tag", "snap=20260101-000000-abcd", "--tag", "instance=coder-1", "--",
                    "/srv/jackin/f1/coder-1", "/var/lib/jackin/snapshots/f1/manifests/coder-1.json"]  # fmt: skip
    assert "--tag" in restic.backup_argv(R, "f1", "h", "s", "coder-1", tmp=True)[-5]


def test_the_benchmark_runs_the_products_own_options() -> None:
    """bench/snapshots.py builds its commands from these pieces: they must be exactly what the product runs,
    and pass no flag an older restic on a host (no --compression before 0.14) would reject."""
    opts = restic.repo_options("/var/lib/jackin/snapshots/f1/repo", "/var/lib/jackin/snapshots/f1/password",
                               "/var/lib/jackin/snapshots/f1/cache")  # fmt: skip
    assert restic.base(R, "f1") == [R, *opts] == BASE
    assert restic.backup_argv(R, "f1", "h", "s", "coder-1") == [*BASE, *restic.backup_options("h", "s", "coder-1"), "--",
                                                                "/srv/jackin/f1/coder-1",
                                                                "/var/lib/jackin/snapshots/f1/manifests/coder-1.json"]  # fmt: skip
    assert restic.restore_argv(R, "f1", "abc", "/t") == [*BASE, *restic.restore_options("abc", "/t")]
    assert restic.check_argv(R, "f1") == [*BASE, *restic.check_options()] == [*BASE, "--quiet", "check"]
    assert not any(a.startswith(("--compression", "--pack-size", "--read-concurrency", "--no-scan"))
                   for a in restic.backup_argv(R, "f1", "h", "s", "coder-1"))  # fmt: skip


def test_init_runs_once_and_layout_is_root_only() -> None:
    assert restic.init_command(R, "f1").startswith("[ -f /var/lib/jackin/snapshots/f1/repo/config ] || ")
    assert restic.layout_commands("f1") == [
        "install -d -m 0700 -o root -g root /var/lib/jackin/snapshots /var/lib/jackin/snapshots/f1 "
        "/var/lib/jackin/snapshots/f1/manifests"]


def test_restore_verifies_and_forget_prunes_by_id() -> None:
    assert restic.restore_argv(R, "f1", "abc", "/t") == [*BASE, "--quiet", "restore", "abc", "--target", "/t", "--verify"]
    assert restic.forget_argv(R, "f1", ["a", "b"]) == [*BASE, "--quiet", "forget", "--prune", "--", "a", "b"]
    assert restic.forget_argv(R, "f1", ["a"], prune=False)[-3:] == ["forget", "--", "a"]
    assert restic.check_argv(R, "f1", read_data=True)[-2:] == ["check", "--read-data"]


def test_parse_backup_takes_the_summary() -> None:
    out = "\n".join([
        json.dumps({"message_type": "status", "percent_done": 0.5}), "not json",
        json.dumps({"message_type": "summary", "files_new": 3, "files_changed": 1, "files_unmodified": 7,
                    "data_added": 302044, "total_bytes_processed": 300000, "snapshot_id": "7cf1f12e"}),
    ])  # fmt: skip
    summary = restic.parse_backup(out)
    assert (summary.snapshot_id, summary.files_new, summary.files_changed, summary.data_added, summary.total_bytes) == (
        "7cf1f12e", 3, 1, 302044, 300000)
    with pytest.raises(RemoteCommandError, match="no summary"):
        restic.parse_backup("{}")


def test_parse_diff_relative_to_the_home_without_the_manifest() -> None:
    home = "/srv/jackin/f1/coder-1"
    lines = [{"message_type": "change", "path": f"{home}/workspace/new", "modifier": "+"},
             {"message_type": "change", "path": f"{home}/workspace/gone", "modifier": "-"},
             {"message_type": "change", "path": f"{home}/workspace/edit", "modifier": "M"},
             {"message_type": "change", "path": f"{home}/workspace/link", "modifier": "T"},
             {"message_type": "change", "path": "/var/lib/jackin/snapshots/f1/manifests/coder-1.json", "modifier": "M"},
             {"message_type": "statistics", "added": {"bytes": 10}, "removed": {"bytes": 4}}]  # fmt: skip
    diff = restic.parse_diff("\n".join(json.dumps(x) for x in lines), host="h", instance="coder-1", against="live",
                             home=home)  # fmt: skip
    assert diff.added == ["workspace/new"] and diff.removed == ["workspace/gone"]
    assert diff.changed == ["workspace/edit", "workspace/link"]
    assert (diff.bytes_added, diff.bytes_removed) == (10, 4)


def test_parse_snapshots_reads_tags() -> None:
    out = json.dumps([{"id": "abc", "hostname": "h", "time": "t", "tags": ["jackin", "snap=s1", "instance=coder-1"]}])
    assert restic.parse_snapshots(out) == [{"id": "abc", "host": "h", "time": "t",
                                            "tags": ["jackin", "snap=s1", "instance=coder-1"], "snap": "s1",
                                            "instance": "coder-1"}]  # fmt: skip
    with pytest.raises(RemoteCommandError):
        restic.parse_snapshots("garbage")


def test_restore_script_stages_verifies_and_swaps_only_on_go_ahead() -> None:
    script = restore_script(R, "f1", "coder-1", "abc123")
    assert "S=/srv/jackin/f1/.restore/coder-1" in script
    assert "restore abc123 --target /srv/jackin/f1/.restore/coder-1/tree --verify" in script
    order = [script.index(x) for x in ('rm -rf --one-file-system -- "$S"', "--quiet check", "--quiet restore", "echo staged",
                                       'read -r go', 'mv -T -- "$W" "$S/old"', 'mv -T -- "$N" "$W"', "echo done")]  # fmt: skip
    assert order == sorted(order)
    assert "password" not in script.replace("--password-file /var/lib/jackin/snapshots/f1/password", "")


def test_new_id_format() -> None:
    sid = new_id(datetime(2026, 12, 3, 4, 5, 6, tzinfo=timezone.utc))
    assert re.fullmatch(r"20261203-040506-[0-9a-f]{4}", sid)


def test_record_sums_and_rows() -> None:
    record = SnapshotRecord(id="x", fleet="f1", created="2026", kind="auto", agents=[
        AgentSnapshot(host="h2", instance="coder-1", agent="coder", size=10, added=3, tiers=["restic"]),
        AgentSnapshot(host="h1", instance="coder-2", agent="coder", size=5, added=1, tiers=["checkpoint", "restic"]),
    ])  # fmt: skip
    assert record.row() == {"id": "x", "created": "2026", "label": None, "kind": "auto", "agents": ["coder-1", "coder-2"],
                            "hosts": ["h1", "h2"], "size": 15, "added": 4, "tiers": ["checkpoint", "restic"]}  # fmt: skip
    with pytest.raises(ValueError):
        SnapshotRecord(id="x", fleet="f", created="t", kind="weekly")  # type: ignore[arg-type]


def _inventory() -> Inventory:
    return Inventory.model_validate({"hosts": [{"name": "h1", "address": "10.0.0.1"}], "fleet": {
        "name": "f1", "hosts": ["h1"], "agents": [{"name": "coder", "count": 2}, {"name": "tester"}]}})  # fmt: skip


def test_select_accepts_an_instance_an_agent_or_nothing() -> None:
    inventory = _inventory()
    assert api.select(inventory, None) == ["coder-1", "coder-2", "tester-1"]
    assert api.select(inventory, "coder") == ["coder-1", "coder-2"]
    assert api.select(inventory, "coder-2") == ["coder-2"]
    with pytest.raises(SpecError, match="no agent 'nobody'"):
        api.select(inventory, "nobody")


def test_ledger_keeps_snapshots_with_their_agents_and_tiers(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        agent = {"host": "h1", "instance": "coder-1", "agent": "coder", "restic_id": "r1", "size": 5, "added": 2,
                 "files_new": 1, "files_changed": 0, "tiers": ["restic"], "manifest": {"uid": 60000}}  # fmt: skip
        ledger.record_snapshot({"id": "s1", "fleet": "f1", "created": "2026-01-01", "label": "l", "kind": "manual"},
                               [agent, {**agent, "host": "h2", "restic_id": "r2"}])  # fmt: skip
        ledger.add_snapshot_tier("s1", "h1", "coder-1", "checkpoint")
        [row] = ledger.snapshot_rows("f1")
        assert [(a["host"], a["tiers"]) for a in row["agents"]] == [("h1", ["checkpoint", "restic"]), ("h2", ["restic"])]
        assert SnapshotRecord.model_validate({**row, "agents": [{**a, "manifest": None} for a in row["agents"]]}).tiers == [
            "checkpoint", "restic"]
        ledger.forget_snapshot("f1", "s1", host="h1")
        assert ledger.snapshot("f1", "s1") is not None  # h2's copy is still there
        ledger.forget_snapshot("f1", "s1", host="h2")
        assert ledger.snapshot("f1", "s1") is None and ledger.snapshot_rows("f1") == []


def test_placement_follows_the_ledger_and_else_the_plan(tmp_path: Path) -> None:
    from jackin.transport.ssh import SshTarget

    targets = [SshTarget(name=n, address="10.0.0.1", known_hosts=tmp_path / "k") for n in ("h1", "h2")]
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        row = {"instance": "old-1", "agent": "old", "uid": 60005, "user": "jk-f1--old-1", "container": "jk-f1--old-1",
               "network": "jk-f1--old-1"}  # fmt: skip
        ledger.record_agents("f1", "h1", [row, {**row, "instance": "coder-1"}])
        plan = SimpleNamespace(fleet="f1", at=lambda host: [SimpleNamespace(instance=i) for i in ("coder-1", "coder-2")])
        where = api.placement(ledger, plan, targets, ["coder-1", "coder-2", "old-1"])  # h2: every agent placed there
        assert where == {"h1": ["coder-1", "old-1"], "h2": ["coder-1", "coder-2"]}
        [stored] = [r for r in ledger.agents("f1") if r["instance"] == "old-1"]
    gone = api.from_row(stored, snapshot="s", created="t", image_id=None)
    assert (gone.home, gone.workspace, gone.uid, gone.spec) == ("/srv/jackin/f1/old-1", "/srv/jackin/f1/old-1/workspace",
                                                               60005, {})  # fmt: skip


def test_restore_can_read_another_repository_of_the_fleet() -> None:
    pushed = "/var/lib/jackin/snapshots/f1/imported/h0"
    argv = restic.restore_argv(R, "f1", "abc", "/t", repo=pushed)
    assert argv[1:3] == ["--repo", pushed] and argv[3:5] == ["--password-file", "/var/lib/jackin/snapshots/f1/password"]
    assert f"--repo {pushed}" in restore_script(R, "f1", "coder-1", "abc", repo=pushed)


def test_restore_script_checks_the_room_before_restoring_and_digs_holes_before_the_swap() -> None:
    script = restore_script(R, "f1", "coder-1", "abc123", min_free=5 << 20)
    order = [script.index(x) for x in ("--quiet check", "stats --mode restore-size --json abc123", "-lt 5242880",
                                       "--quiet restore", "fallocate --dig-holes", "echo staged")]  # fmt: skip
    assert order == sorted(order)


def _run_part(part: str, tmp_path, total: int) -> subprocess.CompletedProcess:
    """``part`` of the restore script in bash, with a stand-in restic that reports ``total`` bytes."""
    fake = tmp_path / "restic"
    fake.write_text(f'#!/bin/sh\necho \'{{"total_size":{total},"total_file_count":3,"snapshots_count":1}}\'\n')
    fake.chmod(0o755)
    (tmp_path / "home").mkdir(exist_ok=True)
    prelude = f'fail() {{ echo "$*" >&2; exit 1; }}; cleanup() {{ echo cleaned; }}; H={tmp_path}/home; N={tmp_path}/home\n'
    return subprocess.run(["bash", "-c", prelude + part + "echo through"], capture_output=True, text=True, timeout=60)


def test_a_restore_that_would_leave_too_little_free_is_refused_with_the_numbers(tmp_path) -> None:
    need = shutil.disk_usage(tmp_path).free + (1 << 40)  # a terabyte more than is free, whatever others free meanwhile
    ok = _run_part(host.room_commands(str(tmp_path / "restic"), "f1", "abc", None, 1 << 20), tmp_path, 1000)
    assert ok.returncode == 0 and ok.stdout == "through\n", ok.stderr  # control: room enough
    refused = _run_part(host.room_commands(str(tmp_path / "restic"), "f1", "abc", None, 1 << 20), tmp_path, need)
    assert refused.returncode == 1 and refused.stdout == "cleaned\n", refused.stderr
    assert f"needs {need} bytes" in refused.stderr and "less than 1048576 (snapshots.min_free)" in refused.stderr


def test_restored_zeros_become_holes_again_and_small_files_and_links_are_left_alone(tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "zeros").write_bytes(b"\0" * (1 << 20) + b"end")
    (home / "small").write_bytes(b"\0" * 4096)
    (home / "odd\nname").write_bytes(b"\0" * (1 << 20))
    outside = tmp_path / "outside"
    outside.write_bytes(b"\0" * (1 << 20))
    (home / "link").symlink_to(outside)
    blocks = {p: p.stat().st_blocks for p in (home / "small", outside)}
    done = _run_part(host.dig_commands(), tmp_path, 0)
    assert done.returncode == 0 and done.stdout == "through\n", done.stderr
    assert (home / "zeros").read_bytes() == b"\0" * (1 << 20) + b"end" and (home / "zeros").stat().st_blocks * 512 < 1 << 16
    assert (home / "odd\nname").stat().st_blocks * 512 < 1 << 16  # NUL-separated names: any byte
    assert {p: p.stat().st_blocks for p in (home / "small", outside)} == blocks  # not followed, not touched
