"""One instant: how an agent's home is held still while restic reads it (pure builders and parsers).

A snapshot of a working agent captures every file as of one moment, never a file-by-file walk
while the agent writes. How the moment is held (``Instant``) depends on the host's tier:

    checkpoint  the btrfs tier: restic reads the read-only checkpoint taken a moment before (with the
                agent frozen for its milliseconds: ``jackin.snapshots.cow``), bound over the home's
                path in a mount namespace of restic's own (so its paths are the home's, as in every
                other snapshot); the agent runs on while restic reads
    frozen      the restic-only tier: the agent's container is frozen (``docker pause``, the cgroup
                freezer) while restic reads and thawed right after; the time frozen is printed. The
                freeze starts once restic has opened the repository (its start is not paid frozen):
                restic reads its ``--exclude-file``, a FIFO the script holds open, before any file
    paused      the container was already paused (by someone else): read as it is, left paused
    stopped     the container is not running: nothing of the agent writes
    live        read as it is, nothing held (``snapshot.diff``'s look at the live workspace)

The thaw does not depend on the operator's process. The backup runs in one bash script on the
host that thaws on every way out (its own end, an error, INT or TERM; a hangup or a broken pipe
is ignored so the script reaches its end). The script ends the backup as soon as its SSH channel
closes (the operator's Ctrl-C, a dropped connection: its stdin sees EOF), and a watchdog in a
session of its own thaws after ``max_freeze`` plus a grace even when the script is killed outright.
A backup that keeps an agent frozen for ``max_freeze`` is stopped (a timer started with the freeze),
so no agent stays frozen longer; a backup that freezes nothing (a checkpoint, a stopped agent) may take
as long as a big first backup takes (``LONG``).

A file that vanishes while restic reads (possible only when nothing is held) never fails a
snapshot; any other file restic cannot read fails that agent's snapshot with the file's name.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import cast, get_args

from jackin.snapshots import freezer
from jackin.snapshots.cow import SUBVOLUME_INODE
from jackin.snapshots.models import Instant
from jackin.snapshots.restic import q

INSTANTS: tuple[str, ...] = get_args(Instant)
LONG = 6 * 3600  # seconds any backup may take: a first backup of a big workspace may take hours
GRACE = 30  # seconds the watchdog waits past max_freeze before it thaws on its own
ENOENT = 2


def backup_script(argv: Sequence[str], *, home: str, container: str | None, checkpoint: str | None = None,
                  max_freeze: int = 600, hold: bool = True, grace: int = GRACE) -> str:  # fmt: skip
    """One bash script: hold the agent's home still (see the module docstring), run restic's backup
    ``argv`` (``... backup [options] -- <paths>``, the paths including ``home``), let go. Prints
    ``jk-instant <how>`` before restic's JSON lines and ``jk-frozen-ns <n>`` after a freeze (or
    ``jk-thaw-failed``); exits with
    restic's status (after ``jk-capped``: stopped at ``max_freeze``). ``checkpoint``: the read-only subvolume
    to read instead of the live home; ``hold=False``: read the live home (``live``); ``grace``: how long
    past ``max_freeze`` the watchdog waits before it thaws on its own (more than ``timeout``'s 10 s
    kill: restic is gone by then)."""
    timed = ["timeout", "-k", "10", str(LONG), *argv]
    if checkpoint is not None:
        return _CHECKPOINT.format(home=shlex.quote(home), ckpt=shlex.quote(checkpoint), restic=q(*timed),
                                  inode=SUBVOLUME_INODE, lifetime=_TIED)  # fmt: skip
    if not hold or container is None:
        return _TIED + f"echo 'jk-instant live'\nrun {q(*timed)}\nexit $rc\n"
    # restic reads its --exclude-file (here a FIFO) right after it opened and locked the repository and
    # before it looks at any file: the freeze starts there, so restic's start (key derivation, about
    # 0.7 s) is not paid frozen. The FIFO's EOF lets it go on.
    cut = timed.index("--")
    restic = f'{q(*timed[:cut])} --exclude-file "$D/excludes" {q(*timed[cut:])}'
    return _FREEZE.format(restic=restic, lifetime=_TIED, max_freeze=int(max_freeze),
                          freezer=freezer.functions(container, limit=max_freeze + grace))  # fmt: skip


# The script's lifetime is its SSH channel's: when the channel closes (the operator's Ctrl-C, a lost
# connection), its stdin ends, and the backup is stopped. Only bash builtins in the reader (no child
# process is left behind when it is killed).
_TIED = r"""set -u
trap '' HUP PIPE
exec 3<&0
rc=0; R=; L=; MAIN=$BASHPID
# A bash subshell signalled right after its fork can still run this shell's traps (bash 5.2): the
# helper subshells are ended with SIGKILL (no trap runs), and the traps act in the main shell only.
main() { [ "$BASHPID" = "$MAIN" ]; }
start() {
  "$@" & R=$!
  { while IFS= read -r -u 3 _; do :; done; kill -TERM "$R" 2>/dev/null; } & L=$!
}
finish() { wait "$R"; rc=$?; R=; stop; }
run() { start "$@"; finish; }
# Whatever ends the script ends the backup first: nothing reads the home once it is let go.
stop() {
  if [ -n "$R" ]; then kill -TERM "$R" 2>/dev/null; wait "$R" 2>/dev/null; R=; fi
  if [ -n "$L" ]; then end "$L"; L=; fi
  return 0
}
# End a helper (a pid, or -pgid for a whole session) with SIGKILL and reap it, quietly: bash would say
# "Killed" on stderr, where restic's own last words must stay the last lines.
# A session is killed by its leader's pid too: a helper forked but not yet past its setsid is in no session
# of its own, and the group kill alone missed it (the wait then waited out its sleep: 60 s and more).
end() { { kill -KILL -- "$1" "${1#-}"; wait "${1#-}"; } 2>/dev/null; return 0; }
trap 'main || exit; stop' EXIT
trap 'exit 130' INT TERM
"""

_CHECKPOINT = """{lifetime}H={home}; K={ckpt}
[ -d "$K" ] && [ ! -L "$K" ] && [ "$(stat -c %i -- "$K")" = {inode} ] || {{ echo "the checkpoint $K is not a subvolume" >&2; exit 1; }}
echo 'jk-instant checkpoint'
run unshare --mount --propagation private -- /bin/sh -c 'mount --bind -- "$1" "$2" && shift 2 && exec "$@"' sh "$K" "$H" {restic}
exit $rc
"""

# Freeze (``jackin.snapshots.freezer``) once restic is at its exclude file, thaw on every way out.
# Opening the FIFO to write blocks until restic opens it to read; if restic ends first, the opener
# opens it itself (read-write never blocks), so the script never hangs.
_FREEZE = """{lifetime}{freezer}O=; K=; E=
D=$(mktemp -d) && mkfifo -m 0600 "$D/excludes" || {{ echo "jackin: cannot make the freeze's FIFO" >&2; exit 1; }}
let_go() {{
  thaw
  for p in "$O" "$E"; do [ -z "$p" ] || end "$p"; done; O=; E=
  if [ -n "$K" ]; then end "-$K"; K=; fi
  rm -rf -- "$D"
}}
trap 'main || exit; stop; let_go' EXIT
start {restic}
{{ while kill -0 "$R" 2>/dev/null; do sleep 0.05; done; exec 5<>"$D/excludes"; }} & O=$!
exec 4>"$D/excludes"
end "$O"; O=
if kill -0 "$R" 2>/dev/null; then
  # The cap on the freeze, from before the pause (a session of its own, ended whole): it stops only
  # this backup (the process it names must still be restic's timeout).
  setsid /bin/sh -c 'sleep "$1"; grep -q restic "/proc/$3/cmdline" 2>/dev/null && : > "$2" && kill -TERM "$3"' \
    sh {max_freeze} "$D/capped" "$R" </dev/null >/dev/null 2>&1 4>&- & K=$!
  freeze || exit 1
  if [ -z "$froze" ]; then end "-$K"; K=; fi
