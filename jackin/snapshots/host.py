"""Snapshot work on one host over a strict Fabric connection (``jackin.transport.ssh.connect``):
restic itself, the fleet's repository, manifests, backup, list, diff, restore, forget.

Files and secrets travel by SFTP (never in a command line). A restore is ONE remote
script in two phases: it checks the repository, restores with ``--verify`` into the
root-only staging dir beside the homes, prints ``staged`` and waits for the operator's
``swap`` on its stdin; only then does it rename the old workspace aside and the new one
into place. The staging dir is on the home's own filesystem, so both moves are renames:
``/srv/jackin/<fleet>/.restore/<instance>`` for a plain home, and ``<home>/.restore`` when
the home is a filesystem of its own (a btrfs subvolume of the checkpoint tier, which a
rename cannot leave): root's, 0700, in the root-owned home (root:agent 0750) that the
agent cannot change. The script refuses to swap a tree that is not on the home's filesystem
(``mv`` would copy it). An SSH drop, a failed verification or a full disk before that point leaves
the old workspace as it was; a staging dir left behind is removed by the next restore
(after putting back a workspace a cut-short swap had moved aside).
"""

from __future__ import annotations

import io
import shlex
import time
from collections.abc import Sequence

import paramiko
from fabric import Connection

from jackin.errors import ConnectError, RemoteCommandError
from jackin.facts.cow import QUOTA_FUNCTION
from jackin.hostpaths import UPLOADED_RESTIC
from jackin.snapshots import binary, freezer, instant, newrepo, repokey, restic
from jackin.snapshots.models import AgentDiff, AgentManifest, BackupSummary
from jackin.transport import channel as reader

LONG = instant.LONG  # a backup or restore of a big workspace may take hours; a dead host is found by SSH keepalives


def run(conn: Connection, command: str, *, host: str, what: str, timeout: float | None = 60) -> str:
    """Run ``command``; its stdout, or a RemoteCommandError saying ``what`` failed, with restic's words."""
    try:
        result = conn.run(command, hide=True, warn=True, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - a dropped connection or timeout is that host's error
        raise ConnectError(f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:200]}", host=host) from None
    if result.exited != 0:
        raise RemoteCommandError(f"{what} failed (exit {result.exited}): {_tail(result.stderr)}", host=host)
    return result.stdout


def _tail(text: str, lines: int = 4) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:]) or "no message"


def put(conn: Connection, path: str, data: bytes, *, mode: int) -> None:
    """Write ``data`` to ``path`` by SFTP: a temporary name in the same root-only dir, its mode, then a rename."""
    sftp = conn.sftp()
    temp = f"{path}.jk-{time.time_ns()}"
    with sftp.open(temp, "wb") as handle:
        handle.chmod(mode)
        handle.write(data)
    sftp.posix_rename(temp, path)


# --- restic itself -------------------------------------------------------------


def ensure_restic(conn: Connection, *, host: str, probed: str | None = None) -> str:
    """The path of restic on the host: its own on PATH, else the operator's, uploaded by SFTP
    (one implementation: ``jackin.snapshots.binary.ensure_restic``, which also runs it once there)."""
    return binary.ensure_restic(conn, host=host, probed=probed)


def ensure_repo(conn: Connection, restic_bin: str, fleet: str, password: bytes, *, host: str) -> None:
    """The fleet's root-only directories, its password file (by SFTP, 0600) and its repository: written
    here for a password jackin generated (``write_repo``), else made by ``restic init``. A repository
    directory that holds data but no config is refused, never made over."""
    repo, ours = restic.repo_path(fleet), repokey.generated(password)
    q = shlex.quote
    data = f'[ -n "$(find {q(repo)}/snapshots {q(repo)}/index {q(repo)}/data -type f -print -quit 2>/dev/null)" ]'
    absent = f"{_repo_dirs(repo)} && echo absent" if ours else "echo absent"
    found = run(conn, " && ".join([*restic.layout_commands(fleet), f"if [ -f {q(repo + '/config')} ]; then "
                                   f"echo present; elif {data}; then echo damaged; else {absent}; fi"]),
                host=host, what="creating the snapshot directories")  # fmt: skip
    said = found.split()[-1:]
    if said == ["damaged"]:
        raise RemoteCommandError(f"the fleet's repository {repo} holds data but no config: not touched",
                                 host=host, hint="put its config back from a copy (snapshot.pull keeps one), "
                                                 "or move the directory aside")  # fmt: skip
    put(conn, restic.password_path(fleet), password, mode=0o600)
    if said == ["present"]:
        return
    if ours and write_repo(conn, restic_bin, fleet, password, host=host):
        return
    made = run(conn, restic.init_command(restic_bin, fleet), host=host, what="restic init", timeout=300)
    if restic.INIT_DONE in made:
        cheapen_key(conn, restic_bin, fleet, password, host=host)


