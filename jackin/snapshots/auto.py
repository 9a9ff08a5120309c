"""Automatic snapshots before ``fleet.up`` recreates or removes an existing agent.

``affected(plan, state)`` is pure: from one host's state read (``jackin.facts.state``) it
names the agents this run would recreate or remove, with the very predicates the
operations decide by (``jackin.operations.changes``), so the two cannot drift.
``snapshot_before_up`` reads every host in one parallel round trip and, when any
agent is affected and the spec's ``snapshots.before_changes`` is on, takes one
``auto`` snapshot of exactly those agents. A failed snapshot refuses the whole run
before anything changes (nothing lost). An up that changes no agent costs the one
state read and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from jackin.errors import JackinError
from jackin.facts.state import HostState, parse_state
from jackin.facts.state_read import state_command
from jackin.operations import changes
from jackin.plan.applied import load_fleet
from jackin.plan.fleet import FleetPlan
from jackin.plan.fleet import instances as spec_instances
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

Log = Callable[[str], None]
STATE_TIMEOUT = 15


class Change(BaseModel):
    """One existing agent that the run recreates or removes, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance: str
    action: Literal["recreate", "remove"]
    why: str


class AutoSnapshot(BaseModel):
    """What ``fleet.up`` snapshotted (or, in a dry run, would) on one host before changing it."""

    model_config = ConfigDict(extra="forbid")

    host: str
    changes: list[Change]
    snapshot: str | None = None  # the auto snapshot's id (None: a dry run, or none was taken here)
    skipped: list[str] = []  # affected, but the ledger has no record to snapshot them by


# Per host what fleet.up changes of its existing agents; and the hosts whose state read failed.
Found = tuple[list[AutoSnapshot], dict[str, JackinError]]


def changes_of(plan: FleetPlan, state: HostState) -> list[Change]:
    """The existing agents on this host that an up of ``plan`` recreates or removes.

    Existing: its workspace is on the host (otherwise there is nothing of the agent's to lose).
    Recreated: its container is there and the operations would remove and run it again.
    Removed: a container of the fleet the plan no longer names (its user and home stay until
    ``fleet.down``, but its environment goes). An agent the operations refuse to touch (its
    network belongs to another agent) is not affected: that run changes nothing of it."""
    found: list[Change] = []
    for agent in plan.agents:
        if agent.workspace not in state.paths or changes.foreign_network(agent, state):
            continue
        create, problem = changes.creates_network(agent, state, plan.address_pools)
        why = changes.recreate_reason(agent, state, plan.address_pools, create=create,
                                      remount=changes.remounts(agent, state))  # fmt: skip
        if why is not None:
            why += f" ({problem})" if problem else ""
            found.append(Change(instance=agent.instance, action="recreate", why=why))
    for name in changes.leaving_containers(plan, state):
        instance = state.containers[name].instance
        if instance and f"{plan.fleet_dir}/{instance}/workspace" in state.paths:
            found.append(Change(instance=instance, action="remove", why="the spec no longer names it"))
    return found


def affected(plan: FleetPlan, state: HostState) -> list[str]:
    """The instances ``changes_of`` names: what an automatic snapshot on this host must hold."""
    return [c.instance for c in changes_of(plan, state)]


States = dict[str, HostState | JackinError]


def read_states(plan: FleetPlan, hosts: Sequence[SshTarget]) -> States:
    """Every host's state of the fleet, in one parallel round trip (per host its error, if any); with
    what the deploy decides on (images, the Docker daemon's settings), so ``fleet.up`` plans from it too."""
    images = sorted({a.image for a in plan.agents})
    command = state_command(plan.fleet, plan.uid_min, plan.uid_max, images, bootstrap=True)
    return gather(hosts, command, lambda out: parse_state(out.split("\n")), timeout=STATE_TIMEOUT)


def plan_snapshots(plan: FleetPlan, hosts: Sequence[SshTarget], known: set[tuple[str, str]],
                   states: States | None = None) -> Found:  # fmt: skip
    """Per host what the run changes of its existing agents; and the hosts whose state read failed.

    ``known``: the (host, instance) pairs the ledger records. A removed agent the ledger does not
    know cannot be snapshotted (its manifest comes from the ledger): it is listed as ``skipped``."""
    planned = {a.instance for a in plan.agents}
    found, failed = [], {}
    for name, state in (read_states(plan, hosts) if states is None else states).items():
        if isinstance(state, JackinError):
            failed[name] = state
            continue
        found_here = changes_of(plan.for_host(name), state)  # what the run does there: its agents only
        skipped = [c.instance for c in found_here if c.instance not in planned and (name, c.instance) not in known]
        if found_here:
            found.append(AutoSnapshot(host=name, changes=found_here, skipped=skipped))
    return found, failed


def _verb(change: Change) -> str:
    return "recreating" if change.action == "recreate" else "removing"


