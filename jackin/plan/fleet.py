"""The fleet plan: what every host must have, computed on the operator's side.

A plan is pure data: names, uids, paths, container settings and a hash of
each container's configuration. The deploy (``deploys/fleet.py``) turns it into
commands; nothing here touches a host. Naming is deterministic:

    instance   <agent>-<i>                 e.g. coder-1
    user       jk-<fleet>--<instance>      also the group, the container and the network
    bridge     jk<8 hex>                   the agent network's Linux bridge (nftables matches it)
    home       /srv/jackin/<fleet>/<instance>            mode 0750, root:<agent group> (see operations/agent_paths)
    workspace  /srv/jackin/<fleet>/<instance>/workspace  mode 0700, mounted at /workspace
    credentials /var/lib/jackin/credentials/<fleet>/<instance>  names only here; mounted read-only
               at /run/jackin/credentials when the agent has any (jackin/spec/credentials.py)
    labels     jackin.fleet=<fleet>, jackin.agent=<instance>

Names longer than Linux allows (32 characters) are shortened with a hash.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from jackin import hostpaths
from jackin.hostpaths import CREDENTIALS_TARGET, ROOT, WORK_TARGET, user_name
from jackin.spec import roles
from jackin.spec.credentials import login_id
from jackin.spec.models import AddressPool, AgentSpec, FleetSpec, Mount, NetworkPolicy, WorkSpec, gateway_credential
from jackin.spec.values import SLUG

DEFAULT_IMAGE = "jackin/agent:busybox"
UIDS_PER_FLEET = 1000
# Stands for the agent network's gateway in the run line (and its hash): known only on the host.
BRIDGE_GATEWAY = "@bridge-gateway"

# The demo role idles until stopped; real roles arrive with the roles issue.
IDLE = ["sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkPlan(_Model):
    """An agent instance's work (jackin/work/bundles.py): what the spec names, and once prepared on the
    operator's machine (``jackin.work.bundles.attach``: fleet.up and fleet.plan) the commit and the sha256 of
    each file delivered (``repo.bundle``, ``task.md``, ``work.json``). Not in the container's hash:
    a new commit or task is re-delivered into the mounted directory, the container stays."""

    repo: str  # the spec's repository: an absolute local path or a git URL
    name: str  # the repository's short name (its last path component, without .git)
    ref: str
    branch: str  # jackin/<instance>: the agent's own branch, fixed by jackin
    commit: str | None = None
    files: dict[str, str] = Field(default_factory=dict)  # file name -> sha256 hex; empty: not prepared


class GatewayPlan(_Model):
    """An agent's credential in gateway mode (jackin/net/gateway.py): the runtime holds a placeholder in
    ``header`` and reaches its API at the gateway on its bridge; the gateway forwards to ``upstream`` only."""

    credential: str
    header: str
    upstream: str  # scheme://host[:port] of the URL in force (the spec's api_url, else the role's)
    ca: bool = False  # the spec's api_ca: the gateway trusts it for the upstream (beside the system's)
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    budget: dict[str, float | int | None] | None = None
    paths: list[str] = Field(default_factory=list)  # the API's paths the gateway forwards (any other: refused)
    login: str | None = None  # kind oauth: the fleet's shared login (its id: jackin.spec.credentials.login_id)
    beta: str | None = None  # kind oauth: added to anthropic-beta with the login's access token


class Health(_Model):
    """The role's healthcheck as ``docker run`` flags (durations in seconds)."""

    test: list[str]
    interval: int
    timeout: int
    retries: int
    start_period: int

    def run_args(self) -> list[str]:
        return ["--health-cmd", shlex.join(self.test), "--health-interval", f"{self.interval}s",
                "--health-timeout", f"{self.timeout}s", "--health-retries", str(self.retries),
                "--health-start-period", f"{self.start_period}s"]  # fmt: skip


