"""The data shapes of snapshots: what one agent's snapshot records, what a fleet
snapshot is, and what create, diff, restore and prune return.

A fleet snapshot (``SnapshotRecord``) is the set of its agents' snapshots taken
together under one id (``YYYYMMDD-HHMMSS-xxxx``, UTC); every (host, instance)
has its own restic snapshot in that host's repository, tagged ``snap=<id>``.
``tiers`` says where a snapshot lives: ``restic`` (the durable copy) and, where
the host's filesystem allows, ``checkpoint`` (a copy-on-write snapshot, another
module's). Pure data: nothing here touches a host.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.transport.remote import HostError

Kind = Literal["manual", "auto", "pre-restore", "final"]
Tier = Literal["checkpoint", "restic"]
# How an agent's home was held still while restic read it (``jackin.snapshots.instant``).
Instant = Literal["checkpoint", "frozen", "paused", "stopped", "live"]
SNAPSHOT_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def new_id(now: datetime | None = None) -> str:
    """A fleet snapshot id: UTC time to the second and 4 random hex digits."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentManifest(_Model):
    """One agent's resolved environment at snapshot time, so a restore (even onto a fresh
    host) can recreate the same agent: written root-only on the host, backed up with the
    agent's home, and recorded in the ledger."""

    fleet: str
    snapshot: str
    instance: str
    agent: str
    host: str
    uid: int
    gid: int
    user: str
    home: str
    workspace: str
    container: str
    image: str
    image_id: str | None = None  # the container's image id, when the container exists
    spec: dict[str, Any]  # the agent's spec (AgentSpec dump)
    network: dict[str, Any]  # its resolved network policy (NetworkPolicy dump)
    firewall_hash: str  # jackin.net.policy.bundle_hash of the fleet plan
    created: str  # UTC, ISO 8601
    tiers: list[Tier] = Field(default_factory=lambda: list[Tier](["restic"]))


class BackupSummary(_Model):
    """restic's ``backup --json`` summary for one agent: what was new and how much was stored."""

    snapshot_id: str
    files_new: int = 0
    files_changed: int = 0
    files_unmodified: int = 0
    data_added: int = 0
    total_bytes: int = 0  # bytes of the files the snapshot holds
    instant: Instant | None = None  # how the home was held still (None: restic ran without jackin's script)
    frozen_ms: float | None = None  # how long the agent's container was frozen for it (None: not frozen)


class AgentSnapshot(_Model):
    """One (host, instance) of a fleet snapshot."""

    host: str
    instance: str
    agent: str
    restic_id: str | None = None  # the restic snapshot id in that host's repository
    size: int = 0
    added: int = 0
    files_new: int = 0
    files_changed: int = 0
    tiers: list[Tier] = Field(default_factory=list)
    manifest: AgentManifest | None = None
    instant: Instant | None = None  # how the restic tier held the home still (None: before jackin recorded it)
    frozen_ms: float | None = None  # how long the agent was frozen for the restic tier (None: not frozen)


class SnapshotRecord(_Model):
    """A fleet snapshot as the ledger keeps it."""

    id: str
    fleet: str
    created: str  # UTC, ISO 8601
    label: str | None = None
    kind: Kind = "manual"
    agents: list[AgentSnapshot] = Field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return sorted({a.host for a in self.agents})

    @property
    def instances(self) -> list[str]:
        return sorted({a.instance for a in self.agents})

    @property
    def size(self) -> int:
        return sum(a.size for a in self.agents)

    @property
    def added(self) -> int:
        return sum(a.added for a in self.agents)

    @property
    def tiers(self) -> list[str]:
        return sorted({t for a in self.agents for t in a.tiers})

    def row(self) -> dict[str, Any]:
        """The summary a listing shows (``snapshot.list --json``)."""
        return {"id": self.id, "created": self.created, "label": self.label, "kind": self.kind,
                "agents": self.instances, "hosts": self.hosts, "size": self.size, "added": self.added,
                "tiers": self.tiers}  # fmt: skip

    def agent(self, host: str, instance: str) -> AgentSnapshot | None:
        return next((a for a in self.agents if a.host == host and a.instance == instance), None)


class CreateResult(_Model):
    """A fleet snapshot taken: what was recorded, and the hosts that failed (never dropped)."""

    snapshot: SnapshotRecord
    errors: list[HostError] = Field(default_factory=list)


class Change(_Model):
    """One path that differs: ``+`` added, ``-`` removed, ``M`` content changed, ``T`` type
    changed, ``U`` metadata (owner, mode, times) changed."""

    path: str
    change: str


class AgentDiff(_Model):
    host: str
    instance: str
    against: str  # the other snapshot's id, or "live"
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    bytes_added: int = 0
    bytes_removed: int = 0


class DiffResult(_Model):
    snapshot: str
    against: str
    agents: list[AgentDiff] = Field(default_factory=list)
    errors: list[HostError] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(a.added or a.removed or a.changed for a in self.agents)


class AgentRestore(_Model):
    host: str
    instance: str
    restored: bool
    error: str | None = None
    restarted: bool = False
    tier: Tier | None = None  # the tier the workspace came back from (None: not restored)
    note: str | None = None  # why the checkpoint tier was not used, when the snapshot had it


class RestoreResult(_Model):
    snapshot: str
    pre_restore: str | None = None  # the snapshot taken first: restoring it undoes this restore
    agents: list[AgentRestore] = Field(default_factory=list)
    errors: list[HostError] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and all(a.restored for a in self.agents)


class PruneResult(_Model):
    keep: int
    kept: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    errors: list[HostError] = Field(default_factory=list)
    checkpoints: int = 0  # checkpoints of the removed snapshots deleted from the hosts
    notes: list[str] = Field(default_factory=list)  # snapshots of hosts that left the fleet: kept or forgotten, why
