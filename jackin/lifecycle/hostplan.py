"""What ``fleet.up`` would do to one host, computed on the operator's side: pure, no pyinfra.

``steps(plan, state, values)`` is the deploy itself: ``deploys/fleet.py`` runs exactly these
steps, in this order, each by one pyinfra operation (agents a few at a time: ``batched``), on
the state ``fleet.up`` read and planned from (handed to it in the host's data; a deploy run by
hand reads the host in one round trip).
``fleet.plan`` and ``fleet.up`` (the no-change fast path) call the same function on the state
they read over SSH, so what they predict is what the engine runs: a host whose
``host_changes`` is empty is not handed to the engine at all.

Every step's commands come from the pure builders in ``jackin.operations`` (the same ones
the deploy runs). A builder that refuses to act (``Refused``) makes the step refused: the
deploy fails that host while preparing, before anything runs there; ``fleet.plan`` shows why.
Credential values are never shown: a delivery is rendered as "credential NAME of INSTANCE: deliver".
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from jackin.facts.state import HostState
from jackin.hostpaths import credentials_dir as fleet_dir
from jackin.images import build as images
from jackin.operations import cow, credentials, firewall, fleet, work
from jackin.operations import gateway as gateway_ops
from jackin.operations import host as host_ops
from jackin.operations import ttl as ttl_ops
from jackin.operations.files import Command, Refused, Step, Upload
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.spec.credentials import Secrets

# Bootstrap: a Docker engine and nftables (any Docker engine will do: docker.io or docker-ce).
PACKAGES = (("docker.io", "dockerd"), ("nftables", "nft"))
AGENTS_AT_ONCE = 4  # agents whose containers a deploy creates side by side (Docker: about twice as fast)
CATEGORIES = ("bootstrap", "docker daemon", "image", "users", "files", "networks", "containers", "firewall",
              "credentials", "checkpoint fs", "work", "time-to-live")  # fmt: skip


def _built(category: str, name: str, build: Callable[[], Sequence[Command]], noop: str) -> Step:
    try:
        return Step(category, name, commands=list(build()), noop=noop)
    except Refused as error:
        return Step(category, name, noop=noop, refused=error.message)


def missing_packages(state: HostState) -> list[str]:
    return [pkg for pkg, command in PACKAGES if not state.host.get(command)]


def steps(plan: FleetPlan, state: HostState, values: Secrets) -> list[Step]:
    """The deploy's operations for this host, in order, each with what it would do (maybe nothing)."""
    out: list[Step] = []
    missing = missing_packages(state)
    if missing:
        out.append(Step("bootstrap", "install the Docker engine and nftables", packages=missing))
    if any(a.dns_filter for a in plan.agents) and not state.host.get("dnsmasq"):
        # The agents' filtering resolvers (jackin/net/dns.py); dnsmasq-base has no system unit of its own.
        out.append(Step("bootstrap", "install dnsmasq (the agents' filtering resolvers)", packages=["dnsmasq-base"]))
    if plan.gateway_agents and not state.host.get("aiohttp"):
        # The credential gateway (jackin/net/gateway.py): Debian's python3 and its aiohttp.
        out.append(Step("bootstrap", "install python3-aiohttp (the credential gateway)", packages=["python3-aiohttp"]))
    if missing or (state.host.get("docker_active"), state.host.get("docker_enabled")) != ("active", "enabled"):
        out.append(Step("bootstrap", "Docker engine running and enabled", service=True))
    # Hardening (CIS Docker section 2) and address pools; agents survive a needed restart (live-restore).
    out.append(_built("docker daemon", "Docker daemon settings",
                      lambda: host_ops.settings_commands(state.daemon, plan.address_pools),
                      noop="docker daemon settings are in place"))  # fmt: skip
    busybox = bool(state.host.get("busybox"))
    for image in sorted({a.image for a in plan.agents}):
        out.append(_built("image", f"agent image {image}",
                          partial(_image_commands, image, state, busybox=busybox, here=plan.images_here),
                          noop=f"image {image} is present"))  # fmt: skip
        if out[-1].commands and isinstance(out[-1].commands[0], host_ops.ImageLoad):  # named as it is shown
            out[-1].name = out[-1].commands[0].shown
    out.append(_built("files", f"fleet {plan.fleet}", lambda: fleet.fleet_commands(plan, state),
                      noop=f"fleet {plan.fleet} root is up to date"))  # fmt: skip
    if plan.checkpoints is not None:  # the checkpoint tier: homes on a loop-mounted btrfs, each a subvolume
        if not state.host.get("mkfs_btrfs"):
            out.append(Step("bootstrap", "install btrfs-progs (the checkpoint tier)", packages=["btrfs-progs"]))
        out.append(_built("checkpoint fs", f"checkpoint filesystem of fleet {plan.fleet}",
                          lambda: cow.filesystem_commands(plan, state),
                          noop=f"fleet {plan.fleet}'s checkpoint filesystem is in place"))  # fmt: skip
    # The egress policy is in place before any agent container starts (fail closed).
    out.append(_built("firewall", f"egress policy of fleet {plan.fleet}", lambda: firewall.apply_commands(plan, state),
                      noop=f"egress policy of fleet {plan.fleet} is loaded and up to date"))  # fmt: skip
    if any(a.credentials for a in plan.agents) or state.credentials:  # before the containers that mount them
        out.append(_built("credentials", f"credentials of fleet {plan.fleet}",
                          lambda: credentials.credential_commands(plan, state, values),
                          noop=f"credentials of fleet {plan.fleet} are up to date"))  # fmt: skip
    if plan.gateway_agents or state.gateway.present:  # before the containers that reach it
        out.append(_built("credentials", f"credential gateway of fleet {plan.fleet}",
                          lambda: gateway_ops.gateway_commands(plan, state, values),
                          noop=f"the credential gateway of fleet {plan.fleet} is up to date"))  # fmt: skip
    if any(a.work for a in plan.agents) or state.work:  # before the containers that mount it (jackin/work/bundles.py)
        out.append(_built("work", f"work of fleet {plan.fleet}", lambda: work.work_commands(plan, state),
                          noop=f"work of fleet {plan.fleet} is up to date"))  # fmt: skip
    for agent in plan.agents:
        out.append(_agent_step(agent, state, plan))
    if plan.ttl_deadline is not None or state.ttl.present:  # the fleet's time-to-live, enforced by the host
        out.append(_built("time-to-live", f"time-to-live of fleet {plan.fleet}",
                          lambda: ttl_ops.ttl_commands(plan, state.ttl, now=time.time()),
                          noop=f"the time-to-live of fleet {plan.fleet} is in place"))  # fmt: skip
    return out