fi
echo "jk-instant ${{froze_how:-live}}"
# Any later open of the exclude file (a restic that reads it twice) finds a writer and reads its end.
{{ while :; do exec 6>"$D/excludes"; exec 6>&-; done; }} 4>&- & E=$!
exec 4>&-
finish
if [ -e "$D/capped" ]; then echo "jk-capped"; fi
let_go
exit $rc
"""


# --- parsers (pure) -----------------------------------------------------------------------------------


def held(stdout: str) -> tuple[Instant | None, float | None]:
    """The ``jk-instant`` and ``jk-frozen-ns`` lines: how the home was held and, after a freeze, for how
    many milliseconds (None when it was not frozen)."""
    how = re.search(r"^jk-instant (\w+)$", stdout, re.MULTILINE)
    instant = cast(Instant, how.group(1)) if how and how.group(1) in INSTANTS else None
    return instant, freezer.parse(stdout)[0]


def capped(stdout: str) -> bool:
    """Whether the freeze's cap stopped the backup (``jk-capped``)."""
    return re.search(r"^jk-capped$", stdout, re.MULTILINE) is not None


def read_errors(stdout: str) -> list[tuple[str, int | None]]:
    """restic's ``--json`` error lines: (the item it could not read, its errno when restic says it)."""
    found = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("message_type") == "error" and isinstance(data.get("item"), str):
            error = data.get("error")
            errno = error.get("Err") if isinstance(error, dict) else None
            found.append((data["item"], errno if isinstance(errno, int) else None))
    return found


def relative(path: str, home: str) -> str:
    """``path`` below the agent's home as the operator knows it (``workspace/x``); the name quoted
    when it holds a control character (a newline cannot forge a line of the message)."""
    inner = path[len(home) + 1 :] if path.startswith(home + "/") else path
    return repr(inner) if any(ord(ch) < 32 or ord(ch) == 127 for ch in inner) else inner


def exists_script() -> str:
    """Reads NUL-terminated paths on stdin; prints, NUL-terminated, those that still exist (``lstat``:
    a link is never followed, nothing is opened)."""
    return 'while IFS= read -r -d \'\' p; do if [ -e "$p" ] || [ -L "$p" ]; then printf \'%s\\0\' "$p"; fi; done\n'
