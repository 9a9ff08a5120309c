"""The checkpoint tier's provisioning as facts-to-commands tables: a ``HostState`` in, the exact
ordered commands out, nothing when all is in place; its teardown from what is there."""

from __future__ import annotations

import subprocess

import pytest
from jackin.operations.files import Refused as OperationError

from jackin.facts.fleet import HostState, PathInfo
from jackin.operations import cow as ops
from jackin.operations.fleet import teardown_commands
from jackin.operations.script import Upload
from jackin.plan.fleet import build
from jackin.facts.cow import CowState
from jackin.operations.cow import unit_hash, unit_text
from jackin.spec import parse_inventory
from jackin.spec.models import SnapshotPolicy

INVENTORY = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
  snapshots: {checkpoints: btrfs, checkpoint_size: 2g}
"""
SPEC = parse_inventory(INVENTORY, "f.yaml").fleet
PLAN = build(SPEC, {"coder-1": 60000, "coder-2": 60001})
HOMES = ["/srv/jackin/demo/coder-1", "/srv/jackin/demo/coder-2"]
IMG = "/var/lib/jackin/cow/demo.img"
UNIT = "/etc/systemd/system/srv-jackin-demo.mount"
FORMAT = [
    "install -d -m 0700 -o root -g root /var/lib/jackin/cow", f"rm -f {IMG}.jackin-new",
    f"truncate -s {2 * 1024**3} {IMG}.jackin-new", f"chmod 0600 {IMG}.jackin-new",
    f"mkfs.btrfs -q -L jackin-demo {IMG}.jackin-new >/dev/null", f"mv -T {IMG}.jackin-new {IMG}",
]  # fmt: skip
WRITE_UNIT = [f"upload {UNIT} 0644", "test -d /etc/systemd/system || install -d -m 0755 /etc/systemd/system",
              f"install -m 0644 -o root -g root -T STAGED {UNIT}.jackin-new", f"mv -f -T {UNIT}.jackin-new {UNIT}"]
MOUNT = [
    "[ -z \"$(ls -A /srv/jackin/demo)\" ] || { echo '/srv/jackin/demo is not empty: not mounting the fleet'\"'\"'s "
    "btrfs over it' >&2; exit 1; }",
    "systemctl start srv-jackin-demo.mount", "mountpoint -q /srv/jackin/demo",
    "chown 0:0 /srv/jackin/demo", "chmod 0711 /srv/jackin/demo",
]  # fmt: skip


LIMIT = 2 * 1024**3  # each home's default quota: DEFAULT_DISK, never more than the 2g filesystem
QUOTA_ON = ["btrfs quota enable /srv/jackin/demo", "btrfs quota rescan -w /srv/jackin/demo >/dev/null"]


def limit(path: str, size: int = LIMIT) -> str:
    return f"btrfs qgroup limit {size} {path}"


def home(path: str, instance: str, gid: int) -> list[str]:
    return [
        f"if [ -e {path} ] || [ -L {path} ]; then [ ! -L {path} ] && [ \"$(stat -c %i -- {path})\" = 256 ] || "
        f"{{ echo 'the home of {instance} ({path}) exists and is not a btrfs subvolume' >&2; exit 1; }}; "
        f"else btrfs subvolume create {path} >/dev/null; fi",
        f"chown -h 0:{gid} -- {path}", f"chmod 00750 -- {path}",
    ]  # fmt: skip


def ready(**change: object) -> HostState:
    """A host where the tier is exactly as planned (changed by ``change``); the state read lists the
    homes that are on the fleet dir: the subvolumes when mounted, none on the bare mount point."""
    cow = CowState(image_size=2 * 1024**3, unit_hash=unit_hash("demo"), enabled=True, mounted="btrfs", subvolumes=HOMES,
                   quota=True, disk={"coder-1": (16384, LIMIT), "coder-2": (16384, LIMIT)})  # fmt: skip
    cow = cow.model_copy(update=change)
    homes = cow.subvolumes if cow.mounted else []
    paths = {"/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0),
             **{h: PathInfo(mode="0750", uid=0, gid=60000 + n) for n, h in enumerate(homes)}}  # fmt: skip
    return HostState(cow=cow, paths=paths)


def shell(commands: list) -> list[str]:
    """The commands with the unit's SFTP upload shown as one line (its content checked apart)."""
    out = []
    for c in commands:
        if isinstance(c, Upload):
            out.append(f"upload {c.target} {c.mode}")
        elif c.startswith("install -m 0644 -o root -g root -T /run/jackin-upload/"):
            out.append(" ".join(["install -m 0644 -o root -g root -T STAGED", c.rsplit(" ", 1)[1]]))
        elif "/run/jackin-upload" not in c:
            out.append(c)
    return out


