"""The lab's keys: the operator's key pair for the lab and each host's own host key, generated here
(never trusted on first use), the tar that puts them into a container before its first boot, and which
host key a container holds."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from jackin.errors import LabError
from jackin.lab import docker as dk

HOSTKEY_LABEL = "jackin.lab.hostkey"  # the SHA256 fingerprint of the host key injected at creation


def fingerprint(public_key_line: str) -> str:
    """``SHA256:<base64>`` of an OpenSSH public key line, as ``ssh-keygen -l`` prints it."""
    blob = base64.b64decode(public_key_line.split()[1], validate=True)
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def write_keypair(path: Path, *, comment: str) -> None:
    """A new ed25519 key pair: ``path`` (OpenSSH private key, mode 0600 from its creation) and ``path.pub``."""
    # lazy: cryptography, for lab.up only (not on every command's start)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, even briefly
    with os.fdopen(fd, "wb") as handle:
        handle.write(private)
    path.with_suffix(".pub").write_bytes(public + f" {comment}\n".encode())


def injection(authorized_key: Path, host_key: Path) -> bytes:
    """A tar of the host's own key and the lab's authorized key, with exact modes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _tar_add(tar, "root/.ssh", None, 0o700)
        _tar_add(tar, "root/.ssh/authorized_keys", authorized_key.read_bytes(), 0o600)
        _tar_add(tar, "etc/ssh/ssh_host_ed25519_key", host_key.read_bytes(), 0o600)
        _tar_add(tar, "etc/ssh/ssh_host_ed25519_key.pub", host_key.with_suffix(".pub").read_bytes(), 0o644)
    return buf.getvalue()


def presents(info: dict[str, Any], pinned: str) -> bool:
    """Whether the container holds the host key pinned here. Hosts made before the label existed
    are asked (their public key, read with ``docker cp``, works stopped too): never replaced
    for a label alone, since other fleets' agents and kept data may live on them."""
    label = (info["Config"]["Labels"] or {}).get(HOSTKEY_LABEL)
    if label is not None:
        return label == pinned
    try:
        raw = dk.docker("cp", f"{info['Name'].lstrip('/')}:/etc/ssh/ssh_host_ed25519_key.pub", "-", binary=True)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = tar.next()
            data = tar.extractfile(member) if member is not None and member.isfile() else None
            return data is not None and fingerprint(data.read().decode()) == pinned
    except (LabError, tarfile.TarError, OSError, ValueError, UnicodeDecodeError):
        return False


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid, info.mtime = mode, 0, 0, int(time.time())
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