def _repo_dirs(repo: str) -> str:
    """The directories of a new repository (root 0700), without what an earlier attempt that failed may
    have left: keys, a config not linked in (run only where the repository holds no data)."""
    q = shlex.quote
    dirs = " ".join(q(f"{repo}/{d}") for d in ("keys", "index", "locks", "snapshots", "data"))
    data = " ".join(q(f"{repo}/data/{i:02x}") for i in range(256))
    return (f"install -d -m 0700 -o root -g root {q(repo)} {dirs} {data} && "
            f"rm -f -- {q(repo)}/keys/* {q(repo)}/config.jk-new {q(repo)}/config.jk-new.jk-*")  # fmt: skip


def write_repo(conn: Connection, restic_bin: str, fleet: str, password: bytes, *, host: str) -> bool:
    """Make the fleet's repository, in its directories (``_repo_dirs``), from files written here
    (``jackin.snapshots.newrepo``: no ``restic init``, whose key calibration costs seconds of CPU), then
    have the host's restic open it. Whether it did; False leaves none of what it wrote (``restic init``
    then makes the repository). The key first, synced, and the config last (it is what makes a
    repository: ``ln`` never replaces one made meanwhile)."""
    made = newrepo.create(password)
    repo = restic.repo_path(fleet)
    q = shlex.quote
    key, new, config = f"{repo}/keys/{made.key_name}", f"{repo}/config.jk-new", f"{repo}/config"
    try:
        put(conn, key, made.key, mode=0o400)
        put(conn, new, made.config, mode=0o400)
        opens = restic.q(*restic.base(restic_bin, fleet), "--no-cache", "--no-lock", "--quiet", "cat", "config")
        run(conn, f"sync -- {q(key)} {q(new)} {q(repo)}/keys && ln -- {q(new)} {q(config)} && sync -- {q(repo)} && "
                  f"{opens} >/dev/null && rm -f -- {q(new)}", host=host, what="opening the new repository")  # fmt: skip
    except (OSError, EOFError, paramiko.SSHException, ConnectError, RemoteCommandError):
        # only what was written here: a config made meanwhile by another (not this one's bytes) stays
        conn.run(f"if [ -f {q(new)} ] && cmp -s -- {q(new)} {q(config)}; then rm -f -- {q(config)}; fi; "
                 f"rm -f -- {q(key)} {q(new)} {q(new)}.jk-*", hide=True, warn=True)  # fmt: skip
        return False
    return True


KEY_FILE_CAP = 64 * 1024  # a restic key file is about 450 bytes


def cheapen_key(conn: Connection, restic_bin: str, fleet: str, password: bytes, *, host: str) -> bool:
    """The new repository's one key, re-sealed with cheap scrypt parameters (``jackin.snapshots.repokey``:
    why that is safe for a fleet's random password, and what it saves). Whether it was.

    The new key file is written (SFTP, 0400 as restic writes it) and synced before anything else; the old
    one is then moved aside (restic ignores a name that is not an id) while the host's own restic opens
    the repository with the new key alone; only then is the old one deleted, else it is put back and the
    new one removed. So at every moment, a crash included, the repository opens. Best effort: a key that
    cannot be re-sealed (or a password jackin did not generate) leaves restic's own, which works."""
    keys = restic.keys_path(fleet)
    if not repokey.generated(password):
        return False
    try:
        sftp = conn.sftp()
        names = sftp.listdir(keys)
        if len(names) != 1:  # not the one key restic init made: leave the keys as they are
            return False
        with sftp.open(f"{keys}/{names[0]}", "rb") as handle:
            old = handle.read(KEY_FILE_CAP)
        if repokey.is_cheap(old):
            return False
        sealed = repokey.reseal(old, password)
        put(conn, f"{keys}/{sealed.name}", sealed.data, mode=0o400)
        run(conn, restic.swap_key_command(restic_bin, fleet, old=names[0], new=sealed.name), host=host,
            what="checking the re-sealed key", timeout=120)  # fmt: skip
    except (OSError, repokey.KeyError_, ConnectError, RemoteCommandError):
        return False
    return True


def write_manifest(conn: Connection, manifest: AgentManifest, *, host: str) -> None:
    data = manifest.model_dump_json(indent=2).encode() + b"\n"
    put(conn, restic.manifest_path(manifest.fleet, manifest.instance), data, mode=0o600)


# --- containers ------------------------------------------------------------------


def container_states(conn: Connection, containers: list[str], *, host: str) -> dict[str, str]:
    """``running``, ``stopped`` or ``missing`` per container, and its image id."""
    script = "; ".join(
        f"echo {shlex.quote(c)} $(docker inspect -f '{{{{.State.Running}}}} {{{{.Image}}}}' -- {shlex.quote(c)} "
        f"2>/dev/null || echo missing)" for c in containers
    )  # fmt: skip
    states = {}
    for line in run(conn, script or "true", host=host, what="reading the agents' containers").splitlines():
        name, _, rest = line.partition(" ")
        states[name] = rest.strip()
    return states


