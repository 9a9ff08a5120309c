"""Per-agent disk quotas (``resources.disk``, issue 18): the spec's rules, the plan, fleet.up's commands,
the state read's lines, and the room checks of a snapshot and a restore, run here in bash with a
stand-in ``btrfs`` (the lab test, tests/integration/test_checkpoints.py, runs them on real btrfs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.facts.cow import CowState, parse_state
from jackin.facts.fleet import HostState
from jackin.operations import cow as ops
from jackin.plan.contract import _disk_risks
from jackin.plan.fleet import build
from jackin.snapshots import host as remote
from jackin.snapshots import restic as restic_paths
from jackin.spec import parse_inventory
from jackin.spec.models import DEFAULT_DISK

GIB = 1024**3
FREE = 50 * GIB  # what the stand-in df says the repository's filesystem has free


def spec(fleet: str):
    return parse_inventory(f"fleet:\n  name: demo\n  provider: lab\n{fleet}", "f.yaml").fleet


AGENTS = "  agents:\n    - name: coder\n      count: 2\n"


# --- the spec and the plan --------------------------------------------------------------


def test_a_disk_quota_puts_the_homes_on_the_fleets_btrfs_and_each_agent_gets_it() -> None:
    fleet = spec(AGENTS + "  resources: {disk: 3g}\n")
    assert fleet.snapshots.checkpoints == "btrfs"
    plan = build(fleet, {"coder-1": 60000, "coder-2": 60001})
    assert plan.checkpoints is not None and [a.disk for a in plan.agents] == [3 * GIB, 3 * GIB]


def test_an_agents_own_quota_wins_and_the_others_get_the_default() -> None:
    fleet = spec("  agents:\n    - name: coder\n      resources: {disk: 64m}\n    - name: judge\n"
                 "  snapshots: {checkpoint_size: 20g}\n")  # fmt: skip
    plan = build(fleet, {"coder-1": 60000, "judge-1": 60001})
    assert [a.disk for a in plan.agents] == [64 * 1024**2, DEFAULT_DISK]


def test_the_fleets_btrfs_holds_the_largest_quota_unless_its_size_is_set() -> None:
    assert spec(AGENTS + "  resources: {disk: 20g}\n").snapshots.checkpoint_size == 20 * GIB
    assert spec(AGENTS + "  resources: {disk: 2g}\n").snapshots.checkpoint_size == 10 * GIB  # the default
    agent = spec("  agents:\n    - name: coder\n      resources: {disk: 12g}\n").snapshots
    assert (agent.checkpoints, agent.checkpoint_size) == ("btrfs", 12 * GIB)


def test_the_default_quota_never_exceeds_the_fleets_filesystem() -> None:
    fleet = spec(AGENTS + "  snapshots: {checkpoints: btrfs, checkpoint_size: 2g}\n")
    assert [a.disk for a in build(fleet, {"coder-1": 60000, "coder-2": 60001}).agents] == [2 * GIB, 2 * GIB]


def test_homes_on_the_hosts_filesystem_have_no_quota_and_the_contract_says_so() -> None:
    plan = build(spec(AGENTS), {"coder-1": 60000, "coder-2": 60001})
    assert plan.checkpoints is None and [a.disk for a in plan.agents] == [None, None]
    assert "no disk quota" in _disk_risks(plan.agents[0])[0]
    quota = build(spec(AGENTS + "  resources: {disk: 1g}\n"), {"coder-1": 60000, "coder-2": 60001})
    assert "outside its home's quota" in _disk_risks(quota.agents[0])[0]


@pytest.mark.parametrize(("fleet", "said"), [
    ("  resources: {disk: 1g}\n  snapshots: {checkpoints: 'off'}\n", "fleet.resources.disk needs the fleet's homes"),
    ("  resources: {disk: 11g}\n  snapshots: {checkpoint_size: 10g}\n",
     "is larger than the fleet's btrfs (snapshots.checkpoint_size"),
    ("  resources: {disk: 1m}\n", "expected at least 32m"),
    ("  resources: {disk: lots}\n", "resources.disk"),
])  # fmt: skip
def test_a_quota_that_cannot_be_enforced_is_refused_by_the_spec(fleet: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec(AGENTS + fleet)
    assert any(said in problem for problem in caught.value.problems), caught.value.problems


# --- fleet.up's commands ----------------------------------------------------------------

PLAN = build(spec(AGENTS + "  resources: {disk: 1g}\n"), {"coder-1": 60000, "coder-2": 60001})
HOMES = ["/srv/jackin/demo/coder-1", "/srv/jackin/demo/coder-2"]


def state(**cow: object) -> HostState:
    return HostState(cow=CowState(mounted="btrfs", subvolumes=HOMES, **cow))  # type: ignore[arg-type]


def test_quotas_are_turned_on_once_then_each_home_gets_its_limit() -> None:
    assert ops.quota_commands(PLAN, state().cow) == [
        "btrfs quota enable /srv/jackin/demo", "btrfs quota rescan -w /srv/jackin/demo >/dev/null",
        f"btrfs qgroup limit {GIB} {HOMES[0]}", f"btrfs qgroup limit {GIB} {HOMES[1]}",
    ]  # fmt: skip


def test_only_a_home_whose_limit_differs_gets_a_new_one_and_a_home_at_its_limit_gets_nothing() -> None:
    at = {"coder-1": (4096, GIB), "coder-2": (4096, 2 * GIB)}
    assert ops.quota_commands(PLAN, state(quota=True, disk=at).cow) == [f"btrfs qgroup limit {GIB} {HOMES[1]}"]
    done = {"coder-1": (4096, GIB), "coder-2": (GIB + 1, GIB)}  # over it (a lowered quota): its files are kept
    assert ops.quota_commands(PLAN, state(quota=True, disk=done).cow) == []
    unread = {"coder-1": (4096, GIB)}  # coder-2's line was not read: its limit is set again (idempotent)
    assert ops.quota_commands(PLAN, state(quota=True, disk=unread).cow) == [f"btrfs qgroup limit {GIB} {HOMES[1]}"]


# --- the state read ---------------------------------------------------------------------


def test_the_quota_lines_parse_and_a_malformed_one_is_dropped() -> None:
    cow = parse_state([], [], ["on", "coder-1 16384 1073741824", "coder-2 99 none", "Coder-3 1 2", "coder-4 x 2",
                               "coder-5 1 2 3", "../x 1 2"])  # fmt: skip
    assert cow.quota and cow.disk == {"coder-1": (16384, GIB), "coder-2": (99, None)}
    assert parse_state([], [], []) == CowState()


# --- the room checks, in bash with stand-ins ---------------------------------------------


def fake_btrfs(tmp_path: Path, quotas: dict[str, tuple[int, int | None]]) -> Path:
    """A ``btrfs`` whose ``qgroup show ... -F -- PATH`` prints PATH's qgroup as btrfs-progs 6.2 does."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    cases = "".join(f'  {path}) echo "0/257 {used} {used} {"none" if limit is None else limit} none x" ;;\n'
                    for path, (used, limit) in quotas.items())  # fmt: skip
    script = bindir / "btrfs"
    script.write_text('#!/bin/sh\nfor p; do :; done\necho "Qgroupid Referenced Exclusive Max Max Path"\n'
                      f'echo "-------- ---------- --------- --- --- ----"\ncase "$p" in\n{cases}  *) exit 1 ;;\nesac\n')  # fmt: skip
    script.chmod(0o755)
    return bindir


