"""The launch contract's gate: the contract ``fleet.up`` is about to apply, the last one applied
(kept in the ledger per run, ``run_contracts``), and what changed between them (``gate``), so
``fleet.up`` can show the difference and ask before it goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from jackin.plan import fleet as planning
from jackin.plan import placement
from jackin.plan.contract import build, diff
from jackin.plan.fleet import FleetPlan
from jackin.plan.make import record as recorded_placement
from jackin.plan.terms import FleetContract
from jackin.spec import Inventory
from jackin.store.ledger import Ledger


class Gate(BaseModel):
    """The contract ``fleet.up`` is about to apply, the last one applied (None: never), and the difference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contract: FleetContract
    previous: FleetContract | None
    changes: list[str]

    @property
    def first(self) -> bool:
        return self.previous is None

    @property
    def differs(self) -> bool:
        return self.first or bool(self.changes)


def current(inventory: Inventory, ledger: Ledger, plan: FleetPlan | None = None,
            host_facts: Mapping[str, Any] | None = None) -> FleetContract:  # fmt: skip
    """The contract of ``inventory`` now: with its plan (default: uids previewed, none allocated)
    and the fleet's newest snapshot from the ledger. Reads the ledger only."""
    fleet = inventory.fleet
    if plan is None:
        names = [instance for _, instance in planning.instances(fleet)]
        plan = planning.build(fleet, ledger.preview_uids(fleet.name, names, fleet.uid_base, planning.UIDS_PER_FLEET))
        where = placement.recorded(
            inventory, recorded_placement(inventory, ledger)
        )  # where each instance lives, as recorded
        plan = plan.model_copy(update={"placement": where.hosts, "stranded": where.stranded})
    snapshots = ledger.snapshot_rows(fleet.name)
    return build(inventory, plan, host_facts, last_snapshot=snapshots[-1]["id"] if snapshots else None)


def last_applied(ledger: Ledger, fleet: str) -> FleetContract | None:
    """The contract of the fleet's last successful run that recorded one; None when there is none, or
    when it was written by another schema version (then the whole contract is shown and asked about
    again). A failed or interrupted run's contract does not count: it may not be in place."""
    text = ledger.last_contract(fleet)
    if text is None:
        return None
    try:
        return FleetContract.model_validate_json(text)
    except ValueError:
        return None


def gate(inventory: Inventory, host_facts: Mapping[str, Any] | None = None) -> Gate:
    """What ``fleet.up`` shows before it applies: the contract, and how it differs from the last
    one applied to the fleet. Reads the ledger; touches no host. No ``host_facts`` (no host read
    now): the hosts as the last applied contract found them, so only the spec makes a difference."""
    with Ledger() as ledger:
        return gate_of(ledger, inventory, host_facts=host_facts)


def gate_of(ledger: Ledger, inventory: Inventory, plan: FleetPlan | None = None,
            host_facts: Mapping[str, Any] | None = None, previous: FleetContract | None = None) -> Gate:  # fmt: skip
    """``gate`` on an open ledger, with ``plan`` when it is made; ``previous``: compare with it
    instead of the last applied contract (a rollback's later step follows its earlier one)."""
    previous = previous or last_applied(ledger, inventory.fleet.name)
    if host_facts is None and previous is not None and previous.hosts:
        host_facts = {h.name: h for h in previous.hosts}
    contract = current(inventory, ledger, plan, host_facts=host_facts)
    return Gate(contract=contract, previous=previous, changes=diff(previous, contract) if previous else [])


def record(ledger: Ledger, run: int, contract: FleetContract) -> None:
    """Keep the contract a run applies (no secret: a contract holds credential names only)."""
    ledger.record_contract(run, contract.fleet, contract.schema_version, contract.model_dump_json())