def set_running(conn: Connection, containers: list[str], running: bool, *, host: str) -> None:
    if containers:
        verb = "start" if running else "stop"
        run(conn, restic.q("docker", verb, "--", *containers), host=host, what=f"docker {verb}", timeout=120)


# --- restic commands ----------------------------------------------------------------


def backup(conn: Connection, restic_bin: str, item: AgentManifest, *, host: str, tmp: bool = False,
           checkpoint: str | None = None, max_freeze: int = 600, hold: bool = True,
           forget_later: list[str] | None = None) -> BackupSummary:  # fmt: skip
    """Back up ``item``'s home and manifest as of one instant (``jackin.snapshots.instant``): from the
    read-only ``checkpoint`` when there is one, else with the container frozen for the backup
    (``hold=False``: the live home, as it is). A file that vanished from a live home never fails it;
    any other file restic could not read fails this agent alone (its partial snapshot is forgotten; with
    ``forget_later``, its id is added there for the caller to forget once no backup runs beside it)."""
    fleet, instance = item.fleet, item.instance
    home = restic.home_path(fleet, instance)
    argv = restic.backup_argv(restic_bin, fleet, host, item.snapshot, instance, tmp=tmp)
    script = instant.backup_script(argv, home=home, container=item.container, checkpoint=checkpoint,
                                   max_freeze=max_freeze, hold=hold)  # fmt: skip
    what = f"restic backup of {instance}"
    code, out, err = session(conn, script, host=host, what=what, timeout=instant.LONG + 120)
    how, frozen_ms = instant.held(out)
    if freezer.parse(out)[1]:
        raise RemoteCommandError(f"{what}: the agent's container {item.container} could not be thawed: it is still "
                                 f"paused", host=host, hint=f"on the host: docker unpause {item.container} (a watchdog "
                                                            "tries again after snapshots.max_freeze)")  # fmt: skip
    if instant.capped(out):
        raise RemoteCommandError(f"{what} did not finish within snapshots.max_freeze ({max_freeze}s): stopped, the "
                                 "agent thawed, nothing recorded for it", host=host,
                                 hint="raise snapshots.max_freeze, or use snapshots.checkpoints: btrfs "
                                      "(the agent is frozen only for the checkpoint)")  # fmt: skip
    if code not in (0, 3):
        raise RemoteCommandError(f"{what} failed (exit {code}): {_tail(err)}", host=host)
    summary = restic.parse_backup(out)
    if code == 3:
        # restic prints its --json error lines on stderr (0.14); read both streams. A file can vanish only
        # from a home nothing held (a frozen one cannot change: every error there counts).
        errors = instant.read_errors(err) + instant.read_errors(out)
        unreadable = _unreadable(conn, errors, host=host, live=how in ("live", None))
        if unreadable:
            if forget_later is None:
                forget(conn, restic_bin, fleet, [summary.snapshot_id], host=host, prune=False)
            else:  # backups run beside it: forget (an exclusive lock) once they are done
                forget_later.append(summary.snapshot_id)
            names = ", ".join(instant.relative(p, home) for p in unreadable[:5])
            more = f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else ""
            raise RemoteCommandError(f"{what}: restic could not read {names}{more}; no snapshot of {instance} kept",
                                     host=host, hint="see why on the host (a file the agent made unreadable to root?); "
                                                     "the other agents' snapshots are not affected")  # fmt: skip
    return summary.model_copy(update={"instant": how, "frozen_ms": frozen_ms})


def _unreadable(conn: Connection, errors: list[tuple[str, int | None]], *, host: str, live: bool) -> list[str]:
    """The items restic could not read that did not just vanish: not ENOENT, and (on a live home, where a
    file can go between restic's listing and its read) still there now. Nothing vanishes from a home
    held still (a checkpoint, a frozen or stopped agent): there every error counts."""
    items = [item for item, errno in errors if not (live and errno == instant.ENOENT)]
    if not live or not items:
        return items
    code, out, _ = session(conn, instant.exists_script(), host=host, what="looking for the files restic could not read",
                           stdin=b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in items))  # fmt: skip
    if code != 0:
        return items
    return [p for p in out.split("\0") if p]


SESSION_WAIT = 600  # seconds a session waits for one of the connection's others to end (sshd's MaxSessions)


