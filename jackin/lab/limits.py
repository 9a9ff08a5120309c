"""Kernel limits the lab runs into on the machine it runs on.

Every booted lab host's systemd (and its services) holds about 8 inotify
instances, all counted against root's ``fs.inotify.max_user_instances`` (128
by default: about 15 hosts; hosts past it fail to boot). ``lab.up`` raises the
limit when it runs as root (only ever upward, and logged), or fails saying
exactly what to run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from jackin.errors import LabError

Log = Callable[[str], None]
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_HOST = 8
INOTIFY_HEADROOM = 64


def inotify_in_use(proc: Path = Path("/proc")) -> int:
    """inotify instances open on this machine (every user's: an upper bound for root's)."""
    used = 0
    for fd in proc.glob("[0-9]*/fd/*"):
        try:
            used += os.readlink(fd) == "anon_inode:inotify"
        except OSError:
            continue  # the process or descriptor went away meanwhile
    return used


def inotify_needed(used: int, limit: int, new_hosts: int) -> int | None:
    """The limit that ``new_hosts`` more lab hosts need, or None when ``limit`` suffices."""
    need = used + INOTIFY_PER_HOST * new_hosts + INOTIFY_HEADROOM
    return need if new_hosts > 0 and need > limit else None


def ensure_inotify(new_hosts: int, log: Log, *, limit_file: Path = INOTIFY_LIMIT, proc: Path = Path("/proc")) -> None:
    """Make room for ``new_hosts`` booting lab hosts: raise root's inotify limit (only ever
    upward, logged) when running as root, or fail saying exactly what to run."""
    if new_hosts <= 0:
        return
    try:
        limit = int(limit_file.read_text())
    except (OSError, ValueError):
        return  # no such knob here: nothing to check
    want = inotify_needed(inotify_in_use(proc), limit, new_hosts)
    if want is None:
        return
    problem = f"{new_hosts} more lab host(s) need about {INOTIFY_PER_HOST * new_hosts} inotify instances"
    if os.geteuid() == 0:
        try:
            current = int(limit_file.read_text())  # another run may have raised it meanwhile
            if current < want:
                limit_file.write_text(f"{want}\n")
                log(f"raised fs.inotify.max_user_instances from {current} to {want}: {problem}")
            return
        except (OSError, ValueError) as error:
            reason = f"could not raise fs.inotify.max_user_instances ({error})"
    else:
        reason = "only root can raise fs.inotify.max_user_instances"
    raise LabError(f"{problem}, beyond root's limit of {limit}: {reason}",
                   hint=f"run as root: sysctl -w fs.inotify.max_user_instances={want}")  # fmt: skip
