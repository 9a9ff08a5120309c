"""The final snapshot at ``fleet.down``: snapshot every agent, pull each host's repository here, and
say which hosts may be torn down.

A host's workspaces are the only copy of its agents' work until a snapshot of them sits on
the operator's machine and checks there. So a host is torn down only when its final snapshot
and the pull (mirror + local ``restic check``, recorded in the ledger's ``repo_copies``) both
succeeded; a host where either failed keeps everything and is reported with what failed.

A host with no agent home of the fleet (it never came up) needs no snapshot; its repository,
if an earlier snapshot made one, is still pulled before teardown removes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import paramiko
from pydantic import BaseModel, ConfigDict, Field

from jackin import plan as planning
from jackin.errors import ConnectError, JackinError
from jackin.ledger import Ledger
from jackin.paths import state_dir
from jackin.remote import gather
from jackin.spec import Inventory
from jackin.ssh import SshTarget
from jackin.state import HostState, parse_state, state_command

LABEL = "final, before fleet.down"
Stage = Literal["done", "nothing", "read", "snapshot", "pull"]
Log = Callable[[str], None]


class FinalHost(BaseModel):
    """One host's final snapshot and pull. ``stage``: ``done`` (snapshotted and/or pulled),
    ``nothing`` (no home, no repository: nothing to keep), or where it failed (``error`` set)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    stage: Stage = "done"
    instances: list[str] = Field(default_factory=list)  # agents whose homes were snapshotted
    snapshot: str | None = None  # the final fleet snapshot's id
    copy_path: str | None = None  # the operator's checked copy of the host's repository
    not_in_spec: list[str] = Field(default_factory=list)  # homes of agents the spec and ledger no longer name
    error: str | None = None
    unreachable: bool = False

    @property
    def blocked(self) -> bool:
        """Not to be torn down: its workspaces are the only copy."""
        return self.error is not None


def pulled_root(fleet: str) -> str:
    """Where the final pull puts each host's repository (``<this>/<host>/repo``); creates nothing."""
    return str(state_dir() / "snapshots" / fleet / "pulled")


def homes(plan: planning.FleetPlan, state: HostState) -> tuple[list[str], list[str]]:
    """The plan's instances with a home on the host, and other home names in the fleet dir
    (agents removed from the spec keep their homes until fleet.down)."""
    planned = [a.instance for a in plan.agents if a.home in state.paths]
    prefix = plan.fleet_dir + "/"
    names = {p[len(prefix):] for p in state.paths if p.startswith(prefix) and "/" not in p[len(prefix):]}
    known = {a.instance for a in plan.agents}
    return planned, sorted(n for n in names if not n.startswith(".") and n not in known)


def take_final(ledger: Ledger, inventory: Inventory, plan: planning.FleetPlan, hosts: Sequence[SshTarget], *,
               log: Log = lambda _: None) -> list[FinalHost]:  # fmt: skip
    """Snapshot every agent home on every host (kind ``final``), then pull every host's repository
    here and check it. The caller holds the fleet's lock. One FinalHost per host, in ``hosts``' order."""
    states = gather(hosts, state_command(plan.fleet, plan.uid_min, plan.uid_max),
                    lambda out: parse_state(out.split("\n")), timeout=30)  # fmt: skip
    out: dict[str, FinalHost] = {}
    groups: dict[tuple[str, ...], list[SshTarget]] = {}
    pull: set[str] = set()
    rows = {(r["host"], r["instance"]) for r in ledger.agents(plan.fleet)}
    for target in hosts:
        state = states[target.name]
        if isinstance(state, JackinError):
            out[target.name] = _failed(target.name, "read", f"could not read what it holds: {state.message}", state)
            continue
        planned, others = homes(plan, state)
        kept = [n for n in others if (target.name, n) in rows]  # the ledger still knows them: take() can
        entry = FinalHost(host=target.name, instances=planned + kept,
                          not_in_spec=[n for n in others if n not in kept])  # fmt: skip
        out[target.name] = entry
        if entry.instances:
            groups.setdefault(tuple(entry.instances), []).append(target)
        elif state.snapshots.repo:
            pull.add(target.name)  # earlier snapshots: pulled before teardown removes them
        else:
            entry.stage = "nothing"
        for name in entry.not_in_spec:
            log(f"warning: {target.name}: home of {name!r} (no longer in the spec nor the ledger) is not snapshotted; "
                "its last automatic snapshot, if any, is in the repository pulled here")  # fmt: skip
    for instances, group in groups.items():
        pull |= _snapshot(ledger, inventory, group, list(instances), out, log)
    _pull(ledger, plan.fleet, [t for t in hosts if t.name in pull], out, log)
    return [out[t.name] for t in hosts]


def _failed(host: str, stage: Stage, message: str, error: JackinError | None = None) -> FinalHost:
    return FinalHost(host=host, stage=stage, error=message, unreachable=isinstance(error, ConnectError))


def _snapshot(ledger: Ledger, inventory: Inventory, group: list[SshTarget], instances: list[str],
              out: dict[str, FinalHost], log: Log) -> set[str]:  # fmt: skip
    """One final fleet snapshot of ``instances`` on ``group``; the names of the hosts where every one
    of them was backed up (the others get their error)."""
    from jackin.snapshots import api  # late: api imports the fleet module's planning in turn

    try:
        result = api.take(ledger, inventory, group, instances, kind="final", label=LABEL)
    except JackinError as error:
        for target in group:
            failed = _failed(target.name, "snapshot", f"final snapshot failed: {error.message}", error)
            out[target.name] = failed.model_copy(update={"instances": instances})
        return set()
    ok = set()
    for target in group:
        entry = out[target.name]
        errors = [e for e in result.errors if e.host == target.name]
        done = {a.instance for a in result.snapshot.agents if a.host == target.name}
        missing = [i for i in instances if i not in done]
        if errors or missing:
            why = "; ".join(e.error for e in errors) or f"not backed up: {', '.join(missing)}"
            entry.stage, entry.error = "snapshot", f"final snapshot failed: {why}"
            entry.unreachable = bool(errors) and all(e.unreachable for e in errors)
            continue
        entry.snapshot = result.snapshot.id
        ok.add(target.name)
        log(f"{target.name}: final snapshot {result.snapshot.id} of {', '.join(instances)}")
    return ok


def _pull(ledger: Ledger, fleet: str, targets: list[SshTarget], out: dict[str, FinalHost], log: Log) -> None:
    """Pull and check each target's repository here (``copies.pull_hosts``: recorded in the ledger)."""
    from jackin.snapshots import copies, transfer

    try:
        results = copies.pull_hosts(ledger, fleet, targets)
    except paramiko.SSHException as error:  # pull_hosts lets this one through: hold every host back
        lost = ConnectError(f"{type(error).__name__}: {' '.join(str(error).split())[:200]}")
        results = dict.fromkeys((t.name for t in targets), lost)
    for name, result in results.items():
        entry = out[name]
        if isinstance(result, JackinError):
            entry.stage, entry.error = "pull", f"pulling its repository here failed: {result.message}"
            entry.unreachable = isinstance(result, ConnectError)
            continue
        entry.copy_path = str(transfer.pulled_repo(fleet, name))
        log(f"{name}: repository pulled and checked: {entry.copy_path}")