def open_channel(
    transport: paramiko.Transport, *, what: str, host: str, wait: float = SESSION_WAIT
) -> paramiko.Channel:
    """A new session channel on ``transport``; while the host refuses one (its sshd's ``MaxSessions``: a
    host's backups run side by side), it waits for another of the connection's sessions to end."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return transport.open_session()
        except paramiko.ChannelException as error:
            if time.monotonic() >= deadline or not transport.is_active():
                raise ConnectError(f"{what}: the host refused another SSH session ({error}; its sshd's MaxSessions?)",
                                   host=host) from None  # fmt: skip
            time.sleep(0.5)
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise ConnectError(
                f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:200]}", host=host
            ) from None


def session(conn: Connection, script: str, *, host: str, what: str, timeout: float = 60,
            stdin: bytes | None = None) -> tuple[int, str, str]:  # fmt: skip
    """Run ``script`` with bash over one SSH channel: (exit status, stdout, stderr). Its stdin stays open
    while it runs (``stdin``, if given, is sent then closed): a script that watches its stdin learns
    the channel closed (the operator went away) as an EOF."""
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise ConnectError(f"{what}: the SSH connection is closed", host=host)
    channel = open_channel(transport, what=what, host=host)
    channel.settimeout(timeout)
    try:
        channel.exec_command("bash -c " + shlex.quote(script))
        if stdin is not None:
            channel.sendall(stdin)
            channel.shutdown_write()
        out, err = io.BytesIO(), io.BytesIO()
        reader.pump(channel, out=out.write, err=err.write, deadline=time.monotonic() + timeout)
        code = channel.recv_exit_status()
    except (OSError, EOFError) as error:
        raise ConnectError(f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:200]}", host=host) from None
    finally:
        channel.close()
    return code, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")


def snapshots(conn: Connection, restic_bin: str, fleet: str, *, host: str) -> list[dict]:
    out = run(conn, restic.q(*restic.snapshots_argv(restic_bin, fleet)), host=host, what="restic snapshots")
    return restic.parse_snapshots(out)


def diff(conn: Connection, restic_bin: str, fleet: str, first: str, second: str, *, host: str, instance: str,
         against: str) -> AgentDiff:  # fmt: skip
    out = run(conn, restic.q(*restic.diff_argv(restic_bin, fleet, first, second)), host=host,
              what=f"restic diff of {instance}", timeout=LONG)  # fmt: skip
    return restic.parse_diff(out, host=host, instance=instance, against=against,
                             home=restic.home_path(fleet, instance))  # fmt: skip


def forget(conn: Connection, restic_bin: str, fleet: str, ids: list[str], *, host: str, prune: bool = True) -> None:
    if ids:
        run(conn, restic.q(*restic.forget_argv(restic_bin, fleet, ids, prune=prune)), host=host,
            what="restic forget", timeout=LONG)  # fmt: skip


def own_ids_script(fleet: str, repo: str | None = None) -> str:
    """Print the restic snapshots of the host's own repository of ``fleet`` (``repo``: another one there,
    pushed from another host) as JSON, ``[]`` when there is no such repository, password or restic yet,
    without creating or locking anything (``--no-lock``, ``--no-cache``)."""
    repo, password = repo or restic.repo_path(fleet), restic.password_path(fleet)
    argv = ["--repo", repo, "--password-file", password, "--no-cache"]
    return (f"R=$(command -v restic || echo {shlex.quote(UPLOADED_RESTIC)}); "
            f"if [ -f {shlex.quote(repo + '/config')} ] && [ -f {shlex.quote(password)} ] && [ -x \"$R\" ]; "
            f"then \"$R\" {restic.q(*argv)} --no-lock snapshots --json; else echo '[]'; fi")  # fmt: skip


def own_restic_ids(conn: Connection, fleet: str, *, host: str, repo: str | None = None) -> set[str]:
    """The restic snapshot ids in the host's own repository of ``fleet`` (``repo``: another one there),
    empty when it has none: whether a snapshot taken on a host of that name is still there, or the host
    was replaced since (or a pushed copy removed with the fleet)."""
    out = run(conn, own_ids_script(fleet, repo), host=host, what="listing the host's restic snapshots", timeout=300)
    return {s["id"] for s in restic.parse_snapshots(out)}


# --- restore ---------------------------------------------------------------------------


def remap_commands(owner: tuple[int, int, int, int] | None) -> str:
    """Give the staged tree ``$N`` (root's 0700 staging dir: nothing in it is the agent's yet) from the
    snapshot's owner to the agent's current one, ``owner`` = (old uid, old gid, new uid, new gid): only
    what the old uid (group: the old gid) owned changes, links themselves and never followed (``-h``,
    and ``-R`` walks without following). Nothing when ``owner`` is None or the same."""
    if owner is None or owner[:2] == owner[2:]:
        return ""
    ou, og, nu, ng = (int(n) for n in owner)
    return (f'chown -R -h --from={ou} {nu} -- "$N" && chown -R -h --from=:{og} :{ng} -- "$N" || '
            f'{{ cleanup; fail "cannot give the restored files of uid {ou} to uid {nu}; the workspace was not touched"; }}\n'
            f'echo "remapped {ou}:{og} {nu}:{ng}"\n')  # fmt: skip


MIN_FREE = 256 << 20  # the spec's default (snapshots.min_free)


QUOTA = QUOTA_FUNCTION + "\n"  # ``quota PATH``: the subvolume's referenced bytes and its qgroup's limit


def quota_check(need: str, what: str, kept: str, *, staged: bool = True) -> str:
    """Shell failing (``cleanup`` first where there is one) when restoring ``need`` bytes (a shell word)
    into the home ``$H`` would exceed its disk quota: a restic restore stages its tree inside a home
    that is a subvolume, beside the workspace (``staged``: the home's bytes count too); a checkpoint's
    copy replaces the home whole (only its own bytes count)."""
    used = '"$used"' if staged else "0"
    holds = " and the home holds $used of it" if staged else ""
    return (f'q=$(quota "$H"); used=${{q% *}}; lim=${{q#* }}\n'
            f'if [ -n "$q" ] && [ "$lim" != none ] && [ "$(({need} + {used}))" -gt "$lim" ]; then '
            f'type cleanup >/dev/null 2>&1 && cleanup; fail "{what} needs ${{{need.strip("$")}}} bytes and the home\'s '
            f'disk quota (resources.disk) is $lim{holds}; {kept}"; fi\n')  # fmt: skip


def room_commands(restic_bin: str, fleet: str, restic_id: str, repo: str | None, min_free: int,
                  kept: str = "the workspace was not touched") -> str:  # fmt: skip
    """Refuse the restore, before anything changes, unless the home's filesystem has room for every
    byte of the snapshot (restic 0.14 has no ``restore --sparse``: a hole is written as zeros, so a
    sparse file takes its whole size until ``dig_commands``) and ``min_free`` bytes beside, and the
    home's disk quota holds them beside what it holds now (``quota_check``)."""
    stats = restic.q(*restic.base(restic_bin, fleet, repo=repo), "--quiet", "stats", "--mode", "restore-size",
                     "--json", restic_id)  # fmt: skip
    return (f"need=$({stats} | sed -n 's/.*\"total_size\":\\([0-9]*\\).*/\\1/p')\n"
            f'[ -n "$need" ] || {{ cleanup; fail "cannot read the size of snapshot {restic_id} (restic stats); {kept}"; }}\n'
            f'free=$(df -B1 --output=avail -- "$H" | tail -n 1 | tr -dc 0-9)\n'
            f'[ -n "$free" ] || {{ cleanup; fail "cannot read the free space of the home\'s filesystem (df); {kept}"; }}\n'
            f'if [ "$((free - need))" -lt {int(min_free)} ]; then cleanup; fail "snapshot {restic_id} needs '
            f'$need bytes to restore and the home\'s filesystem has $free free: that would leave less than '
            f'{int(min_free)} (snapshots.min_free); {kept}"; fi\n'
            + QUOTA + quota_check("$need", f"restoring snapshot {restic_id}", kept))  # fmt: skip


def room_script(fleet: str, agents: list[tuple[str, str, str | None]], *, min_free: int = MIN_FREE,
                checkpoints: Sequence[tuple[str, str]] = ()) -> str:  # fmt: skip
    """The room check of ``room_commands`` for every agent of one host at once, for snapshot.restore to run
    before it changes anything: ``agents`` are (instance, restic id, repository or None for the fleet's
    own). The sizes of the agents whose homes share a filesystem are added up. Installs and creates
    nothing: with no restic on the host yet, it says ``unchecked`` (the restore script checks again).
    ``checkpoints``: (instance, checkpoint path) restored from the checkpoint tier, checked against the
    home's disk quota only (a writable copy of a checkpoint takes no new space). Prints ``room`` when
    there is room."""
    lines = ["set -u", 'fail() { echo "$*" >&2; exit 1; }', QUOTA.rstrip("\n")]
    for instance, checkpoint in checkpoints:
        what = f"restoring checkpoint {checkpoint.rsplit('/', 1)[-1]} of {instance}"
        lines += [f"H={shlex.quote(restic.home_path(fleet, instance))}",
                  f"q=$(quota {shlex.quote(checkpoint)}); need=${{q% *}}",
                  f'if [ -n "$q" ]; then {quota_check("$need", what, "nothing was changed", staged=False).strip()}; fi']  # fmt: skip
    lines += [f'R=$(command -v restic || echo {shlex.quote(UPLOADED_RESTIC)}); [ -x "$R" ] || {{ echo unchecked; exit 0; }}',
              "rows="]  # fmt: skip
    for instance, restic_id, repo in agents:
        home = shlex.quote(restic.home_path(fleet, instance))
        stats = restic.q(*restic.base("RESTIC", fleet, repo=repo), "--quiet", "stats", "--mode", "restore-size",
                         "--json", restic_id).replace("RESTIC", '"$R"', 1)  # fmt: skip
        lines += [
            f"H={home}",
            f'{{ [ -d "$H" ] && [ ! -L "$H" ]; }} || fail "the home of {instance} is missing (run fleet.up first); '
            'nothing was changed"',
            f"need=$({stats} | sed -n 's/.*\"total_size\":\\([0-9]*\\).*/\\1/p')",
            f'[ -n "$need" ] || fail "cannot read the size of snapshot {restic_id} of {instance} (restic stats); '
            'nothing was changed"',
            quota_check("$need", f"restoring snapshot {restic_id} of {instance}", "nothing was changed").strip(),
            'free=$(df -B1 --output=avail -- "$H" | tail -n 1 | tr -dc 0-9)',
            '[ -n "$free" ] || fail "cannot read the free space of the filesystem of $H (df); nothing was changed"',
            # homes on one filesystem share its free space: grouped by its source (not st_dev: each btrfs
            # subvolume has its own)
            f'rows="$rows$(df --output=source -- "$H" | tail -n 1 | tr -d " ") $need $free {instance}\n"',
        ]
    total = (f"awk -v min={int(min_free)} '{{ need[$1] += $2; free[$1] = $3; n[$1]++; who[$1] = who[$1] (who[$1] ? \", \" : \"\") $4 }}"
             " END { for (d in need) if (free[d] - need[d] < min) { printf \"%s %s %.0f bytes to restore and the "
             "filesystem of %s has %.0f free: that would leave less than %.0f (snapshots.min_free); nothing "
             "was changed\\n\", who[d], (n[d] > 1 ? \"need\" : \"needs\"), need[d], (n[d] > 1 ? \"their homes\" : \"its home\"), "
             "free[d], min > \"/dev/stderr\"; bad = 1 } exit bad }'")  # fmt: skip
    lines += [f"printf '%b' \"$rows\" | {total} || exit 1", "echo room"]
    return "\n".join(lines) + "\n"


def room(conn: Connection, fleet: str, agents: list[tuple[str, str, str | None]], *, host: str,
         min_free: int = MIN_FREE, checkpoints: Sequence[tuple[str, str]] = ()) -> bool:  # fmt: skip
    """Raise, with the numbers, when restoring ``agents`` (``room_script``) would leave less than
    ``min_free`` on their homes' filesystem. False when the host has no restic to ask yet."""
    script = room_script(fleet, agents, min_free=min_free, checkpoints=checkpoints)
    done = conn.run("bash -c " + shlex.quote(script), hide=True, warn=True, timeout=LONG)
    said = done.stdout.split()
    if done.exited == 0 and "unchecked" in said:
        return False
    if done.exited != 0 or "room" not in said:
        raise RemoteCommandError(_tail(done.stderr) or f"the room check failed (exit {done.exited})", host=host)
    return True


ROOM_BUDGET = 60  # seconds the room check's finds may take on one host, all homes together


def backup_room_script(fleet: str, instances: Sequence[str], *, min_free: int = MIN_FREE) -> str:
    """Which of ``instances`` a snapshot on one host may back up with restic, checked before anything
    changes: the agents are taken smallest first while what they may add to the fleet's repository leaves
    ``min_free`` free on its filesystem; each other one is refused (``refuse <instance> <bytes>``), so one
    agent that made a great deal fails alone. Ends with ``free <free> <taken>``.

    What an agent may add (an estimate, not a bound): the space of its home's files whose inode changed
    since its last snapshot (its manifest is rewritten at each: ``-cnewer``, a ctime no agent can set
    back), the whole home for a first one, each inode counted once (hard links), and at most what the
    home's qgroup references where it has one (a reflinked copy costs nothing there). ``find`` follows no
    link, stays on the home's filesystem, opens no file, and all homes share ``ROOM_BUDGET`` seconds (a
    home not finished counts what was counted)."""
    repo = shlex.quote(restic.repo_path(fleet))
    lines = ["set -u", 'fail() { echo "$*" >&2; exit 1; }', QUOTA.rstrip("\n"),
             f"D={repo}; while [ ! -e \"$D\" ]; do D=$(dirname -- \"$D\"); done",
             'free=$(df -B1 --output=avail -- "$D" | tail -n 1 | tr -dc 0-9)',
             '[ -n "$free" ] || fail "cannot read the free space of the repository\'s filesystem (df); nothing was changed"',
             f"deadline=$(( $(date +%s) + {ROOM_BUDGET} )); rows="]  # fmt: skip
    for instance in instances:
        home, manifest = restic.home_path(fleet, instance), restic.manifest_path(fleet, instance)
        lines += [
            f"H={shlex.quote(home)}; M={shlex.quote(manifest)}",
            'if [ -d "$H" ] && [ ! -L "$H" ]; then',
            '  if [ -f "$M" ]; then set -- -cnewer "$M"; else set --; fi',
            '  left=$(( deadline - $(date +%s) )); [ "$left" -ge 1 ] || left=1',
            '  u=$(timeout "$left" find "$H" -xdev -type f "$@" -printf \'%i %b\\n\' 2>/dev/null '
            "| awk '!seen[$1]++ { s += $2 } END { printf \"%.0f\", s * 512 }')",
            '  case "$u" in ""|*[!0-9]*) u=0;; esac',
            '  q=$(quota "$H"); r=${q%% *}',
            '  if [ -n "$q" ] && [ "$r" -lt "$u" ]; then u=$r; fi',
            f'  rows="${{rows}}{instance} $u\\n"',
            "fi",
        ]
    lines += ["printf '%b' \"$rows\" | sort -n -k2 | awk -v free=\"$free\" -v min=" + str(int(min_free)) +
              " '{ if (free - t - $2 >= min) t += $2; else print \"refuse\", $1, $2 } END { printf \"free %.0f %.0f\\n\", free, t }'"]  # fmt: skip
    return "\n".join(lines) + "\n"


ROOM = "jk-room"  # backup_room's line between the room check's answer and the restic probe's


def backup_room(conn: Connection, fleet: str, instances: Sequence[str], *, host: str,
                min_free: int = MIN_FREE) -> tuple[dict[str, str], str]:  # fmt: skip
    """The agents of ``instances`` a snapshot must not back up with restic (``backup_room_script``), each
    with why, in numbers; and the output of ``binary.restic_probe``, run in the same round trip."""
    script = backup_room_script(fleet, instances, min_free=min_free) + f"echo {ROOM}\n" + binary.restic_probe()
    try:
        done = conn.run("bash -c " + shlex.quote(script + "\n"), hide=True, warn=True, timeout=ROOM_BUDGET + 60)
    except Exception as error:  # noqa: BLE001 - a timeout or a dropped connection is that host's error
        raise ConnectError(f"the snapshot's room check: {type(error).__name__}: {' '.join(str(error).split())[:200]}",
                           host=host) from None  # fmt: skip
    answer, found, probed = done.stdout.partition(ROOM + "\n")
    if done.exited != 0 or not found:
        raise RemoteCommandError(_tail(done.stderr) or f"the snapshot's room check failed (exit {done.exited})",
                                 host=host)  # fmt: skip
    free = taken = 0
    refused: dict[str, str] = {}
    for words in map(str.split, answer.splitlines()):
        if words[:1] == ["free"] and len(words) == 3 and all(w.isdigit() for w in words[1:]):
            free, taken = int(words[1]), int(words[2])
    for words in map(str.split, answer.splitlines()):
        if words[:1] == ["refuse"] and len(words) == 3 and words[2].isdigit():
            refused[words[1]] = (f"no restic snapshot: it may add up to {int(words[2])} bytes to the fleet's repository "
                                 f"(its files changed since its last snapshot) and the repository's filesystem has "
                                 f"{free} free ({taken} for the other agents of this snapshot): that would leave "
                                 f"less than {int(min_free)} (snapshots.min_free); nothing of it was changed")  # fmt: skip
    return refused, probed


DIG_FROM = 64 * 1024  # files larger than this in a restored tree have their runs of zeros made holes again


def dig_commands() -> str:
    """Make the zeros restic 0.14 wrote for a sparse file's holes holes again (``fallocate --dig-holes``)
    in the staged tree ``$N``: root's 0700 staging dir, which nothing of the agent's reaches yet; ``find``
    follows no link and stays on the filesystem, and NUL-separated names carry any byte. Best effort: a
    filesystem that cannot punch holes keeps the zeros (the room was checked before), and says so."""
    return (
        f'find "$N" -xdev -type f -size +{DIG_FROM // 1024}k -print0 | xargs -0 -r -n 1 fallocate --dig-holes -- '
        f'|| echo "note: some restored files could not be made sparse again" >&2\n'
    )


def restore_script(restic_bin: str, fleet: str, instance: str, restic_id: str, *, repo: str | None = None,
                   owner: tuple[int, int, int, int] | None = None, min_free: int = MIN_FREE) -> str:  # fmt: skip
    """The whole restore of one agent's workspace, as one bash script (see the module docstring);
    ``repo``: restore from another repository of the fleet on this host (one pushed here); ``owner``:
    (snapshot uid, gid, current uid, gid) when the agent's uid changed since (``remap_commands``);
    ``min_free``: bytes the restore must leave free on the home's filesystem (``room_commands``)."""
    home = restic.home_path(fleet, instance)
    stage, inside = restic.staging_path(fleet, instance), in_home_staging(fleet, instance)
    check = restic.q(*restic.check_argv(restic_bin, fleet, repo=repo))
    beside = restic.q(*restic.restore_argv(restic_bin, fleet, restic_id, stage + "/tree", repo=repo))
    within = restic.q(*restic.restore_argv(restic_bin, fleet, restic_id, inside + "/tree", repo=repo))
    return f"""set -u
umask 077
H={shlex.quote(home)}; W="$H/workspace"; S={shlex.quote(stage)}
fail() {{ echo "$*" >&2; exit 1; }}
{{ [ -d "$H" ] && [ ! -L "$H" ]; }} || fail "the agent's home $H is missing (run fleet.up first)"
dev() {{ stat -c %d -- "$1"; }}
if [ "$(dev "$H")" != "$(dev "$(dirname "$H")")" ]; then
  S={shlex.quote(inside)}  # the home is a filesystem of its own (a btrfs subvolume): stage inside it
else
  install -d -m 0700 -o root -g root "$(dirname "$S")" || fail "cannot create the staging dir"
fi
N="$S/tree$W"
if [ ! -e "$W" ] && [ ! -L "$W" ] && [ -d "$S/old" ] && [ ! -L "$S/old" ]; then
  mv -T -- "$S/old" "$W" || fail "cannot put back the workspace an earlier restore left in $S/old"
fi
# A staging dir rm cannot empty (a btrfs subvolume the agent made in the old workspace: another
# filesystem to rm) is renamed aside, root-only, never entered by path: the next restore still works.
clear_stage() {{ [ ! -e "$S" ] || rm -rf --one-file-system -- "$S" 2>/dev/null || mv -T -- "$S" "$S.kept-$(date +%s%N)"; }}
clear_stage || fail "cannot remove the stale staging dir $S"
mkdir -m 0700 -- "$S" || fail "cannot create the staging dir $S"
cleanup() {{ clear_stage; }}
{check} >&2 || {{ cleanup; fail "restic check found the repository damaged; the workspace was not touched"; }}
{room_commands(restic_bin, fleet, restic_id, repo, min_free)}if [ "$S" = {shlex.quote(inside)} ]; then {within}; else {beside}; fi >&2 || {{ cleanup; fail "restoring snapshot {restic_id} failed (a damaged repository or a full disk?): the verified copy is incomplete; the workspace was not touched"; }}
{{ [ -d "$N" ] && [ ! -L "$N" ]; }} || {{ cleanup; fail "snapshot {restic_id} holds no workspace for {instance}"; }}
[ "$(dev "$N")" = "$(dev "$H")" ] || {{ cleanup; fail "the staged tree is not on the home's filesystem (a swap would copy, not rename); the workspace was not touched"; }}
{dig_commands()}{remap_commands(owner)}echo staged
IFS= read -r go || go=
[ "$go" = swap ] || {{ cleanup; fail "not swapped: no go-ahead from the operator (connection lost?)"; }}
if [ -e "$W" ] || [ -L "$W" ]; then mv -T -- "$W" "$S/old" || fail "cannot move the old workspace aside"; fi
if ! mv -T -- "$N" "$W"; then mv -T -- "$S/old" "$W"; fail "cannot move the restored workspace into place"; fi
echo swapped
cleanup
echo done
"""


def in_home_staging(fleet: str, instance: str) -> str:
    """The staging dir of a home that is a filesystem of its own (a btrfs subvolume): inside it, root 0700."""
    return f"{restic.home_path(fleet, instance)}/.restore"


def restore(conn: Connection, restic_bin: str, fleet: str, instance: str, restic_id: str, *, host: str,
            timeout: float = LONG, repo: str | None = None, owner: tuple[int, int, int, int] | None = None,
            min_free: int = MIN_FREE) -> bool:  # fmt: skip
    """Restore ``instance``'s workspace from ``restic_id`` (see ``restore_script``); raises with the
    script's own message when it stopped before the swap (the old workspace is then intact). True
    when the files' owner was remapped (``owner``)."""
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise ConnectError("the SSH connection is closed", host=host)
    channel = transport.open_session()
    channel.settimeout(timeout)
    try:
        script = restore_script(restic_bin, fleet, instance, restic_id, repo=repo, owner=owner, min_free=min_free)
        channel.exec_command("bash -c " + shlex.quote(script))
        out, err = io.BytesIO(), io.BytesIO()
        staged = reader.pump(channel, out=out.write, err=err.write, until=lambda: b"staged\n" in out.getvalue())
        if staged == "until":
            channel.sendall(b"swap\n")
            channel.shutdown_write()
        reader.pump(channel, out=out.write, err=err.write)
        code = channel.recv_exit_status()
    except (OSError, EOFError) as error:
        raise ConnectError(f"restore of {instance}: the connection failed: {error}", host=host) from None
    finally:
        channel.close()
    if code != 0 or b"done\n" not in out.getvalue():
        text = err.getvalue().decode(errors="replace")
        raise RemoteCommandError(f"restore of {instance} failed (exit {code}): {_tail(text)}", host=host)
    return b"\nremapped " in b"\n" + out.getvalue()
