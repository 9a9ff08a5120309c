"""Imperative reads from many hosts at once over strict SSH, with bounded timeouts: the system's
OpenSSH client, multiplexed, where it serves the target (``jackin.transport.openssh``), else Fabric.

A host that does not answer is a result (its ConnectError), never a hang and
never an exception that hides the other hosts; a command that fails on a host
that answered is that host's RemoteCommandError.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict

from jackin.errors import ConnectError, JackinError, RemoteCommandError
from jackin.transport import fanout, openssh
from jackin.transport.target import SshTarget

if TYPE_CHECKING:
    from fabric import Connection

T = TypeVar("T")


class HostError(BaseModel):
    """One host's failure in a task over several hosts: reported beside the others' results."""

    model_config = ConfigDict(extra="forbid")

    host: str
    error: str
    unreachable: bool  # not reached (exit 3), else reached and failed (exit 1)

    @classmethod
    def of(cls, host: str, error: JackinError) -> HostError:
        return cls(host=host, error=error.message, unreachable=isinstance(error, ConnectError))

    @property
    def exit_code(self) -> int:
        return ConnectError.exit_code if self.unreachable else JackinError.exit_code


def connect(target: SshTarget, *, timeout: float = 10) -> Connection:
    """The Fabric fallback's connection (``jackin.transport.ssh.connect``): paramiko and Fabric are loaded by
    the first read OpenSSH does not serve, not by every command's start."""
    from jackin.transport import ssh  # lazy: paramiko and Fabric, for the first read OpenSSH does not serve

    return ssh.connect(target, timeout=timeout)


def run(target: SshTarget, command: str, *, timeout: float = 10, input: bytes | None = None) -> openssh.Ran:
    """``command`` on ``target`` (``input`` on its stdin: how files reach a host beside SFTP, never in the command
    line): the system's OpenSSH client where it serves the target, else Fabric. ConnectError when not reached (a
    timeout or an SSH fault too); the command's own failure is its exit status."""
    try:
        if openssh.usable(target):  # the system client, multiplexed; as strict (jackin.transport.openssh)
            return openssh.run(target, command, timeout=timeout, connect_timeout=min(timeout, 10), input=input)
        with connect(target, timeout=min(timeout, 10)) as conn:
            if input is None:
                done = conn.run(command, hide=True, warn=True, timeout=timeout)
                return openssh.Ran(exited=done.exited, stdout=done.stdout, stderr=done.stderr)
            return _with_input(conn, command, input, timeout=timeout, host=target.name)
    except ConnectError:
        raise
    except Exception as error:  # noqa: BLE001 - timeouts and SSH faults become that host's error
        raise fanout.unreached(error, target.name) from None


def _with_input(conn: Connection, command: str, data: bytes, *, timeout: float, host: str) -> openssh.Ran:
    """``command`` over a Fabric connection's channel with ``data`` on its stdin, read as it comes (``channel.pump``)."""
    from jackin.transport import channel as reader  # lazy: paramiko's side, for this path alone

    transport = conn.client.get_transport()
    if transport is None:
        raise ConnectError("the SSH connection is closed", host=host)
    session = transport.open_session()
    session.settimeout(timeout)
    out, err = bytearray(), bytearray()
    try:
        session.exec_command(command)
        session.sendall(data)
        session.shutdown_write()
        try:
            reader.pump(session, out=out.extend, err=lambda b: err.extend(b[: max(0, 65536 - len(err))]),
                        deadline=time.monotonic() + timeout, poll=0.02)  # fmt: skip
        except TimeoutError:
            raise ConnectError(f"no end within {timeout:.0f} s", host=host) from None
        return openssh.Ran(exited=session.recv_exit_status(), stdout=out.decode(errors="replace"),
                           stderr=err.decode(errors="replace"))  # fmt: skip
    finally:
        session.close()


def gather(
    targets: Sequence[SshTarget],
    command: str,
    parse: Callable[[str], T],
    *,
    timeout: float = 10,
) -> dict[str, T | JackinError]:
    """Run ``command`` on every target in parallel; per host the parsed output or the error
    (ConnectError: not reached; RemoteCommandError: reached, the command failed).

    A Ctrl-C is raised at once (``jackin.transport.fanout``), not after the reads in flight: their
    ssh clients are ended, and a Fabric connection's daemon threads are left to the process's exit."""

    def one(target: SshTarget) -> T:
        result = run(target, command, timeout=timeout)
        if result.exited != 0:
            raise RemoteCommandError(
                f"command failed (exit {result.exited}): {result.stderr.strip()[:200]}", host=target.name
            )
        return parse(result.stdout)  # output that does not parse (a forged or broken read) fails that host alone

    return fanout.each_host(targets, one, interrupted=openssh.end_all).by_host()