def snapshot_before_up(ledger: Ledger, inventory: Inventory, plan: FleetPlan, hosts: Sequence[SshTarget], *,
                       action: str, dry_run: bool, log: Log, states: States | None = None) -> Found:  # fmt: skip
    """Before ``fleet.up`` (the caller holds the fleet's lock): snapshot the agents it will recreate or
    remove, per host. Returns what was (or, dry run, would be) snapshotted, and the hosts whose state
    read failed (the caller runs nothing there: it cannot know what would be lost).

    ``states``: the hosts' state read already made (``fleet.up`` reads once for this and its plan).

    Raises JackinError, before anything changed, when a snapshot fails on any host."""
    if not inventory.fleet.snapshots.before_changes:
        return [], {}  # off: no read, no snapshot, the run as it always was
    known = {(r["host"], r["instance"]) for r in ledger.agents(plan.fleet)}
    found, failed = plan_snapshots(plan, hosts, known, states)
    for item in found:
        for change in item.changes:
            if change.instance in item.skipped:
                log(f"{item.host}: no snapshot of {change.instance} before {_verb(change)} it ({change.why}): "
                    "the ledger has no record of it")  # fmt: skip
            elif dry_run:
                log(f"{item.host}: would snapshot {change.instance} before {_verb(change)} it: {change.why}")
    if not dry_run:
        for group in _groups(found):
            for spec, part in by_spec_in_place(ledger, inventory, group):
                _take(ledger, spec, hosts, part, action=action, log=log)
    return found, failed


PLACEMENT = ("name", "provider", "lab", "hosts")  # as jackin.lifecycle.rollback_choice.PLACEMENT: where the fleet runs


def by_spec_in_place(ledger: Ledger, inventory: Inventory,
                     group: list[AutoSnapshot]) -> list[tuple[Inventory, list[AutoSnapshot]]]:  # fmt: skip
    """The group's hosts by the fleet spec their agents run under, so the snapshot's manifests (spec,
    image, network policy, firewall hash) record what runs now, not the spec this run is about to apply:
    the spec of the last run that succeeded on the host (``jackin.plan.applied.in_place``; after a rollback
    not the file's). The spec being applied stands in where there is none, where it places the fleet
    elsewhere, or where it does not name an agent to snapshot that the ledger has no row of either.
    Hosts under different specs get different snapshots (ids)."""
    runs = ledger.spec_runs(inventory.fleet.name)
    rows = {(r["host"], r["instance"]) for r in ledger.agents(inventory.fleet.name)}
    parts: dict[str, tuple[Inventory, list[AutoSnapshot]]] = {}
    for item in group:
        run = next((r for r in reversed(runs) if r["results"].get(item.host) == "ok"), None)
        row = ledger.run(run["id"]) if run else None
        fleet = load_fleet(row["spec"]) if row and row.get("spec") else inventory.fleet
        named = {i for _, i in spec_instances(fleet)}
        wanted = {c.instance for c in item.changes} - set(item.skipped)
        if any(getattr(fleet, f) != getattr(inventory.fleet, f) for f in PLACEMENT) or any(
                i not in named and (item.host, i) not in rows for i in wanted):  # fmt: skip
            fleet = inventory.fleet
        parts.setdefault(fleet.model_dump_json(), (inventory.model_copy(update={"fleet": fleet}), []))[1].append(item)
    return list(parts.values())


def _groups(found: list[AutoSnapshot]) -> list[list[AutoSnapshot]]:
    """Hosts with the same agents to snapshot share one fleet snapshot (one id); others get their own."""
    groups: dict[tuple[str, ...], list[AutoSnapshot]] = {}
    for item in found:
        wanted = tuple(sorted({c.instance for c in item.changes} - set(item.skipped)))
        if wanted:
            groups.setdefault(wanted, []).append(item)
    return list(groups.values())


def _take(ledger: Ledger, inventory: Inventory, hosts: Sequence[SshTarget], group: list[AutoSnapshot], *,
          action: str, log: Log) -> None:  # fmt: skip
    from jackin.snapshots import (
        api,  # lazy: Fabric and paramiko load only when a snapshot is due, not on fleet.up's path
    )

    names = {item.host for item in group}
    skipped = {i for item in group for i in item.skipped}
    instances = sorted({c.instance for item in group for c in item.changes} - skipped)
    what = "; ".join(f"{c.action} {c.instance}" for c in group[0].changes if c.instance in instances)
    result = api.take(ledger, inventory, [h for h in hosts if h.name in names], instances, kind="auto",
                      label=f"before {action}: {what}")  # fmt: skip
    if result.errors:
        lines = [f"{e.host}: {e.error}" for e in result.errors]
        raise JackinError(f"the automatic snapshot before {action} failed, so nothing was changed: " + "; ".join(lines),
                          hint="fix the host (see the error) and run again, or set snapshots.before_changes: false "
                               "in the spec to change agents without a snapshot first")  # fmt: skip
    taken = {(a.host, a.instance) for a in result.snapshot.agents}
    for item in group:
        item.snapshot = result.snapshot.id if any(h == item.host for h, _ in taken) else None
        for change in item.changes:
            if (item.host, change.instance) in taken:
                log(f"{item.host}: snapshot {result.snapshot.id} of {change.instance} before {_verb(change)} it: "
                    f"{change.why}")  # fmt: skip
            elif change.instance not in item.skipped:
                item.skipped.append(change.instance)
                log(f"{item.host}: no snapshot of {change.instance} before {_verb(change)} it: the ledger does not "
                    "place it on this host")  # fmt: skip
