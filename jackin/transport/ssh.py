"""Strict SSH: the resolved target (``jackin.transport.target``), the tunnel through its jump hosts, and Fabric
connections for imperative one-off work (status, the clean check, netcheck).

The inventory is the whole truth. Nothing here reads the operator's
``~/.ssh/config``, ``~/.fabric.yaml`` or ``~/.ssh/known_hosts``: a config there
could send a pinned name elsewhere or add a jump host nobody pinned. Every hop,
each jump host and the target itself, is checked against the fleet's pinned
known_hosts and refused when its key is not there; nothing is ever added to it.
The engine (pyinfra) opens its jump hosts with the same ``open_tunnel``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import paramiko
from fabric import Config, Connection

from jackin.errors import ConnectError, HostKeyError
from jackin.transport.target import SshTarget

# paramiko logs a traceback for every refused banner while sshd boots; we report
# failures ourselves, with context.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


def auth_kwargs(target: SshTarget, *, timeout: float) -> dict[str, object]:
    """paramiko ``connect`` arguments: only the inventory's key (or the agent when it
    names none), never the operator's default keys; every phase bounded by ``timeout``."""
    kwargs: dict[str, object] = {
        "look_for_keys": False,
        "allow_agent": target.key_file is None,
        "banner_timeout": timeout,
        "auth_timeout": timeout,
    }
    if target.key_file is not None:
        kwargs["key_filename"] = str(target.key_file.expanduser())
    return kwargs


def pin(client: paramiko.SSHClient, hop: SshTarget, *, target: SshTarget) -> None:
    """Make ``client`` accept only the keys pinned for ``hop``: no key is ever learned."""
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.load_host_keys(str(hop.known_hosts))
    except OSError as error:
        raise HostKeyError(
            f"{_via(hop, target)}cannot read the pinned host keys for {hop.endpoint}: "
            f"{error.strerror}: {hop.known_hosts}",
            host=target.name,
        ) from None
    except paramiko.hostkeys.InvalidHostKey as error:  # a pinned key whose base64 does not decode
        raise HostKeyError(
            f"{_via(hop, target)}a pinned host key in {hop.known_hosts} is not a valid key: {error.line.strip()[:120]}",
            host=target.name,
            hint="copy the host's key again from /etc/ssh/ssh_host_ed25519_key.pub (the whole base64 part)",
        ) from None


def _via(hop: SshTarget, target: SshTarget) -> str:
    return "" if hop is target else f"through jump host {hop.name}: "


@contextmanager
def reported(hop: SshTarget, *, target: SshTarget) -> Iterator[None]:
    """Turn paramiko's failures while connecting to ``hop`` (on the way to ``target``)
    into our errors: reported for ``target``, naming the hop that failed."""
    via = _via(hop, target)
    try:
        yield
    except paramiko.BadHostKeyException as error:
        raise HostKeyError(
            f"{via}host key mismatch for {hop.endpoint}: got {error.key.get_name()} {error.key.fingerprint}, "
            f"not the key pinned in {hop.known_hosts}",
            host=target.name,
            hint="if the host was rebuilt on purpose, update its pinned key; otherwise do not connect",
        ) from None
    except paramiko.SSHException as error:
        if "not found in known_hosts" in str(error):
            raise HostKeyError(
                f"{via}no pinned host key for {hop.endpoint} in {hop.known_hosts}",
                host=target.name,
                hint="pin the host's public key (host_keys in the inventory)",
            ) from None
        raise ConnectError(f"{via}SSH to {hop.endpoint} failed: {error}", host=target.name) from None
    except (TimeoutError, OSError, EOFError) as error:
        raise ConnectError(f"{via}cannot reach {hop.endpoint}: {error}", host=target.name) from None


class Tunnel:
    """Open connections to a target's jump hosts and the channel through the last
    of them to the target; close it once the target's connection is closed."""

    def __init__(self) -> None:
        self.clients: list[paramiko.SSHClient] = []
        self.sock: paramiko.Channel | None = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        for client in reversed(self.clients):
            client.close()
        self.clients.clear()


def open_tunnel(target: SshTarget, *, timeout: float = 10) -> Tunnel:
    """Connect to each of ``target``'s jump hosts in turn, each through the one
    before and each checked against its pinned key, and open a channel from the
    last one to ``target``. Every step is bounded by ``timeout``."""
    tunnel = Tunnel()
    hops = target.hops
    try:
        for hop, after in zip(hops, [*hops[1:], target], strict=True):
            client = paramiko.SSHClient()
            tunnel.clients.append(client)
            pin(client, hop, target=target)
            with reported(hop, target=target):
                client.connect(hop.address, hop.port, hop.user, sock=tunnel.sock, timeout=timeout,
                               **auth_kwargs(hop, timeout=timeout))  # type: ignore[arg-type]  # values of several types, one per keyword  # fmt: skip
            tunnel.sock = _channel(client, hop, after, target=target, timeout=timeout)
    except BaseException:
        tunnel.close()
        raise
    return tunnel


def _channel(client: paramiko.SSHClient, hop: SshTarget, to: SshTarget, *, target: SshTarget,
             timeout: float) -> paramiko.Channel:  # fmt: skip
    transport = client.get_transport()
    try:
        assert transport is not None, "connected clients have a transport"
        return transport.open_channel("direct-tcpip", (to.address, to.port), ("", 0), timeout=timeout)
    except (paramiko.SSHException, OSError, EOFError) as error:
        raise ConnectError(
            f"through jump host {hop.name}: cannot reach {to.endpoint}: {str(error) or type(error).__name__}",
            host=target.name,
        ) from None


class _Connection(Connection):
    """A Fabric connection that also closes the tunnel it was opened through."""

    tunnel: Tunnel | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.tunnel is not None:
                self.tunnel.close()


def connection(target: SshTarget, *, timeout: float = 10, sock: paramiko.Channel | None = None) -> Connection:
    """A Fabric connection to ``target``, not yet open, built from the target alone.

    Its config is lazy: no ssh config, no ``~/.fabric.yaml`` or ``/etc/fabric.yaml``
    (which could set a gateway, forward the agent or add keys).
    """
    config = Config(ssh_config=paramiko.SSHConfig(), lazy=True,
                    overrides={"load_ssh_configs": False, "run": {"in_stream": False}})  # fmt: skip
    kwargs = auth_kwargs(target, timeout=timeout)
    if sock is not None:
        kwargs["sock"] = sock
    return _Connection(host=target.address, port=target.port, user=target.user, config=config,
                       connect_timeout=max(1, round(timeout)), connect_kwargs=kwargs, forward_agent=False)  # fmt: skip


def connect(target: SshTarget, *, timeout: float = 10) -> Connection:
    """An open Fabric connection that refuses any host key not pinned for ``target``,
    and for each jump host on the way."""
    tunnel = open_tunnel(target, timeout=timeout) if target.jump else None
    try:
        conn = connection(target, timeout=timeout, sock=tunnel.sock if tunnel else None)
        conn.tunnel = tunnel
        pin(conn.client, target, target=target)
        with reported(target, target=target):
            conn.open()
    except BaseException:
        if tunnel is not None:
            tunnel.close()
        raise
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
    raise ConnectError(f"{target.endpoint} was not ready within {timeout:.0f}s: {last}", host=target.name)
