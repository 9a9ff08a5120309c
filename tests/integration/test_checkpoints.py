"""The checkpoint tier on a real lab host: a loop-mounted btrfs, homes as subvolumes, checkpoints
taken while the agent runs, an atomic restore, and a teardown that leaves nothing.

One 1-host lab and one fleet (``snapshots: {checkpoints: btrfs}``, one agent) for the module; the
tests run in file order on it and the last one brings the fleet down (the fixture does too, on failure).
Timings are printed (run with -s), never asserted.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shlex
import subprocess
from pathlib import Path

import pytest

from jackin.lab import Lab
from jackin.snapshots import cow
from jackin.transport.ssh import connect, wait_ready

from .conftest import inv, module_lab, sh

FIRST, SECOND, UNDO, LATE = "20261203-050000-0001", "20261203-050000-0002", "20261203-050000-0003", "20261203-050000-0004"
QUOTA = "20261203-050000-0005"
# Every entry of the home, NUL-safe: name, then type, mode, owner, group, size, mtime, link target; then the
# NUL-terminated sha256 of every regular file. Base64, so any byte of any name survives. {skip} leaves out
# what the role's entrypoint rewrites every 5 s while the agent runs (its heartbeat, in workspace/.jackin).
LISTING = ("cd {home} && find . {skip} -printf '%P\\0%y %m %U %G %s %T@ %l\\0' | base64 -w0; echo; "
           "find . {skip} -type f -print0 | sort -z | xargs -0 -r sha256sum -z | base64 -w0")  # fmt: skip
HEARTBEAT = "-path ./workspace/.jackin -prune -o"
POPULATE = """cd /workspace && mkdir -p src/deep && echo hello > src/a.txt && printf 'x\\ny' > 'src/new
line' && dd if=/dev/urandom of=big.bin bs=1024 count=4096 2>/dev/null && chmod 0640 src/a.txt && chmod 0751 src/deep \
&& ln -s a.txt src/link && ln -s /etc/shadow src/abs && echo keep > keep.txt && touch -d '2020-01-02 03:04:05' src/a.txt"""
DAMAGE = """cd /workspace && rm keep.txt && echo changed > src/a.txt && chmod 0600 src/deep && rm -r src/deep \
&& rm src/link && ln -s /etc/passwd src/a2 && rm big.bin && ln -s /etc/shadow big.bin && chmod 0777 src \
&& echo new > 'new\nfile'"""


@pytest.fixture(scope="module")
def clab():
    yield from module_lab("c", 1)


