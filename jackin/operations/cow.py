"""Commands for the checkpoint tier: the fleet dir as a loop-mounted btrfs, homes as subvolumes.

With ``snapshots.checkpoints: btrfs`` (``FleetPlan.checkpoints``), before any home exists:
a sparse image ``/var/lib/jackin/cow/<fleet>.img`` formatted once, a systemd mount unit
that mounts it at ``/srv/jackin/<fleet>`` now and at every boot (before Docker starts),
and each agent home created as a subvolume (root:<agent> 0750, as agent_paths makes it),
so ``jackin.snapshots.cow`` can checkpoint it. A second run changes nothing. Teardown
(``teardown_commands``) reads what is there, not the plan, so a fleet whose spec has
since turned the tier off, or one ``fleet.gc`` collects, loses it too.

The command builders are plain functions of (plan, state), tested without a host.
"""

from __future__ import annotations

import hashlib
import shlex

from jackin import hostpaths
from jackin.facts.cow import SUBVOLUME_INODE, CowState
from jackin.facts.state import HostState
from jackin.hostpaths import COW_DIR, fleet_dir
from jackin.hostpaths import cow_image as image_path
from jackin.hostpaths import cow_unit as unit_name
from jackin.operations.agent_paths import HOME_MODE
from jackin.operations.files import Command, Refused, write_files
from jackin.plan.fleet import FleetPlan


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def unit_path(fleet: str) -> str:
    return hostpaths.unit_path(unit_name(fleet))


def unit_text(fleet: str) -> str:
    """The mount unit: the image loop-mounted at the fleet dir at every boot, before Docker starts.

    Docker is only ordered after it (``Before=``), not made to need it: stopping the mount
    (fleet.down) must not stop Docker and every other fleet's agents. If the mount fails at
    boot, the agents' containers do not start on the bare mount point: their workspaces are
    bind mounts (``--mount type=bind``), which Docker refuses when the source is missing.
    """
    return f"""\
# Written by jackin for fleet {fleet}: the checkpoint tier's btrfs (its agent homes are subvolumes).
# fleet.down removes it with the image.
[Unit]
Description=jackin fleet {fleet}: agent homes on a loop-mounted btrfs
RequiresMountsFor={COW_DIR}
Before=docker.service

[Mount]
What={image_path(fleet)}
Where={fleet_dir(fleet)}
Type=btrfs
Options=loop,nodev,nosuid

[Install]
WantedBy=local-fs.target
"""


def unit_hash(fleet: str) -> str:
    return hashlib.sha256(unit_text(fleet).encode()).hexdigest()


def _refusal(plan: FleetPlan, state: HostState) -> str | None:
    """Why the tier cannot be put in place here (None: it can). Never mount over existing homes:
    it would hide their data (and running agents would keep writing to the hidden copies)."""
    cow, root = state.cow, plan.fleet_dir
    if cow.mounted not in (None, "btrfs"):
        return f"{root} is a mount of {cow.mounted}, not the fleet's btrfs"
    entries = sorted(p for p in state.paths if p.startswith(root + "/") and p.count("/") == root.count("/") + 1)
    if cow.mounted is None and entries:
        return (f"{root} already holds {', '.join(e.rsplit('/', 1)[1] for e in entries)} on the host's own filesystem; "
                "mounting the btrfs there would hide them")  # fmt: skip
    if cow.mounted and cow.image_size is None:
        return (f"{root} is mounted but {image_path(plan.fleet)} is missing: a new image would replace it at the "
                "next boot; find out what removed it")  # fmt: skip
    plain = [a.instance for a in plan.agents if a.home in state.paths and a.home not in cow.subvolumes]
    if cow.mounted and plain:
        return f"the home(s) of {', '.join(plain)} are plain directories, not subvolumes"
    return None


