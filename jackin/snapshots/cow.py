"""The copy-on-write checkpoint tier: btrfs snapshots of agent homes on one host, in milliseconds.

With ``snapshots.checkpoints: btrfs`` the fleet dir is a loop-mounted btrfs and every agent
home a subvolume (provisioned by ``jackin/operations/cow.py``). A checkpoint is a read-only
snapshot of the home, taken with the agent frozen for it (one instant); a restore swaps a writable snapshot of
it in for the home with two renames. Layout (all root's; agents reach none of it):

    /var/lib/jackin/cow/<fleet>.img                      the filesystem image (sparse), dir 0700
    /srv/jackin/<fleet>                                  its mount point (systemd unit ``unit_name``)
    /srv/jackin/<fleet>/<instance>                       the home: a subvolume, root:<agent> 0750
    /srv/jackin/<fleet>/.checkpoints/<instance>/<id>     a checkpoint: a read-only subvolume (dirs 0700)
    /srv/jackin/<fleet>/.checkpoints/.swap/<instance>/   a restore's work: ``new`` and ``old`` homes

Root never acts by path inside a workspace: a snapshot, a rename or a delete acts on a
whole subvolume, whose path lies only in directories root owns. A subvolume (unlike a
plain directory) can be renamed across subvolumes, which is what makes the swap atomic.

Limits: a nested subvolume an agent creates in its workspace (btrfs lets any user) is not
in its home's checkpoints (it shows there as an empty directory).

Pure command builders and parsers first (unit-tested), then the Fabric functions the
snapshot API calls with a ``jackin.transport.ssh.connect`` connection.
"""

from __future__ import annotations

import re
import shlex
import time
from typing import TYPE_CHECKING

from invoke.exceptions import CommandTimedOut
from pydantic import BaseModel, ConfigDict

from jackin import hostpaths
from jackin.errors import RemoteCommandError, SpecError
from jackin.facts.cow import QUOTA_FUNCTION, SUBVOLUME_INODE
from jackin.hostpaths import user_name
from jackin.snapshots import freezer
from jackin.spec.values import SLUG

if TYPE_CHECKING:
    from fabric import Connection

CHECKPOINTS = ".checkpoints"
SWAP = ".swap"  # not a slug: never an instance's name
SNAPSHOT_ID = r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$"  # YYYYMMDD-HHMMSS-xxxx (UTC): the snapshot API's ids
REFUSED = 3  # a script's exit code for "refused" (the agent runs): nothing was changed
FREEZE_LIMIT = 120  # seconds after which a checkpoint's freeze is undone by its watchdog, whatever happened
TIMEOUT = 600


class CheckpointError(RemoteCommandError):
    """A checkpoint command failed on a host that answered; the message says what and why."""


class CheckpointRefused(CheckpointError):
    """Refused without changing anything: the agent's container runs (stop it first), or the checkpoint
    holds more than the home's disk quota. Never worked around (no restic restore instead)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- names (pure) ---------------------------------------------------------------------


def _check(kind: str, value: str, pattern: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(pattern, value) or len(value) > 64:
        expected = "YYYYMMDD-HHMMSS-xxxx" if pattern == SNAPSHOT_ID else "lower-case letters, digits and '-'"
        raise SpecError(f"invalid {kind} {value!r}: expected {expected}")
    return value


def fleet_dir(fleet: str) -> str:
    return hostpaths.fleet_dir(_check("fleet name", fleet, SLUG))


def home_path(fleet: str, instance: str) -> str:
    return f"{fleet_dir(fleet)}/{_check('agent instance', instance, SLUG)}"


def image_path(fleet: str) -> str:
    return hostpaths.cow_image(_check("fleet name", fleet, SLUG))


def checkpoint_path(fleet: str, instance: str, snapshot_id: str) -> str:
    _check("snapshot id", snapshot_id, SNAPSHOT_ID)
    return f"{checkpoints_dir(fleet, instance)}/{snapshot_id}"


def checkpoints_dir(fleet: str, instance: str | None = None) -> str:
    """The fleet's checkpoints (root 0700), or one instance's."""
    base = f"{fleet_dir(fleet)}/{CHECKPOINTS}"
    return base if instance is None else f"{base}/{_check('agent instance', instance, SLUG)}"


def swap_path(fleet: str, instance: str) -> str:
    return f"{fleet_dir(fleet)}/{CHECKPOINTS}/{SWAP}/{_check('agent instance', instance, SLUG)}"


def unit_name(fleet: str) -> str:
    """The systemd mount unit of the fleet's filesystem (``systemd-escape -p --suffix=mount``)."""
    return hostpaths.cow_unit(_check("fleet name", fleet, SLUG))


