"""The launch contract: what each agent will be able to reach, and what jackin does to each host.

``build(inventory, plan, host_facts)`` resolves it (the models of ``jackin.plan.terms``) from the
spec and its plan (and, when they were read, the hosts' facts), pure: nothing here touches a host
(the operator's credential and task files are resolved on this machine, ``jackin.spec.sources``, none
opened). Per agent: identity, every host path it sees, credentials (names, how they are delivered
and, for a file, where it is read from; never a value), its work, network, Docker access, resources
and residual risks (a credential or task file read from outside the inventory's directory and the
operator's home among them); for the fleet: the host-side
effects, the recovery and teardown posture. ``diff(old, new)`` gives the differences as human
lines, in a stable order, so ``fleet.up`` can show what changed since the last contract it applied
(kept in the ledger per run, ``run_contracts``) and ask before it goes on
(``jackin.plan.launch.gate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jackin import hostpaths
from jackin.hostpaths import CREDENTIALS_TARGET, DAEMON_JSON, NFT_DIR, UNIT_DIR, UPLOADED_RESTIC, WORK_TARGET
from jackin.plan import fleet as planning
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.plan.terms import (
    AgentContract,
    ApiTerm,
    CredentialTerm,
    DockerTerm,
    FleetContract,
    HostEffects,
    HostFacts,
    Identity,
    MountTerm,
    NetworkTerm,
    PackageTerm,
    PublishTerm,
    RecoveryTerm,
    ResourcesTerm,
    TeardownTerm,
    WorkTerm,
)
from jackin.spec import Inventory, sources
from jackin.spec.models import (
    AgentSpec,
    Credential,
    SnapshotPolicy,
    WorkSpec,
    _role,
    _role_names,
    enforcement,
    role_egress,
)

DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                  "/var/run/containerd/containerd.sock")  # fmt: skip
ALWAYS_DENIED = [
    "link-local addresses (169.254.0.0/16 with the metadata address, fe80::/10)",
    "the other clouds' metadata addresses (168.63.129.16, 100.100.100.200, fd00:ec2::254)",
    "every address of every host of the fleet",
    "the host itself (sshd, the Docker API, any service), except DNS to the agent's own filter",
    "other agents' bridges",
    "private and reserved ranges not explicitly allowed by an entry inside them",
]
# jackin.operations.host.HARDENING's keys (that module loads pyinfra; a unit test keeps the two equal)
DAEMON_KEYS = ["icc", "live-restore", "no-new-privileges", "userland-proxy"]
HARDENING = ["every capability dropped", "no-new-privileges", "read-only root filesystem",
             "/tmp a 64 MiB tmpfs (nosuid, nodev)", "Docker's default seccomp profile",
             "its own uid:gid, never root", "logs capped at 3 x 10 MiB"]  # fmt: skip


# --- build --------------------------------------------------------------------------------------


def build(inventory: Inventory, plan: FleetPlan, host_facts: Mapping[str, Any] | None = None, *,
          last_snapshot: str | None = None) -> FleetContract:  # fmt: skip
    """The launch contract of ``plan`` (made from ``inventory``). ``host_facts``: per host name,
    a ``HostState`` or its ``host`` mapping (``kernel``, ``apparmor``: "Y" when the kernel's
    AppArmor is enabled); None when no host was read. ``last_snapshot``: from the ledger."""
    hosts = [_facts(name, facts) for name, facts in sorted((host_facts or {}).items())]
    spec = inventory.fleet
    by_name = {a.name: a for a in spec.agents}
    trusted = sources.trusted(inventory.source_dir)  # where a from_file or task_file is no risk
    agents = [_agent(a, by_name[a.agent], hosts, trusted, plan) for a in plan.agents]
    return FleetContract(fleet=plan.fleet, hosts=hosts, agents=agents, host_effects=_effects(plan),
                         recovery=_recovery(inventory, last_snapshot), teardown=_teardown(inventory),
                         residual_risks=FLEET_RISKS)  # fmt: skip


def _facts(name: str, facts: Any) -> HostFacts:
    """A host's facts from its state read (``HostState``: ``apparmor`` read by ``jackin.facts.state``), a
    mapping (``kernel``, ``apparmor``: "Y"/"N", ``apparmor_docker``), or facts a contract already holds."""
    if isinstance(facts, HostFacts):
        return facts.model_copy(update={"name": name})
    values = getattr(facts, "host", facts) or {}
    read = getattr(facts, "apparmor", None)
    if read is not None:  # a HostState whose read included AppArmor
        return HostFacts(name=name, kernel=values.get("kernel") or None, apparmor=read.enabled,
                         apparmor_docker=read.docker_default if read.enabled else None)  # fmt: skip
    apparmor = values.get("apparmor") if isinstance(values, Mapping) else None
    return HostFacts(name=name, kernel=values.get("kernel") or None, apparmor_docker=values.get("apparmor_docker"),
                     apparmor=None if apparmor is None else apparmor.strip().upper().startswith("Y"))  # fmt: skip


def hosts_of(plan: FleetPlan, instance: str) -> list[str]:
    """The hosts the instance lives on: where the plan places it, else the host it is stranded on."""
    return plan.hosts_of(instance) or ([plan.stranded[instance]] if instance in plan.stranded else [])


def _agent(agent: AgentPlan, spec: AgentSpec, hosts: list[HostFacts], trusted: list[str],
           plan: FleetPlan) -> AgentContract:  # fmt: skip
    identity = Identity(user=agent.user, uid=agent.uid, gid=agent.uid, home=agent.home, workspace=agent.workspace,
                        container=agent.container)  # fmt: skip
    given = sorted(spec.credentials, key=lambda c: c.name)
    creds = [CredentialTerm(name=c.name, host_path=f"{agent.credentials_dir}/{c.name}",
                            container_path=f"{CREDENTIALS_TARGET}/{c.name}", owner=agent.user,
                            source="env" if c.from_env else "file",
                            source_path=sources.resolved(c.from_file) if c.from_file else None,
                            **_held(agent, c.name)) for c in given]  # fmt: skip
    work = _work(agent, spec.work)
    mounts = _mounts(agent)
    docker = _docker(mounts).model_copy(update={"apparmor": [h.apparmor_line() for h in hosts] or
                                                ["AppArmor not checked (no host facts read)"]})  # fmt: skip
    network = _network(agent)
    return AgentContract(instance=agent.instance, agent=agent.agent, role=agent.role, image=agent.image,
                         identity=identity, mounts=mounts, credentials=creds, network=network, docker=docker,
                         resources=_resources(agent), work=work, api=_api(agent, spec), placement=agent.placement,
                         hosts=hosts_of(plan, agent.instance),
                         residual_risks=_risks(mounts, network, docker, hosts) + _disk_risks(agent) + _role_risks(agent, creds)
                         + _source_risks(given, creds, spec.work, work, trusted))  # fmt: skip


def _held(agent: AgentPlan, name: str) -> dict[str, str]:
    """A credential through the gateway: who holds its value, and the one host it goes to."""
    if agent.gateway is None or agent.gateway.credential != name:
        return {}
    return {"delivery": "gateway", "upstream": agent.gateway.upstream,
            "holds": f"the agent never holds the value: it holds a placeholder, which the host's credential gateway "
                     f"({hostpaths.gateway_unit(agent.fleet)}) replaces in its requests to {agent.gateway.upstream} only"}  # fmt: skip


def _api(agent: AgentPlan, spec: AgentSpec) -> ApiTerm | None:
    """The base URL in force: the spec's ``api_url``, else the role's; reached directly or through the gateway."""
    api = _role(agent.role).api if agent.role in _role_names() else None
    if api is None:
        return None
    via = {"via": "gateway", "budget": agent.gateway.budget} if agent.gateway is not None else {}
    if spec.api_url is not None:
        return ApiTerm(url=spec.api_url, env=api.env, source="spec", **via)
    return ApiTerm(url=api.url, env=api.env, source="role", **via)


def _work(agent: AgentPlan, spec: WorkSpec | None) -> WorkTerm | None:
    if agent.work is None or spec is None:
        return None
    return WorkTerm(repo=agent.work.repo, ref=agent.work.ref, branch=agent.work.branch,
                    task="file" if spec.task_file else "text" if spec.task else "queue",
                    task_path=sources.resolved(spec.task_file) if spec.task_file else None)  # fmt: skip


def _source_risks(given: list[Credential], creds: list[CredentialTerm], spec: WorkSpec | None, work: WorkTerm | None,
                  trusted: list[str]) -> list[str]:  # fmt: skip
    """A credential's file or the task's file read from outside the inventory's directory and the operator's
    home (``jackin.spec.sources``): the agent receives that file's content."""
    found = [sources.risk(f"credential {c.name}'s from_file", str(c.from_file), term.source_path, trusted)
             for c, term in zip(given, creds, strict=True) if c.from_file and term.source_path]  # fmt: skip
    if spec is not None and spec.task_file and work is not None and work.task_path:
        found.append(sources.risk("its task_file", spec.task_file, work.task_path, trusted))
    return [risk for risk in found if risk]


