"""The inventory and fleet spec: what an operator writes in ``inventory/*.yaml``.

One document per file::

    hosts:      servers reached over SSH (provider ``static``)
    groups:     named lists of hosts
    fleet:      what runs on them: agents, network policy, resources, snapshots, ttl

Every model forbids unknown keys, so a typo is an error rather than a silent
default. Secrets never live in a spec: a credential is named and says where the
operator's machine keeps it (an environment variable or a file), never its value.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from jackin.errors import SpecError
from jackin.hostpaths import RUN_DIR
from jackin.spec import roles
from jackin.spec.values import (
    SLUG,
    Address,
    AllowEntry,
    ApiUrl,
    HostKey,
    HostName,
    IpAddress,
    Model,
    Slug,
    api_entry,
    parse_duration,
    parse_entry,
    parse_size,
)

# Shipped in roles/; `role:` is checked against the roles found there (jackin/spec/roles.py).
ROLES = ("claude-code", "codex", "opencode", "gemini", "amp", "demo")
# --- hosts -------------------------------------------------------------------


class HostSpec(Model):
    """A server reached over SSH. ``host_keys`` pins its public keys: connections
    to a host whose key is not among them are refused."""

    name: HostName
    address: Address
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]*$")
    key_file: Path | None = None
    host_keys: list[HostKey] = Field(default_factory=list)
    jump: HostName | None = None


# --- fleet -------------------------------------------------------------------


class Publish(Model):
    """An inbound port of the agent's container, published on an address the spec names."""

    port: int = Field(ge=1, le=65535)
    host_port: int | None = Field(None, ge=1, le=65535)
    bind: IpAddress = "127.0.0.1"
    protocol: Literal["tcp", "udp"] = "tcp"


class NetworkPolicy(Model):
    """Egress policy. Always denied whatever the mode: link-local (metadata),
    the host's own services, other agents, private ranges not explicitly allowed."""

    mode: Literal["none", "allowlist", "open"] = "none"
    allow: list[AllowEntry] = Field(default_factory=list)
    dns: list[IpAddress] = Field(default_factory=list)
    publish: list[Publish] = Field(default_factory=list)

    @field_validator("dns")
    @classmethod
    def _dns_not_link_local(cls, value: list[str]) -> list[str]:
        for server in value:
            if ipaddress.ip_address(server).is_link_local:
                raise ValueError(f"resolver {server} is link-local, and link-local addresses are always denied")
        return value

    @field_validator("allow")
    @classmethod
    def _allow_needs_allowlist(cls, value: list[str], info: ValidationInfo) -> list[str]:
        mode = info.data.get("mode")
        if value and mode == "none":
            raise ValueError("entries are not allowed with mode 'none' (use mode 'allowlist')")
        return value


def enforcement(policy: NetworkPolicy) -> tuple[str, list[str]]:
    """What is enforced for an agent with ``policy``: ("full", []) or ("partial", [reasons])."""
    reasons = []
    entries = [parse_entry(e) for e in policy.allow]
    if policy.mode == "allowlist" and any(e.family == "domain" for e in entries):  # open allows more anyway
        reasons.append("domain entries allow the addresses the agent's filtering resolver gave it for "
                       "those names, so other services at those addresses (shared CDNs) are reachable too")  # fmt: skip
    if policy.publish:
        reasons.append("published ports accept inbound connections on their bind address")
    return ("partial", reasons) if reasons else ("full", [])


MIN_DISK = parse_size("32m")
# The disk quota of an agent whose fleet keeps its homes on its btrfs (``snapshots.checkpoints: btrfs``)
# and that sets no ``resources.disk``: never more than the fleet's filesystem (``checkpoint_size``).
DEFAULT_DISK = parse_size("10g")