class AgentPlan(_Model):
    fleet: str
    agent: str
    instance: str
    role: str
    uid: int = Field(ge=1000)
    user: str
    home: str
    workspace: str
    container: str
    network: str
    bridge: str
    image: str
    command: list[str]
    memory: int
    cpus: float
    pids: int
    disk: int | None = None  # the home's btrfs quota in bytes (a qgroup); None: homes on the host's filesystem
    policy: NetworkPolicy = NetworkPolicy()
    credentials: list[str] = Field(default_factory=list)  # names only: values never enter a plan
    mounts: list[Mount] = Field(default_factory=list)
    healthcheck: Health | None = None  # the role's Docker HEALTHCHECK (None: the image's own, if any)
    # Set in the container: the spec's api_url, in the variable its role's runtime reads (api.env).
    env: dict[str, str] = Field(default_factory=dict)
    gateway: GatewayPlan | None = None  # its API credential through the host's credential gateway
    placement: Literal["spread", "each"] = "spread"  # on one host, or on every one of its agent's (placement.py)
    work: WorkPlan | None = None  # a repository and a task delivered to /run/jackin/work (jackin/work/bundles.py)

    @property
    def work_dir(self) -> str:
        """The host directory holding this agent's delivered work (see jackin/work/bundles.py)."""
        return hostpaths.work_dir(self.fleet, self.instance)

    @property
    def credentials_dir(self) -> str:
        """The host directory holding this agent's credential files (see jackin/spec/credentials.py)."""
        return hostpaths.credentials_dir(self.fleet, self.instance)

    @property
    def dns_filter(self) -> bool:
        """Whether the agent resolves through its own filtering resolver (jackin/net/dns.py): allowlist
        mode with at least one domain entry."""
        return self.policy.mode == "allowlist" and any(_is_domain(entry) for entry in self.policy.allow)

    @property
    def dns(self) -> list[str]:
        """Resolvers the container uses. allowlist with domain entries: its filter on the bridge
        gateway (``BRIDGE_GATEWAY``, filled in on the host when the container is created); open:
        the policy's, or Docker's default; otherwise none at all (a loopback address nothing
        answers on: the spec's ``dns`` servers are only ever the filter's upstreams)."""
        if self.dns_filter:
            return [BRIDGE_GATEWAY]
        if self.policy.mode == "open":
            return list(self.policy.dns)
        return ["127.0.0.1"]

    @property
    def labels(self) -> dict[str, str]:
        return {"jackin.fleet": self.fleet, "jackin.agent": self.instance}

    def run_args(self) -> list[str]:
        """The ``docker run`` arguments of this agent's container (hardened)."""
        options, tail = self._run_line()
        return [*options, "--label", f"jackin.config={self.config_hash}", *tail]

    def _run_line(self) -> tuple[list[str], list[str]]:
        args = [
            "--name", self.container, "--hostname", self.instance,
            "--user", f"{self.uid}:{self.uid}",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m",
            "--memory", str(self.memory), "--memory-swap", str(self.memory),
            "--cpus", f"{self.cpus:g}", "--pids-limit", str(self.pids),
            "--network", self.network,
            "--mount", f"type=bind,src={self.workspace},dst=/workspace",
            "--workdir", "/workspace", "--env", "HOME=/workspace",
            *(arg for key, value in sorted(self.env.items()) for arg in ("--env", f"{key}={value}")),
            "--restart", "unless-stopped",
            "--log-opt", "max-size=10m", "--log-opt", "max-file=3",
        ]  # fmt: skip
        if self.credentials:  # the directory, not each file: a re-delivered file is seen at once
            args += ["--mount", f"type=bind,src={self.credentials_dir},dst={CREDENTIALS_TARGET},readonly"]
        if self.work is not None:  # the directory: a re-delivered task is seen at once, like credentials
            args += ["--mount", f"type=bind,src={self.work_dir},dst={WORK_TARGET},readonly"]
        for mount in self.mounts:
            args += [
                "--mount",
                f"type=bind,src={mount.source},dst={mount.target}" + (",readonly" if mount.readonly else ""),
            ]
        for server in self.dns:
            args += ["--dns", server]
        for port in self.policy.publish:
            host_port = port.host_port or port.port
            args += ["--publish", f"{port.bind}:{host_port}:{port.port}/{port.protocol}"]
        for key, value in sorted(self.labels.items()):
            args += ["--label", f"{key}={value}"]
        if self.healthcheck is not None:
            args += self.healthcheck.run_args()
        return args, [self.image, *self.command]

    @property
    def config_hash(self) -> str:
        """A hash of the whole ``docker run`` line: any change to it, from the spec or from a new
        release's hardening, recreates the container; nothing else does."""
        options, tail = self._run_line()
        return hashlib.sha256(json.dumps([options, tail]).encode()).hexdigest()[:12]


class CheckpointPlan(_Model):
    """The checkpoint tier on each host (``snapshots.checkpoints``): the fleet dir is a loop-mounted
    filesystem of ``size`` bytes whose agent homes are subvolumes (jackin/operations/cow.py)."""

    filesystem: Literal["btrfs"] = "btrfs"
    size: int = Field(gt=0)