def filesystem_commands(plan: FleetPlan, state: HostState) -> list[Command]:
    """Commands that bring the fleet's checkpoint filesystem to the plan; none when it is so.

    Raises Refused when it cannot be done without hiding or converting existing homes.
    """
    if plan.checkpoints is None:
        return []  # without the option nothing changes (an existing tier stays until fleet.down)
    problem = _refusal(plan, state)
    if problem is not None:
        raise Refused(f"snapshots.checkpoints: btrfs for fleet {plan.fleet}: {problem}. Homes become "
                             "subvolumes only when they are created: snapshot the agents, fleet.down, fleet.up, "
                             "then restore (or set checkpoints: off)")  # fmt: skip
    cow, size = state.cow, str(plan.checkpoints.size)
    image, root, unit = image_path(plan.fleet), plan.fleet_dir, unit_name(plan.fleet)
    commands: list[Command] = []
    if cow.image_size is None:  # formatted under a temporary name: an image that exists is a filesystem
        new = image + ".jackin-new"
        commands += [q("install", "-d", "-m", "0700", "-o", "root", "-g", "root", COW_DIR), q("rm", "-f", new),
                     q("truncate", "-s", size, new), q("chmod", "0600", new),
                     q("mkfs.btrfs", "-q", "-L", f"jackin-{plan.fleet}", new) + " >/dev/null",
                     q("mv", "-T", new, image)]  # fmt: skip
    if cow.unit_hash != unit_hash(plan.fleet):
        commands += write_files({unit_path(plan.fleet): unit_text(plan.fleet)}, modes={unit_path(plan.fleet): "0644"})
        commands.append("systemctl daemon-reload")
    if not cow.enabled:
        commands.append(q("systemctl", "enable", "--quiet", unit))
    if cow.mounted is None:
        busy = f"{root} is not empty: not mounting the fleet's btrfs over it"
        commands += [f'[ -z "$(ls -A {shlex.quote(root)})" ] || {{ echo {shlex.quote(busy)} >&2; exit 1; }}',
                     q("systemctl", "start", unit), q("mountpoint", "-q", root),
                     q("chown", "0:0", root), q("chmod", "0711", root)]  # fmt: skip
    if cow.image_size is not None and cow.image_size < plan.checkpoints.size:  # grown, never shrunk
        commands += [q("truncate", "-s", size, image),
                     f"losetup -c \"$(findmnt -n -o SOURCE --target {shlex.quote(root)})\"",
                     q("btrfs", "filesystem", "resize", "max", root) + " >/dev/null"]  # fmt: skip
    for agent in plan.agents:
        if agent.home not in cow.subvolumes:
            commands += _home(agent.home, agent.instance, agent.uid)
    return commands + quota_commands(plan, cow)


def quota_commands(plan: FleetPlan, cow: CowState) -> list[Command]:
    """Each home's disk quota (``AgentPlan.disk``) as the limit of its subvolume's qgroup: the
    filesystem's qgroups turned on once (a rescan counts what is already there), then a limit set
    wherever the state read found another (or none). A home over its new limit keeps its files; its
    agent's next write that needs space fails (EDQUOT) until it frees some."""
    quotas = [a for a in plan.agents if a.disk is not None]
    if not quotas:
        return []
    root = plan.fleet_dir
    commands: list[Command] = []
    if not cow.quota:
        commands += [q("btrfs", "quota", "enable", root), q("btrfs", "quota", "rescan", "-w", root) + " >/dev/null"]
    for agent in quotas:
        if not cow.quota or cow.disk.get(agent.instance, (0, None))[1] != agent.disk:
            commands.append(q("btrfs", "qgroup", "limit", str(agent.disk), agent.home))
    return commands


def _home(home: str, instance: str, gid: int) -> list[str]:
    """The home as a subvolume, root:``gid`` 0750 (agent_paths' home); an existing non-subvolume is refused."""
    p = shlex.quote(home)
    wrong = f"the home of {instance} ({home}) exists and is not a btrfs subvolume"
    return [
        f'if [ -e {p} ] || [ -L {p} ]; then [ ! -L {p} ] && [ "$(stat -c %i -- {p})" = {SUBVOLUME_INODE} ] || '
        f"{{ echo {shlex.quote(wrong)} >&2; exit 1; }}; else btrfs subvolume create {p} >/dev/null; fi",
        q("chown", "-h", f"0:{gid}", "--", home),
        q("chmod", "0" + HOME_MODE, "--", home),
    ]


def teardown_commands(fleet: str, root: str, cow: CowState) -> list[str]:
    """Remove the fleet's checkpoint filesystem: unmount (checkpoints and homes go with it), remove
    the unit and the image. From what the state read found, whatever the plan says. Run after the
    agents' containers are gone (a mount they use would be busy) and before the fleet dir is removed."""
    unit = unit_name(fleet)
    commands: list[str] = []
    if cow.enabled:
        commands.append(q("systemctl", "disable", "--quiet", unit))
    if cow.mounted:
        commands.append(f"systemctl stop {shlex.quote(unit)} 2>/dev/null || umount {shlex.quote(root)}")
        held = f"{root} is still mounted: not removing the fleet's btrfs image"
        commands.append(f"if mountpoint -q {shlex.quote(root)}; then echo {shlex.quote(held)} >&2; exit 1; fi")
    if cow.unit_hash is not None:
        commands += [q("rm", "-f", unit_path(fleet)), "systemctl daemon-reload"]
    if cow.image_size is not None:
        commands += [q("rm", "-f", image_path(fleet)), f"rmdir {shlex.quote(COW_DIR)} 2>/dev/null || true"]
    return commands
