"""Placement: on which of the fleet's hosts each agent instance lives. Pure: the spec, the ledger's record and
the hosts' capacity in (``jackin.facts.capacity``), a ``Placement`` out.

    spread (the default)  ``count`` instances across the agent's hosts, each on one: a new instance goes to the
                          host with room for it whose load is lowest once it is there (its largest fraction of
                          CPUs, memory and disk taken), ties to the first in the fleet's order
    each                  ``count`` instances on every one of the agent's hosts (one set per host)

Memory and disk are never overcommitted: the instances on a host, ``resources.memory`` each, fit its memory, and
the disk of those it does not hold yet (``resources.disk`` where the fleet sets quotas, else ``DISK_NEED``) fits
its free disk. CPUs are a cap (``docker run --cpus``), not a reservation: up to ``CPU_OVERCOMMIT`` times the
host's CPUs. Only this fleet's instances count (another fleet's agents on a host are not weighed).

Stable: an instance recorded on a host (the ledger's ``placements``) stays there while that host is in the
inventory (even when its agent's ``hosts`` no longer name it: ``agent.move`` moves it); one found on one of its
agent's hosts before any record (a fleet brought up by an earlier release, a kept home) stays where it is found.
One whose host left the inventory is not placed again: it is ``stranded`` (``agent.move`` moves it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import SpecError
from jackin.facts.capacity import Capacity
from jackin.plan.fleet import instances
from jackin.spec import Inventory
from jackin.spec.models import AgentSpec
from jackin.spec.values import parse_size

CPU_OVERCOMMIT = 8  # a host takes agents with up to this many times its CPUs in all (CPU is a cap, not reserved)
DISK_NEED = parse_size("128m")  # the disk an instance needs on a host where its home has no quota (resources.disk)
RESOURCES = ("memory", "cpus", "disk")


class PlacementError(SpecError):
    """The fleet does not fit on its hosts, or a move cannot be made: nothing was changed (exit 2)."""


class Need(BaseModel):
    """What one instance takes of a host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory: int
    cpus: float
    disk: int