def run_room(tmp_path: Path, quotas: dict[str, tuple[int, int | None]], *, checkpoint: bool = False,
             need: int = 3000) -> subprocess.CompletedProcess:  # fmt: skip
    """``room_script`` for coder-1 (home under tmp_path), restic saying ``need`` bytes, btrfs ``quotas``."""
    bindir = fake_btrfs(tmp_path, quotas)
    (bindir / "restic").write_text(f"#!/bin/sh\necho '{{\"total_size\":{need},\"total_file_count\":1}}'\n")
    (bindir / "restic").chmod(0o755)
    home = tmp_path / "coder-1"
    home.mkdir(exist_ok=True)
    ckpt = str(tmp_path / "ckpt")
    script = remote.room_script("demo", [] if checkpoint else [("coder-1", "a1", None)], min_free=0,
                                checkpoints=[("coder-1", ckpt)] if checkpoint else [])  # fmt: skip
    script = script.replace(restic_paths.home_path("demo", "coder-1"), str(home))
    return subprocess.run([shutil.which("bash") or "/bin/bash", "-c", script], capture_output=True, text=True,
                          timeout=20, env={"PATH": f"{bindir}:/usr/bin:/bin"})  # fmt: skip


def test_a_restic_restore_is_refused_when_the_snapshot_and_the_home_together_exceed_the_quota(tmp_path: Path) -> None:
    home = str(tmp_path / "coder-1")
    refused = run_room(tmp_path, {home: (8000, 10000)})  # stages 3000 beside the 8000 the home holds
    assert refused.returncode == 1 and refused.stdout == "", refused.stdout
    assert ("restoring snapshot a1 of coder-1 needs 3000 bytes and the home's disk quota (resources.disk) is 10000 "
            "and the home holds 8000 of it; nothing was changed") in refused.stderr  # fmt: skip
    assert run_room(tmp_path, {home: (7000, 10000)}).stdout == "room\n"  # control: it fits
    assert run_room(tmp_path, {home: (8000, None)}).stdout == "room\n"  # no limit
    assert run_room(tmp_path, {}).stdout == "room\n"  # no qgroups (homes on the host's filesystem)