def unit_path(fleet: str) -> str:
    return hostpaths.unit_path(unit_name(fleet))


# --- command builders (pure) ------------------------------------------------------------


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


# A real directory (never a link) that is the root of a btrfs subvolume.
_SUBVOL = (f'subvol() {{ [ -d "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %i -- "$1")" = {SUBVOLUME_INODE} ] && '
           '[ "$(stat -f -c %T -- "$1")" = btrfs ]; }')  # fmt: skip


def _prelude(fleet: str) -> str:
    """Every script's start: strict shell, helpers, and a refusal unless the fleet dir is a btrfs mount."""
    return f"""set -eu
umask 077
F={shlex.quote(fleet_dir(fleet))}
fail() {{ echo "$*" >&2; exit 1; }}
refuse() {{ echo "$*" >&2; exit {REFUSED}; }}
{_SUBVOL}
{{ mountpoint -q "$F" && [ "$(stat -f -c %T -- "$F")" = btrfs ]; }} || fail "$F is not a btrfs mount: \
fleet {fleet} has no checkpoint tier on this host (set snapshots.checkpoints: btrfs, then fleet.up)"
command -v btrfs >/dev/null || fail "btrfs (btrfs-progs) is not installed on this host"
"""


# The home's disk quota (its qgroup's limit, ``resources.disk``) goes with it to the restored copy (a new
# subvolume, with a qgroup of its own); a checkpoint that references more than the limit is refused.
_QUOTA = (
    QUOTA_FUNCTION
    + """
L=; if [ -e "$H" ]; then L=$(quota "$H" | awk '$2 ~ /^[0-9]+$/ { print $2 }'); fi
if [ -n "$L" ]; then
  N=$(quota "$C" | awk '{ print $1 }')
  if [ -n "$N" ] && [ "$N" -gt "$L" ]; then
    refuse "checkpoint $(basename "$C") holds $N bytes and the home's disk quota (resources.disk) is $L; nothing was changed"
  fi
fi"""
)


def _names(fleet: str, instance: str) -> str:
    return f"H={shlex.quote(home_path(fleet, instance))}; X={shlex.quote(swap_path(fleet, instance))}\n"


# A restore stopped between its two renames left the home moved aside: put it back first. A
# restore stopped later left the old home (its swap had finished) or an unused new one: delete them.
_RECOVER = """if [ ! -e "$H" ] && [ ! -L "$H" ] && subvol "$X/old"; then
  mv -T -- "$X/old" "$H"; echo "put back the home an interrupted restore had moved aside" >&2
fi
if subvol "$X/new"; then btrfs subvolume delete "$X/new" >/dev/null; fi
if subvol "$X/old"; then btrfs subvolume delete "$X/old" >/dev/null 2>&1 || mv -T -- "$X/old" "$X/kept-$(date +%s)"; fi
"""


def supported_script(fleet: str, instance: str | None = None) -> str:
    """Prints ``yes`` when the fleet dir is a btrfs mount (and ``instance``'s home a subvolume). Changes nothing."""
    home = f" && subvol {shlex.quote(home_path(fleet, instance))}" if instance else ""
    return (f"F={shlex.quote(fleet_dir(fleet))}\n{_SUBVOL}\n"
            f'mountpoint -q "$F" && subvol "$F" && command -v btrfs >/dev/null{home} '
            "&& echo yes || true\n")  # fmt: skip