def _agent_step(agent: AgentPlan, state: HostState, plan: FleetPlan) -> Step:
    """One agent's user, directories, network and container; its Docker part marked (``batched``), unless
    the agent publishes a host port: ports are the host's, and two agents asking for one must meet in
    the spec's order (the first gets it, the second fails), never in a race."""
    noop = f"agent {agent.instance} is up to date"
    try:
        host, docker = fleet.agent_parts(agent, state, plan.address_pools)
    except Refused as error:
        return Step("containers", f"agent {agent.instance}", noop=noop, refused=error.message)
    side_by_side = None if agent.policy.publish else len(host)
    return Step("containers", f"agent {agent.instance}", commands=[*host, *docker], noop=noop, docker_from=side_by_side)


def batched(steps: Sequence[Step], size: int = AGENTS_AT_ONCE) -> list[Step]:
    """``steps`` as the deploy runs them: each run of agents with changes in batches of ``size``, one
    step each (one round trip): their users and directories one after another, then their networks and
    containers side by side (``fleet.concurrently``). Every other step, and a batch of one, is as it was."""
    out: list[Step] = []
    pending: list[Step] = []

    def flush() -> None:
        for start in range(0, len(pending), size):
            out.append(_batch(pending[start : start + size]))
        pending.clear()

    for step in steps:
        if step.docker_from is not None and step.commands and not step.refused:
            pending.append(step)
            continue
        flush()
        out.append(step)
    flush()
    return out


def _batch(agents: list[Step]) -> Step:
    if len(agents) == 1:
        return agents[0]
    names = [s.name.removeprefix("agent ") for s in agents]
    heads = [c for s in agents for c in s.commands[: s.docker_from]]
    jobs = [(n, [str(c) for c in s.commands[s.docker_from :]]) for n, s in zip(names, agents, strict=True)]
    return Step("containers", "agents " + ", ".join(names), commands=[*heads, fleet.concurrently(jobs)],
                noop=f"agents {', '.join(names)} are up to date")  # fmt: skip


def _image_commands(image: str, state: HostState, *, busybox: bool, here: bool = False) -> list[Command]:
    """The agent image on the host: a role's (loaded from the operator, or built there; ``here``: every
    role's loaded from the operator) or the busybox one. Nothing when the host has it (the role is not
    loaded and hashed again for each host of a warm run)."""
    if image in state.images:
        return []
    if images.is_role_image(image):
        return host_ops.role_image_commands(image, state.images, **images.source(image, here=here))
    return host_ops.image_commands(image, state.images, busybox=busybox)