def test_a_checkpoint_larger_than_the_quota_is_refused_and_one_within_it_is_not(tmp_path: Path) -> None:
    home, ckpt = str(tmp_path / "coder-1"), str(tmp_path / "ckpt")
    refused = run_room(tmp_path, {home: (9000, 10000), ckpt: (12000, None)}, checkpoint=True)
    assert refused.returncode == 1
    assert "restoring checkpoint ckpt of coder-1 needs 12000 bytes and the home's disk quota (resources.disk) " \
           "is 10000; nothing was changed" in refused.stderr  # fmt: skip
    fits = run_room(tmp_path, {home: (9000, 10000), ckpt: (10000, None)}, checkpoint=True)  # replaces the home whole
    assert (fits.returncode, fits.stdout) == (0, "room\n"), fits.stderr


def test_the_restore_scripts_own_check_counts_the_quota_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bindir = fake_btrfs(tmp_path, {str(home): (8000, 10000)})
    (bindir / "restic").write_text("#!/bin/sh\necho '{\"total_size\":3000,\"total_file_count\":1}'\n")
    (bindir / "restic").chmod(0o755)
    part = remote.room_commands(str(bindir / "restic"), "f1", "abc", None, 0)
    prelude = f'fail() {{ echo "$*" >&2; exit 1; }}; cleanup() {{ echo cleaned; }}; H={home}\n'
    done = subprocess.run(["bash", "-c", prelude + part + "echo through"], capture_output=True, text=True, timeout=20,
                          env={"PATH": f"{bindir}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 1 and done.stdout == "cleaned\n"
    assert "needs 3000 bytes and the home's disk quota (resources.disk) is 10000 and the home holds 8000" in done.stderr


def run_backup_room(tmp_path: Path, min_free: int, manifest: bool, instances: tuple[str, ...] = ("coder-1",)):
    """``backup_room_script`` for ``instances`` (homes under tmp_path), run here; its output's lines."""
    script = remote.backup_room_script("demo", list(instances), min_free=min_free)
    for instance in instances:
        script = script.replace(restic_paths.home_path("demo", instance), str(tmp_path / instance))
        script = script.replace(restic_paths.manifest_path("demo", instance), str(tmp_path / "manifests" / f"{instance}.json"))
    script = script.replace(restic_paths.repo_path("demo"), str(tmp_path / "repo"))
    if manifest:
        (tmp_path / "manifests").mkdir(exist_ok=True)
        for instance in instances:
            (tmp_path / "manifests" / f"{instance}.json").write_text("{}")
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "df").write_text(f"#!/bin/sh\necho Avail; echo {FREE}\n")  # not this shared machine's moving disk
    (bindir / "df").chmod(0o755)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=90,
                          env={"PATH": f"{bindir}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_snapshot_that_could_leave_too_little_free_refuses_the_biggest_agents_with_the_numbers(tmp_path: Path) -> None:
    big, small = tmp_path / "coder-1" / "workspace", tmp_path / "coder-2" / "workspace"
    big.mkdir(parents=True)
    small.mkdir(parents=True)
    (big / "data").write_bytes(b"x" * (1 << 20))
    (big / "same").hardlink_to(big / "data")  # one inode: counted once
    with (big / "sparse").open("wb") as sparse:
        sparse.truncate(1 << 40)  # a terabyte of holes: counted as its blocks (restic stores zeros once)
    (small / "note").write_text("hi\n")
    both = ("coder-1", "coder-2")
    ok = run_backup_room(tmp_path, 1 << 20, manifest=False, instances=both)
    assert [line for line in ok if line.startswith("refuse")] == [], ok  # control
    taken = int(ok[-1].split()[2])
    assert 1 << 20 <= taken < (1 << 20) + (1 << 18), ok  # 1 MiB once, not twice, and not the terabyte
    free = int(ok[-1].split()[1])
    tight = run_backup_room(tmp_path, free - (1 << 19), manifest=False, instances=both)  # room for the small one only
    refused = [line.split() for line in tight if line.startswith("refuse")]
    assert [r[1] for r in refused] == ["coder-1"] and int(refused[0][2]) >= 1 << 20, tight
    since = run_backup_room(tmp_path, free - (1 << 19), manifest=True, instances=both)  # nothing changed since
    assert [line for line in since if line.startswith("refuse")] == [], since


def test_backup_room_says_why_each_refused_agent_gets_no_restic_snapshot() -> None:
    class Done:
        exited, stderr = 0, ""
        stdout = "refuse coder-1 5000\nfree 9000 3000\njk-room\n/usr/bin/restic\n"

    class Conn:
        def run(self, *_: object, **__: object) -> Done:
            return Done()

    refused, probed = remote.backup_room(Conn(), "demo", ["coder-1", "coder-2"], host="h1", min_free=2000)  # type: ignore[arg-type]
    assert probed == "/usr/bin/restic\n"
    assert refused == {"coder-1": "no restic snapshot: it may add up to 5000 bytes to the fleet's repository (its "
                                  "files changed since its last snapshot) and the repository's filesystem has 9000 "
                                  "free (3000 for the other agents of this snapshot): that would leave less than "
                                  "2000 (snapshots.min_free); nothing of it was changed"}  # fmt: skip