@pytest.fixture(scope="module")
def fleet(clab, tmp_path_factory):
    """(name, spec path) of a fleet with the checkpoint tier and one agent, up on the lab's host."""
    name = f"c{secrets.token_hex(3)}"
    spec = tmp_path_factory.mktemp("cow") / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {clab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
  snapshots: {{checkpoints: btrfs, checkpoint_size: 1g}}
""")
    try:
        up(str(spec))
        yield name, str(spec)
    finally:  # a cleanup: the final snapshot and pull are proven in test_final_pull, not here
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")


def up(spec: str) -> dict:
    done = inv("fleet.up", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)



def listing(lab: Lab, home: str, *, whole: bool = False) -> tuple[dict[bytes, bytes], bytes]:
    """{name: "type mode uid gid size mtime target"} of every entry of ``home`` and the files' hashes.

    Without the agent's heartbeat files, unless ``whole``: compare whole listings only while the agent
    is stopped, since its entrypoint rewrites them every 5 s (a race the CI once lost)."""
    entries, hashes = sh(lab, LISTING.format(home=home, skip="" if whole else HEARTBEAT)).stdout.split("\n")[:2]
    fields = base64.b64decode(entries).split(b"\0")[:-1]
    return dict(zip(fields[::2], fields[1::2])), base64.b64decode(hashes)


def running(lab: Lab, container: str) -> str:
    """The container's start time while it runs (changes if it was restarted), else 'stopped'."""
    out = sh(lab, f"docker inspect -f '{{{{.State.Running}}}} {{{{.State.StartedAt}}}}' {container}").stdout.split()
    return out[1] if out[0] == "true" else "stopped"


def test_lab_host_offers_loop_devices_and_btrfs(clab):
    """losetup, mkfs.btrfs and mount -o loop work inside a lab host (no --privileged)."""
    out = sh(clab, "set -e; d=$(mktemp -d); truncate -s 300M $d/i.img; mkfs.btrfs -q $d/i.img >/dev/null 2>&1; "
                   "mkdir $d/m; mount -o loop $d/i.img $d/m; stat -f -c %T $d/m; findmnt -n -o SOURCE $d/m; "
                   "umount $d/m; rm -rf $d; losetup -f").stdout.split()  # fmt: skip
    assert out[0] == "btrfs" and out[1].startswith("/dev/loop") and out[2].startswith("/dev/loop")


def test_up_mounts_the_fleets_btrfs_and_makes_the_home_a_subvolume(clab, fleet):
    name, _ = fleet
    root, home, user = f"/srv/jackin/{name}", f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1"
    source, fstype, options = sh(clab, f"findmnt -n -o SOURCE,FSTYPE,OPTIONS {root}").stdout.split()
    assert source.startswith("/dev/loop") and fstype == "btrfs" and {"nodev", "nosuid"} <= set(options.split(","))
    assert sh(clab, f"stat -c %i {home}; btrfs subvolume show {home} >/dev/null && echo subvolume").stdout.split() == [
        "256", "subvolume"]  # fmt: skip
    assert sh(clab, f"stat -c '%a %U %G' {root} {home} {home}/workspace").stdout.splitlines() == [
        "711 root root", f"750 root {user}", f"700 {user} {user}"]  # fmt: skip
    mode, owner, size, blocks = sh(clab, f"stat -c '%a %U %s %b' /var/lib/jackin/cow/{name}.img").stdout.split()
    assert (mode, owner, int(size)) == ("600", "root", 1024**3) and int(blocks) * 512 < int(size) // 4  # sparse
    unit = sh(clab, f"systemd-escape -p --suffix=mount {root}").stdout.strip()
    assert unit == cow.unit_name(name)
    assert sh(clab, f"systemctl is-enabled '{unit}'; systemctl is-active '{unit}'").stdout.split() == ["enabled", "active"]
    assert unit in sh(clab, "systemctl show -p After docker.service").stdout.split("=", 1)[1].split()
    with connect(clab.status().hosts[0].target()) as conn:
        assert cow.supported(conn, name) and cow.supported(conn, name, "coder-1")
        # Negative controls: a fleet without the tier, a home that is not a subvolume.
        assert not cow.supported(conn, "nofleet")
        assert not cow.supported(conn, name, "coder-9")


def test_a_second_up_changes_nothing(clab, fleet):
    name, spec = fleet
    state = (f"findmnt -n -o SOURCE,FSTYPE,OPTIONS /srv/jackin/{name}; btrfs subvolume list /srv/jackin/{name}; "
             f"sha256sum {shlex.quote(cow.unit_path(name))}; "
             f"stat -c '%s %a' /var/lib/jackin/cow/{name}.img; stat -c '%a %U %G %Y' /srv/jackin/{name}/coder-1")  # fmt: skip
    before = sh(clab, state).stdout
    assert [h["changed"] for h in up(spec)["run"]["hosts"]] == [0]
    assert sh(clab, state).stdout == before


def test_checkpoint_while_running_then_restore_puts_back_bytes_modes_owners_links_and_mtimes(clab, fleet):
    name, _ = fleet
    home, container = f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1"
    sh(clab, f"docker exec {container} sh -c {json.dumps(POPULATE)}")
    started = running(clab, container)
    assert started != "stopped"
    shadow = sh(clab, "stat -c '%a %U %Y %s' /etc/shadow /etc/passwd").stdout
    before = listing(clab, home)
    with connect(clab.status().hosts[0].target()) as conn:
        taken = cow.checkpoint(conn, name, "coder-1", FIRST)
        print(f"\ncheckpoint of a {sum(1 for _ in before[0])}-entry home while the agent runs: "
              f"{taken.took_ms:.1f} ms on the host, {taken.wall_ms:.0f} ms with SSH")
        assert running(clab, container) == started  # the agent ran on, not restarted
        path = cow.checkpoint_path(name, "coder-1", FIRST)
        assert sh(clab, f"btrfs property get -ts {path} ro").stdout.strip() == "ro=true"
        assert sh(clab, f"stat -c '%a %U' {path} $(dirname {path}) $(dirname $(dirname {path}))").stdout.split() == [
            "750", "root", "700", "root", "700", "root"]  # fmt: skip
        # Read-only: root cannot write into it, while the live workspace takes the same write (control).
        assert sh(clab, f"touch {path}/workspace/x", warn=True).failed
        assert sh(clab, f"touch {home}/workspace/.x && rm {home}/workspace/.x", warn=True).ok
        assert listing(clab, path) == before

        sh(clab, f"docker exec {container} sh -c {json.dumps(DAMAGE)}")
        damaged = listing(clab, home)
        assert damaged != before
        with pytest.raises(cow.CheckpointRefused, match="is running"):
            cow.restore_checkpoint(conn, name, "coder-1", FIRST)
        assert listing(clab, home) == damaged  # refused: nothing changed

        sh(clab, f"docker stop -t 2 {container}")
        stopped = listing(clab, home, whole=True)
        restored = cow.restore_checkpoint(conn, name, "coder-1", FIRST, previous_id=UNDO)
        print(f"restore of checkpoint {FIRST}: {restored.took_ms:.1f} ms on the host, {restored.wall_ms:.0f} ms with SSH")
        assert listing(clab, home) == before
        assert listing(clab, home, whole=True) == listing(clab, path, whole=True)  # the heartbeat files too
        undo = cow.checkpoint_path(name, "coder-1", UNDO)
        assert listing(clab, undo) == damaged  # the undo point holds the damage
        assert listing(clab, undo, whole=True) == stopped  # ... and the heartbeat files as they were at the stop
        beat = b"workspace/.jackin/status.json"
        assert beat in stopped[0] and beat not in damaged[0]  # control: only a whole listing has them
        assert sh(clab, "stat -c '%a %U %Y %s' /etc/shadow /etc/passwd").stdout == shadow  # links never followed
        assert sh(clab, f"ls -A {cow.swap_path(name, 'coder-1')}").stdout == ""  # the old home is gone
        assert [c.snapshot_id for c in cow.list_checkpoints(conn, name)] == [FIRST, UNDO]

        # Undo the restore, then restore again: both directions are exact.
        cow.restore_checkpoint(conn, name, "coder-1", UNDO)
        assert listing(clab, home) == damaged
        assert listing(clab, home, whole=True) == listing(clab, undo, whole=True)
        cow.restore_checkpoint(conn, name, "coder-1", FIRST)
        assert listing(clab, home) == before
        assert listing(clab, home, whole=True) == listing(clab, path, whole=True)

        sh(clab, f"docker start {container}")
        assert sh(clab, f"docker exec {container} cat /workspace/keep.txt /workspace/src/a.txt").stdout == "keep\nhello\n"
        assert cow.delete_checkpoint(conn, name, "coder-1", UNDO) and not cow.delete_checkpoint(conn, name, "coder-1", UNDO)
        assert [c.snapshot_id for c in cow.list_checkpoints(conn, name, "coder-1")] == [FIRST]


def qgroup(lab: Lab, path: str) -> tuple[int, int | None]:
    """(bytes the subvolume at ``path`` references, its qgroup's limit or None), after a sync."""
    out = sh(lab, f"sync; btrfs qgroup show --raw -re -F -- {path} | awk '$1 ~ /^0\\// {{ print $2, $4; exit }}'")
    used, limit = out.stdout.split()
    return int(used), None if limit == "none" else int(limit)


def with_disk(spec: str, disk: str) -> None:
    text = Path(spec).read_text()
    Path(spec).write_text(re.sub(r"pids: 64(, disk: \w+)?}", f"pids: 64, disk: {disk}}}", text))


def test_the_home_has_a_disk_quota_that_stops_writes_and_that_restores_keep(clab, fleet):
    """resources.disk as the limit of the home's qgroup: set by a warm fleet.up without a restart, shown by
    fleet.status, met by the agent's writes (a write within it is the control), refused for a checkpoint
    that holds more than a lowered quota (nothing changed), and carried to the home a restore puts in."""
    name, spec = fleet
    home, container = f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1"
    assert qgroup(clab, home)[1] == 1024**3  # the default: DEFAULT_DISK, never more than the 1g filesystem
    started = running(clab, container)
    with_disk(spec, "64m")
    assert sum(h["changed"] for h in up(spec)["run"]["hosts"]) >= 1
    assert qgroup(clab, home)[1] == 64 << 20 and running(clab, container) == started
    status = inv("fleet.status", "-i", spec, "--json")
    agent = json.loads(status.stdout)["hosts"][0]["agents"][0]
    assert agent["disk_limit"] == 64 << 20 and 0 < agent["disk"] <= 64 << 20, agent

    fill = "dd if=/dev/zero of=/workspace/{name} bs=1M count={mb} conv=fsync 2>&1; echo rc=$?"
    control = sh(clab, f"docker exec {container} sh -c '{fill.format(name='fill', mb=40)}'").stdout
    assert control.rstrip().endswith("rc=0"), control
    over = sh(clab, f"docker exec {container} sh -c '{fill.format(name='more', mb=100)}'").stdout
    assert "Disk quota exceeded" in over and not over.rstrip().endswith("rc=0"), over
    assert qgroup(clab, home)[0] <= 64 << 20
    sh(clab, f"docker exec {container} rm -f /workspace/more")

    with connect(clab.status().hosts[0].target()) as conn:
        cow.checkpoint(conn, name, "coder-1", QUOTA)  # holds the 40 MB file
        sh(clab, f"docker exec {container} rm /workspace/fill")
        with_disk(spec, "32m")
        up(spec)
        assert qgroup(clab, home)[1] == 32 << 20
        sh(clab, f"docker stop -t 2 {container}")
        try:
            before = listing(clab, home, whole=True)
            with pytest.raises(cow.CheckpointError, match=r"holds \d+ bytes and the home's disk quota \(resources.disk\) "
                                                          r"is 33554432; nothing was changed"):  # fmt: skip
                cow.restore_checkpoint(conn, name, "coder-1", QUOTA)
            assert listing(clab, home, whole=True) == before
            with_disk(spec, "64m")
            up(spec)  # starts the agent again (what the spec asks): stopped again for the restore
            sh(clab, f"docker stop -t 2 {container}")
            cow.restore_checkpoint(conn, name, "coder-1", QUOTA)  # control: within the quota it is restored
            used, limit = qgroup(clab, home)
            assert limit == 64 << 20 and used >= 40 << 20  # a new subvolume, with the home's quota
        finally:
            sh(clab, f"docker start {container}", warn=True)
        sh(clab, f"docker exec {container} rm /workspace/fill")
        assert cow.delete_checkpoint(conn, name, "coder-1", QUOTA)


def test_the_mount_comes_back_at_boot_before_docker_and_the_agent_runs_again(clab, fleet):
    name, _ = fleet
    host = clab.status().hosts[0]
    container = f"jk-{name}--coder-1"
    assert running(clab, container) != "stopped"
    sh(clab, f"docker exec {container} sh -c 'echo before-reboot > /workspace/reboot.txt'")
    subprocess.run(["docker", "restart", "-t", "10", host.container], check=True, capture_output=True)
    wait_ready(clab.status().hosts[0].target(), timeout=120, command="systemctl is-system-running --wait || true")
    unit = cow.unit_name(name)
    mounted, docker_started = sh(clab, f"systemctl show -p ActiveEnterTimestampMonotonic --value '{unit}'; "
                                       "systemctl show -p ExecMainStartTimestampMonotonic --value docker").stdout.split()  # fmt: skip
    assert 0 < int(mounted) < int(docker_started)
    for _ in range(60):
        if running(clab, container) != "stopped":
            break
        sh(clab, "sleep 1")
    assert sh(clab, f"docker exec {container} cat /workspace/reboot.txt").stdout == "before-reboot\n"
    with connect(clab.status().hosts[0].target()) as conn:
        assert cow.supported(conn, name, "coder-1")
        assert cow.checkpoint(conn, name, "coder-1", LATE).checkpoint.snapshot_id == LATE


def test_an_interrupted_restore_is_repaired_by_the_next(clab, fleet):
    """The state a restore leaves when it stops between its two renames (home aside, a fresh copy
    beside it): checkpoints are refused, and the next restore puts the home back, then restores."""
    name, _ = fleet
    home, container, swap = f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1", cow.swap_path(name, "coder-1")
    path = cow.checkpoint_path(name, "coder-1", FIRST)
    sh(clab, f"docker stop -t 2 {container}")
    try:
        sh(clab, f"install -d -m 0700 {swap} && btrfs subvolume snapshot {path} {swap}/new >/dev/null "
                 f"&& mv -T {home} {swap}/old")  # fmt: skip
        with connect(clab.status().hosts[0].target()) as conn:
            assert not cow.supported(conn, name, "coder-1")
            with pytest.raises(cow.CheckpointError, match="is not a btrfs subvolume"):
                cow.checkpoint(conn, name, "coder-1", "20261203-070000-0001")
            cow.restore_checkpoint(conn, name, "coder-1", FIRST)
            assert cow.supported(conn, name, "coder-1")
        assert listing(clab, home, whole=True) == listing(clab, path, whole=True)
        assert sh(clab, f"ls -A {swap}").stdout == ""
    finally:
        sh(clab, f"docker start {container}", warn=True)


def test_a_subvolume_the_agent_made_is_not_checkpointed_and_its_home_is_kept_aside(clab, fleet):
    """Any user may create a btrfs subvolume: the agent makes one in its workspace. The checkpoint shows
    it as an empty directory; the restore keeps the old home (it cannot be deleted) aside, root-only."""
    name, _ = fleet
    home, container, user = f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1", f"jk-{name}--coder-1"
    uid = sh(clab, f"id -u {user}").stdout.strip()
    make = f"btrfs subvolume create {home}/workspace/nested >/dev/null && echo inner > {home}/workspace/nested/f"
    sh(clab, f"setpriv --reuid={uid} --regid={uid} --clear-groups -- sh -c '{make}'")
    with connect(clab.status().hosts[0].target()) as conn:
        cow.checkpoint(conn, name, "coder-1", "20261203-080000-0001")
        path = cow.checkpoint_path(name, "coder-1", "20261203-080000-0001")
        assert sh(clab, f"ls -A {path}/workspace/nested").stdout == ""
        sh(clab, f"docker stop -t 2 {container}")
        try:
            done = cow.restore_checkpoint(conn, name, "coder-1", "20261203-080000-0001")
        finally:
            sh(clab, f"docker start {container}", warn=True)
    assert done.kept is not None and done.kept.startswith(cow.swap_path(name, "coder-1") + "/kept-")
    assert sh(clab, f"cat {done.kept}/workspace/nested/f; stat -c %a $(dirname {done.kept})").stdout.split() == [
        "inner", "700"]  # fmt: skip


def test_down_keep_data_keeps_the_tier_and_down_leaves_no_mount_unit_image_or_loop_device(clab, fleet):
    name, spec = fleet
    root, image, unit = f"/srv/jackin/{name}", f"/var/lib/jackin/cow/{name}.img", cow.unit_path(name)
    present = f"mountpoint -q {root} && echo mount; [ -f '{unit}' ] && echo unit; [ -f {image} ] && echo image; " \
              f"losetup -a | grep -qF {image} && echo loop; [ -e {root} ] && echo dir; true"  # fmt: skip
    assert sh(clab, present).stdout.split() == ["mount", "unit", "image", "loop", "dir"]  # control: all there
    kept = inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--keep-data")
    assert kept.returncode == 0, kept.stdout + kept.stderr  # its clean check allows the kept tier
    assert sh(clab, present).stdout.split() == ["mount", "unit", "image", "loop", "dir"]
    assert sh(clab, f"cat {root}/coder-1/workspace/keep.txt").stdout == "keep\n"
    done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(clab, present).stdout.split() == []
    assert sh(clab, f"systemctl is-enabled {shlex.quote(cow.unit_name(name))}", warn=True).failed
    assert sh(clab, "[ -e /var/lib/jackin/cow ] && echo cow-dir; true").stdout == ""