def test_first_up_formats_mounts_and_makes_each_home_a_subvolume() -> None:
    commands = ops.filesystem_commands(PLAN, HostState(paths={"/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0)}))
    assert shell(commands) == [
        *FORMAT, *WRITE_UNIT, "systemctl daemon-reload",
        "systemctl enable --quiet srv-jackin-demo.mount", *MOUNT,
        *home(HOMES[0], "coder-1", 60000), *home(HOMES[1], "coder-2", 60001),
        *QUOTA_ON, limit(HOMES[0]), limit(HOMES[1]),
    ]  # fmt: skip
    upload = next(c for c in commands if isinstance(c, Upload))
    assert upload.data == unit_text("demo").encode()


def test_a_host_with_the_tier_in_place_gets_nothing() -> None:
    assert ops.filesystem_commands(PLAN, ready()) == []


def test_without_the_option_nothing_changes_even_where_the_tier_exists() -> None:
    plain = build(SPEC.model_copy(update={"snapshots": SnapshotPolicy()}), {"coder-1": 60000, "coder-2": 60001})
    assert plain.checkpoints is None
    assert ops.filesystem_commands(plain, HostState()) == []
    assert ops.filesystem_commands(plain, ready(mounted=None)) == []


def test_after_a_boot_whose_mount_failed_it_is_mounted_again() -> None:
    assert ops.filesystem_commands(PLAN, ready(mounted=None, subvolumes=[])) == [*MOUNT, *home(HOMES[0], "coder-1", 60000),
                                                                               *home(HOMES[1], "coder-2", 60001)]  # fmt: skip


def test_a_changed_unit_is_rewritten_and_a_disabled_one_enabled() -> None:
    assert shell(ops.filesystem_commands(PLAN, ready(unit_hash="0" * 64, enabled=False))) == [
        *WRITE_UNIT, "systemctl daemon-reload", "systemctl enable --quiet srv-jackin-demo.mount",
    ]  # fmt: skip


def test_a_bigger_size_grows_the_filesystem_and_a_smaller_one_never_shrinks_it() -> None:
    assert ops.filesystem_commands(PLAN, ready(image_size=1024**3)) == [
        f"truncate -s {2 * 1024**3} {IMG}",
        'losetup -c "$(findmnt -n -o SOURCE --target /srv/jackin/demo)"',
        "btrfs filesystem resize max /srv/jackin/demo >/dev/null",
    ]  # fmt: skip
    assert ops.filesystem_commands(PLAN, ready(image_size=4 * 1024**3)) == []


def test_a_new_agent_gets_a_subvolume_home() -> None:
    assert ops.filesystem_commands(PLAN, ready(subvolumes=HOMES[:1])) == home(HOMES[1], "coder-2", 60001)


def test_never_mounts_over_homes_on_the_hosts_own_filesystem() -> None:
    state = HostState(paths={"/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0),
                             HOMES[0]: PathInfo(mode="0750", uid=0, gid=60000),
                             HOMES[0] + "/workspace": PathInfo(mode="0700", uid=60000, gid=60000)})  # fmt: skip
    with pytest.raises(OperationError, match=r"/srv/jackin/demo already holds coder-1 on the host's own filesystem; "
                                             r"mounting the btrfs there would hide them\. Homes become subvolumes"):
        ops.filesystem_commands(PLAN, state)


def test_refuses_plain_homes_on_the_btrfs_and_a_foreign_mount() -> None:
    state = ready(subvolumes=HOMES[1:]).model_copy(update={"paths": ready().paths})  # coder-1's home: a plain dir
    with pytest.raises(OperationError, match=r"the home\(s\) of coder-1 are plain directories, not subvolumes"):
        ops.filesystem_commands(PLAN, state)
    with pytest.raises(OperationError, match="/srv/jackin/demo is a mount of ext4, not the fleet's btrfs"):
        ops.filesystem_commands(PLAN, ready(mounted="ext4"))
    with pytest.raises(OperationError, match="/srv/jackin/demo is mounted but /var/lib/jackin/cow/demo.img is missing"):
        ops.filesystem_commands(PLAN, ready(image_size=None))


TEARDOWN = [
    "systemctl disable --quiet srv-jackin-demo.mount",
    "systemctl stop srv-jackin-demo.mount 2>/dev/null || umount /srv/jackin/demo",
    "if mountpoint -q /srv/jackin/demo; then echo '/srv/jackin/demo is still mounted: not removing the fleet'\"'\"'s "
    "btrfs image' >&2; exit 1; fi",
    f"rm -f {UNIT}", "systemctl daemon-reload",
    f"rm -f {IMG}", "rmdir /var/lib/jackin/cow 2>/dev/null || true",
]  # fmt: skip


def test_teardown_removes_what_is_there_whatever_the_plan_says() -> None:
    assert ops.teardown_commands("demo", "/srv/jackin/demo", ready().cow) == TEARDOWN
    assert ops.teardown_commands("demo", "/srv/jackin/demo", CowState()) == []
    assert ops.teardown_commands("demo", "/srv/jackin/demo", CowState(image_size=1)) == TEARDOWN[-2:]


def test_fleet_teardown_unmounts_before_removing_the_fleet_dir_and_keep_data_keeps_it() -> None:
    commands = teardown_commands(PLAN, ready(), keep_data=False)
    assert commands[: len(TEARDOWN)] == TEARDOWN
    assert commands[len(TEARDOWN)] == "rm -rf --one-file-system /srv/jackin/demo"
    assert teardown_commands(PLAN, ready(), keep_data=True) == []


@pytest.mark.parametrize("state", [HostState(), ready(mounted=None, image_size=1)], ids=["fresh", "unmounted"])
def test_the_commands_are_posix_sh(state: HostState) -> None:
    script = "\n".join(c for c in ops.filesystem_commands(PLAN, state) if isinstance(c, str))
    script += "\n" + "\n".join(ops.teardown_commands("demo", "/srv/jackin/demo", ready().cow))
    done = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, timeout=10)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_spec_option_and_its_size() -> None:
    assert PLAN.checkpoints is not None and PLAN.checkpoints.size == 2 * 1024**3
    assert SnapshotPolicy().checkpoints == "off" and SnapshotPolicy().checkpoint_size == 10 * 1024**3
    assert build(parse_inventory(INVENTORY.replace("btrfs, checkpoint_size: 2g", "off"), "f.yaml").fleet,
                 {"coder-1": 60000, "coder-2": 60001}).checkpoints is None  # fmt: skip


@pytest.mark.parametrize(("value", "problem"), [
    ("checkpoints: zfs", "f.yaml:7: fleet.snapshots.checkpoints: expected one of 'off' or 'btrfs', got 'zfs'"),
    ("checkpoints: true", "f.yaml:7: fleet.snapshots.checkpoints: expected one of 'off' or 'btrfs', got True"),
    ("checkpoint_size: 100m", "f.yaml:7: fleet.snapshots.checkpoint_size: expected at least 256m (the smallest btrfs "
                              "worth having), e.g. 10g, got '100m'"),
    ("checkpoint_size: lots", "f.yaml:7: fleet.snapshots.checkpoint_size: expected a size such as 512m or 2g, got 'lots'"),
])  # fmt: skip
def test_the_spec_option_refuses_bad_values_with_the_line(value: str, problem: str) -> None:
    from jackin.errors import SpecError

    text = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n  snapshots:\n    " + value + "\n"
    with pytest.raises(SpecError) as caught:
        parse_inventory(text, "f.yaml")
    assert caught.value.problems == [problem]


def test_the_clean_check_sees_the_tier_and_keep_data_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """fleet.down's proof: a mount, unit or image of the fleet left on a host makes it dirty (with
    --keep-data they hold the kept homes, so they may stay); a host without them is clean."""
    from pathlib import Path

    from jackin.lifecycle import down as lifecycle
    from jackin.transport.ssh import SshTarget

    target = SshTarget(name="web-1", address="192.0.2.10", known_hosts=Path("/nonexistent"))
    plan = PLAN.model_copy(update={"agents": []})
    for lines, keep, clean, left in [
        (["##cow", "image 5", "mounted btrfs"], False, False, {"cow": ["image", "mount (btrfs)"]}),
        (["##cow", "image 5", "mounted btrfs"], True, True, {}),
        (["##cow"], False, True, {}),
    ]:
        monkeypatch.setattr(lifecycle, "gather", lambda hosts, command, parse, _l=lines, **kw: {
            h.name: parse("\n".join(_l)) for h in hosts})  # fmt: skip
        [check] = lifecycle.clean_check(plan, [target], keep_data=keep)
        assert (check.clean, check.leftovers) == (clean, left)