class FleetPlan(_Model):
    fleet: str = Field(pattern=SLUG, max_length=24)  # names read back from hosts (gc) are checked too
    root: str = ROOT
    uid_min: int
    uid_max: int
    agents: list[AgentPlan]
    address_pools: list[AddressPool] = Field(default_factory=list)
    fleet_hosts: list[str] = Field(default_factory=list)  # every fleet host's IP addresses: always denied to agents
    checkpoints: CheckpointPlan | None = None  # None: homes are plain directories (no checkpoint tier)
    ttl_deadline: int | None = None  # epoch seconds (operator clock) the time-to-live ends (jackin/plan/ttl.py)
    # Every role image built on the operator's machine and loaded over SSH, ``build: host`` roles too (from
    # their Dockerfile, offline: jackin/images/build.py): lab hosts reach no registry.
    images_here: bool = False
    budget: dict[str, float | int | None] | None = None  # the fleet's whole budget (each host enforces a share)
    host_count: int = 1  # the fleet's hosts: a host's share of ``budget``
    # Per host of the fleet (in its order), the instances placed there (jackin/plan/placement.py); None: not
    # placed, every agent on every host (a plan built without a ledger: tests, by hand).
    placement: dict[str, list[str]] | None = None
    stranded: dict[str, str] = Field(default_factory=dict)  # instance -> the host it is on, which left the inventory
    unplaced: list[str] = Field(default_factory=list)  # instances on no host yet (the next fleet.up places them)

    @property
    def gateway_agents(self) -> list[AgentPlan]:
        return [a for a in self.agents if a.gateway is not None]

    def at(self, host: str) -> list[AgentPlan]:
        """The agents placed on ``host`` (placement: jackin/plan/placement.py), in plan order."""
        if self.placement is None:
            return list(self.agents)
        here = set(self.placement.get(host, []))
        return [a for a in self.agents if a.instance in here]

    def hosts_of(self, instance: str) -> list[str]:
        """The hosts ``instance`` is placed on (spread: one; each: every one of its agent's); none: unplaced,
        stranded or unknown. Unplaced plans (``placement`` None): every host is unknown here, so none."""
        return [h for h, placed in (self.placement or {}).items() if instance in placed]

    def spread_placement(self) -> dict[str, str]:
        """instance -> host of every placed instance of a ``spread`` agent (what the ledger records)."""
        each = {a.instance for a in self.agents if a.placement == "each"}
        return {i: h for h, here in (self.placement or {}).items() for i in here if i not in each}

    def for_host(self, host: str) -> FleetPlan:
        """The plan as one host gets it: its agents only (what its deploy, firewall, DNS, credentials, gateway
        and work render). A host the placement does not name is refused (ValueError): never read as "no agents
        here", which would remove them."""
        if self.placement is None:
            return self
        if host not in self.placement:
            raise ValueError(f"host {host} is not one of the plan's hosts ({', '.join(self.placement) or 'none'})")
        return self.model_copy(update={"agents": self.at(host), "placement": {host: list(self.placement.get(host, []))},
                                       "stranded": {}, "unplaced": []})  # fmt: skip

    @property
    def fleet_dir(self) -> str:
        return f"{self.root}/{self.fleet}"

    @property
    def marker(self) -> str:
        return hostpaths.marker(self.fleet)


def _is_domain(entry: str) -> bool:
    """An allow entry names a domain (not an address or CIDR, with or without a port)."""
    if entry.startswith("["):
        return False
    target = entry.split(":")[0] if entry.count(":") == 1 else entry
    try:
        ipaddress.ip_network(target, strict=False)
    except ValueError:
        return True
    return False


def host_addresses(addresses: list[str]) -> list[str]:
    """The IP literals among a fleet's host addresses, deduplicated and sorted (names are not
    resolved: the operator's resolver may not see what the hosts see)."""
    found = set()
    for address in addresses:
        try:
            found.add(ipaddress.ip_address(address))
        except ValueError:
            continue
    return [str(a) for a in sorted(found, key=lambda a: (a.version, a))]


def bridge_name(fleet: str, instance: str) -> str:
    return "jk" + hashlib.sha256(f"{fleet}/{instance}".encode()).hexdigest()[:8]


def instances(spec: FleetSpec) -> list[tuple[str, str]]:
    """(agent, instance) for every agent of the fleet, in spec order."""
    return [(a.name, f"{a.name}-{i}") for a in spec.agents for i in range(1, a.count + 1)]


