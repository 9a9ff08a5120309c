"""pyinfra's SSH connector with the inventory as the whole truth (engine process only).

pyinfra reads ``~/.ssh/config`` by default (HostName, Port, User, IdentityFile,
ProxyJump, ForwardAgent, even ``Match exec`` commands) and opens ProxyJump hops
with its accept-new/ask host-key policies and ``~/.ssh/known_hosts``. The engine
gives every host ``ssh_config_file = /dev/null`` instead, and this connector
opens a target's jump hosts itself with ``jackin.transport.ssh.open_tunnel``: each hop
checked against the pinned known_hosts, nothing accepted on first use, every
step bounded by the run's connect timeout. The target is then reached over the
tunnel's channel (paramiko's ``sock``), still with strict host-key checking.
"""

from __future__ import annotations

import os
from typing import Any

from pyinfra.api.exceptions import ConnectError as PyinfraConnectError
from pyinfra.connectors.ssh import SSHConnector

from jackin.errors import JackinError
from jackin.transport.ssh import SshTarget, Tunnel, open_tunnel

NO_SSH_CONFIG = os.devnull
TARGET_DATA = "jackin_ssh_target"


class PinnedSSHConnector(SSHConnector):
    """SSH to a jackin target: no ssh config, every jump host pinned."""

    tunnel: Tunnel | None = None

    def _connect(self) -> None:
        self._close_tunnel()
        target = SshTarget.model_validate(self.host.data.get(TARGET_DATA))
        if target.jump is not None:
            try:
                self.tunnel = open_tunnel(target, timeout=self.state.config.CONNECT_TIMEOUT)
            except JackinError as error:
                raise PyinfraConnectError(error.message) from None
        try:
            super()._connect()
        except BaseException:
            self._close_tunnel()
            raise

    def make_paramiko_kwargs(self) -> dict[str, Any]:
        kwargs = super().make_paramiko_kwargs()
        if self.tunnel is not None:
            kwargs["sock"] = self.tunnel.sock
        return kwargs

    def disconnect(self) -> None:
        try:
            super().disconnect()
        finally:
            if self.client is not None:
                self.client.close()
            self._close_tunnel()

    def _close_tunnel(self) -> None:
        if self.tunnel is not None:
            self.tunnel.close()
            self.tunnel = None