# --- what is shown ---------------------------------------------------------------


class Change(BaseModel):
    """Commands of one step in one category (an agent's step spans users, files, networks, containers)."""

    model_config = ConfigDict(extra="forbid")

    category: str
    step: str
    lines: list[str] = Field(default_factory=list)


class HostChanges(BaseModel):
    """What ``fleet.up`` would do to one host: nothing (``empty``), changes by category, or refusals."""

    model_config = ConfigDict(extra="forbid")

    host: str
    changes: list[Change] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)
    operations: int = 0  # how many operations of the deploy would change something (agents batched: ``batched``)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.refused

    def categories(self) -> list[str]:
        return [c for c in CATEGORIES if any(ch.category == c for ch in self.changes)]


def _agent_category(command: Command) -> str:
    """An agent step's command by what it changes (display only; the step runs as one script)."""
    if isinstance(command, Upload):
        return "files"
    head = command.split(" ", 2)
    if head[0] in ("groupadd", "useradd", "usermod"):
        return "users"
    if command.startswith(("docker network", "if docker network inspect", "echo ")):
        return "networks"
    if command.startswith(("docker", "set -- $(docker network inspect", '[ "${1:-}"')):
        return "containers"
    return "files"


def _fleet_category(command: Command) -> str:
    if isinstance(command, str) and command.startswith("docker network rm"):
        return "networks"
    if isinstance(command, str) and command.startswith("docker rm"):
        return "containers"
    return "files"


def _credential_lines(plan: FleetPlan, commands: list[Command]) -> list[str]:
    """Names and agents only: "credential NAME of coder-1: deliver" (the uploads hold the values)."""
    owner = {a.credentials_dir: a.instance for a in plan.agents}
    lines, other = [], 0
    for command in commands:
        if isinstance(command, credentials.SecretUpload):
            directory, _, name = command.target.rpartition("/")
            lines.append(f"credential {name} of {owner.get(directory, directory)}: deliver")
            continue
        words = shlex.split(command) if isinstance(command, str) and command.startswith("rm -rf") else []
        directory, _, name = words[-1].rpartition("/") if words else ("", "", "")
        if directory in owner:
            lines.append(f"credential {name} of {owner[directory]}: remove")
        elif directory == fleet_dir(plan.fleet) and not name.endswith(".digests"):
            lines.append(f"credentials of {name}: remove (it has none left, or left the plan)")
        elif words and words[-1] == fleet_dir(plan.fleet):
            lines.append(f"credentials of fleet {plan.fleet}: remove (no agent has any left)")
        else:
            other += 1
    if other:
        lines.append(f"{other} command(s) for the credential directories, staging and digest record")
    return lines


def _split(step: Step, plan: FleetPlan) -> list[Change]:
    if step.packages:
        return [Change(category=step.category, step=step.name, lines=["apt install " + " ".join(step.packages)])]
    if step.service:
        return [Change(category=step.category, step=step.name, lines=["systemctl: docker running and enabled"])]
    if step.category == "credentials":
        return [Change(category="credentials", step=step.name, lines=_credential_lines(plan, step.commands))]
    if step.category == "work":
        return [Change(category="work", step=step.name, lines=work.lines(plan, step.commands))]
    if step.category == "image":  # a role image loaded from the operator: by tag and size, not its check
        lines = [c.shown if isinstance(c, host_ops.ImageLoad) else str(c) for c in step.commands]
        return [Change(category="image", step=step.name, lines=lines)]
    classify = {"containers": _agent_category, "files": _fleet_category}.get(step.category)
    out: list[Change] = []
    for command in step.commands:
        category = classify(command) if classify else step.category
        if not out or out[-1].category != category:
            out.append(Change(category=category, step=step.name))
        out[-1].lines.append(str(command))
    return out


def host_changes(plan: FleetPlan, state: HostState, values: Secrets, *, host: str = "") -> HostChanges:
    """What ``fleet.up`` of ``plan`` would do to a host in ``state``: empty when nothing (the fast
    path then leaves the host out of the engine run)."""
    result = HostChanges(host=host)
    planned = steps(plan, state, values)
    for step in planned:
        if step.refused:
            result.refused.append(f"{step.name}: {step.refused}")
        elif step.changes:
            result.changes += _split(step, plan)
    result.operations = sum(1 for step in batched(planned) if step.changes and not step.refused)
    return result
