"""The checkpoint tier's part of the state read (``##cow``, ``##cowsubvols``, ``##cowquota``): its image,
mount unit, mount, subvolumes and each home's disk quota on a host (pure). What the tier is: jackin/snapshots/cow.py; how it is provisioned:
jackin/operations/cow.py; its paths: jackin/hostpaths.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from jackin.hostpaths import cow_image, cow_unit, fleet_dir, unit_path
from jackin.spec.values import SLUG

SUBVOLUME_INODE = 256  # the root directory of every btrfs subvolume


class CowState(BaseModel):
    """The fleet's checkpoint filesystem on a host, as the state read found it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_size: int | None = None  # bytes (apparent size); None: no image
    unit_hash: str | None = None  # sha256 of the mount unit file; None: no unit
    enabled: bool = False  # the unit is enabled (mounted at boot)
    mounted: str | None = None  # the filesystem type mounted at the fleet dir; None: not a mount point
    subvolumes: list[str] = Field(default_factory=list)  # fleet-dir entries that are subvolumes (full paths)
    quota: bool = False  # the filesystem's qgroups are on (``btrfs quota enable``)
    # Each home subvolume's qgroup, by instance: (bytes it references, its limit or None); read only with quota.
    disk: dict[str, tuple[int, int | None]] = Field(default_factory=dict)

    @property
    def leftovers(self) -> list[str]:
        """What of the tier is on the host (the clean check: nothing after fleet.down)."""
        found = ["image"] if self.image_size is not None else []
        found += ["mount unit"] if self.unit_hash is not None or self.enabled else []
        return found + ([f"mount ({self.mounted})"] if self.mounted else [])


def state_section(fleet: str, *, systemd: bool = True) -> str:
    """Shell lines printing the ``##cow`` section (and ``##cowsubvols``, hex as ``##paths``) of the state read.
    A name that is no fleet's (fleet.gc reads what it finds on hosts) cannot have the tier: an empty section.
    ``systemd=False``: without the unit's ``enabled`` (``jackin.facts.state`` reads it in its one ``systemctl show``)."""
    if not re.fullmatch(SLUG, fleet) or len(fleet) > 64:
        return "echo '##cow'"
    img, unit, mnt = (shlex.quote(p) for p in (cow_image(fleet), unit_path(cow_unit(fleet)), fleet_dir(fleet)))
    name = shlex.quote(cow_unit(fleet))
    return f"""echo '##cow'; [ -f {img} ] && echo "image $(stat -c %s {img})"
[ -f {unit} ] && echo "unit $(sha256sum < {unit} | cut -c1-64)"
{f'[ "$(systemctl is-enabled {name} 2>/dev/null)" = enabled ] && echo enabled' if systemd else ":"}
if mountpoint -q {mnt} 2>/dev/null; then echo "mounted $(stat -f -c %T {mnt})"; fi
if [ "$(stat -f -c %T {mnt} 2>/dev/null)" = btrfs ]; then echo '##cowsubvols'; \
find {mnt} -mindepth 1 -maxdepth 1 -type d -inum {SUBVOLUME_INODE} -printf '%p\\0' | od -An -v -tx1
{quota_lines(mnt)}; fi"""


# A shell function: ``quota PATH`` prints the bytes the btrfs subvolume at PATH references and its qgroup's
# limit (``none`` when it has none); nothing where PATH is no subvolume with qgroups. Read by its path (``-F``):
# only that subvolume's own qgroup. The state read, the restores' room checks and the checkpoint restore use it.
QUOTA_FUNCTION = ("quota() { command -v btrfs >/dev/null 2>&1 && btrfs qgroup show --raw -re -F -- \"$1\" "
                  "2>/dev/null | awk '$1 ~ /^0\\// { print $2, $4; exit }'; }")  # fmt: skip


def quota_lines(mnt: str) -> str:
    """Shell printing ``##cowquota``, then ``on`` when the btrfs at ``mnt`` (quoted) has qgroups, and one
    ``<instance> <referenced> <limit|none>`` per home subvolume. The names are the fleet dir's entries,
    which only root makes (0711 root); each home's qgroup is read by its path (``-F``), so nothing an agent
    names (a subvolume it made in its workspace) can stand in for a home's line."""
    return f"""echo '##cowquota'; if btrfs qgroup show --raw -F -- {mnt} >/dev/null 2>&1; then echo on; {QUOTA_FUNCTION}; \
for h in $(find {mnt} -mindepth 1 -maxdepth 1 -type d -inum {SUBVOLUME_INODE} -printf '%f\\n' | grep -E '^[a-z0-9-]+$'); do \
q=$(quota {mnt}/"$h"); [ -z "$q" ] || echo "$h $q"; done; fi"""


def parse_state(cow: Sequence[str], subvolumes: Sequence[str], quota: Sequence[str] = ()) -> CowState:
    """The ``##cow``, ``##cowsubvols`` and ``##cowquota`` lines; a malformed line is dropped, never acted on."""
    data: dict[str, object] = {}
    disk: dict[str, tuple[int, int | None]] = {}
    for line in quota:
        fields = line.split()
        if fields == ["on"]:
            data["quota"] = True
        elif (len(fields) == 3 and re.fullmatch(SLUG, fields[0]) and fields[1].isdigit()
              and (fields[2].isdigit() or fields[2] == "none")):  # fmt: skip
            disk[fields[0]] = (int(fields[1]), int(fields[2]) if fields[2].isdigit() else None)
    if data.get("quota"):
        data["disk"] = disk
    for line in cow:
        key, _, value = line.strip().partition(" ")
        if key == "image" and value.isdigit():
            data["image_size"] = int(value)
        elif key == "unit" and re.fullmatch(r"[0-9a-f]{64}", value):
            data["unit_hash"] = value
        elif key == "enabled" and not value:
            data["enabled"] = True
        elif key == "mounted" and re.fullmatch(r"[a-z0-9_]{1,32}", value):
            data["mounted"] = value
    try:
        raw = bytes.fromhex("".join(subvolumes))
    except ValueError:
        raw = b""
    names = [r.decode("utf-8", "backslashreplace") for r in raw.split(b"\0")[:-1]]
    return CowState(**data, subvolumes=sorted(names))
