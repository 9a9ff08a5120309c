"""A host's capacity for agents, as placement (jackin/plan/placement.py) weighs it: read in fleet.up's and
fleet.plan's state read (``##capacity``), pure (no pyinfra).

    cpus    ``nproc`` (the CPUs the host lets its processes use), capped by the CPU quota of PID 1's cgroup
            or any of its ancestors (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``):
            a container (a lab host) has its ``--cpus`` there
    memory  ``MemTotal``, capped by the memory limit of PID 1's cgroup or any of its ancestors (v2
            ``memory.max``, v1 ``memory.limit_in_bytes``): a container's ``--memory``
    disk    the space free (to root) on the filesystem of the fleets' root, ``/srv/jackin`` (or its nearest
            existing parent, before the first fleet): where the agents' homes and workspaces go

Only files of the kernel's and paths root chose are read: no name an agent chose.
"""

from __future__ import annotations

import re
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from jackin.hostpaths import ROOT

# Each level of PID 1's cgroup, from its own up to the root, for each hierarchy (v2: "0::PATH"; v1 memory and
# cpu): every limit file found, one "name=value" line each. The lowest limit is the host's.
SECTION = (
    "echo '##capacity'; echo \"nproc=$(nproc 2>/dev/null)\"; sed -n 's/^MemTotal: *\\([0-9]*\\) kB$/memtotal=\\1/p' "
    "/proc/meminfo; while IFS=: read -r _ c p; do case $c in "
    "'') d=/sys/fs/cgroup; f='memory.max cpu.max';; memory) d=/sys/fs/cgroup/memory; f=memory.limit_in_bytes;; "
    "cpu|cpu,cpuacct|cpuacct,cpu) d=/sys/fs/cgroup/cpu; f='cpu.cfs_quota_us cpu.cfs_period_us';; *) continue;; esac; "
    'while :; do for x in $f; do [ -r "$d$p/$x" ] && echo "$x=$(cat "$d$p/$x")"; done; '
    '{ [ -z "$p" ] || [ "$p" = / ]; } && break; p=${p%/*}; done; done < /proc/1/cgroup 2>/dev/null; '
    f'r={ROOT}; while [ ! -d "$r" ]; do r=${{r%/*}}; [ -n "$r" ] || r=/; done; '
    'df -P -B1 "$r" 2>/dev/null | awk \'NR == 2 {print "free=" $4}\''
)


_N = TypeVar("_N", int, float)


class Capacity(BaseModel):
    """What a host has for agents: CPUs, memory (bytes) and free disk (bytes) of the fleets' root."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float
    memory: int
    disk: int


_DIGITS = re.compile(r"[0-9]+")


def _digits(value: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes "²", which ``int`` refuses)."""
    return bool(_DIGITS.fullmatch(value))


def parse(lines: list[str]) -> Capacity | None:
    """``##capacity``'s lines as a Capacity; None when a figure is missing (an unusual host: placement then
    says it could not weigh it)."""
    cpus: float | None = None
    memory: int | None = None
    disk: int | None = None
    quota: int | None = None
    for line in lines:
        key, _, value = line.strip().partition("=")
        if key == "nproc" and _digits(value) and int(value) > 0:
            cpus = float(value)
        elif key == "memtotal" and _digits(value):
            memory = _lowest(memory, int(value) * 1024)
        elif key in ("memory.max", "memory.limit_in_bytes") and _digits(value):
            memory = _lowest(memory, int(value))
        elif key == "cpu.max":  # "max 100000" or "QUOTA PERIOD"
            words = value.split()
            if len(words) == 2 and _digits(words[0]) and _digits(words[1]) and int(words[1]) > 0:
                cpus = _lowest(cpus, int(words[0]) / int(words[1]))
        elif key == "cpu.cfs_quota_us":  # -1: none; its period follows on the next line
            quota = int(value) if _digits(value) else None
        elif key == "cpu.cfs_period_us" and quota is not None and _digits(value) and int(value) > 0:
            cpus = _lowest(cpus, quota / int(value))
            quota = None
        elif key == "free" and _digits(value):
            disk = int(value)
    if cpus is None or memory is None or disk is None:
        return None
    return Capacity(cpus=round(cpus, 3), memory=memory, disk=disk)


def _lowest(current: _N | None, found: _N) -> _N:
    return found if current is None else min(current, found)
