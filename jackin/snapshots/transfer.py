"""Moving durable snapshots over SFTP: a host's restic repository to the operator's machine and on
to another host.

    pull_repo   host  -> ``state_dir()/snapshots/<fleet>/pulled/<host>/repo``  (snapshot.pull, fleet.down)
    push_repo   local -> ``/var/lib/jackin/snapshots/<fleet>/imported/<origin>`` on another host (snapshot.push)

(restic itself, uploaded to a host that lacks it and run here to check a mirror: ``jackin.snapshots.binary``.)

What is copied, skipped, deleted and kept, and in which order, is decided by ``jackin.snapshots.mirror``
from the two sides' listings before anything is written; this module lists the sides and carries the
plan out. Files reach a host by SFTP only, never in a command line; each file lands under a temporary
name, is checked against its name's sha256 and only then renamed into place. A destination made from
another repository (another ``config``) is refused. Leftover temporary files of an interrupted run are
removed by the next one. Both sides are root-only: 0700 directories, 0600 files.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import paramiko
from fabric import Connection

from jackin.errors import ConnectError, JackinError, RemoteCommandError
from jackin.hostpaths import SNAPSHOTS_ROOT
from jackin.paths import private_dir, state_dir
from jackin.snapshots.mirror import (  # noqa: F401
    KINDS,
    MIRRORED,
    RESTIC_DIR,
    RESTIC_FILE,
    STAGES,
    TEMP_MARK,
    Listing,
    TransferError,
    TransferPlan,
    TransferResult,
    aside_name,
    classify,
    content_ok,
    list_local,  # fmt: skip
    parse_listing,
    plan_transfer,
    result_of,
    temp_name,
)
from jackin.snapshots.restic import (  # noqa: F401
    NAME,
    checked_name,
    fleet_dir,
    imported_path,  # fmt: skip
    repo_path,
)
from jackin.transport.ssh import SshTarget, connect

CHUNK = 1 << 20


# --- the operator's side ------------------------------------------------------------------------


def operator_dir(fleet: str) -> Path:
    """``state_dir()/snapshots/<fleet>``, every level 0700."""
    return private_dir(private_dir(state_dir() / "snapshots") / checked_name(fleet, "fleet"))


def pulled_repo(fleet: str, host: str) -> Path:
    """The operator's mirror of ``host``'s repository (the fleet's directory is created, the mirror is not)."""
    return operator_dir(fleet) / "pulled" / checked_name(host, "host") / "repo"


def fleet_password_file(fleet: str) -> Path:
    """The fleet's repository password on the operator's machine: one line, ``secrets.token_urlsafe(32)``,
    0600, generated once (never overwritten, never printed)."""
    path = operator_dir(fleet) / "password"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
            handle.flush()
            os.fsync(handle.fileno())
    path.chmod(0o600)
    return path


# --- the remote side ------------------------------------------------------------------------------


def remote_run(conn: Connection, command: str, *, host: str, what: str, timeout: float | None = 300,
         stdin: str | None = None) -> str:  # fmt: skip
    try:
        extra = {"in_stream": io.StringIO(stdin)} if stdin is not None else {}
        result = conn.run(command, hide=True, warn=True, timeout=timeout, **extra)
    except Exception as error:  # noqa: BLE001 - a dropped connection or timeout is that host's error
        raise ConnectError(f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:200]}", host=host) from None
    if result.exited != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:]) or "no message"
        raise RemoteCommandError(f"{what} failed (exit {result.exited}): {tail}", host=host)
    return result.stdout


def remote_listing(conn: Connection, directory: str, *, host: str) -> Listing | None:
    """The classified tree under ``directory`` on the host (as root), or None when it is not there."""
    q = shlex.quote(directory)
    out = remote_run(conn, f"if [ -d {q} ] && [ ! -L {q} ]; then echo yes; find {q} -mindepth 1 -printf '%y %s %P\\0'; "
                     f"elif [ -e {q} ] || [ -L {q} ]; then echo other; else echo no; fi",
               host=host, what=f"listing {directory}")  # fmt: skip
    head, _, body = out.partition("\n")
    if head == "other":
        raise TransferError(f"{directory} is not a directory", host=host)
    return parse_listing(body, where=f"{host}:{directory}") if head == "yes" else None


