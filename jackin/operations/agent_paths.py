"""Root's actions on an agent's directories, built so that no path the agent controls is ever followed.

The rule: root creates, chowns, chmods, removes or restores a path only when every
directory above it is root's, so the agent cannot swap the path for a symlink
between a check and the action. The layout gives every agent path such a parent:

    /srv/jackin                          root 0755
    /srv/jackin/<fleet>                  root 0711
    /srv/jackin/<fleet>/<instance>       root:<agent's group> 0750  (home: the agent may look, not change)
    /srv/jackin/<fleet>/<instance>/workspace   the agent's, 0700; mounted at /workspace

Only the workspace is the agent's. Root never acts by path inside it: do such work
as the agent (``as_agent``: a planted link then leads only where the agent could
already write), or build the tree beside it in the home (root's) and swap it in
with ``rename``. Dockerd mounts the workspace as root, too: the home being root's is
what stops an agent from turning the mount source into a link to another agent's data.

Homes of older releases were the agent's (0700): the home's commands take it back
(chown before chmod, so the agent cannot loosen the mode in between) before any
command touches the workspace, and a workspace that is a symlink is replaced.

Pure: command strings only (no pyinfra), for operations and later the snapshot tasks.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

HOME_MODE = "0750"
WORKSPACE_MODE = "0700"


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def home_commands(home: str, gid: int) -> list[str]:
    """``home`` (in the root-only fleet dir) exists as a real directory, root:``gid`` 0750.

    A symlink or a file there is refused (mkdir fails and the script stops): only
    root writes the fleet dir, so neither comes from an agent.
    """
    p = shlex.quote(home)
    return [
        f"{{ [ -d {p} ] && [ ! -L {p} ]; }} || mkdir -m {HOME_MODE} -- {p}",
        q("chown", "-h", f"0:{gid}", "--", home),  # first: from here on the agent cannot chmod it
        q("chmod", "0" + HOME_MODE, "--", home),  # 00750: also clears a directory's setuid/setgid bits
    ]


def workspace_commands(workspace: str, uid: int) -> list[str]:
    """``workspace`` is a real directory, ``uid``:``uid`` 0700; run after ``home_commands`` made the
    home root's (or with the state read showing it is).

    A symlink is replaced (removed, never followed; a link holds no data). Anything else
    that is not a directory is refused: mkdir fails and the script stops.
    """
    p = shlex.quote(workspace)
    return [
        f"if [ -L {p} ]; then rm -f -- {p}; fi",
        f"[ -d {p} ] || mkdir -m {WORKSPACE_MODE} -- {p}",
        q("chown", "-h", f"{uid}:{uid}", "--", workspace),
        q("chmod", "0" + WORKSPACE_MODE, "--", workspace),
    ]


def as_agent(uid: int, gid: int, *argv: str) -> str:
    """``argv`` run with the agent's uid and gid and no supplementary groups (util-linux ``setpriv``;
    no capabilities are kept across the switch from root). For work inside the workspace:
    restoring a snapshot in place, delivering a repository."""
    return q("setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv)


END_ROUNDS = 100  # rounds 0.1 s apart (10 s) before ``end_processes`` gives up


def end_processes(uids: Sequence[int]) -> str:
    """Shell: every process of these uids ended (SIGKILL) and gone, or the command fails saying so.

    While the kernel lists a process whose real, effective or saved uid is one of them
    (``/proc/*/status``, as ``userdel`` looks: zombies count until reaped; one ``grep`` for all, the
    whole cost when none is left), ``kill -1`` is sent AS EACH UID (``setpriv``, as ``as_agent``):
    it reaches exactly the processes that uid may signal, its own (in any pid namespace: a
    container's too), never another user's, whatever pid was reused meanwhile. (``kill -1``'s own
    exit status cannot say when none is left: Linux answers success while any other process
    exists.) For teardown, before ``userdel``, which refuses a user with a live process: a process an
    agent left on the host (before issue 18, a status read blocked on a FIFO) no longer keeps its
    user, home and units there."""
    ids = sorted({int(u) for u in uids})
    if not ids:
        return "true"
    words, one, sp = " ".join(map(str, ids)), "|".join(map(str, ids)), "[[:space:]]"
    listed = f"^Uid:{sp}+(({one})|[0-9]+{sp}+({one})|[0-9]+{sp}+[0-9]+{sp}+({one})){sp}"
    kill = 'setpriv --reuid="$u" --regid="$u" --clear-groups -- sh -c \'kill -s KILL -- -1\' 2>/dev/null'
    return (f"n=0; while grep -qE {shlex.quote(listed)} /proc/[0-9]*/status 2>/dev/null; do "
            f"[ $n -lt {END_ROUNDS} ] || {{ echo 'processes of uids {words} do not end' >&2; exit 1; }}; "
            f"for u in {words}; do {kill}; done; n=$((n + 1)); sleep 0.1; done")  # fmt: skip
