"""restic itself: on a host, the host's own or the operator's uploaded by SFTP when the host has none
(``ensure_restic``); here, the operator's, which checks a pulled mirror (``verify_local``)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path

from fabric import Connection

from jackin.errors import JackinError
from jackin.hostpaths import UPLOADED_RESTIC
from jackin.paths import private_dir, state_dir
from jackin.snapshots import transfer
from jackin.snapshots.mirror import TransferError, temp_name


def restic_probe(uploaded: str = UPLOADED_RESTIC) -> str:
    """Prints restic's path when the host has its own, else ``upload``, the machine and the sha256 of the
    restic jackin uploaded there (none when there is none). Every snapshot command asks, so the sha256
    (0.2 to 0.4 s for restic's 25 MB on a busy host) is stamped beside the file (``<uploaded>.sha256``),
    with the file's identity (device, inode, size, ctime: any change of the file changes its ctime, and
    only root can write there), and read from the stamp while that identity holds. Anything but a
    regular file there (a symbolic link's identity is not its target's) reads as absent: uploaded anew."""
    b, stamp = shlex.quote(uploaded), shlex.quote(uploaded + ".sha256")
    ident = f"stat -c '%d:%i:%s:%Z:%z' -- {b} 2>/dev/null | tr -d ' '"
    return (f"command -v restic || {{ echo upload; uname -m; [ -f {b} ] && [ ! -L {b} ] || exit 0\n"
            f"i=$({ident}); [ -n \"$i\" ] || exit 0\n"
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


def ensure_restic(conn: Connection, *, host: str = "", probed: str | None = None) -> str:
    """The path of restic on the host: its own on PATH, else the operator's (``shutil.which``), uploaded
    by SFTP to ``/usr/local/lib/jackin/restic`` (0755 root) unless the same bytes are already there
    (their sha256s: ``restic_probe``, ``local_sha256``). ``probed``: ``restic_probe``'s output, when the
    caller ran it in a command of its own (one round trip fewer)."""
    if probed is None:
        probed = transfer.remote_run(conn, restic_probe(), host=host, what="looking for restic")
    words = probed.split()
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
    transfer.remote_run(conn, f"install -d -m 0755 -o root -g root {parent}", host=host, what=f"creating {parent}")
    temp = temp_name(UPLOADED_RESTIC)
    try:
        sftp = conn.sftp()
        with sftp.open(temp, "wb") as handle:
            handle.chmod(0o700)
            handle.set_pipelined(True)
            handle.write(data)
        sftp.chmod(temp, 0o755)
        if (
            transfer.remote_run(
                conn, f"{temp} version; echo $?", host=host, what="running the uploaded restic"
            ).split()[-1]
            != "0"
        ):
            sftp.remove(temp)
            raise TransferError(f"this machine's restic ({found}) does not run on the host",
                                host=host, hint="install restic on the host, or a static restic build here")  # fmt: skip
        sftp.posix_rename(temp, UPLOADED_RESTIC)
    except JackinError:
        raise
    except transfer.REMOTE_FAULTS as error:
        raise transfer.sftp_failure(error, conn, host=host, what=f"uploading restic to {UPLOADED_RESTIC}") from None
    return UPLOADED_RESTIC


def local_restic() -> str:
    found = shutil.which("restic")
    if not found:
        raise TransferError("restic is not installed on this machine",
                            hint="install restic here (apt-get install restic)")  # fmt: skip
    return found


def verify_local(repo: Path, password_file: Path, *, read_data: bool = False) -> str:
    """``restic check`` of a local repository (``--read-data`` also reads every pack); restic's report,
    or a TransferError with restic's words when the repository is not whole. Without restic's lock (and
    its 200 ms wait for others' locks): a copy here is this machine's alone, checked under the fleet's lock."""
    argv = [local_restic(), "--repo", str(repo), "--password-file", str(password_file), "--no-cache", "--no-lock",
            "check"]  # fmt: skip
    done = subprocess.run([*argv, *(["--read-data"] if read_data else [])], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:]) or "no message"
        raise TransferError(f"restic check of {repo} failed (exit {done.returncode}): {tail}",
                            hint="pull again; a file that does not match its name is never kept")  # fmt: skip
    return done.stdout
