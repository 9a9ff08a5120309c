"""When ``fleet.up`` recreates or removes an agent's container: the predicates, pure.

The operations (``jackin.operations.fleet``) decide with these, and so does the
automatic snapshot before a run (``jackin.snapshots.auto``), so the two cannot
drift. No pyinfra here: the CLI process imports this module.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from jackin.facts.state import HostState, Network, PathInfo
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.spec.models import AddressPool


def home_ok(agent: AgentPlan, state: HostState) -> bool:
    """The agent's home is a real directory, root:agent 0750, as planned."""
    return state.paths.get(agent.home) == PathInfo(kind="d", mode="0750", uid=0, gid=agent.uid)


def remounts(agent: AgentPlan, state: HostState) -> bool:
    """The home or workspace was not as planned, so the container may have mounted the workspace
    through a link: it is recreated."""
    workspace = state.paths.get(agent.workspace)
    return not (home_ok(agent, state) and workspace is not None and workspace.kind == "d")


def network_problem(agent: AgentPlan, network: Network, pools: Sequence[AddressPool]) -> str | None:
    """Why the agent's existing network is not the one the plan wants (None: it is)."""
    if network.bridge != agent.bridge:
        return f"its bridge is {network.bridge or 'a name Docker chose'}, not {agent.bridge}"
    nets = [ipaddress.ip_network(p.base) for p in pools]
    outside = [s for s in network.subnets if nets and not any(_within(s, n) for n in nets)]
    if outside:
        return f"its subnet {outside[0]} is outside the fleet's address pools"
    return None


def _within(subnet: str, pool: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    net = ipaddress.ip_network(subnet, strict=False)
    return net.version == pool.version and net.subnet_of(pool)  # type: ignore[arg-type]  # same version, checked first


def foreign_network(agent: AgentPlan, state: HostState) -> bool:
    """The agent's network name is taken by a network of the fleet labelled for another agent:
    the operation refuses (changes nothing) rather than replace it."""
    network = state.networks.get(agent.network)
    return network is not None and network.labels.get("jackin.agent") != agent.instance


def recreate_reason(agent: AgentPlan, state: HostState, pools: Sequence[AddressPool], *,
                    create: bool, remount: bool) -> str | None:  # fmt: skip
    """Why the agent's existing container is removed and run again (None: it is kept, or there
    is none). ``create``: its network is (re)created; ``remount``: see ``remounts``."""
    container = state.containers.get(agent.container)
    if container is None:
        return None
    if create:
        return "its network is replaced" if agent.network in state.networks else "its network is created"
    if remount:
        return "its home or workspace was not as planned"
    if container.labels.get("jackin.config") != agent.config_hash:
        return "its configuration changed"
    if container.networks not in (None, [agent.network]):
        return "it is on other networks than its own"
    return None


def creates_network(agent: AgentPlan, state: HostState, pools: Sequence[AddressPool]) -> tuple[bool, str | None]:
    """Whether the agent's network is (re)created, and why an existing one is replaced."""
    network = state.networks.get(agent.network)
    problem = network_problem(agent, network, pools) if network is not None else None
    return network is None or problem is not None, problem


def leaving_containers(plan: FleetPlan, state: HostState) -> list[str]:
    """The fleet's containers the plan no longer names (an agent that left, an old name): removed."""
    return sorted(set(state.containers) - {a.container for a in plan.agents})


def leaving_networks(plan: FleetPlan, state: HostState) -> list[str]:
    """The fleet's networks the plan no longer names: removed."""
    return sorted(set(state.networks) - {a.network for a in plan.agents})
