"""Strict SSH for imperative one-off work (Fabric), and the resolved SSH target.

Fabric's ``Connection`` accepts any host key by default; ``connect`` loads only
the fleet's pinned known_hosts and rejects every key not in it.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import paramiko
from fabric import Config, Connection
from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import ConnectError, HostKeyError

# paramiko logs a traceback for every refused banner while sshd boots; we report
# failures ourselves, with context.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


class SshTarget(BaseModel):
    """A host resolved for connection: where it is and how it is trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    address: str
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None
    known_hosts: Path
    jump: SshTarget | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def connect(target: SshTarget, *, timeout: float = 10) -> Connection:
    """An open Fabric connection that refuses any host key not pinned for ``target``."""
    gateway = connect(target.jump, timeout=timeout) if target.jump else None
    kwargs: dict[str, object] = {"look_for_keys": False, "allow_agent": target.key_file is None}
    if target.key_file is not None:
        kwargs["key_filename"] = str(target.key_file.expanduser())
    conn = Connection(
        host=target.address,
        port=target.port,
        user=target.user,
        connect_timeout=int(timeout),
        connect_kwargs=kwargs,
        gateway=gateway,
        config=Config(overrides={"load_ssh_configs": False, "run": {"in_stream": False}}),
    )
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.client.load_host_keys(str(target.known_hosts))
    except OSError as error:
        raise HostKeyError(
            f"cannot read the pinned host keys for {target.endpoint}: {error.strerror}: {target.known_hosts}",
            host=target.name,
        ) from None
    try:
        conn.open()
    except paramiko.BadHostKeyException as error:
        raise HostKeyError(
            f"host key mismatch for {target.endpoint}: got {error.key.get_name()} "
            f"{error.key.get_base64()[:24]}..., not the key pinned in {target.known_hosts}",
            host=target.name,
            hint="if the host was rebuilt on purpose, update its pinned key; otherwise do not connect",
        ) from None
    except paramiko.SSHException as error:
        if "not found in known_hosts" in str(error):
            raise HostKeyError(
                f"no pinned host key for {target.endpoint} in {target.known_hosts}",
                host=target.name,
                hint="pin the host's public key (host_keys in the inventory)",
            ) from None
        raise ConnectError(f"SSH to {target.endpoint} failed: {error}", host=target.name) from None
    except (OSError, socket.timeout, EOFError) as error:
        raise ConnectError(f"cannot reach {target.endpoint}: {error}", host=target.name) from None
    return conn


def wait_ready(target: SshTarget, *, timeout: float = 90, command: str = "true") -> str:
    """Poll until ``target`` accepts SSH and ``command`` succeeds; return its output.

    A host-key mismatch is final and raised at once; other failures are retried
    until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    delay = 0.2
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with connect(target, timeout=min(10, max(1, deadline - time.monotonic()))) as conn:
                result = conn.run(command, hide=True, warn=True, timeout=max(5, deadline - time.monotonic()))
                if result.ok:
                    return result.stdout
                last = ConnectError(f"{command!r} exited {result.exited}: {result.stderr.strip()}")
        except HostKeyError:
            raise
        except ConnectError as error:
            last = error
        except Exception as error:  # noqa: BLE001 - paramiko raises many kinds while sshd starts
            last = error
        time.sleep(delay)
        delay = min(delay * 1.5, 2)
    raise ConnectError(
        f"{target.endpoint} was not ready within {timeout:.0f}s: {last}", host=target.name
    )
