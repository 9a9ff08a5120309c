"""Where a host is and how it is trusted: ``SshTarget``, apart from the SSH clients (``jackin.transport.ssh``:
paramiko and Fabric; ``jackin.transport.openssh``), so that what only names a target loads neither."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class SshTarget(BaseModel):
    """A host resolved for connection: where it is, how it is trusted, and the
    jump host (itself a target, checked the same way) it is reached through."""

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

    @property
    def hops(self) -> list[SshTarget]:
        """The jump hosts on the way to this target, outermost (reached first) first."""
        chain: list[SshTarget] = []
        hop = self.jump
        while hop is not None:
            chain.insert(0, hop)
            hop = hop.jump
        return chain