def _mounts(agent: AgentPlan) -> list[MountTerm]:
    mounts = [MountTerm(source=agent.workspace, target="/workspace", mode="rw", kind="workspace")]
    if agent.credentials:
        mounts.append(MountTerm(source=agent.credentials_dir, target=CREDENTIALS_TARGET, mode="ro", kind="credentials"))
    if agent.work is not None:  # the repository bundle, the task and work.json (jackin/work/bundles.py)
        mounts.append(MountTerm(source=agent.work_dir, target=WORK_TARGET, mode="ro", kind="work"))
    mounts += [MountTerm(source=m.source, target=m.target, mode="ro" if m.readonly else "rw", kind="spec",
                         acknowledged_credentials=m.acknowledge_credentials) for m in agent.mounts]  # fmt: skip
    return mounts


def _docker(mounts: list[MountTerm]) -> DockerTerm:
    sockets = [m.source for m in mounts if m.source in DOCKER_SOCKETS or m.source.endswith("/docker.sock")]
    if sockets:
        return DockerTerm(access="socket", detail=f"the spec mounts {', '.join(sockets)} into the container",
                          risk="whoever reaches the Docker socket is root on the host: the agent can start a "
                               "privileged container that mounts the host's root")  # fmt: skip
    return DockerTerm(access="none", detail="no Docker socket or API in the container; the firewall drops the "
                      "agent's traffic to the host (the Docker API included); not in the docker group",
                      risk="a spec mount of a Docker (or containerd) socket would make the agent root on the host")  # fmt: skip


