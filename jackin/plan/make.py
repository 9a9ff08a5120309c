"""The fleet plan as the operator's ledger has it: ``make_plan`` builds it (``jackin.plan.fleet.build``) with
the uids the ledger allocates (or only previews, for a dry run), every address of the fleet's hosts (always
denied to its agents) and the time-to-live's deadline (jackin/plan/ttl.py).

Apart from ``jackin.plan.fleet``, which is pure: the operations render the fleet plan and never touch the ledger.
"""

from __future__ import annotations

from jackin.errors import SpecError
from jackin.plan import fleet as planning
from jackin.plan import ttl
from jackin.spec import Inventory
from jackin.store.ledger import Ledger


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
    return built.model_copy(update={"ttl_deadline": ttl.deadline(ledger, fleet, start=start_ttl),
                                    "host_count": hosts})  # fmt: skip
