"""Read-only, one-round-trip commands over the system's OpenSSH client, multiplexed.

``jackin.transport.remote.gather`` (fleet.status, the state read before fleet.up and fleet.plan, the clean
check, gc's scan, netcheck) runs one command per host. A paramiko connection costs a key exchange
and authentication in Python on every command; OpenSSH does both in C, and with a master connection
per host (``ControlMaster=auto``, ``ControlPersist=60``: what Ansible does) a command within a minute
of the last costs one channel on the open connection.

The client is as strict as ``jackin.transport.ssh``: no config file (``-F /dev/null``: neither
``~/.ssh/config`` nor ``/etc/ssh/ssh_config``), only the fleet's pinned known_hosts
(``StrictHostKeyChecking=yes``, no global file, nothing learned or updated), only the inventory's
key (``IdentitiesOnly``), no agent forwarding, no password or keyboard prompts (``BatchMode``).
The master's socket lives in a 0700 directory under the state dir, and its name is a hash of
everything the connection was checked against (user, address, port, key file, the known_hosts
file's bytes): a changed pin or key never reuses a connection made under the old one, so a
host whose key no longer matches its pin is refused as before.

``argv`` returns None when the target needs what this path does not do, and the caller uses
Fabric (paramiko): a jump host (its per-hop error reporting is paramiko's), no key file (the agent),
a path OpenSSH would expand or split (``%``, ``~``, whitespace), an unreadable key or pin (Fabric
reports those as before), or ``JACKIN_SSH=paramiko``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from jackin.errors import ConnectError, HostKeyError
from jackin.paths import private_dir, state_dir
from jackin.transport.target import SshTarget

PERSIST = 60  # seconds a master connection outlives its last command
SOCKET_MAX = 100  # a Unix socket path must fit in sun_path (108 bytes, less what ssh appends while binding)
STRICT = (
    "StrictHostKeyChecking=yes", "GlobalKnownHostsFile=/dev/null", "UpdateHostKeys=no", "HashKnownHosts=no",
    "CheckHostIP=no", "VerifyHostKeyDNS=no", "BatchMode=yes", "IdentitiesOnly=yes",
    "PreferredAuthentications=publickey", "PasswordAuthentication=no", "KbdInteractiveAuthentication=no",
    "ForwardAgent=no", "ForwardX11=no", "ClearAllForwardings=yes", "AddKeysToAgent=no", "ProxyCommand=none",
    "ProxyJump=none", "PermitLocalCommand=no", "RequestTTY=no", "EnableSSHKeysign=no", "LogLevel=ERROR",
)  # fmt: skip


class Ran(BaseModel):
    """What the remote command did: its exit status and output."""

    model_config = ConfigDict(extra="forbid")

    exited: int
    stdout: str
    stderr: str


def _plain(path: Path) -> bool:
    """A path OpenSSH takes literally: no tokens (%), no ~, no whitespace (UserKnownHostsFile splits on it)."""
    text = str(path)
    return path.is_absolute() and not re.search(r"[%~\s\"']", text)


def usable(target: SshTarget) -> bool:
    """Whether this path serves ``target`` (else Fabric does)."""
    if os.environ.get("JACKIN_SSH", "").lower() == "paramiko" or shutil.which("ssh") is None:
        return False
    if target.jump is not None or target.key_file is None:
        return False
    key = target.key_file.expanduser()
    readable = os.access(key, os.R_OK) and os.access(target.known_hosts, os.R_OK)  # else Fabric's own errors
    return _plain(key) and _plain(target.known_hosts) and readable


def control_path(target: SshTarget) -> str | None:
    """The master connection's socket: named by everything the connection was checked against."""
    pinned = target.known_hosts.read_bytes()
    key = str(target.key_file.expanduser()) if target.key_file else ""
    name = hashlib.sha256("\0".join([target.user, target.address, str(target.port), key]).encode()
                          + b"\0" + pinned).hexdigest()[:24]  # fmt: skip
    path = str(private_dir(state_dir() / "ssh") / name)
    return path if len(path) <= SOCKET_MAX and _plain(Path(path)) else None


def argv(target: SshTarget, command: str, *, timeout: float = 10) -> list[str] | None:
    """The ssh command line for ``command`` on ``target``, or None when Fabric must serve it."""
    if not usable(target):
        return None
    assert target.key_file is not None  # usable() checked it
    options = [*STRICT, f"UserKnownHostsFile={target.known_hosts}", f"ConnectTimeout={max(1, round(timeout))}",
               "ServerAliveInterval=5", "ServerAliveCountMax=2"]  # fmt: skip
    socket = control_path(target)
    if socket is None:  # too long for a socket: no multiplexing, still strict
        options += ["ControlMaster=no", "ControlPath=none"]
    else:
        options += ["ControlMaster=auto", f"ControlPersist={PERSIST}", f"ControlPath={socket}"]
    args = ["ssh", "-F", "/dev/null", "-T", "-i", str(target.key_file.expanduser()), "-p", str(target.port),
            "-l", target.user]  # fmt: skip
    for option in options:
        args += ["-o", option]
    return [*args, "--", target.address, command]