def _network(agent: AgentPlan) -> NetworkTerm:
    policy = agent.policy
    level, reasons = enforcement(policy)
    publish = [PublishTerm(bind=p.bind, host_port=p.host_port or p.port, port=p.port, protocol=p.protocol)
               for p in policy.publish]  # fmt: skip
    return NetworkTerm(mode=policy.mode, allowlist=list(policy.allow), dns=list(policy.dns), dns_filter=agent.dns_filter,
                       publish=publish, enforcement=level, enforcement_reasons=reasons, always_denied=ALWAYS_DENIED)  # fmt: skip


def _run_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _resources(agent: AgentPlan) -> ResourcesTerm:
    args = agent.run_args()
    return ResourcesTerm(cpus=float(_run_value(args, "--cpus")), memory=int(_run_value(args, "--memory")),
                         memory_swap=int(_run_value(args, "--memory-swap")), pids=int(_run_value(args, "--pids-limit")),
                         disk=agent.disk, hardening=HARDENING)  # fmt: skip


FLEET_RISKS = [
    "the Docker daemon runs as root without user namespaces: a container escape is root on the host",
    "agents on a host share its Docker daemon, and a full disk or a daemon restart affects them all",
]


def _risks(mounts: list[MountTerm], network: NetworkTerm, docker: DockerTerm, hosts: list[HostFacts]) -> list[str]:
    risks = ["shares the host's kernel with the host and every other agent: a kernel exploit escapes the container"]
    absent = [h.name for h in hosts if h.apparmor is False]
    if absent:
        risks.append(
            f"no AppArmor on {', '.join(absent)}: the container runs without a mandatory access control profile"
        )
    unloaded = [h.name for h in hosts if h.apparmor and h.apparmor_docker != "enforce"]
    if unloaded:
        risks.append(f"AppArmor on {', '.join(unloaded)} is enabled but docker-default was not enforcing when read: "
                     "the container's profile is not confirmed")  # fmt: skip
    if not hosts or any(h.apparmor is None for h in hosts):
        risks.append("AppArmor not checked (no host facts read): the container may run without a MAC profile")
    if network.mode == "open":
        risks.append("egress mode open: any public IPv4 destination is reachable (exfiltration is not prevented)")
    if network.dns_filter:
        risks.append("domain entries allow every service at the addresses their names resolve to (shared CDN "
                     "addresses)")  # fmt: skip
        risks.append("the policy guard checks the table's rules and static sets, not the addresses the agent's "
                     "resolver adds to its domain sets as it resolves: root on the host can add one there unseen")  # fmt: skip
    for port in network.publish:
        risks.append(f"accepts inbound connections on {port.bind}:{port.host_port}/{port.protocol}")
    for mount in (m for m in mounts if m.kind == "spec"):
        if mount.acknowledged_credentials:
            risks.append(f"sees {mount.source}, a credential-like path the spec acknowledged ({mount.mode})")
        if mount.mode == "rw":
            risks.append(f"can write to the host path {mount.source}")
    if docker.access != "none":
        risks.append(docker.risk)
    return risks


