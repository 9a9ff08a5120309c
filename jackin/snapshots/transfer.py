"""Moving durable snapshots over SFTP: a host's restic repository to the operator's machine and on
to another host.

    pull_repo   host  -> ``state_dir()/snapshots/<fleet>/pulled/<host>/repo``  (snapshot.pull, fleet.down)
    push_repo   local -> ``/var/lib/jackin/snapshots/<fleet>/imported/<origin>`` on another host (snapshot.push)
    verify_local        ``restic check`` of a local mirror with the fleet's password

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
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import paramiko
from fabric import Connection

from jackin.errors import ConnectError, JackinError, RemoteCommandError
from jackin.hostpaths import SNAPSHOTS_ROOT, UPLOADED_RESTIC
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


def _run(conn: Connection, command: str, *, host: str, what: str, timeout: float | None = 300,
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
    out = _run(conn, f"if [ -d {q} ] && [ ! -L {q} ]; then echo yes; find {q} -mindepth 1 -printf '%y %s %P\\0'; "
                     f"elif [ -e {q} ] || [ -L {q} ]; then echo other; else echo no; fi",
               host=host, what=f"listing {directory}")  # fmt: skip
    head, _, body = out.partition("\n")
    if head == "other":
        raise TransferError(f"{directory} is not a directory", host=host)
    return parse_listing(body, where=f"{host}:{directory}") if head == "yes" else None


def _lost(error: BaseException, conn: Connection, *, host: str, what: str) -> JackinError:
    """A failure of SFTP: the connection dropped (ConnectError), else the host refused (TransferError)."""
    transport = conn.client.get_transport()
    detail = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    if transport is None or not transport.is_active():
        return ConnectError(f"connection lost {what}: {detail}", host=host,
                            hint="run it again: finished files are kept, partial ones are removed")  # fmt: skip
    return TransferError(f"{what}: {detail}", host=host)


_REMOTE_FAULTS = (paramiko.SSHException, EOFError, OSError)


def _quiet_prefetch(previous: Callable[[threading.ExceptHookArgs], Any] = threading.excepthook) -> None:
    """paramiko's read-ahead thread dies with a traceback on stderr when the connection drops; the
    read in our thread fails too and is reported, with context, so that thread's death is not printed."""

    def hook(args: threading.ExceptHookArgs) -> None:
        if not (args.thread and "_prefetch_thread" in args.thread.name and isinstance(args.exc_value, _REMOTE_FAULTS)):
            previous(args)

    threading.excepthook = hook


_quiet_prefetch()


def restic_probe(uploaded: str = UPLOADED_RESTIC) -> str:
    """Prints restic's path when the host has its own, else ``upload``, the machine and the sha256 of the
    restic jackin uploaded there (none when there is none). Every snapshot command asks, so the sha256
    (0.2 to 0.4 s for restic's 25 MB on a busy host) is stamped beside the file (``<uploaded>.sha256``),
    with the file's identity (device, inode, size, ctime: any change of the file changes its ctime, and
    only root can write there), and read from the stamp while that identity holds."""
    b, stamp = shlex.quote(uploaded), shlex.quote(uploaded + ".sha256")
    ident = f"stat -c '%d:%i:%s:%Z:%z' -- {b} 2>/dev/null | tr -d ' '"
    return (f"command -v restic || {{ echo upload; uname -m; i=$({ident}); [ -n \"$i\" ] || exit 0\n"
            f"set -- $(cat {stamp} 2>/dev/null); if [ \"${{2:-}}\" = \"$i\" ]; then echo \"$1\"; exit 0; fi\n"
            f"h=$(sha256sum -- {b} | cut -d' ' -f1) && echo \"$h\" && [ \"$({ident})\" = \"$i\" ] && "
            f"printf '%s %s\\n' \"$h\" \"$i\" > {stamp}.tmp && mv -f -- {stamp}.tmp {stamp} || true; }}")  # fmt: skip


def local_sha256(path: Path) -> str:
    """The sha256 of this machine's restic at ``path``, remembered in the operator's state dir with the
    file's identity (device, inode, size, mtime, ctime): hashing 20 MB costs 0.1 to 0.2 s per command."""
    st = path.stat()
    ident = f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    cache = private_dir(state_dir()) / "restic.sha256"
    try:
        known, _, digest = cache.read_text().strip().rpartition(" ")
        if known == ident and len(digest) == 64:
            return digest
    except OSError:
        pass
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    temp = cache.with_name(f"{cache.name}.{secrets.token_hex(4)}")
    temp.write_text(f"{ident} {digest}\n")
    temp.replace(cache)
    return digest