def run(target: SshTarget, command: str, *, timeout: float = 10, connect_timeout: float = 10,
        input: bytes | None = None) -> Ran:  # fmt: skip
    """Run ``command`` on ``target``: its exit status and output, or our error when SSH failed
    (HostKeyError: the key is not the pinned one, or none is pinned; ConnectError: not reached).
    ``connect_timeout`` bounds the connection, ``timeout`` the command after it. ``input``: the command's
    stdin (how files reach a host beside SFTP: never in the command line)."""
    args = argv(target, command, timeout=connect_timeout)
    if args is None:
        raise ValueError(f"{target.name}: not served by the OpenSSH path (check usable() first)")
    # stderr to a file, not a pipe: a master that goes to the background keeps the stderr it was given,
    # and a pipe would not reach its end until the master exits.
    with tempfile.TemporaryFile() as err:
        stdin = subprocess.DEVNULL if input is None else subprocess.PIPE
        with subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=err) as client:
            _clients.add(client)
            try:
                out, _ = client.communicate(input, timeout=timeout + max(1, round(connect_timeout)) + 2)
            except subprocess.TimeoutExpired:
                client.kill()
                raise ConnectError(f"SSH to {target.endpoint} failed: no answer within "
                                   f"{timeout + connect_timeout:.0f}s", host=target.name) from None  # fmt: skip
            finally:
                _clients.discard(client)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    stdout = out.decode(errors="replace")
    if client.returncode == 255:
        failure = ssh_failure(target, stderr)
        if failure is not None:
            raise failure
    return Ran(exited=client.returncode, stdout=stdout, stderr=stderr)


_clients: set[subprocess.Popen] = set()  # the ssh clients ``run`` is waiting on, in any thread


def end_all() -> None:
    """Kill every ssh client ``run`` is still waiting on (after a Ctrl-C: their reads are not wanted).
    A multiplexing master is not among them: it is its own process, and stays for the next command."""
    for client in list(_clients):
        client.kill()


MISMATCH = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is\s+(\S+?)\.?\s*$", re.M)
UNREACHED = ("Connection refused", "Connection timed out", "No route to host", "Network is unreachable",
             "Could not resolve hostname", "Connection reset", "Connection closed", "banner exchange",
             "kex_exchange_identification")  # fmt: skip


def ssh_failure(target: SshTarget, stderr: str) -> ConnectError | None:
    """ssh's own failure (exit 255) as our error, worded as ``jackin.transport.ssh`` words paramiko's;
    None when stderr does not read as ssh's (then exit 255 was the remote command's)."""
    text = " ".join(stderr.split())
    endpoint, pinned = target.endpoint, target.known_hosts
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr or "Host key verification failed" in stderr:
        found = MISMATCH.search(stderr)
        if found or "IDENTIFICATION HAS CHANGED" in stderr:
            got = f"got {_key_name(found.group(1))} {found.group(2)}, " if found else ""
            return HostKeyError(f"host key mismatch for {endpoint}: {got}not the key pinned in {pinned}",
                                host=target.name,
                                hint="if the host was rebuilt on purpose, update its pinned key; otherwise do not connect")  # fmt: skip
        return HostKeyError(f"no pinned host key for {endpoint} in {pinned}", host=target.name,
                            hint="pin the host's public key (host_keys in the inventory)")  # fmt: skip
    if "Permission denied" in text:
        return ConnectError(f"SSH to {endpoint} failed: Authentication failed ({text[:160]})", host=target.name)
    if any(marker in text for marker in UNREACHED):
        return ConnectError(f"cannot reach {endpoint}: {text[:200]}", host=target.name)
    if text.startswith("ssh:") or "ssh_" in text or "mux_client" in text or "ControlSocket" in text:
        return ConnectError(f"SSH to {endpoint} failed: {text[:200]}", host=target.name)
    return None


def _key_name(kind: str) -> str:
    """OpenSSH's key kind as paramiko names it (ED25519 -> ssh-ed25519)."""
    return {"ED25519": "ssh-ed25519", "RSA": "ssh-rsa", "ECDSA": "ecdsa-sha2-nistp256"}.get(kind, kind)