def sftp_failure(error: BaseException, conn: Connection, *, host: str, what: str) -> JackinError:
    """A failure of SFTP: the connection dropped (ConnectError), else the host refused (TransferError)."""
    transport = conn.client.get_transport()
    detail = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    if transport is None or not transport.is_active():
        return ConnectError(f"connection lost {what}: {detail}", host=host,
                            hint="run it again: finished files are kept, partial ones are removed")  # fmt: skip
    return TransferError(f"{what}: {detail}", host=host)


REMOTE_FAULTS = (paramiko.SSHException, EOFError, OSError)


def _quiet_prefetch(previous: Callable[[threading.ExceptHookArgs], Any] = threading.excepthook) -> None:
    """paramiko's read-ahead thread dies with a traceback on stderr when the connection drops; the
    read in our thread fails too and is reported, with context, so that thread's death is not printed."""

    def hook(args: threading.ExceptHookArgs) -> None:
        if not (args.thread and "_prefetch_thread" in args.thread.name and isinstance(args.exc_value, REMOTE_FAULTS)):
            previous(args)

    threading.excepthook = hook


_quiet_prefetch()


# --- pull -------------------------------------------------------------------------------------------


def pull_repo(target: SshTarget, fleet: str, dest: Path | None = None, *, timeout: float = 10) -> TransferResult:
    """Mirror ``target``'s repository of ``fleet`` to ``dest`` (default: ``pulled_repo(fleet, host)``),
    incrementally and verified file by file. See the module's docstring for what is copied and deleted."""
    with connect(target, timeout=timeout) as conn:
        if dest is None:
            dest = pulled_repo(fleet, target.name)
            private_dir(private_dir(dest.parent.parent) / target.name)
        return pull_with(conn, target.name, fleet, dest)


def pull_with(conn: Connection, host: str, fleet: str, dest: Path) -> TransferResult:
    """``pull_repo`` over an open connection (the lead's tasks may hold one already)."""
    source = repo_path(fleet)
    where = f"{host}:{source}"
    listing = remote_listing(conn, source, host=host)
    if listing is None:
        raise TransferError(f"no restic repository at {source}", host=host,
                            hint="take a snapshot on that host first (snapshot.create)")  # fmt: skip
    plan_transfer(listing, Listing(), where=where)  # refuses a source that is not a repository, before any move
    try:
        sftp = conn.sftp()
        with sftp.open(f"{source}/config", "rb") as handle:
            theirs = handle.read()
    except REMOTE_FAULTS as error:
        raise sftp_failure(error, conn, host=host, what=f"reading {source}/config") from None
    aside = _move_aside_local(dest, theirs)
    private_dir(dest)
    local = list_local(dest)
    plan = plan_transfer(listing, local, where=where)
    for temp in plan.temps:
        (dest / temp).unlink(missing_ok=True)
    for directory in plan.dirs:
        (dest / directory).mkdir(mode=0o700, exist_ok=True)
        (dest / directory).chmod(0o700)
    touched: set[Path] = set()
    for path in plan.to_copy:
        _download(conn, sftp, f"{source}/{path}", dest / path, plan.sizes[path], host=host)
        touched.add((dest / path).parent)
    _fsync_dirs(touched)
    for path in plan.delete:
        (dest / path).unlink()
    _fsync_dirs({(dest / p).parent for p in plan.delete})
    result = result_of(plan, listing, direction="pull", host=host, fleet=fleet, source=where, destination=str(dest))
    return result.model_copy(update={"moved_aside": aside})


