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

import re
import shlex

PAUSE_TRIES = 3  # docker pause attempts when runc says "unable to freeze" (it left the container thawed)


def functions(container: str, *, limit: int) -> str:
    """``FC``, ``freeze`` and ``thaw`` (see the module docstring); ``froze_how`` is set by ``freeze`` to
    ``frozen``, ``paused`` (by someone else) or ``stopped`` (not running, or no such container). A
    state Docker does not give (its daemon slow or down) fails the freeze: nothing is read unheld."""
    unpause = f"sleep {int(limit)}; docker unpause -- {shlex.quote(container)} >/dev/null 2>&1"
    return f"""FC={shlex.quote(container)}; froze=; W=; froze_how=
freeze() {{
  fs=$(docker container inspect -f '{{{{.State.Running}}}} {{{{.State.Paused}}}}' -- "$FC" 2>&1) || case "$fs" in
    *"No such container"*) fs=missing ;;
    *) echo "jackin: cannot read the state of container $FC: $fs" >&2; return 1 ;;
  esac
  case "$fs" in
    "true false")
      setsid /bin/sh -c {shlex.quote(unpause)} </dev/null >/dev/null 2>&1 4>&- & W=$!
      # Not paused before the watchdog leads a session of its own: until then a kill of this script's
      # whole group (SIGKILL: no trap runs) would take the watchdog with it, and the agent stay frozen.
      i=0; while [ "$(sed 's/.*) //' "/proc/$W/stat" 2>/dev/null | cut -d' ' -f4)" != "$W" ] && [ "$i" -lt 500 ] \
        && kill -0 "$W" 2>/dev/null; do sleep 0.01; i=$((i + 1)); done
      froze=$(date +%s%N)  # before the pause: a signal during it still thaws on the way out
      tries=1
      until pe=$(docker pause -- "$FC" 2>&1 >/dev/null); do
        case "$pe" in *"unable to freeze"*) [ "$tries" -lt {PAUSE_TRIES} ] && tries=$((tries + 1)) && continue ;; esac
        echo "$pe" >&2; thaw; echo "jackin: cannot freeze container $FC (docker pause failed)" >&2; return 1
      done
      froze_how=frozen ;;
    "true true") froze_how=paused ;;
    *) froze_how=stopped ;;
  esac
}}
# Thawed once; a failed unpause of a container still paused keeps the watchdog (it tries again at its
# time) and says jk-thaw-failed, which fails the snapshot.
thaw() {{
  if [ -n "$froze" ]; then
    if docker unpause -- "$FC" >/dev/null 2>&1; then echo "jk-frozen-ns $(( $(date +%s%N) - froze ))" || true
    elif [ "$(docker container inspect -f '{{{{.State.Paused}}}}' -- "$FC" 2>/dev/null)" = true ]; then
      echo "jk-thaw-failed" || true; echo "jackin: could not thaw container $FC: run docker unpause $FC" >&2 || true
      froze=; W=; return 0
    fi
    froze=
  fi
  if [ -n "$W" ]; then kill -- "-$W" "$W" 2>/dev/null || true; W=; fi  # its pid too: it may not be past its setsid yet
  return 0
}}
"""


def parse(stdout: str) -> tuple[float | None, bool]:
    """A script's ``jk-frozen-ns`` (milliseconds frozen; None: not frozen) and whether ``jk-thaw-failed``."""
    frozen = re.search(r"^jk-frozen-ns ([0-9]{1,19})$", stdout, re.MULTILINE)
    failed = re.search(r"^jk-thaw-failed$", stdout, re.MULTILINE) is not None
    return (int(frozen.group(1)) / 1e6 if frozen else None), failed
