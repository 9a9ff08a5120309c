"""Freezing an agent's container on its host for one instant (pure shell builders, no I/O).

``docker pause`` puts the container's processes in the cgroup freezer: every one of them stops
between system calls, so its files are exactly as its last completed calls left them. That is the
instant a snapshot takes, on both tiers: restic reads the frozen home (the restic-only tier), or a
btrfs checkpoint is taken while it is frozen (a snapshot of a subvolume being written is not one
instant: a rename made during the snapshot can land without the data written before it).

The shell below defines ``freeze`` and ``thaw`` for a script (``FC``: the container).
``freeze`` pauses only a container that runs and is not paused already (a container paused by
someone else is left as it is); it starts a watchdog in a session of its own that thaws after
``limit`` seconds even if the script is killed outright. ``thaw`` unpauses (once), prints
``jk-frozen-ns <n>`` (from before the pause to after the unpause) and stops the watchdog. Every
script that freezes calls ``thaw`` from its EXIT trap, and turns INT and TERM into an exit.
"""

from __future__ import annotations

import shlex


def functions(container: str, *, limit: int) -> str:
    """``FC``, ``freeze`` and ``thaw`` (see the module docstring); ``froze_how`` is set by ``freeze`` to
    ``frozen``, ``paused`` (by someone else) or ``stopped`` (not running, or missing)."""
    unpause = f"sleep {int(limit)}; docker unpause -- {shlex.quote(container)} >/dev/null 2>&1"
    return f"""FC={shlex.quote(container)}; froze=; W=; froze_how=
freeze() {{
  case "$(docker inspect -f '{{{{.State.Running}}}} {{{{.State.Paused}}}}' -- "$FC" 2>/dev/null || echo missing)" in
    "true false")
      setsid /bin/sh -c {shlex.quote(unpause)} </dev/null >/dev/null 2>&1 4>&- & W=$!
      t0=$(date +%s%N)
      docker pause -- "$FC" >/dev/null || {{ echo "jackin: cannot freeze container $FC (docker pause failed)" >&2; return 1; }}
      froze=$t0; froze_how=frozen ;;
    "true true") froze_how=paused ;;
    *) froze_how=stopped ;;
  esac
}}
thaw() {{
  if [ -n "$froze" ]; then
    if docker unpause -- "$FC" >/dev/null; then echo "jk-frozen-ns $(( $(date +%s%N) - froze ))"
    else echo "jackin: could not thaw container $FC: run docker unpause $FC" >&2; fi
    froze=
  fi
  if [ -n "$W" ]; then kill -- "-$W" 2>/dev/null; W=; fi
  return 0
}}
"""