def build(spec: FleetSpec, uids: Mapping[str, int], fleet_hosts: Sequence[str] = ()) -> FleetPlan:
    """The plan for ``spec``, with each instance's uid taken from ``uids`` (the ledger) and the
    fleet's host addresses (always denied to its agents)."""
    agents = []
    by_name = {a.name: a for a in spec.agents}
    for agent_name, instance in instances(spec):
        agent = by_name[agent_name]
        resources = spec.agent_resources(agent)
        user = user_name(spec.name, instance)
        home = f"{ROOT}/{spec.name}/{instance}"
        agents.append(
            AgentPlan(
                fleet=spec.name,
                agent=agent_name,
                instance=instance,
                role=agent.role,
                uid=uids[instance],
                user=user,
                home=home,
                workspace=f"{home}/workspace",
                container=user,
                network=user,
                bridge=bridge_name(spec.name, instance),
                **role_settings(agent.role, agent.image),
                memory=resources.memory,
                cpus=resources.cpus,
                pids=resources.pids,
                disk=spec.agent_disk(agent),
                policy=spec.agent_network(agent),
                credentials=sorted({c.name for c in agent.credentials}),
                mounts=agent.mounts,
                env=api_env(agent.role, agent.api_url, gateway=gateway_credential(agent) is not None),
                gateway=gateway_plan(agent, spec.name),
                placement=agent.placement,
            )  # fmt: skip
        )
    agents = [a.model_copy(update={"work": work_plan(by_name[a.agent].work, a.instance)}) for a in agents]
    return FleetPlan(
        fleet=spec.name,
        uid_min=spec.uid_base,
        uid_max=spec.uid_base + UIDS_PER_FLEET - 1,
        agents=agents,
        address_pools=spec.address_pools,
        fleet_hosts=list(fleet_hosts),
        checkpoints=(
            CheckpointPlan(size=spec.snapshots.checkpoint_size) if spec.snapshots.checkpoints == "btrfs" else None
        ),  # fmt: skip
        images_here=spec.provider == "lab",
        budget=spec.budget.model_dump() if spec.budget is not None else None,
    )


def api_env(role_name: str, api_url: str | None, *, gateway: bool = False) -> dict[str, str]:
    """The runtime's base URL variable when the spec replaces the role's (none otherwise: the runtime's
    own default is the vendor's); with ``gateway``, the gateway on the agent's bridge, with the path of the
    URL in force (``http://<bridge address>:8377/v1``: the address is filled in on the host)."""
    if (api_url is None and not gateway) or role_name not in roles.names():
        return {}
    api = roles.load(role_name).api
    if api is None:
        return {}
    if gateway:
        path = urlsplit(api_url or api.url).path.rstrip("/")
        return {api.env: f"http://{BRIDGE_GATEWAY}:{hostpaths.GATEWAY_PORT}{path}"}
    return {api.env: api_url} if api_url is not None else {}


def gateway_plan(agent: AgentSpec, fleet: str = "") -> GatewayPlan | None:
    """The agent's credential in gateway mode, or None (``jackin.spec.models.gateway_credential``)."""
    name = gateway_credential(agent)
    if name is None:
        return None
    role = roles.load(agent.role)
    assert role.api is not None  # gateway_credential says the role has one
    parts = urlsplit(agent.api_url or role.api.url)
    given = next(c for c in agent.credentials if c.name == name)
    login = login_id(fleet, given) if given.kind == "oauth" else None
    return GatewayPlan(credential=name, header=role.api.header, upstream=f"{parts.scheme}://{parts.netloc}",
                       ca=agent.api_ca is not None, prices={m: p.model_dump() for m, p in role.prices.items()},
                       budget=agent.budget.model_dump() if agent.budget is not None else None, login=login,
                       beta=role.api.login.beta if login and role.api.login else None,
                       paths=[parts.path.rstrip("/") + p for p in role.api.paths])  # fmt: skip


def work_plan(work: WorkSpec | None, instance: str) -> WorkPlan | None:
    """The plan's part of an agent's work, from the spec alone (``jackin.work.bundles.attach`` adds the commit
    and the files' digests once the repository is bundled on the operator's machine)."""
    if work is None:
        return None
    name = work.repo.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git") or "repo"
    return WorkPlan(repo=work.repo, name=name, ref=work.ref, branch=f"jackin/{instance}")


def role_settings(role_name: str, image: str | None) -> dict:
    """The agent's image, command and healthcheck from its role (jackin/spec/roles.py): the role's image
    (``jackin/role-<name>:<hash>``), its command (run by the image's entrypoint) and healthcheck.
    The spec's ``image:`` overrides the image; the registry-free busybox image (``DEFAULT_IMAGE``)
    has no entrypoint or health script, so it idles with no healthcheck."""
    if image == DEFAULT_IMAGE:
        return {"image": image, "command": IDLE, "healthcheck": None}
    role = roles.load(role_name)
    return {
        "image": image or role.tag,
        "command": list(role.command),
        "healthcheck": Health(**role.healthcheck.model_dump()),
    }