class Placement(BaseModel):
    """Per host (every one of the fleet's, in its order) the instances placed there, in spec order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hosts: dict[str, list[str]]
    stranded: dict[str, str] = Field(default_factory=dict)  # instance -> the host it is on, which left the inventory
    unplaced: list[str] = Field(default_factory=list)  # spread instances not placed yet (no capacity weighed)
    new: list[str] = Field(default_factory=list)  # the instances this placement put somewhere first


def need(inventory: Inventory, agent: AgentSpec) -> Need:
    fleet = inventory.fleet
    resources = fleet.agent_resources(agent)
    disk = fleet.agent_disk(agent)
    return Need(memory=resources.memory, cpus=resources.cpus, disk=disk if disk is not None else DISK_NEED)


def each_instances(inventory: Inventory) -> list[str]:
    return [f"{a.name}-{i}" for a in inventory.fleet.agents if a.placement == "each" for i in range(1, a.count + 1)]


def recorded(inventory: Inventory, record: Mapping[str, str]) -> Placement:
    """The placement as the ledger has it, weighing nothing: ``each`` instances on every one of their hosts,
    spread ones where recorded (``unplaced``: none recorded; ``stranded``: their host is not their agent's)."""
    return _start(inventory, record, {})[0]


def place(inventory: Inventory, record: Mapping[str, str], capacity: Mapping[str, Capacity | None],
          present: Mapping[str, set[str]], *, most: int | None = None) -> Placement:  # fmt: skip
    """Every instance placed: the recorded ones (and those ``present``, found on a host, before any record)
    where they are, each new one on the host of its agent's with room whose load is then lowest. ``capacity``:
    the hosts read (a host missing or None takes no new instance; an instance with no room on the hosts read while
    one of its hosts was not is left ``unplaced``). Raises PlacementError, with the numbers, when an instance fits
    on none of its hosts, all of them read, or a host cannot hold an ``each`` agent's set. ``most``: the instances a host
    holds at most (each has its own network, which its Docker address pools must hold: jackin/plan/pools.py)."""
    start, needs = _start(inventory, record, present)
    hosts = {h: list(placed) for h, placed in start.hosts.items()}
    used = _used(hosts, needs, present)
    problems = _each_fits(inventory, hosts, needs, present, capacity)
    placed_now: list[str] = []
    unfit: list[str] = []
    later: list[str] = []
    for instance in start.unplaced:
        agent = _agent_of(inventory, instance)
        room = [h for h in inventory.agent_host_names(agent) if most is None or len(hosts[h]) < most]
        best = _best(room, needs[instance], used, capacity)
        if best is None:  # refused only when every one of its hosts was weighed: else it waits (unplaced)
            (unfit if all(capacity.get(h) is not None for h in inventory.agent_host_names(agent)) else later).append(
                instance
            )
            continue
        hosts[best].append(instance)
        used[best] = add(used[best], needs[instance])
        placed_now.append(instance)
    problems += _unfit_problems(inventory, unfit, needs, used, capacity)
    full = sorted({h for i in unfit for h in inventory.agent_host_names(_agent_of(inventory, i))
                   if most is not None and len(hosts[h]) >= most})  # fmt: skip
    if full:
        problems.append(f"  host(s) {', '.join(full)} hold {most} agent networks at most (their Docker address pools: "
                        "fleet.address_pools), and have as many")  # fmt: skip
    if problems:
        raise PlacementError(f"fleet {inventory.fleet.name!r} does not fit on its hosts: nothing was changed",
                             problems=problems,
                             hint="lower count or resources, give the agents more hosts, or add hosts")  # fmt: skip
    order = {i: n for n, (_, i) in enumerate(instances(inventory.fleet))}
    hosts = {h: sorted(placed, key=lambda i: order[i]) for h, placed in hosts.items()}
    return Placement(hosts=hosts, stranded=start.stranded, new=placed_now, unplaced=later)


def fits(capacity: Capacity, used: Need, one: Need) -> bool:
    return not _short(capacity, used, one)


def load(capacity: Capacity, used: Need) -> float:
    """The host's largest fraction taken of its memory, CPUs (overcommit included) and free disk."""
    return max(used.memory / max(capacity.memory, 1), used.cpus / max(capacity.cpus * CPU_OVERCOMMIT, 1e-9),
               used.disk / max(capacity.disk, 1))  # fmt: skip


def size(value: float) -> str:
    """Bytes, as the refusals show them: 512 MiB, 7.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return str(value)


def amount(resource: str, value: float) -> str:
    return f"{value:g} CPUs" if resource == "cpus" else size(value)


# --- the parts --------------------------------------------------------------------------------------------


def _agent_of(inventory: Inventory, instance: str) -> AgentSpec:
    return next(a for a in inventory.fleet.agents if instance.rsplit("-", 1)[0] == a.name)


def _start(inventory: Inventory, record: Mapping[str, str],
           present: Mapping[str, set[str]]) -> tuple[Placement, dict[str, Need]]:  # fmt: skip
    """What is placed before anything is weighed, and each instance's need."""
    fleet_hosts = inventory.fleet_host_names()
    hosts: dict[str, list[str]] = {h: [] for h in fleet_hosts}
    stranded: dict[str, str] = {}
    unplaced: list[str] = []
    needs: dict[str, Need] = {}
    for agent in inventory.fleet.agents:
        mine = inventory.agent_host_names(agent)
        one = need(inventory, agent)
        for n in range(1, agent.count + 1):
            instance = f"{agent.name}-{n}"
            needs[instance] = one
            if agent.placement == "each":
                for host in mine:
                    hosts[host].append(instance)
                continue
            where = record.get(instance)
            if where is None:  # found on one of its hosts before any record: it stays where it is
                where = next((h for h in mine if instance in present.get(h, set())), None)
            if where is None:
                unplaced.append(instance)
            elif where in hosts:  # its host, or one of the fleet's its agent no longer names: it stays
                hosts[where].append(instance)
            else:  # its host left the inventory: not placed again (agent.move moves it)
                stranded[instance] = where
    return Placement(hosts=hosts, stranded=stranded, unplaced=unplaced), needs


def add(a: Need, b: Need, *, disk: bool = True) -> Need:
    return Need(memory=a.memory + b.memory, cpus=round(a.cpus + b.cpus, 6), disk=a.disk + (b.disk if disk else 0))


ZERO = Need(memory=0, cpus=0, disk=0)


def _used(
    hosts: Mapping[str, list[str]], needs: Mapping[str, Need], present: Mapping[str, set[str]]
) -> dict[str, Need]:
    """Per host what its placed instances take: their memory and CPUs, and the disk of those not there yet."""
    used = {}
    for host, placed in hosts.items():
        total = ZERO
        for instance in placed:
            total = add(total, needs[instance], disk=instance not in present.get(host, set()))
        used[host] = total
    return used


def _short(capacity: Capacity, used: Need, one: Need) -> list[str]:
    """The resources ``one`` more instance would exceed on the host."""
    after = add(used, one)
    limits = {"memory": capacity.memory, "cpus": capacity.cpus * CPU_OVERCOMMIT, "disk": capacity.disk}
    return [r for r in RESOURCES if getattr(after, r) > limits[r] + 1e-9]


def _best(candidates: Sequence[str], one: Need, used: Mapping[str, Need],
          capacity: Mapping[str, Capacity | None]) -> str | None:  # fmt: skip
    """The host of ``candidates`` with room for ``one`` whose load is lowest with it; ties: the first."""
    best, lowest = None, 0.0
    for host in candidates:
        cap = capacity.get(host)
        if cap is None or not fits(cap, used[host], one):
            continue
        score = load(cap, add(used[host], one))
        if best is None or score < lowest - 1e-12:
            best, lowest = host, score
    return best


def _each_fits(inventory: Inventory, hosts: Mapping[str, list[str]], needs: Mapping[str, Need],
               present: Mapping[str, set[str]], capacity: Mapping[str, Capacity | None]) -> list[str]:  # fmt: skip
    """A line per host read that cannot hold what is placed on it with an ``each`` agent's set among it."""
    each = set(each_instances(inventory))
    problems = []
    for host, placed in hosts.items():
        cap = capacity.get(host)
        if cap is None or not each.intersection(placed):
            continue
        used = _used({host: placed}, needs, present)[host]
        limits = {"memory": cap.memory, "cpus": cap.cpus * CPU_OVERCOMMIT, "disk": cap.disk}
        for resource in RESOURCES:
            have, want = limits[resource], getattr(used, resource)
            if want > have + 1e-9:
                names = sorted({_agent_of(inventory, i).name for i in placed if i in each})
                problems.append(f"host {host}: {resource}: its instances (agent(s) {', '.join(names)} with "
                                f"placement each among them) need {amount(resource, want)}, it has "
                                f"{amount(resource, have)}{_allowed(resource, cap)}: short by "
                                f"{amount(resource, want - have)}")  # fmt: skip
    return problems


def _allowed(resource: str, cap: Capacity) -> str:
    return f" ({CPU_OVERCOMMIT} × its {cap.cpus:g} CPUs)" if resource == "cpus" else (
        " free" if resource == "disk" else "")  # fmt: skip


def _unfit_problems(inventory: Inventory, unfit: list[str], needs: Mapping[str, Need], used: Mapping[str, Need],
                    capacity: Mapping[str, Capacity | None]) -> list[str]:  # fmt: skip
    """Per agent with instances that fit nowhere: which, and per resource what they need against what is
    free on its hosts (and by how much it falls short)."""
    problems = []
    for agent in inventory.fleet.agents:
        left = [i for i in unfit if _agent_of(inventory, i).name == agent.name]
        if not left:
            continue
        mine = inventory.agent_host_names(agent)
        read = [h for h in mine if capacity.get(h) is not None]
        one = needs[left[0]]
        problems.append(f"agent {agent.name}: {len(left)} of its {agent.count} instance(s) fit on none of its hosts "
                        f"({', '.join(left)}), each needing {size(one.memory)} of memory, {one.cpus:g} CPUs and "
                        f"{size(one.disk)} of disk")  # fmt: skip
        short_any = False
        for resource in RESOURCES:
            room = {h: free(cap, used[h], resource) for h in read if (cap := capacity.get(h)) is not None}
            want = getattr(one, resource) * len(left)
            total = sum(room.values())
            per_host = ", ".join(f"{h} {amount(resource, v)}" for h, v in room.items())
            short = want > total + 1e-9
            short_any |= short
            problems.append(f"  {resource}: needed {amount(resource, want)}, free {amount(resource, total)} "
                            f"({per_host or 'no host read'}): "
                            f"{f'short by {amount(resource, want - total)}' if short else 'enough'}")  # fmt: skip
        if read and not short_any:
            problems.append("  enough in all, but no one host has room for one more instance")
    return problems


def free(cap: Capacity, used: Need, resource: str) -> float:
    limits = {"memory": cap.memory, "cpus": cap.cpus * CPU_OVERCOMMIT, "disk": cap.disk}
    return max(0.0, limits[resource] - getattr(used, resource))
