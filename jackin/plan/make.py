"""The fleet plan as the operator's ledger has it: ``make_plan`` builds it (``jackin.plan.fleet.build``) with
the uids the ledger allocates (or only previews, for a dry run), every address of the fleet's hosts (always
denied to its agents), the time-to-live's deadline (jackin/plan/ttl.py) and the placement the ledger records
(jackin/plan/placement.py); ``placed`` completes the placement from the hosts' state read (fleet.up, fleet.plan).

Apart from ``jackin.plan.fleet``, which is pure: the operations render the fleet plan and never touch the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from jackin.errors import SpecError
from jackin.plan import fleet as planning
from jackin.plan import placement, pools, ttl
from jackin.spec import Inventory
from jackin.store.ledger import Ledger

if TYPE_CHECKING:  # fleet.status reads the placement through ``record`` without the state read's models
    from jackin.facts.state import HostState


def make_plan(
    inventory: Inventory,
    ledger: Ledger,
    *,
    store: bool = True,
    fleet_hosts: list[str] | None = None,
    start_ttl: bool = False,
) -> planning.FleetPlan:
    """The fleet's plan; ``store=False`` previews new uids without allocating them (a dry run).
    ``fleet_hosts``: every address of the fleet's hosts, always denied to its agents.
    ``start_ttl``: a real fleet.up, which fixes the time-to-live's start if none is (jackin/plan/ttl.py)."""
    fleet = inventory.fleet
    names = [instance for _, instance in planning.instances(fleet)]
    assign = ledger.allocate_uids if store else ledger.preview_uids
    uids = assign(fleet.name, names, fleet.uid_base, planning.UIDS_PER_FLEET)
    built = planning.build(fleet, uids, planning.host_addresses(fleet_hosts or []))
    hosts = max(1, len(inventory.fleet_host_names()))
    for key, value in (fleet.budget.model_dump() if fleet.budget else {}).items():
        if key != "usd" and value is not None and value < hosts:
            raise SpecError(f"budget.{key} {value} is less than the fleet's {hosts} hosts: each host enforces an equal "
                            "share of the fleet's budget, and a share would be 0",
                            hint=f"give budget.{key} at least {hosts}, or per agent")  # fmt: skip
    where = placement.recorded(inventory, record(inventory, ledger))
    return built.model_copy(update={"ttl_deadline": ttl.deadline(ledger, fleet, start=start_ttl), "host_count": hosts,
                                    "placement": where.hosts, "stranded": where.stranded,
                                    "unplaced": where.unplaced})  # fmt: skip


def record(inventory: Inventory, ledger: Ledger) -> dict[str, str]:
    """instance -> host as the ledger records it: its placements, else (a fleet an earlier release brought up)
    the first of the fleet's hosts its agents table has the instance on."""
    order = {h: n for n, h in enumerate(inventory.fleet_host_names())}
    found: dict[str, str] = {}
    for row in sorted(ledger.agents(inventory.fleet.name), key=lambda r: order.get(r["host"], len(order))):
        found.setdefault(row["instance"], row["host"])
    return {**found, **ledger.placements(inventory.fleet.name)}


def present(plan: planning.FleetPlan, state: HostState) -> set[str]:
    """The fleet's instances a host holds: a container of the fleet, or a home in its directory."""
    homes = {p.rsplit("/", 1)[1] for p, info in state.paths.items()
             if p.rsplit("/", 1)[0] == plan.fleet_dir and info.kind == "d"}  # fmt: skip
    return {c.instance for c in state.containers.values() if c.instance} | homes


def _refuse_split_sets(inventory: Inventory, ledger: Ledger, present: Mapping[str, set[str]]) -> None:
    """A ``spread`` instance with no placement recorded that lives on several hosts (a fleet an earlier release
    brought up, when every agent ran on every host): placing it on one would remove the others, each a workspace of
    its own. Refused (exit 2, nothing changed), saying how to keep them."""
    recorded = ledger.placements(inventory.fleet.name)
    found: dict[str, set[str]] = {}
    for row in ledger.agents(inventory.fleet.name):
        found.setdefault(row["instance"], set()).add(row["host"])
    for host, instances in present.items():
        for instance in instances:
            found.setdefault(instance, set()).add(host)
    spread_agents = {a.name for a in inventory.fleet.agents if a.placement == "spread"}
    spread = {i for agent, i in planning.instances(inventory.fleet) if agent in spread_agents}
    split = sorted(i for i, hosts in found.items() if i in spread and i not in recorded and len(hosts) > 1)
    if split:
        agents = sorted({i.rsplit("-", 1)[0] for i in split})
        raise placement.PlacementError(
            f"fleet {inventory.fleet.name!r}: {', '.join(split)} live on several hosts each (the fleet was brought up "
            "when every agent ran on every host), and placement spread would keep one of each and remove the others, "
            "each a workspace of its own: nothing was changed",
            hint=f"keep them: set placement: each on agent(s) {', '.join(agents)}; or snapshot them and lower what "
                 "runs where by hand")  # fmt: skip


def placed(plan: planning.FleetPlan, inventory: Inventory, ledger: Ledger,
           states: Mapping[str, object]) -> planning.FleetPlan:  # fmt: skip
    """``plan`` with every instance placed (``jackin.plan.placement.place``) by the capacity of the hosts read
    (``states``: a HostState per host read, else its error). Raises PlacementError (exit 2) when the fleet does
    not fit: before any host is changed."""
    from jackin.facts.state import HostState

    read = {h: s for h, s in states.items() if isinstance(s, HostState)}
    _refuse_split_sets(inventory, ledger, {h: present(plan, s) for h, s in read.items()})
    where = placement.place(inventory, record(inventory, ledger), {h: s.capacity for h, s in read.items()},
                            {h: present(plan, s) for h, s in read.items()}, most=pools.held(inventory))  # fmt: skip
    return plan.model_copy(update={"placement": where.hosts, "stranded": where.stranded, "unplaced": where.unplaced})