def _disk_risks(agent: AgentPlan) -> list[str]:
    if agent.disk is None:
        return [
            "no disk quota: its home is on the host's filesystem, which it can fill for every agent and the host "
            "(set resources.disk: the fleet's homes then live on its btrfs, each with a quota)"
        ]
    return [
        "a btrfs subvolume it creates inside its workspace is outside its home's quota (btrfs lets any user make "
        "one): only the fleet's btrfs (snapshots.checkpoint_size) bounds it"
    ]


def _role_risks(agent: AgentPlan, creds: list[CredentialTerm]) -> list[str]:
    """What the agent's role adds (jackin/spec/roles.py): its credentials live in the runtime's environment, and
    its default egress entries are in the allowlist (allowlist mode)."""
    risks = []
    held = [c for c in creds if c.delivery == "file"]
    if held and agent.image != planning.DEFAULT_IMAGE:  # the busybox image has no entrypoint: files only
        risks.append(f"the role's entrypoint exports {', '.join(c.name for c in held)} into the runtime's process "
                     "environment: the runtime and every command it runs can read it (and a prompt can make it leak "
                     "through any allowed destination)")  # fmt: skip
    if agent.gateway is not None:
        spend = ("its budget (this instance's own, on each host it runs on)" if agent.gateway.budget
                 else "no budget of its own (none in the spec)")  # fmt: skip
        risks.append(f"through the gateway the agent can spend {agent.gateway.credential}'s quota at "
                     f"{agent.gateway.upstream}, up to {spend}")  # fmt: skip
    if agent.role in _role_names() and agent.policy.mode == "allowlist":
        api = _role(agent.role).api
        egress = [e for e in role_egress(agent.role, agent.env.get(api.env) if api else None,
                                         gateway=agent.gateway is not None)
                  if e in agent.policy.allow]  # fmt: skip
        if egress:
            risks.append(f"role {agent.role} adds {', '.join(egress)} to the allowlist (its model provider's API)")
    return risks


