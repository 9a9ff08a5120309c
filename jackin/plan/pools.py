"""Whether each host's Docker address pools can hold the networks of the agents placed on it.

Every agent instance has its own bridge network on each host it runs on (``jackin.plan.fleet``: network
``jk-<fleet>--<instance>``, bridge ``jk<hash>``), and Docker gives each network a subnet from its address
pools: ``fleet.address_pools`` when the spec sets them (merged into the host's daemon.json), else
Docker's defaults. Pools that run out fail ``fleet.up`` in the middle of a host's run, after it made the
networks that fit; ``check`` refuses such a spec first (exit 2), from the spec alone, before any host is
touched (``fleet.validate``, ``fleet.plan``, ``fleet.up``).

What a host's pools hold, in agent networks: the IPv4 networks of the pools (agent networks are IPv4),
less the one Docker's own bridge (``docker0``) takes, less, with Docker's defaults on a lab host, the one
the lab's own network takes (the local engine gives it a subnet from the same defaults). A host whose
own networks overlap the pools, or that carries other fleets' networks, holds fewer: that is not known
before the host is read, and is not counted here.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence

from jackin.errors import SpecError
from jackin.spec import Inventory
from jackin.spec.models import AddressPool

# Docker's default local-scope pools (moby libnetwork/ipamutils, localScopeDefaultNetworks; Debian 12's docker.io
# 20.10.24): 172.17, 172.18 and 172.19 as /16s, 172.20.0.0/14, 172.24.0.0/14 and 172.28.0.0/14 split into /16s,
# 192.168.0.0/16 split into /20s: 31 networks. Measured on a lab host (no daemon.json pools): docker0 had
# 172.17.0.0/16, `docker network create` made 29 networks and failed the 30th ("could not find an available,
# non-overlapping IPv4 address pool among the defaults"), the lab network's 192.168.48.0/20 skipped.
DEFAULT_POOLS = [AddressPool(base=base, size=size) for base, size in (
    ("172.17.0.0/16", 16), ("172.18.0.0/16", 16), ("172.19.0.0/16", 16), ("172.20.0.0/14", 16),
    ("172.24.0.0/14", 16), ("172.28.0.0/14", 16), ("192.168.0.0/16", 20))]  # fmt: skip
# With daemon.json pools docker0 moves into them when Docker restarts (measured: 10.213.0.0/22 in /24s held
# docker0 and 3 networks), so it takes one network of the spec's pools as well.
DOCKER_BRIDGE = 1


def networks(pools: Sequence[AddressPool]) -> int:
    """How many IPv4 networks the pools split into (each pool counted as given, overlaps included)."""
    total = 0
    for pool in pools:
        base = ipaddress.ip_network(pool.base)
        if base.version == 4:
            total += 2 ** (pool.size - base.prefixlen)
    return total


def held(inventory: Inventory) -> int:
    """How many agent networks one of the fleet's hosts can hold (see the module's docstring)."""
    fleet = inventory.fleet
    taken = DOCKER_BRIDGE + (1 if fleet.provider == "lab" and not fleet.address_pools else 0)
    return max(0, networks(fleet.address_pools or DEFAULT_POOLS) - taken)


def placement(inventory: Inventory) -> dict[str, int]:
    """How many agent instances each host of the fleet runs at least (jackin/plan/placement.py): every instance of
    an ``each`` agent on each of its hosts, a ``spread`` agent's spread evenly over its hosts (placement then keeps
    a host to what its pools hold, ``held``)."""
    found = {host: 0 for host in inventory.fleet_host_names()}
    for agent in inventory.fleet.agents:
        mine = inventory.agent_host_names(agent)
        share = agent.count if agent.placement == "each" else math.ceil(agent.count / max(1, len(mine)))
        for host in mine:
            found[host] += share
    return found


def check(inventory: Inventory) -> None:
    """Refuse (SpecError, exit 2) a fleet whose agents need more networks on a host than its pools hold,
    naming each such host, with a pool that would hold them."""
    fleet, most = inventory.fleet, held(inventory)
    over = {host: count for host, count in placement(inventory).items() if count > most}
    if not over:
        return
    need = max(over.values())
    if fleet.address_pools:
        pools = f"fleet.address_pools hold {networks(fleet.address_pools)} networks"
    else:
        pools = ("Docker's default address pools (no fleet.address_pools) hold 31 networks, 172.17.0.0/16 to "
                 "172.31.0.0/16 and 192.168.0.0/16 in /20s")  # fmt: skip
    taken = "Docker's own bridge (docker0) takes one" + (
        ", the lab's own network another" if fleet.provider == "lab" and not fleet.address_pools else "")  # fmt: skip
    raise SpecError(
        f"fleet {fleet.name!r}: the hosts' Docker address pools cannot hold the agents' networks: {need} needed on "
        f"a host, at most {most} fit (each agent instance has its own bridge network on every host it runs on)",
        problems=[f"host {host}: {count} agent instances need {count} networks" for host, count in over.items()],
        hint=f"{pools}; {taken}. {_example(need)}",
    )


def _example(need: int) -> str:
    """How to set ``fleet.address_pools``, with a pool of /24 networks that holds ``need`` agents a host."""
    bits = math.ceil(math.log2(need + DOCKER_BRIDGE))
    prefix = max(8, 24 - bits)
    base = ipaddress.ip_network(("10.213.0.0", prefix), strict=False)
    count = 2 ** (24 - prefix)
    return (f"Set fleet.address_pools to pools that hold them, in a range no network or route of the hosts uses, "
            f"for example:\n"
            f"  fleet:\n"
            f"    address_pools:\n"
            f"      - {{base: {base}, size: 24}}   # {count} networks of 254 addresses: "
            f"{count - DOCKER_BRIDGE} agents a host")  # fmt: skip
