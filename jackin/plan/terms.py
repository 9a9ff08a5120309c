"""The launch contract's document: what each agent will be able to reach, and what jackin does to each host.

These models are the contract ``jackin.plan.contract.build`` resolves. The JSON form is versioned
(``schema_version``); its JSON schema is generated from these models and committed as
``docs/contract.schema.json`` (a unit test keeps the two equal). Bump ``SCHEMA_VERSION`` whenever a
field is renamed, removed or changes meaning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from jackin.spec.credentials import FILE_MODE

SCHEMA_VERSION: Final = 1
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "contract.schema.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- per agent --------------------------------------------------------------------------------


class Identity(_Model):
    user: str  # the Unix user (and group) on every host of the fleet
    uid: int
    gid: int
    home: str
    workspace: str
    container: str


class MountTerm(_Model):
    """A host path visible inside the agent's container."""

    source: str  # on the host
    target: str  # in the container
    mode: Literal["ro", "rw"]
    kind: Literal["workspace", "credentials", "spec", "work"]
    acknowledged_credentials: bool = False  # a credential-like path the spec acknowledged


class CredentialTerm(_Model):
    """How one credential reaches the agent; its value is never part of a contract."""

    name: str
    # file: the value in the agent's file; gateway: a placeholder there, the value with the host's gateway
    delivery: Literal["file", "gateway"] = "file"
    holds: str = "the agent's process holds the value (residual risk)"  # who holds the value, in words
    upstream: str | None = None  # gateway: the only host the gateway sends the value to
    host_path: str
    container_path: str
    mode: str = FILE_MODE
    owner: str  # the agent's user
    source: Literal["env", "file"]  # where the operator's machine keeps it
    # source "file": the file it is read from on the operator's machine, resolved (~ expanded, symlinks followed)
    source_path: str | None = None


class WorkTerm(_Model):
    """What the agent is given to work on (jackin/work/bundles.py); never the task's text."""

    repo: str  # the spec's repository: an absolute local path or a git URL
    ref: str
    branch: str  # jackin/<instance>: the agent's own branch
    task: Literal[
        "text", "file", "queue"
    ]  # the spec gives the task as text, as a file (task_file), or none: the queue's
    task_path: str | None = None  # task "file": the file it is read from on the operator's machine, resolved


class PublishTerm(_Model):
    bind: str
    host_port: int
    port: int
    protocol: Literal["tcp", "udp"]


class NetworkTerm(_Model):
    mode: Literal["none", "allowlist", "open"]
    allowlist: list[str]  # the spec's entries (CIDR, host:port, domain[:port])
    dns: list[str]  # the spec's resolvers (allowlist: the filter's upstreams only)
    dns_filter: bool  # resolves through its own filtering resolver (domain entries)
    publish: list[PublishTerm]
    enforcement: Literal["full", "partial"]  # jackin.spec.models.enforcement
    enforcement_reasons: list[str]
    always_denied: list[str]


class DockerTerm(_Model):
    access: Literal["none", "socket"]
    detail: str
    risk: str
    apparmor: list[str] = []  # per host read: "h1: no AppArmor on this host", "h1: AppArmor: docker-default (enforce)"


class ResourcesTerm(_Model):
    """As applied in the container's ``docker run`` line."""

    cpus: float
    memory: int  # bytes; swap is not allowed beyond it (--memory-swap equal)
    memory_swap: int
    pids: int
    disk: int | None = None  # bytes: the home's btrfs quota (resources.disk); None: no quota (the host's filesystem)
    hardening: list[str]


class ApiTerm(_Model):
    """The model provider's base URL the runtime uses, and whence: its role's default, or the spec's
    ``api_url`` (then set in ``env`` in the container; in allowlist mode its ``host:port`` is the
    allowlist's entry for the provider)."""

    url: str
    env: str
    source: Literal["role", "spec"]
    # gateway: the runtime reaches ``url`` through the credential gateway on its bridge (``env`` is
    # http://<bridge address>:8377<path>); direct: itself
    via: Literal["direct", "gateway"] = "direct"
    budget: dict[str, float | int | None] | None = None  # the agent's, enforced by the gateway


class AgentContract(_Model):
    instance: str
    agent: str
    role: str
    image: str
    identity: Identity
    mounts: list[MountTerm]
    credentials: list[CredentialTerm]
    network: NetworkTerm
    docker: DockerTerm
    resources: ResourcesTerm
    residual_risks: list[str]
    work: WorkTerm | None = None  # None: the agent has no work in the spec
    api: ApiTerm | None = None  # None: the role names no model provider's base URL
    # Where it lives (jackin/plan/placement.py): spread, on one host; each, on every one of its agent's. hosts
    # empty: not placed yet (fleet.up places it by the hosts' capacity)
    placement: Literal["spread", "each"] = "spread"
    hosts: list[str] = []


# --- per fleet --------------------------------------------------------------------------------


class PackageTerm(_Model):
    name: str
    when: str


class HostEffects(_Model):
    """What ``fleet.up`` writes on each host of the fleet (deploys/fleet.py), the same on every host."""

    packages: list[PackageTerm]
    services: list[str]
    files: list[str]
    directories: list[str]
    firewall_tables: list[str]
    daemon_json_keys: list[str]  # merged into /etc/docker/daemon.json; the operator's other keys kept
    users: list[str]
    docker_objects: list[str]


class RecoveryTerm(_Model):
    engine: str
    before_changes: bool
    before_teardown: bool
    keep: int
    every: int | None  # seconds
    checkpoints: Literal["off", "btrfs"]
    checkpoint_size: int | None
    max_freeze: int  # seconds: the longest a running agent is frozen for a restic backup (restic-only tier)
    point_in_time: str  # how each agent's snapshot is one instant on this fleet's tier, and what it costs
    last_snapshot: str | None  # the fleet's newest snapshot id in the ledger (informational: never diffed)
    notes: list[str]


class TeardownTerm(_Model):
    ttl: int | None  # seconds, from the spec
    ttl_enforced: bool
    removes: list[str]
    keeps: list[str]
    keep_data_keeps: list[str]  # what fleet.down --keep-data leaves on the hosts
    final_snapshot: str


class HostFacts(_Model):
    name: str
    kernel: str | None = None
    apparmor: bool | None = None  # the kernel's AppArmor is enabled; None: not read
    apparmor_docker: str | None = None  # docker-default's mode when loaded (enforce, complain); None: not loaded

    def apparmor_line(self) -> str:
        """What confines a container on this host, as the contract's Docker and risk lines say it."""
        if self.apparmor is None:
            return f"{self.name}: AppArmor not checked"
        if not self.apparmor:
            return f"{self.name}: no AppArmor on this host"
        if self.apparmor_docker:
            return f"{self.name}: AppArmor: docker-default ({self.apparmor_docker})"
        return f"{self.name}: AppArmor enabled, docker-default not loaded when read (Docker loads it when it starts)"


class FleetContract(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    fleet: str
    hosts: list[HostFacts]  # the hosts whose facts were read (empty: none were)
    agents: list[AgentContract]
    host_effects: HostEffects
    recovery: RecoveryTerm
    teardown: TeardownTerm
    residual_risks: list[str]

    def agent(self, instance: str) -> AgentContract | None:
        return next((a for a in self.agents if a.instance == instance), None)


def schema() -> dict[str, Any]:
    """The JSON schema of the contract document (committed as docs/contract.schema.json)."""
    return FleetContract.model_json_schema()