def _effects(plan: FleetPlan) -> HostEffects:
    fleet = plan.fleet
    packages = [PackageTerm(name="docker.io", when="dockerd is missing"),
                PackageTerm(name="nftables", when="nft is missing")]  # fmt: skip
    if any(a.dns_filter for a in plan.agents):
        packages.append(PackageTerm(name="dnsmasq-base", when="an agent has domain entries and dnsmasq is missing"))
    if plan.checkpoints is not None:
        packages.append(PackageTerm(name="btrfs-progs", when="the checkpoint tier is on and mkfs.btrfs is missing"))
    if any(a.image == planning.DEFAULT_IMAGE for a in plan.agents):
        packages.append(
            PackageTerm(name="busybox-static", when=f"{planning.DEFAULT_IMAGE} and /bin/busybox are missing")
        )
    filtered = [a.instance for a in plan.agents if a.dns_filter]
    policy = hostpaths.policy_files(fleet, filtered)  # the egress policy's files (jackin/net/policy.py)
    units = sorted(
        Path(p).name
        for p in policy
        if Path(p).parent == Path(UNIT_DIR) and p.endswith((".service", ".timer", ".target"))
    )
    services = ["docker (running, enabled)", *units, *(hostpaths.dns_unit(fleet, i) for i in filtered)]
    files = sorted({*policy, f"{NFT_DIR}/{fleet}.sha", DAEMON_JSON, hostpaths.dropin(fleet), plan.marker})
    directories = [plan.fleet_dir, *(a.home for a in plan.agents), *(a.workspace for a in plan.agents)]
    if any(a.credentials for a in plan.agents):
        directories += [hostpaths.credentials_dir(fleet),
                        *(a.credentials_dir for a in plan.agents if a.credentials)]  # fmt: skip
    if any(a.work for a in plan.agents):
        directories += [hostpaths.work_dir(fleet), *(a.work_dir for a in plan.agents if a.work)]
    if plan.checkpoints is not None:
        directories.append(f"{hostpaths.cow_image(fleet)} (a sparse file, loop-mounted btrfs at {plan.fleet_dir})")
    directories.append(f"{hostpaths.snapshots_dir(fleet)} (when a snapshot is taken)")
    if plan.ttl_deadline is not None:  # the time-to-live (jackin/operations/ttl.py)
        services.append(f"{hostpaths.ttl_unit(fleet, 'timer')} (stops the agents at the deadline)")
        files += [hostpaths.ttl_file(fleet), hostpaths.unit_path(hostpaths.ttl_unit(fleet, "timer")),
                  hostpaths.unit_path(hostpaths.ttl_unit(fleet, "service"))]  # fmt: skip
    files.append(f"{UPLOADED_RESTIC} (when a snapshot is taken and the host has no restic)")
    users = [a.user for a in plan.agents]
    if plan.gateway_agents:  # the credential gateway (jackin/net/gateway.py)
        packages.append(
            PackageTerm(name="python3-aiohttp", when="an agent's credential is in gateway mode and it is missing")
        )
        services.append(f"{hostpaths.gateway_unit(fleet)} (the credential gateway: its own user, no capabilities, "
                        f"listening on port {hostpaths.GATEWAY_PORT} of its agents' bridges only)")  # fmt: skip
        gw = hostpaths.gateway_dir(fleet)
        files += [hostpaths.GATEWAY_PROGRAM, f"{gw}/config.json", f"{gw}/secrets.json (the values: root, and only the "
                  "gateway's group may read it)", hostpaths.unit_path(hostpaths.gateway_unit(fleet))]  # fmt: skip
        directories += [gw, f"{hostpaths.gateway_state(fleet)} (the gateway's usage and audit records)"]
        users.append(f"{hostpaths.gateway_user(fleet)} (system user of the credential gateway)")
    return HostEffects(packages=packages, services=services, files=files, directories=directories,
                       firewall_tables=[f"inet {hostpaths.table_name(fleet)}"],
                       daemon_json_keys=DAEMON_KEYS + (["default-address-pools"] if plan.address_pools else []),
                       users=users,
                       docker_objects=[f"network {a.network}" for a in plan.agents] +
                                      [f"container {a.container}" for a in plan.agents] +
                                      [f"image {i}" for i in sorted({a.image for a in plan.agents})])  # fmt: skip