def checkpoint_script(fleet: str, instance: str, snapshot_id: str) -> str:
    """A read-only snapshot of the home at its checkpoint path, taken with the agent's container frozen
    (``jackin.snapshots.freezer``: a subvolume snapshotted while it is written is not one instant; the
    freeze lasts milliseconds). Prints ``took_ns=`` (the snapshot alone) and, when it froze the
    container, ``jk-frozen-ns <n>``."""
    target = checkpoint_path(fleet, instance, snapshot_id)
    directory = checkpoints_dir(fleet, instance)
    return (
        _prelude(fleet)
        + _names(fleet, instance)
        + freezer.functions(user_name(fleet, instance), limit=FREEZE_LIMIT)
        + f"""\
subvol "$H" || fail "the home of {instance} ($H) is not a btrfs subvolume: no checkpoint for it (fleet.up makes one; \
after an interrupted restore, restore again)"
C={shlex.quote(target)}
install -d -m 0700 -o root -g root -- {q(checkpoints_dir(fleet), directory)}
if [ -e "$C" ] || [ -L "$C" ]; then fail "checkpoint {snapshot_id} of {instance} exists already"; fi
trap 'thaw' EXIT
trap 'exit 130' INT TERM
trap '' HUP PIPE
freeze || fail "cannot freeze the container of {instance} for its checkpoint"
t0=$(date +%s%N)
btrfs subvolume snapshot -r "$H" "$C" >/dev/null
t1=$(date +%s%N)
thaw
echo "took_ns=$((t1 - t0))"
"""
    )


def list_script(fleet: str, instance: str | None = None) -> str:
    """NUL-terminated ``<instance>/<id>`` of every checkpoint (or ``instance``'s), hex-encoded."""
    base = shlex.quote(checkpoints_dir(fleet))
    where = f"{base}/{shlex.quote(instance)}" if instance else base
    depth = "-mindepth 1 -maxdepth 1" if instance else "-mindepth 2 -maxdepth 2"
    return (_prelude(fleet) + f"[ -d {where} ] || exit 0\n"
            f"find {where} {depth} -type d -inum {SUBVOLUME_INODE} -printf '%P\\0' | od -An -v -tx1\n")  # fmt: skip


def delete_script(fleet: str, instance: str, snapshot_id: str) -> str:
    """Delete one checkpoint; prints ``deleted``, or ``absent`` when there was none."""
    target = shlex.quote(checkpoint_path(fleet, instance, snapshot_id))
    return (
        _prelude(fleet)
        + f"""\
C={target}
if [ ! -e "$C" ] && [ ! -L "$C" ]; then echo absent; exit 0; fi
subvol "$C" || fail "$C is not a subvolume: not a checkpoint, not deleted"
btrfs subvolume delete "$C" >/dev/null
echo deleted
"""
    )


