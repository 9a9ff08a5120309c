"""The lab's data: its hosts, its test service and its status, as ``Lab.status`` reads them from the
Docker engine; and ``Log``, how the lab reports progress."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from jackin.lab.service import SERVICE_PORTS
from jackin.transport.target import SshTarget

Log = Callable[[str], None]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LabHost(_Model):
    name: str
    container: str
    state: str
    address: str = "127.0.0.1"
    port: int
    user: str = "root"
    key_file: Path
    known_hosts: Path
    lab_ip: str | None = None
    public_ip: str | None = None
    pinned: bool = False  # the container was made with the host key pinned on this machine

    def target(self) -> SshTarget:
        return SshTarget(
            name=self.name, address=self.address, port=self.port, user=self.user,
            key_file=self.key_file, known_hosts=self.known_hosts,
        )  # fmt: skip


class LabService(_Model):
    """The lab's test service: HTTP on two ports, for proving firewalls."""

    container: str
    state: str
    address: str | None
    public_address: str | None = None
    ports: tuple[int, ...] = SERVICE_PORTS


class LabStatus(_Model):
    name: str
    image: str
    network: str
    directory: Path
    hosts: list[LabHost]
    service: LabService | None = None

    @property
    def exists(self) -> bool:
        return bool(self.hosts) or self.service is not None