def _recovery(inventory: Inventory, last_snapshot: str | None) -> RecoveryTerm:
    policy = inventory.fleet.snapshots
    notes = ["snapshot.create takes a snapshot on demand (restic, and the btrfs checkpoint when on)"]
    if policy.before_changes:
        notes.append("before_changes: fleet.up first snapshots (kind auto) the agents it will recreate or remove; "
                     "a failed snapshot refuses the run before anything changes")  # fmt: skip
    else:
        notes.append("before_changes off: fleet.up recreates or removes agents with no snapshot first")
    if policy.every:
        notes.append("every is not acted on yet: no scheduled snapshots")
    return RecoveryTerm(engine=policy.engine, before_changes=policy.before_changes,
                        before_teardown=policy.before_teardown, keep=policy.keep, every=policy.every,
                        checkpoints=policy.checkpoints,
                        checkpoint_size=policy.checkpoint_size if policy.checkpoints == "btrfs" else None,
                        max_freeze=policy.max_freeze, point_in_time=_point_in_time(policy),
                        last_snapshot=last_snapshot, notes=notes)  # fmt: skip


def _point_in_time(policy: SnapshotPolicy) -> str:
    """The instant guarantee of this fleet's snapshots (``jackin.snapshots.instant``), in one sentence."""
    freeze = (f"the agent's container is frozen (docker pause) while restic reads its home and thawed right after, "
              f"whatever happens: one instant, at the cost of a pause as long as the backup (an incremental "
              f"backup of a small workspace: well under a second; a first or large one: longer), at most "
              f"{policy.max_freeze}s (snapshots.max_freeze; past it the backup stops and that agent's snapshot fails)")  # fmt: skip
    if policy.checkpoints == "btrfs":
        return ("each snapshot is one instant: the btrfs checkpoint is taken with the agent's container frozen "
                "for the checkpoint (its milliseconds plus docker pause and unpause), then restic reads that read-only checkpoint while the agent runs on; where a "
                f"checkpoint cannot be taken, {freeze}")  # fmt: skip
    return f"each snapshot of a running agent is one instant: {freeze}"


def _teardown(inventory: Inventory) -> TeardownTerm:
    fleet = inventory.fleet
    final = ("a final snapshot of every agent, each host's repository pulled to the operator's "
             f"<state>/snapshots/{fleet.name}/pulled/<host>/repo and checked; a host where that fails is not torn "
             "down (fleet.down --keep-data or --no-final-snapshot skip it)")  # fmt: skip
    if not fleet.snapshots.before_teardown:
        final = "none (snapshots.before_teardown: false): the workspaces are removed with no copy"
    return TeardownTerm(
        ttl=fleet.ttl, ttl_enforced=fleet.ttl is not None,  # a systemd timer on each host (jackin/operations/ttl.py)
        removes=["containers", "networks", "users and groups", "homes and workspaces", "delivered credentials",
                 "delivered work", "the nftables table and its units and files", "the checkpoint filesystem",
                 f"the time-to-live's timer and deadline file ({hostpaths.ttl_unit(fleet.name, 'timer')}, "
                 f"{hostpaths.ttl_file(fleet.name)})",
                 f"{hostpaths.snapshots_dir(fleet.name)} (the host's snapshots)", "the fleet marker"],
        keeps=["Docker and the installed packages", "daemon.json settings", "the agent images",
               "the operator's pulled snapshot copies and the ledger's history"],
        keep_data_keeps=["homes and workspaces", "uids", "the host's snapshots"],
        final_snapshot=final,
    )  # fmt: skip