def restore_script(fleet: str, instance: str, snapshot_id: str, *, previous_id: str | None = None) -> str:
    """Put checkpoint ``snapshot_id`` back as ``instance``'s home: a writable snapshot of it beside the
    home (root-only), then two renames (home aside, new home in); the old home is deleted, or kept as
    checkpoint ``previous_id`` (read-only). Refused (exit ``REFUSED``) while the agent's container runs.
    Prints ``took_ns=`` (snapshot and swap)."""
    source = shlex.quote(checkpoint_path(fleet, instance, snapshot_id))
    running = q("docker", "inspect", "--format", "{{.State.Running}}", user_name(fleet, instance))
    keep = ""
    if previous_id is not None:
        kept = shlex.quote(checkpoint_path(fleet, instance, previous_id))
        keep = (f'P={kept}\nif [ -e "$P" ] || [ -L "$P" ]; then fail "checkpoint {previous_id} of {instance} '
                'exists already: not overwritten"; fi\n')  # fmt: skip
    old = ('if [ -n "${P:-}" ]; then mv -T -- "$X/old" "$P"; btrfs property set -ts "$P" ro true\n'
           'elif ! btrfs subvolume delete "$X/old" >/dev/null 2>&1; then\n'
           '  K="$X/kept-$(date +%s)"; mv -T -- "$X/old" "$K"; echo "kept=$K"\n'
           "fi\n")  # fmt: skip
    return (
        _prelude(fleet)
        + _names(fleet, instance)
        + keep
        + f"""\
C={source}
subvol "$C" || fail "checkpoint {snapshot_id} of {instance} not found on this host"
if [ "$({running} 2>/dev/null)" = true ]; then
  refuse "agent {instance} is running (container {user_name(fleet, instance)}): stop it first; nothing was changed"
fi
{_RECOVER}if [ -e "$H" ] || [ -L "$H" ]; then subvol "$H" || fail "the home $H is not a subvolume: not replaced"; fi
{_QUOTA}
t0=$(date +%s%N)
install -d -m 0700 -o root -g root -- {q(checkpoints_dir(fleet), checkpoints_dir(fleet) + "/" + SWAP)} "$X"
btrfs subvolume snapshot "$C" "$X/new" >/dev/null
subvol "$X/new" || fail "the writable copy of checkpoint {snapshot_id} was not made; the home is untouched"
if [ -n "$L" ]; then btrfs qgroup limit "$L" "$X/new" || {{ btrfs subvolume delete "$X/new" >/dev/null 2>&1; \
fail "cannot give the restored home its disk quota ($L bytes); the home is untouched"; }}; fi
trap '' HUP INT TERM PIPE
if [ -e "$H" ]; then mv -T -- "$H" "$X/old"; fi
if ! mv -T -- "$X/new" "$H"; then
  if subvol "$X/old"; then mv -T -- "$X/old" "$H"; fi
  fail "cannot move the restored home into place; the old home is back"
fi
t1=$(date +%s%N)
if subvol "$X/old"; then
{old}fi
echo "took_ns=$((t1 - t0))"
"""
    )


# --- parsers (pure) -------------------------------------------------------------------------


def parse_took(stdout: str) -> float:
    """Milliseconds from a script's ``took_ns=`` line (0.0 when absent)."""
    match = re.search(r"^took_ns=([0-9]{1,19})$", stdout, re.MULTILINE)
    return int(match.group(1)) / 1e6 if match else 0.0


def parse_list(stdout: str, fleet: str, instance: str | None = None) -> list[Checkpoint]:
    """``list_script``'s hex output as checkpoints, sorted; names that are not ``<instance>/<id>`` are dropped."""
    try:
        raw = bytes.fromhex("".join(stdout.split()))
    except ValueError:
        raise CheckpointError("the checkpoint listing does not parse (not hex)") from None
    found = []
    for record in raw.split(b"\0")[:-1]:
        text = record.decode("utf-8", "replace")
        owner, _, snapshot = text.rpartition("/") if instance is None else (instance, "/", text)
        if re.fullmatch(SLUG, owner) and re.fullmatch(SNAPSHOT_ID, snapshot):
            found.append(Checkpoint(fleet=fleet, instance=owner, snapshot_id=snapshot))
    return sorted(found, key=lambda c: (c.instance, c.snapshot_id))


# --- results ----------------------------------------------------------------------------


class Checkpoint(_Model):
    """One checkpoint: a read-only snapshot of ``instance``'s home."""

    fleet: str
    instance: str
    snapshot_id: str

    @property
    def path(self) -> str:
        return checkpoint_path(self.fleet, self.instance, self.snapshot_id)


class CheckpointTaken(_Model):
    checkpoint: Checkpoint
    took_ms: float  # the snapshot on the host
    wall_ms: float  # the whole call, SSH round trip included
    frozen_ms: float | None = None  # how long the agent's container was frozen for it (None: it was not running)


class CheckpointRestored(_Model):
    checkpoint: Checkpoint
    took_ms: float  # the writable snapshot and the swap, on the host
    wall_ms: float
    previous: Checkpoint | None = None  # the old home, kept as this checkpoint (``previous_id``)
    kept: str | None = None  # the old home kept aside (it could not be deleted), or None


# --- on a host (Fabric) -----------------------------------------------------------------