def _move_aside_local(dest: Path, theirs: bytes) -> str | None:
    """When ``dest`` mirrors another repository than the host's (the host's was made anew: a host torn
    down and brought back, or replaced), rename it to ``aside_name`` beside itself, keeping its older
    snapshots, so the host's repository is pulled fresh; that path, or None when nothing moved. A copy
    cut short before its ``config`` arrived holds no whole repository and is pulled into as it is."""
    config = dest / "config"
    if not config.is_file() or (ours := config.read_bytes()) == theirs:
        return None
    aside = dest.with_name(aside_name(dest.name, ours))
    if aside.exists():
        aside = aside.with_name(f"{aside.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    os.rename(dest, aside)
    _fsync_dirs([dest.parent])
    return str(aside)


def _same_config(theirs: bytes, ours: bytes, dest: Path, where: str) -> None:
    if theirs != ours:
        raise TransferError(f"{dest} mirrors another repository than {where} (their config files differ)",
                            hint=f"the host's repository was made anew: move {dest} aside (it keeps the older "
                                 "snapshots) and pull again")  # fmt: skip


def _download(conn: Connection, sftp: paramiko.SFTPClient, remote: str, final: Path, size: int, *, host: str) -> None:
    """``remote`` to ``final`` through a temporary name: written 0600, fsynced, size and sha256 checked, renamed."""
    temp = final.with_name(temp_name(final.name))
    digest = hashlib.sha256()
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            try:
                with sftp.open(remote, "rb") as handle:
                    handle.prefetch(size)
                    while chunk := handle.read(CHUNK):
                        digest.update(chunk)
                        _write(out, chunk, temp)
            except REMOTE_FAULTS as error:
                raise sftp_failure(error, conn, host=host, what=f"copying {remote}") from None
            out.flush()
            os.fsync(out.fileno())
        if temp.stat().st_size != size or not content_ok(final.name, digest.hexdigest()):
            raise TransferError(f"{remote} did not arrive as listed: {temp.stat().st_size} bytes of {size}, "
                                f"sha256 {digest.hexdigest()[:16]}... (its name is its expected sha256)", host=host,
                                hint="the host's file changed or is damaged: run restic check there; nothing was replaced")  # fmt: skip
        os.replace(temp, final)
    except JackinError:
        raise  # ConnectError is also an OSError (a ConnectionError)
    except OSError as error:
        raise TransferError(
            f"cannot write {final}: {error.strerror}", hint="free space on this machine and pull again"
        ) from None
    finally:
        temp.unlink(missing_ok=True)


def _write(out: BinaryIO, chunk: bytes, temp: Path) -> None:
    """A local write; its failure (a full disk) is this machine's, not the connection's."""
    try:
        out.write(chunk)
    except OSError as error:
        raise TransferError(
            f"cannot write {temp}: {error.strerror}", hint="free space on this machine and pull again"
        ) from None


def _fsync_dirs(directories: Iterable[Path]) -> None:
    for directory in sorted(directories, key=lambda d: -len(d.parts)):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --- push -------------------------------------------------------------------------------------------


def push_repo(target: SshTarget, fleet: str, src: Path, origin: str, *, timeout: float = 10) -> TransferResult:
    """Copy the local repository ``src`` (a pulled mirror of ``origin``'s) to ``imported_path(fleet, origin)``
    on ``target``: by SFTP, incrementally, each file under a temporary name until its sha256 on the host
    is checked, then renamed; root-only (0700 directories, 0600 files)."""
    with connect(target, timeout=timeout) as conn:
        return push_with(conn, target.name, fleet, src, origin)


def push_with(conn: Connection, host: str, fleet: str, src: Path, origin: str) -> TransferResult:
    """``push_repo`` over an open connection."""
    dest = imported_path(fleet, origin)
    local = list_local(src)
    plan = plan_transfer(local, Listing(), where=str(src))  # refuses a source that is not a repository
    dirs = [SNAPSHOTS_ROOT, fleet_dir(fleet), f"{fleet_dir(fleet)}/imported", dest]
    remote_run(conn, "install -d -m 0700 -o root -g root " + " ".join(map(shlex.quote, dirs)), host=host,
         what=f"creating {dest}")  # fmt: skip
    remote = remote_listing(conn, dest, host=host) or Listing()
    aside = None
    try:
        sftp = conn.sftp()
        if "config" in remote.files:
            with sftp.open(f"{dest}/config", "rb") as handle:
                theirs = handle.read()
            if theirs != (src / "config").read_bytes():  # an older repository of the origin was pushed here
                aside = _move_aside_remote(conn, dest, theirs, host=host)
                remote = Listing()
        plan = plan_transfer(local, remote, where=str(src))
        for temp in plan.temps:
            sftp.remove(f"{dest}/{temp}")
        for directory in plan.dirs:
            sftp.mkdir(f"{dest}/{directory}", 0o700)
            sftp.chmod(f"{dest}/{directory}", 0o700)
        for stage in STAGES:
            _push_stage(conn, sftp, [p for p in plan.to_copy if p.split("/")[0] == stage], src, dest, host=host)
        for path in plan.delete:
            sftp.remove(f"{dest}/{path}")
    except JackinError:
        raise  # ConnectError is also an OSError (a ConnectionError)
    except REMOTE_FAULTS as error:
        raise sftp_failure(error, conn, host=host, what=f"copying {src} to {dest}") from None
    remote_run(conn, f"sync -f {shlex.quote(dest)}", host=host, what=f"syncing {dest}")
    result = result_of(
        plan, local, direction="push", host=host, fleet=fleet, source=str(src), destination=f"{host}:{dest}"
    )
    return result.model_copy(update={"moved_aside": aside})


def _move_aside_remote(conn: Connection, dest: str, config: bytes, *, host: str) -> str:
    """Rename the host's ``dest`` (a copy of another repository) to ``aside_name`` beside it (root-only,
    like its parent) and create ``dest`` anew, empty; the path it was moved to."""
    aside = f"{dest.rsplit('/', 1)[0]}/{aside_name(dest.rsplit('/', 1)[1], config)}"
    q, a = shlex.quote(dest), shlex.quote(aside)
    out = remote_run(conn, f"A={a}; [ ! -e \"$A\" ] || A=\"$A-$(date -u +%Y%m%d-%H%M%S)\"; mv -T -- {q} \"$A\" && "
                     f"install -d -m 0700 -o root -g root {q} && echo \"$A\"",
               host=host, what=f"moving {dest} aside")  # fmt: skip
    return out.strip().splitlines()[-1]


def _push_stage(conn: Connection, sftp: paramiko.SFTPClient, paths: list[str], src: Path, dest: str, *,
                host: str) -> None:  # fmt: skip
    """Upload ``paths`` to temporary names, check their sha256 on the host, then rename them into place."""
    if not paths:
        return
    temps: dict[str, tuple[str, str]] = {}  # final -> (temp, sha256)
    try:
        for path in paths:
            temps[path] = (temp := temp_name(path), _upload(sftp, src / path, f"{dest}/{temp}"))
            if not content_ok(path, temps[path][1]):
                raise TransferError(f"{src / path} is damaged: its sha256 is not its name",
                                    hint=f"run restic check on {src}; nothing was renamed into place on {host}")  # fmt: skip
        listed = "".join(f"{temp}\0" for temp, _ in temps.values())
        out = remote_run(conn, f"cd {shlex.quote(dest)} && xargs -0 -r sha256sum --", host=host,
                   what="checking the uploaded files", stdin=listed)  # fmt: skip
        theirs = {name: digest for digest, _, name in (line.partition("  ") for line in out.splitlines())}
        for path, (temp, digest) in temps.items():
            if theirs.get(temp) != digest:
                raise TransferError(f"{dest}/{temp} does not hold the bytes of {src / path} after the upload",
                                    host=host, hint="push again; nothing was renamed into place")  # fmt: skip
        for path, (temp, _) in list(temps.items()):
            sftp.posix_rename(f"{dest}/{temp}", f"{dest}/{path}")
            del temps[path]
    finally:
        for temp, _ in temps.values():
            try:
                sftp.remove(f"{dest}/{temp}")
            except REMOTE_FAULTS:
                pass  # the connection is gone: the next run removes it


def _upload(sftp: paramiko.SFTPClient, local: Path, remote: str) -> str:
    """``local`` to ``remote`` (0600) by SFTP; the sha256 of the bytes sent."""
    digest = hashlib.sha256()
    fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as source, sftp.open(remote, "wb") as handle:
        handle.chmod(0o600)
        handle.set_pipelined(True)
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            handle.write(chunk)
    return digest.hexdigest()