# --- diff ---------------------------------------------------------------------------------------

NOT_DIFFED = {("recovery", "last_snapshot")}  # informational: a new snapshot is no change of terms
LABELS = {"allowlist": "allowlist", "publish": "published", "residual_risks": "risks"}


def diff(old: FleetContract, new: FleetContract) -> list[str]:
    """What changed from ``old`` to ``new``, one human line each ("coder-1 network: allowlist gained
    api.example.com:443"); agents in ``new``'s order, then removed ones; empty when equal."""
    lines: list[str] = []
    if old.schema_version != new.schema_version:
        lines.append(f"schema_version {old.schema_version} -> {new.schema_version}")
    before = {a.instance: a for a in old.agents}
    after = {a.instance: a for a in new.agents}
    for instance, agent in after.items():
        if instance not in before:
            lines.append(f"{instance}: new agent")
            continue
        old_dump, new_dump = before[instance].model_dump(mode="json"), agent.model_dump(mode="json")
        for section in new_dump:
            if section == "instance":
                continue
            prefix = f"{instance} {LABELS.get(section, section)}"
            _walk(prefix, "", old_dump[section], new_dump[section], lines)
    lines += [f"{instance}: removed" for instance in before if instance not in after]
    old_dump, new_dump = old.model_dump(mode="json"), new.model_dump(mode="json")
    for section in ("hosts", "host_effects", "recovery", "teardown", "residual_risks"):
        old_part, new_part = old_dump[section], new_dump[section]
        if isinstance(new_part, dict):
            old_part = {k: v for k, v in old_part.items() if (section, k) not in NOT_DIFFED}
            new_part = {k: v for k, v in new_part.items() if (section, k) not in NOT_DIFFED}
        _walk(f"fleet {section.replace('_', ' ')}", "", old_part, new_part, lines)
    return lines


def _key(item: Any) -> str:
    """How a list item is named in a diff line (and matched between two lists)."""
    if not isinstance(item, dict):
        return str(item)
    if "kind" in item and "target" in item:  # a mount
        where = item["source"] if item["source"] == item["target"] else f"{item['source']} at {item['target']}"
        return f"{where} ({item['mode']})"
    if "bind" in item:  # a published port
        return f"{item['bind']}:{item['host_port']}->{item['port']}/{item['protocol']}"
    return str(item.get("name", item))


def _walk(prefix: str, path: str, old: Any, new: Any, lines: list[str]) -> None:
    if old == new:
        return
    where = f"{prefix}: {LABELS.get(path.split('.')[-1], path)} " if path else f"{prefix}: "
    if (isinstance(old, dict) and new is None) or (old is None and isinstance(new, dict)):  # a term added or removed
        old, new = old or {}, new or {}  # (an agent's work): one line per field
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*new, *(k for k in old if k not in new)]:
            _walk(prefix, f"{path}.{key}" if path else key, old.get(key), new.get(key), lines)
    elif isinstance(old, list) and isinstance(new, list):
        olds, news = {_key(x): x for x in old}, {_key(x): x for x in new}
        lines += [f"{where}gained {k}" for k in news if k not in olds]
        lines += [f"{where}lost {k}" for k in olds if k not in news]
        for key in (k for k in news if k in olds and olds[k] != news[k]):
            _walk(prefix, f"{path} {key}" if path else key, olds[key], news[key], lines)
    else:
        lines.append(f"{where}{_show(old)} -> {_show(new)}")


def _show(value: Any) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