def _run(conn: Connection, script: str, what: str, *, timeout: float = TIMEOUT) -> str:
    """Run ``script`` with ``sh``; its stdout, or CheckpointRefused / CheckpointError with its last words."""
    try:
        result = conn.run("sh -c " + shlex.quote(script), hide=True, warn=True, timeout=timeout)
    except CommandTimedOut:
        raise CheckpointError(f"{what}: no answer within {timeout:.0f}s") from None
    if result.exited == 0:
        return result.stdout
    tail = " ".join(result.stderr.strip().splitlines()[-3:])[:400] or f"exit {result.exited}"
    if result.exited == REFUSED:
        hint = "stop the agent first (snapshot.restore --stop)" if "is running" in tail else None
        raise CheckpointRefused(f"{what} refused: {tail}", hint=hint)
    raise CheckpointError(f"{what} failed: {tail}")


def supported(conn: Connection, fleet: str, instance: str | None = None) -> bool:
    """Whether the host has the checkpoint tier for ``fleet``: its fleet dir is a btrfs mount (and
    ``instance``'s home a subvolume). Changes nothing."""
    out = _run(conn, supported_script(fleet, instance), f"checking the checkpoint tier of fleet {fleet}")
    return out.strip() == "yes"


def checkpoint(conn: Connection, fleet: str, instance: str, snapshot_id: str) -> CheckpointTaken:
    """Take checkpoint ``snapshot_id`` of ``instance``'s home: a read-only snapshot, the agent frozen for it."""
    started = time.monotonic()
    out = _run(conn, checkpoint_script(fleet, instance, snapshot_id), f"checkpoint {snapshot_id} of {instance}")
    frozen_ms, thaw_failed = freezer.parse(out)
    if thaw_failed:
        raise CheckpointError(f"checkpoint {snapshot_id} of {instance}: the agent's container could not be thawed: "
                              f"it is still paused", hint=f"on the host: docker unpause {user_name(fleet, instance)}")  # fmt: skip
    return CheckpointTaken(checkpoint=Checkpoint(fleet=fleet, instance=instance, snapshot_id=snapshot_id),
                           took_ms=parse_took(out), wall_ms=(time.monotonic() - started) * 1000,
                           frozen_ms=frozen_ms)  # fmt: skip


def list_checkpoints(conn: Connection, fleet: str, instance: str | None = None) -> list[Checkpoint]:
    """The fleet's checkpoints on this host (or ``instance``'s), sorted by instance and id."""
    if instance is not None:
        home_path(fleet, instance)  # checks the name
    out = _run(conn, list_script(fleet, instance), f"listing the checkpoints of fleet {fleet}")
    return parse_list(out, fleet, instance)


def delete_checkpoint(conn: Connection, fleet: str, instance: str, snapshot_id: str) -> bool:
    """Delete checkpoint ``snapshot_id`` of ``instance``; False when there was none."""
    out = _run(conn, delete_script(fleet, instance, snapshot_id), f"deleting checkpoint {snapshot_id} of {instance}")
    return out.strip() == "deleted"


def restore_checkpoint(conn: Connection, fleet: str, instance: str, snapshot_id: str, *,
                       previous_id: str | None = None) -> CheckpointRestored:  # fmt: skip
    """Make checkpoint ``snapshot_id`` ``instance``'s home again, atomically (see ``restore_script``).

    Raises CheckpointRefused (nothing changed) while the agent's container runs: the caller stops
    it first (``--stop``) and starts it again after. ``previous_id``: keep the replaced home as that
    checkpoint (an instant undo) instead of deleting it.
    """
    started = time.monotonic()
    script = restore_script(fleet, instance, snapshot_id, previous_id=previous_id)
    out = _run(conn, script, f"restoring checkpoint {snapshot_id} of {instance}")
    kept = re.search(r"^kept=(.+)$", out, re.MULTILINE)
    previous = Checkpoint(fleet=fleet, instance=instance, snapshot_id=previous_id) if previous_id else None
    return CheckpointRestored(checkpoint=Checkpoint(fleet=fleet, instance=instance, snapshot_id=snapshot_id),
                              took_ms=parse_took(out), wall_ms=(time.monotonic() - started) * 1000,
                              previous=previous, kept=kept.group(1) if kept else None)  # fmt: skip