class Resources(Model):
    memory: Annotated[int, Field(gt=0)] = parse_size("1g")
    cpus: float = Field(1.0, gt=0, le=256)
    pids: int = Field(256, ge=16, le=65536)
    # The home's (and so the workspace's) disk quota, enforced by btrfs (a qgroup of the home's subvolume on
    # the fleet's btrfs): setting it puts the fleet's homes there (``snapshots.checkpoints: btrfs``).
    disk: int | None = None

    @field_validator("memory", "disk", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int | None:
        return None if value is None else parse_size(value)

    @field_validator("disk")
    @classmethod
    def _disk(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_DISK:
            raise ValueError("expected at least 32m (an agent's home holds its workspace and its runtime's files)")
        return value


API_CA = "JACKIN_API_CA"  # the credential an agent's api_ca is delivered as


class Credential(Model):
    """Names a secret and where the operator's machine keeps it; never its value.
    Delivered to the agent as a read-only file, ``/run/jackin/credentials/<name>`` in its
    container (jackin/spec/credentials.py)."""

    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    from_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    from_file: Path | None = None
    # gateway: the agent holds a placeholder, and the host's credential gateway (jackin/net/gateway.py) puts
    # the value into its API requests; file: the agent's process holds the value (residual risk). Unset:
    # gateway for the credential the role's runtime authenticates its API calls with, where it can.
    mode: Literal["gateway", "file"] | None = None
    # oauth: a subscription login (the runtime's login file, or its refresh token), shared by every agent given
    # the same source and refreshed once for the fleet on the operator's machine (jackin/net/logins.py); always
    # through the gateway. The vendors' terms restrict such use: acknowledge_terms says they were read.
    kind: Literal["key", "oauth"] = "key"
    token_url: ApiUrl | None = None  # kind oauth: the login's token endpoint, in place of the role's
    acknowledge_terms: bool = False

    @model_validator(mode="after")
    def _oauth_fields(self) -> Credential:
        if self.kind != "oauth" and (self.token_url is not None or self.acknowledge_terms):
            raise ValueError("token_url and acknowledge_terms are for a credential of kind oauth")
        if self.kind == "oauth" and self.mode == "file":
            raise ValueError("a credential of kind oauth goes through the gateway only (no agent holds a token): "
                             "leave mode unset")  # fmt: skip
        if self.kind == "oauth" and not self.acknowledge_terms:
            raise ValueError("kind oauth: a subscription login used by a fleet may breach the vendor's terms; read "
                             "docs/gateway.md (one shared login), then set acknowledge_terms: true")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _one_source(self) -> Credential:
        if (self.from_env is None) == (self.from_file is None):
            raise ValueError("a credential needs exactly one of from_env or from_file")
        return self


def _check_mount_path(value: str) -> str:
    """An absolute path without a comma or control character (it goes into ``docker run --mount``)."""
    if not value.startswith("/"):
        raise ValueError("expected an absolute path (a host path such as /srv/data, or a container path)")
    if "," in value or any(ord(c) < 32 for c in value):
        raise ValueError("a mount path cannot hold a comma or a control character")
    return str(PurePosixPath(value))


MountPath = Annotated[str, AfterValidator(_check_mount_path)]
RESERVED_TARGETS = ("/workspace", RUN_DIR)  # the workspace and the credentials' and work's mounts


class Mount(Model):
    """A host path bind-mounted into the agent's container, read-only unless ``readonly: false``.
    A credential-like source (~/.ssh, ~/.aws, /root...) is refused unless ``acknowledge_credentials``."""

    source: MountPath
    target: MountPath
    readonly: bool = True
    acknowledge_credentials: bool = False

    @field_validator("target")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == "/" or any(value == r or value.startswith(r + "/") or r.startswith(value + "/")
                               for r in RESERVED_TARGETS):  # fmt: skip
            raise ValueError(f"{value} is the root or overlaps {' or '.join(RESERVED_TARGETS)}, which jackin mounts")
        return value


class Budget(Model):
    """What an agent (or the whole fleet) may spend through the credential gateway; the request after it is
    spent is refused (HTTP 429), and the agent shows ``blocked: budget spent``. A higher budget applied by
    ``fleet.up`` lets it go on, with no restart."""

    tokens: int | None = Field(None, ge=1)  # input and output (cached input included), as the API reports them
    usd: float | None = Field(None, gt=0, allow_inf_nan=False)  # counted with the role's price table
    requests: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _something(self) -> Budget:
        if self.tokens is None and self.usd is None and self.requests is None:
            raise ValueError("a budget needs at least one of tokens, usd or requests")
        return self


class AgentSpec(Model):
    name: Slug
    role: str = "demo"  # one of the roles found under roles/ (jackin/spec/roles.py); checked below
    count: int = Field(1, ge=1, le=64)
    network: NetworkPolicy | None = None
    resources: Resources | None = None
    credentials: list[Credential] = Field(default_factory=list)
    image: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?$")
    mounts: list[Mount] = Field(default_factory=list)
    work: WorkSpec | None = None  # a repository and a task delivered to each instance (jackin/work/bundles.py)
    # The model provider's base URL, in place of the role's (its api.url): a gateway, a stand-in of the
    # vendor's API. The runtime gets it in the role's api.env; the allowlist and the contract follow it.
    api_url: ApiUrl | None = None
    # The certificate authority (a PEM file on this machine) that signed an https:// api_url's certificate:
    # a gateway's or a stand-in's own CA. Delivered as the credential JACKIN_API_CA (a file like any other:
    # /run/jackin/credentials/JACKIN_API_CA); the entrypoint points NODE_EXTRA_CA_CERTS at it, so a Node
    # runtime trusts it beside the system's authorities (never in place of them).
    api_ca: Path | None = None
    budget: Budget | None = None  # counted and enforced by the credential gateway (jackin/net/gateway.py)
    # Where its instances run (jackin/plan/placement.py): ``spread``, ``count`` instances across its hosts by
    # their capacity, each on one host; ``each``, ``count`` instances on every one of its hosts.
    placement: Literal["spread", "each"] = "spread"
    hosts: list[HostName] = Field(default_factory=list)  # host or group names among the fleet's; empty: all of them

    @field_validator("mounts")
    @classmethod
    def _distinct_targets(cls, value: list[Mount]) -> list[Mount]:
        targets = [m.target for m in value]
        if len(set(targets)) != len(targets):
            raise ValueError("two mounts have the same target")
        return value

    @field_validator("role")
    @classmethod
    def _known_role(cls, value: str) -> str:
        return _check_role(value)

    @model_validator(mode="after")
    def _role_credentials(self) -> AgentSpec:
        """Every credential the agent's role needs is given to the agent (names only here)."""
        return _check_role_credentials(self)

    @model_validator(mode="after")
    def _gateway(self) -> AgentSpec:
        return _check_gateway(self)

    @model_validator(mode="after")
    def _role_api(self) -> AgentSpec:
        api = _role(self.role).api if self.role in _role_names() else None
        if self.api_url is not None and api is None:
            raise ValueError(f"agent {self.name!r}: api_url: role {self.role!r} declares no API base URL to replace")
        if api is not None and api.https and self.api_url is not None and _plain_http_elsewhere(self.api_url):
            raise ValueError(f"agent {self.name!r}: api_url {self.api_url}: role {self.role!r}'s runtime refuses a base "
                             "URL that is not https:// unless its host is localhost (it would fail at its start); "
                             "give an https:// URL")  # fmt: skip
        if self.api_ca is not None:
            through = gateway_credential(self) is not None  # the gateway trusts it for the upstream, not the agent
            if not through and api is not None and not api.extra_ca:
                raise ValueError(f"agent {self.name!r}: api_ca: role {self.role!r}'s runtime does not take an extra "
                                 "certificate authority (NODE_EXTRA_CA_CERTS is Node's); give its api_url a "
                                 "certificate the system trusts, or its credential mode gateway")  # fmt: skip
            if self.api_url is None or not self.api_url.startswith("https://"):
                raise ValueError(f"agent {self.name!r}: api_ca: the authority of an https:// api_url's certificate; "
                                 f"{'no api_url is set' if self.api_url is None else f'api_url {self.api_url} is not https://'}")  # fmt: skip
            given = next((c for c in self.credentials if c.name == API_CA), None)
            if given is not None and given.from_file != self.api_ca:
                raise ValueError(f"agent {self.name!r}: credential {API_CA} is api_ca's: give the file as api_ca")
            if through and given is not None:  # a dump of an earlier file-mode spec: the agent gets none now
                self.credentials.remove(given)
            elif not through and given is None:
                self.credentials.append(Credential(name=API_CA, from_file=self.api_ca))
        if api is not None and api.env in {c.name for c in self.credentials}:
            # The entrypoint exports every credential as a variable: this one would replace the URL in force.
            raise ValueError(f"agent {self.name!r}: a credential may not be named {api.env}: that is the variable "
                             f"role {self.role!r} reads its API base URL from (set api_url instead)")  # fmt: skip
        return self


def gateway_credential(agent: AgentSpec) -> str | None:
    """The credential of ``agent`` that goes through the credential gateway, or None (file mode, or a role
    whose runtime cannot reach its API through the gateway)."""
    api = _role(agent.role).api if agent.role in _role_names() else None
    if api is None or api.credential is None:
        return None
    given = next((c for c in agent.credentials if c.name == api.credential), None)
    if given is None:
        return None
    mode = given.mode or ("gateway" if api.gateway or given.kind == "oauth" else "file")
    return api.credential if mode == "gateway" else None


def _check_gateway(agent: AgentSpec) -> AgentSpec:
    """``mode: gateway`` only where the gateway can serve it; a budget only where the gateway counts it."""
    if agent.role not in _role_names():
        return agent
    role = _role(agent.role)
    api = role.api
    for credential in agent.credentials:
        if credential.kind == "oauth" and (api is None or api.login is None or api.credential != credential.name):
            raise ValueError(f"agent {agent.name!r}: credential {credential.name}: kind oauth: role {agent.role!r} "
                             "has no subscription login for it (api.login in its role.yaml)")  # fmt: skip
        if credential.mode != "gateway":
            continue
        if api is None or api.credential != credential.name:
            raise ValueError(f"agent {agent.name!r}: credential {credential.name}: mode gateway is for the credential "
                             f"role {agent.role!r}'s runtime authenticates its API calls with "
                             f"({api.credential if api and api.credential else 'it has none'}); use mode: file")  # fmt: skip
        if not api.gateway:
            raise ValueError(f"agent {agent.name!r}: credential {credential.name}: role {agent.role!r}'s runtime takes "
                             "only an https:// base URL, and the gateway serves agents plain HTTP on their own bridge; "
                             "use mode: file")  # fmt: skip
    through = gateway_credential(agent)
    if through is not None and agent.api_url is not None and not agent.api_url.startswith("https://"):
        raise ValueError(f"agent {agent.name!r}: api_url {agent.api_url}: the credential gateway forwards over "
                         "verified TLS only: give an https:// api_url, or mode: file for its credential")  # fmt: skip
    if agent.budget is not None:
        if through is None:
            raise ValueError(f"agent {agent.name!r}: budget: the credential gateway counts it, and this agent's API "
                             "credential is not in mode gateway")  # fmt: skip
        if agent.budget.usd is not None and not role.prices:
            raise ValueError(f"agent {agent.name!r}: budget.usd: role {agent.role!r} has no price table (prices:)")
    return agent


def _plain_http_elsewhere(url: str) -> bool:
    """Whether ``url`` is http:// to a host other than localhost (and its loopback addresses)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme != "http" or host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


MIN_CHECKPOINT_SIZE = parse_size("256m")
DEFAULT_CHECKPOINT_SIZE = parse_size("10g")


class SnapshotPolicy(Model):
    engine: Literal["restic"] = "restic"
    keep: int = Field(5, ge=1, le=1000)
    before_changes: bool = True
    before_teardown: bool = True
    every: Annotated[int, Field(gt=0)] | None = None
    # The restic-only tier freezes a running agent's container for its backup (one instant): a backup
    # that takes longer than this is stopped and the agent thawed (that agent's snapshot fails).
    max_freeze: int = 600

    @field_validator("every", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int | None:
        return None if value is None else parse_duration(value)

    @field_validator("max_freeze", mode="before")
    @classmethod
    def _max_freeze(cls, value: Any) -> int:
        seconds = parse_duration(value)
        if seconds > 6 * 3600:
            raise ValueError("expected at most 6h (an agent frozen longer is a stopped agent)")
        return seconds

    # The copy-on-write checkpoint tier: ``btrfs`` puts the fleet's homes on a loop-mounted btrfs of
    # ``checkpoint_size`` (a sparse file: space is used as written) so each home is a subvolume.
    checkpoints: Literal["off", "btrfs"] = "off"
    checkpoint_size: int = DEFAULT_CHECKPOINT_SIZE
    # A restic restore is refused, before anything changes, when it would leave less than this free on
    # the homes' filesystem (restic 0.14 writes a sparse file's holes as zeros until jackin digs them again).
    min_free: int = parse_size("256m")

    @field_validator("min_free", mode="before")
    @classmethod
    def _min_free(cls, value: Any) -> int:
        return parse_size(value)

    @field_validator("checkpoint_size", mode="before")
    @classmethod
    def _checkpoint_size(cls, value: Any) -> int:
        size = parse_size(value)
        if size < MIN_CHECKPOINT_SIZE:
            raise ValueError("expected at least 256m (the smallest btrfs worth having), e.g. 10g")
        return size


class AddressPool(Model):
    """A Docker address pool (daemon.json ``default-address-pools``): ``base`` split into networks of
    prefix ``size``, one per agent network (jackin/plan/pools.py counts them against the agents)."""

    base: Annotated[str, AfterValidator(lambda v: str(ipaddress.ip_network(v, strict=True)))]
    size: int = Field(24, ge=16, le=29)

    @model_validator(mode="after")
    def _size_within_base(self) -> AddressPool:
        prefix = ipaddress.ip_network(self.base).prefixlen
        if self.size < prefix:
            raise ValueError(f"size {self.size} is shorter than the base's prefix /{prefix}: the base is split into "
                             f"networks of /size, so size must be at least {prefix}")  # fmt: skip
        return self


class LabSize(Model):
    """A lab host's size: its container's memory (``docker run --memory``) and CPUs (``--cpus``); unset: the
    machine's. What placement weighs (jackin/facts/capacity.py), so a lab can stand for hosts of different sizes."""

    memory: int | None = None
    cpus: float | None = Field(None, gt=0, le=256)

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int | None:
        if value is None:
            return None
        size = parse_size(value)
        if size < MIN_LAB_MEMORY:
            raise ValueError("expected at least 256m (a lab host runs systemd, sshd and a Docker engine)")
        return size


MIN_LAB_MEMORY = parse_size("256m")


class LabSpec(Model):
    """Provider ``lab``: hosts are containers on the local Docker engine."""

    name: Slug = "jackin"
    hosts: int = Field(2, ge=1, le=64)
    sizes: list[LabSize] = Field(default_factory=list, max_length=64)  # host 1's, host 2's...; beyond: the machine's


def lab_host_name(lab: str, index: int) -> str:
    """The name of a lab's ``index``-th host (from 1), ``<lab>-<index>``, as ``jackin.lab.lab.Lab.host_name``
    names it (that module stays light for ``inv --list``: a unit test keeps the two equal)."""
    return f"{lab}-{index}"


class FleetSpec(Model):
    name: Annotated[str, Field(pattern=SLUG, max_length=16)]  # fits jk-<fleet>-<agent>-<n> user names
    provider: Literal["lab", "static"] = "static"
    lab: LabSpec | None = None
    hosts: list[HostName] = Field(default_factory=list, description="host or group names; empty means every host")
    agents: list[AgentSpec] = Field(min_length=1)
    network: NetworkPolicy = NetworkPolicy()
    resources: Resources = Resources()
    snapshots: SnapshotPolicy = SnapshotPolicy()
    ttl: Annotated[int, Field(gt=0)] | None = None
    uid_base: int = Field(60000, ge=1000, le=4_000_000_000)
    address_pools: list[AddressPool] = Field(default_factory=list)
    # The whole fleet's, beside each agent's (which is each instance's own, on each host it runs on): each host's
    # gateway enforces an equal share (the total over the fleet's hosts, which each run every agent, rounded
    # down), so the fleet never spends more, with no host waiting on another.
    budget: Budget | None = None
    tasks: list[TaskSpec] = Field(default_factory=list)  # the queue's tasks from the spec (inv task.add -i FILE)
    review: ReviewSpec | None = None  # the review gate of every task queued for the fleet (a task's own replaces it)

    @model_validator(mode="after")
    def _reviewers(self) -> FleetSpec:
        names = [a.name for a in self.agents]
        gates = [("review", self.review)] + [(f"tasks[{i}].review", t.review) for i, t in enumerate(self.tasks)]
        workers = [a for a in self.agents if a.work is not None]
        for where, gate in gates:
            if gate is None:
                continue
            if gate.agent not in names:
                raise ValueError(
                    f"{where}.agent: {gate.agent!r} is not an agent of the fleet (agents: {', '.join(names)})"
                )
            reviewer = next(a for a in self.agents if a.name == gate.agent)
            if reviewer.work is None:
                raise ValueError(f"{where}.agent: {gate.agent!r} has no work: (its repository), so it takes no task: "
                                 "give it work: {repo: ...}")  # fmt: skip
            if workers == [reviewer] and reviewer.count < 2:
                raise ValueError(f"{where}.agent: {gate.agent!r} is the only agent that works, with one instance: a "
                                 "review goes to another instance than the work's; give it count: 2 or more, or "
                                 "another agent to review")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _fleet_budget(self) -> FleetSpec:
        if self.budget is not None and not any(gateway_credential(a) for a in self.agents):
            raise ValueError("budget: the credential gateway counts it, and no agent of the fleet has its API "
                             "credential in mode gateway")  # fmt: skip
        if self.budget is not None and self.budget.usd is not None:
            unpriced = sorted({a.role for a in self.agents if gateway_credential(a) and not _role(a.role).prices})
            if unpriced:
                raise ValueError(f"budget.usd: role(s) {', '.join(unpriced)} have no price table (prices:)")
        return self

    @field_validator("ttl", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int | None:
        return None if value is None else parse_duration(value)

    @model_validator(mode="before")
    @classmethod
    def _disk_puts_homes_on_btrfs(cls, data: Any) -> Any:
        """A ``resources.disk`` (the fleet's or an agent's) is enforced by btrfs: it turns the checkpoint
        tier on (the fleet's homes on its btrfs) unless ``snapshots.checkpoints`` is set (``off`` with a
        disk is refused after validation, in ``_disk_fits``), and the btrfs (``checkpoint_size``, unless
        set) holds the largest quota."""
        if not isinstance(data, dict) or not _sets_disk(data):
            return data
        snapshots = data.get("snapshots")
        if isinstance(snapshots, SnapshotPolicy):
            snapshots = snapshots.model_dump(exclude_unset=True)
        if snapshots is None:
            snapshots = {}
        if not isinstance(snapshots, dict):
            return data
        snapshots = {"checkpoints": "btrfs", **snapshots}
        largest = _largest_disk(data)
        if "checkpoint_size" not in snapshots and largest and largest > DEFAULT_CHECKPOINT_SIZE:
            snapshots["checkpoint_size"] = largest  # the fleet's btrfs holds the largest quota, at least
        return {**data, "snapshots": snapshots}

    @model_validator(mode="after")
    def _disk_fits(self) -> FleetSpec:
        quotas = [(self.resources.disk, "fleet.resources.disk")]
        quotas += [(a.resources.disk, f"agent {a.name}'s resources.disk") for a in self.agents if a.resources]
        for disk, where in quotas:
            if disk is None:
                continue
            if self.snapshots.checkpoints != "btrfs":
                raise ValueError(f"{where} needs the fleet's homes on its btrfs, whose qgroups enforce it: remove "
                                 "snapshots.checkpoints: off (a disk quota turns the checkpoint tier on)")  # fmt: skip
            if disk > self.snapshots.checkpoint_size:
                raise ValueError(f"{where} ({disk} bytes) is larger than the fleet's btrfs "
                                 f"(snapshots.checkpoint_size, {self.snapshots.checkpoint_size} bytes): raise "
                                 "checkpoint_size or lower the quota")  # fmt: skip
        return self

    def agent_disk(self, agent: AgentSpec) -> int | None:
        """The agent's disk quota in bytes, where the fleet's homes are on its btrfs (None elsewhere: no
        quota, the homes share the host's filesystem)."""
        if self.snapshots.checkpoints != "btrfs":
            return None
        disk = self.agent_resources(agent).disk
        return disk if disk is not None else min(DEFAULT_DISK, self.snapshots.checkpoint_size)

    def agent_network(self, agent: AgentSpec) -> NetworkPolicy:
        """An agent's own policy replaces the fleet's whole: a policy is read as one piece. In allowlist
        mode its role's ``egress`` entries (e.g. the model provider's API host) join the allowlist."""
        return with_role_egress(
            agent.network or self.network, agent.role, agent.api_url, gateway=gateway_credential(agent) is not None
        )

    def agent_resources(self, agent: AgentSpec) -> Resources:
        """The fleet's resources, with what the agent sets itself taking precedence, field by field."""
        if agent.resources is None:
            return self.resources
        return self.resources.model_copy(update=agent.resources.model_dump(include=agent.resources.model_fields_set))


def _resources_of(fleet: dict) -> list[Any]:
    """The raw ``resources`` of the fleet mapping and of each of its agents (dicts, models or None)."""
    agents = fleet.get("agents")
    agents = agents if isinstance(agents, list) else []
    own = [a.get("resources") if isinstance(a, dict) else getattr(a, "resources", None) for a in agents]
    return [fleet.get("resources"), *own]


def _largest_disk(fleet: dict) -> int | None:
    """The largest ``resources.disk`` the raw fleet mapping sets, in bytes (None: none that parses)."""
    found = []
    for resources in _resources_of(fleet):
        disk = resources.get("disk") if isinstance(resources, dict) else getattr(resources, "disk", None)
        if disk is None:
            continue
        try:
            found.append(parse_size(disk))
        except (ValueError, TypeError):
            continue
    return max(found, default=None)


def _sets_disk(fleet: dict) -> bool:
    """Whether the raw fleet mapping sets a ``resources.disk`` (its own, or an agent's)."""

    def sets(resources: Any) -> bool:
        if isinstance(resources, dict):
            return resources.get("disk") is not None
        return isinstance(resources, Resources) and resources.disk is not None

    return any(sets(r) for r in _resources_of(fleet))


class Inventory(Model):
    """One inventory file."""

    hosts: list[HostSpec] = Field(default_factory=list)
    groups: dict[HostName, list[HostName]] = Field(default_factory=dict)
    fleet: FleetSpec
    _source_dir: str | None = PrivateAttr(default=None)  # the file's directory (the loader's ``base_dir``)

    @model_validator(mode="after")
    def _remember_source_dir(self, info: ValidationInfo) -> Inventory:
        base = (info.context or {}).get("base_dir")
        self._source_dir = os.path.abspath(base) if base else None
        return self

    @property
    def source_dir(self) -> str:
        """The inventory file's directory, absolute; the working directory when it was not read from a
        file. Relative paths of the spec (work's ``repo`` and ``task_file``) are its neighbours."""
        return self._source_dir or os.getcwd()

    def agent_host_names(self, agent: AgentSpec) -> list[str]:
        """The agent's hosts (its ``hosts`` entries, groups expanded, none: the fleet's), in the fleet's order;
        the loader refuses an entry that is not among the fleet's hosts."""
        fleet = self.fleet_host_names()
        if not agent.hosts:
            return fleet
        chosen = {name for entry in agent.hosts for name in self.groups.get(entry, [entry])}
        return [name for name in fleet if name in chosen]

    def fleet_host_names(self) -> list[str]:
        """The hosts the fleet runs on, by name, in order, touching nothing: provider ``static``, the
        ``fleet.hosts`` entries with groups expanded (none: every host of the file); provider ``lab``,
        the lab's first ``lab.hosts`` hosts."""
        if self.fleet.provider == "lab":
            lab = self.fleet.lab or LabSpec()
            return [lab_host_name(lab.name, i) for i in range(1, lab.hosts + 1)]
        selected: list[str] = []
        for entry in self.fleet.hosts or [h.name for h in self.hosts]:
            for name in self.groups.get(entry, [entry]):
                if name not in selected:
                    selected.append(name)
        return selected


# --- roles (jackin/spec/roles.py): the spec's ``role:``, its credentials and egress ---------------------


def _check_role(name: str) -> str:
    known = roles.names()
    if name not in known:
        raise ValueError(f"unknown role {name!r}; known roles: {', '.join(known) or 'none'} (in {roles.roles_dir()})")
    return name


def _role(name: str) -> roles.Role:
    try:
        return roles.load(name)
    except SpecError as error:
        raise ValueError(f"role {name!r} does not validate ({error.message}): run inv role.validate {name}") from None


def _check_role_credentials(agent: AgentSpec) -> AgentSpec:
    if agent.role not in _role_names():
        return agent  # the unknown role is reported on its own field
    given = {c.name for c in agent.credentials}
    missing = [name for name in _role(agent.role).credentials if name not in given]
    if missing:
        raise ValueError(f"agent {agent.name!r} has role {agent.role!r}, which needs credential(s) "
                         f"{', '.join(missing)}: give each under the agent's credentials (from_env or from_file)")  # fmt: skip
    return agent


def _role_names() -> list[str]:
    return roles.names()


def role_egress(role: str, api_url: str | None = None, *, gateway: bool = False) -> list[str]:
    """The role's egress entries, its API's entry being that of ``api_url`` when the spec replaces it, and
    none with ``gateway`` (the agent reaches its API only through the credential gateway on its bridge)."""
    if role not in _role_names():
        return []
    found = _role(role)
    if gateway and found.api is not None:
        return [e for e in found.egress if e != api_entry(found.api.url)]
    if api_url is None or found.api is None:
        return list(found.egress)
    default, wanted = api_entry(found.api.url), api_entry(api_url)
    entries = [wanted if entry == default else entry for entry in found.egress]
    return list(dict.fromkeys(entries))


def with_role_egress(policy: NetworkPolicy, role: str, api_url: str | None = None, *,
                     gateway: bool = False) -> NetworkPolicy:  # fmt: skip
    """``policy`` with the role's egress entries added to its allowlist (allowlist mode only); the API's
    entry is that of ``api_url`` when the spec replaces the role's base URL, none through the gateway."""
    if policy.mode != "allowlist" or role not in _role_names():
        return policy
    extra = [entry for entry in role_egress(role, api_url, gateway=gateway) if entry not in policy.allow]
    if not extra:
        return policy
    return NetworkPolicy.model_validate({**policy.model_dump(), "allow": [*policy.allow, *extra]})


# --- work (jackin/work/bundles.py) -------------------------------------------------------

_GIT_URL = re.compile(r"^(?:(?:https?|ssh|git|file)://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)")
_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/@^~+-]{1,200}$")


def is_git_url(repo: str) -> bool:
    """``https://``, ``http://``, ``ssh://``, ``git://``, ``file://`` or scp-like ``git@host:path``."""
    return bool(_GIT_URL.match(repo))


class WorkSpec(Model):
    """An agent's work: a source repository (a local path, relative to the inventory file's
    directory, or a git URL), a ref in it (default HEAD) and a task, as text (``task``) or as a
    file (``task_file``, relative like ``repo``); with no task, the agent waits for the queue's
    (``inv fleet.work``). jackin/work/bundles.py checks the repository, ref and
    task on the operator's machine before any host is touched and delivers them as a git bundle."""

    repo: str = Field(min_length=1, max_length=1000)
    ref: str = "HEAD"
    task: str | None = Field(None, min_length=1, max_length=256 * 1024)
    task_file: str | None = Field(None, min_length=1, max_length=1000)

    @field_validator("repo", "task_file")
    @classmethod
    def _resolved(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A local path is made absolute against the inventory file's directory (the loader passes
        it as ``base_dir`` in the validation context; without one, the working directory)."""
        if value is None:
            return None
        if any(ord(c) < 32 for c in value):
            raise ValueError("a path or URL cannot hold a control character")
        if info.field_name == "repo" and is_git_url(value):
            return value
        base = Path((info.context or {}).get("base_dir") or ".")
        return os.path.normpath((base / Path(value).expanduser()).absolute())

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str) -> str:
        if not _REF.match(value):
            raise ValueError("expected a git ref such as HEAD, main, v1.2 or a commit id")
        return value

    @model_validator(mode="after")
    def _one_task(self) -> WorkSpec:
        if self.task is not None and self.task_file is not None:
            raise ValueError("work takes one of task (text) or task_file (a path), not both; with neither, the agent "
                             "waits for a task of the queue (inv fleet.work)")  # fmt: skip
        return self


class ReviewSpec(Model):
    """The review gate (``review:`` on the fleet or a task): each finished task goes, as a review task, to an
    instance of ``agent`` (an agent of the fleet, which then takes reviews only) that made none of its attempts,
    with the diff, the handoff and the task; the reviewer's verdict is ``approve`` or ``changes: NOTES``; changes
    go back to the queue with the notes, at most ``rounds`` times."""

    agent: Slug
    rounds: int = Field(2, ge=1, le=10)
    instructions: str | None = Field(None, min_length=1, max_length=64 * 1024)  # what the reviewer checks


class TaskSpec(Model):
    """A task of the spec's ``tasks:`` queue (jackin/store/tasks.py): its text (``task``) or file (``task_file``,
    relative to the inventory file), the repository and ref it is for (default: the fleet's agents' work's),
    how many independent attempts it gets on different agents (best-of-N), how often a transient failure is
    retried, and a label. Queued once, however often the spec is applied."""

    task: str | None = Field(None, min_length=1, max_length=256 * 1024)
    task_file: str | None = Field(None, min_length=1, max_length=1000)
    repo: str | None = Field(None, min_length=1, max_length=1000)
    ref: str | None = None
    attempts: int = Field(1, ge=1, le=10)
    retries: int = Field(2, ge=0, le=10)
    label: str | None = Field(None, min_length=1, max_length=100)
    review: ReviewSpec | None = None  # this task's review gate, in place of the fleet's

    @field_validator("repo", "task_file")
    @classmethod
    def _resolved(cls, value: str | None, info: ValidationInfo) -> str | None:
        return WorkSpec._resolved(value, info)  # the same rule as an agent's work

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        if value is not None and not _REF.match(value):
            raise ValueError("expected a git ref such as HEAD, main, v1.2 or a commit id")
        return value

    @model_validator(mode="after")
    def _one_task(self) -> TaskSpec:
        if (self.task is None) == (self.task_file is None):
            raise ValueError("a task needs exactly one of task (text) or task_file (a path)")
        return self


for _model in (AgentSpec, FleetSpec, Inventory):  # AgentSpec.work names WorkSpec, defined after it
    _model.model_rebuild()