def ensure_restic(conn: Connection, *, host: str = "") -> str:
    """The path of restic on the host: its own on PATH, else the operator's (``shutil.which``), uploaded
    by SFTP to ``/usr/local/lib/jackin/restic`` (0755 root) unless the same bytes are already there
    (their sha256s: ``restic_probe``, ``local_sha256``)."""
    words = _run(conn, restic_probe(), host=host, what="looking for restic").split()
    if words and words[0] != "upload":
        return words[0]
    found = shutil.which("restic")
    if not found:
        raise TransferError("the host has no restic and neither has this machine", host=host,
                            hint="install restic here (apt-get install restic): jackin uploads it to hosts without it")  # fmt: skip
    arch = words[1] if len(words) > 1 else "unknown"
    if arch != os.uname().machine:
        raise TransferError(f"the host has no restic and is {arch}; this machine's restic is {os.uname().machine}",
                            host=host, hint="install restic on the host")  # fmt: skip
    if len(words) > 2 and words[2] == local_sha256(Path(found).resolve()):
        return UPLOADED_RESTIC
    data = Path(found).resolve().read_bytes()
    parent = UPLOADED_RESTIC.rsplit("/", 1)[0]
    _run(conn, f"install -d -m 0755 -o root -g root {parent}", host=host, what=f"creating {parent}")
    temp = temp_name(UPLOADED_RESTIC)
    try:
        sftp = conn.sftp()
        with sftp.open(temp, "wb") as handle:
            handle.chmod(0o700)
            handle.set_pipelined(True)
            handle.write(data)
        sftp.chmod(temp, 0o755)
        if _run(conn, f"{temp} version; echo $?", host=host, what="running the uploaded restic").split()[-1] != "0":
            sftp.remove(temp)
            raise TransferError(f"this machine's restic ({found}) does not run on the host",
                                host=host, hint="install restic on the host, or a static restic build here")  # fmt: skip
        sftp.posix_rename(temp, UPLOADED_RESTIC)
    except JackinError:
        raise
    except _REMOTE_FAULTS as error:
        raise _lost(error, conn, host=host, what=f"uploading restic to {UPLOADED_RESTIC}") from None
    return UPLOADED_RESTIC


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
    except _REMOTE_FAULTS as error:
        raise _lost(error, conn, host=host, what=f"reading {source}/config") from None
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
            except _REMOTE_FAULTS as error:
                raise _lost(error, conn, host=host, what=f"copying {remote}") from None
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
    _run(conn, "install -d -m 0700 -o root -g root " + " ".join(map(shlex.quote, dirs)), host=host,
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
    except _REMOTE_FAULTS as error:
        raise _lost(error, conn, host=host, what=f"copying {src} to {dest}") from None
    _run(conn, f"sync -f {shlex.quote(dest)}", host=host, what=f"syncing {dest}")
    result = result_of(
        plan, local, direction="push", host=host, fleet=fleet, source=str(src), destination=f"{host}:{dest}"
    )
    return result.model_copy(update={"moved_aside": aside})


def _move_aside_remote(conn: Connection, dest: str, config: bytes, *, host: str) -> str:
    """Rename the host's ``dest`` (a copy of another repository) to ``aside_name`` beside it (root-only,
    like its parent) and create ``dest`` anew, empty; the path it was moved to."""
    aside = f"{dest.rsplit('/', 1)[0]}/{aside_name(dest.rsplit('/', 1)[1], config)}"
    q, a = shlex.quote(dest), shlex.quote(aside)
    out = _run(conn, f"A={a}; [ ! -e \"$A\" ] || A=\"$A-$(date -u +%Y%m%d-%H%M%S)\"; mv -T -- {q} \"$A\" && "
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
        out = _run(conn, f"cd {shlex.quote(dest)} && xargs -0 -r sha256sum --", host=host,
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
            except _REMOTE_FAULTS:
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


# --- verification -----------------------------------------------------------------------------------


def local_restic() -> str:
    found = shutil.which("restic")
    if not found:
        raise TransferError("restic is not installed on this machine",
                            hint="install restic here (apt-get install restic)")  # fmt: skip
    return found


def verify_local(repo: Path, password_file: Path, *, read_data: bool = False) -> str:
    """``restic check`` of a local repository (``--read-data`` also reads every pack); restic's report,
    or a TransferError with restic's words when the repository is not whole."""
    argv = [local_restic(), "--repo", str(repo), "--password-file", str(password_file), "--no-cache", "check"]
    done = subprocess.run([*argv, *(["--read-data"] if read_data else [])], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:]) or "no message"
        raise TransferError(f"restic check of {repo} failed (exit {done.returncode}): {tail}",
                            hint="pull again; a file that does not match its name is never kept")  # fmt: skip
    return done.stdout
