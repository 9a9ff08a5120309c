"""fleet.down: remove everything of the fleet from every host, check it is gone, and (lab) destroy the lab.

A final snapshot of every agent comes first (``jackin.snapshots.final``); the teardown deploy runs
through ``jackin.lifecycle.runs.recorded_run`` from the state each host was read in
(``jackin.lifecycle.teardown``); the clean check afterwards reads every host anew over strict SSH.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from jackin.engine import RunResult
from jackin.errors import JackinError, SpecError
from jackin.facts.state import HostState, parse_state
from jackin.facts.state_read import state_command
from jackin.lab.providers import LabProvider, provider_for
from jackin.lifecycle import teardown
from jackin.lifecycle.runs import OnEvent, recorded_run, states_for_deploy
from jackin.plan import fleet as planning
from jackin.plan.make import make_plan
from jackin.snapshots.final import FinalHost, take_final
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

KEPT = ["homes", "workspaces", "uids"]  # what fleet.down --keep-data keeps
Log = Callable[[str], None]


class CleanCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    clean: bool
    leftovers: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = None


class DownResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    run: RunResult
    checks: list[CleanCheck]
    lab_removed: bool = False
    lab_note: str | None = None  # why the lab was left in place
    final: list[FinalHost] = Field(default_factory=list)  # per host, when a final snapshot was taken
    final_skipped: str | None = None  # why no final snapshot was taken (None: it was, where needed)
    discarded: dict[str, list[str]] = Field(default_factory=dict)  # --discard-snapshots: per host, forgotten ids

    @property
    def blocked(self) -> list[FinalHost]:
        """Hosts not torn down because their final snapshot or its pull failed."""
        return [f for f in self.final if f.blocked]

    @property
    def clean(self) -> bool:
        return all(c.clean for c in self.checks) and not self.run.failed and not self.blocked


def clean_check(plan: planning.FleetPlan, hosts: list[SshTarget], *, keep_data: bool = False) -> list[CleanCheck]:
    """From a fresh connection: prove nothing of the fleet is left on each host."""
    command = state_command(plan.fleet, plan.uid_min, plan.uid_max)
    found = gather(hosts, command, lambda out: parse_state(out.split("\n")), timeout=15)
    checks = []
    for host in hosts:
        state = found[host.name]
        if isinstance(state, JackinError):
            checks.append(CleanCheck(host=host.name, clean=False, error=state.message))
            continue
        leftovers = _leftovers(plan, state, keep_data=keep_data)
        checks.append(CleanCheck(host=host.name, clean=not any(leftovers.values()), leftovers=leftovers))
    return checks


def _leftovers(plan: planning.FleetPlan, state: HostState, *, keep_data: bool) -> dict[str, list[str]]:
    left = {k: v for k, v in state.model_copy(update={"fleet": plan.fleet}).leftovers.items() if v}
    if keep_data:
        left.pop("paths", None)
        left.pop("cow", None)  # the checkpoint tier's btrfs holds the kept homes
        left.pop("snapshots", None)  # the repository stays with the workspaces it snapshots
    return left


def down(
    inventory: Inventory,
    *,
    keep_data: bool = False,
    keep_lab: bool = False,
    final_snapshot: bool = True,
    discard_snapshots: bool = False,
    on_event: OnEvent = lambda _: None,
    log: Log = lambda _: None,
) -> DownResult:
    """Remove everything of the fleet from every host, check it is gone, and (lab) destroy the lab.

    First (unless ``keep_data``, ``final_snapshot=False`` or the spec's ``snapshots.before_teardown:
    false``) a ``final`` snapshot of every agent, pulled and checked here; a host where that failed
    is not torn down (``DownResult.blocked``), the others are. Without a final snapshot each host's
    repository (earlier snapshots) is still pulled, with the same hold-back, unless
    ``discard_snapshots``: then nothing is pulled and the ledger forgets the snapshots that existed
    only on the hosts torn down."""
    fleet = inventory.fleet
    skipped = final_skip_reason(inventory, keep_data=keep_data, final_snapshot=final_snapshot,
                                discard_snapshots=discard_snapshots)  # fmt: skip
    with Ledger() as ledger, ledger.lock(fleet.name, "fleet.down"):
        provider = provider_for(inventory, ledger)
        hosts = provider.targets(bring_up=False)
        is_lab = isinstance(provider, LabProvider)
        if is_lab and not hosts:
            ledger.forget_fleet(fleet.name)
            release = provider.release(keep_hosts=keep_lab, log=log)
            return DownResult(fleet=fleet.name, run=RunResult(hosts=[]), checks=[], lab_removed=release.destroyed,
                              lab_note=release.note)  # fmt: skip
        plan = make_plan(inventory, ledger)
        read = teardown.read_states(plan, hosts)  # one parallel round trip: the final snapshot's and teardown's
        final = [] if keep_data or discard_snapshots else take_final(ledger, inventory, plan, hosts, log=log,
                                                                     snapshot=not skipped, states=read)  # fmt: skip
        blocked = {f.host for f in final if f.blocked}
        detail = {"keep_data": keep_data, "final": _final_detail(final, skipped)}
        run_id, result = _teardown_run(ledger, plan, [h for h in hosts if h.name not in blocked],
                                       keep_data=keep_data, detail=detail, on_event=on_event,
                                       status="failed" if blocked else "ok", read=read, final=final)  # fmt: skip
        for entry in (f for f in final if f.blocked):
            ledger.audit(run_id, fleet.name, "final-snapshot", "failed", host=entry.host,
                         detail={"stage": entry.stage, "error": entry.error, "torn_down": False})  # fmt: skip
        checks = clean_check(plan, [h for h in hosts if h.name not in blocked], keep_data=keep_data)
        for check in checks:
            ledger.audit(run_id, fleet.name, "clean-check", "clean" if check.clean else "dirty",
                         host=check.host, detail=check.leftovers or check.error)  # fmt: skip
        outcome = DownResult(fleet=fleet.name, run=result, checks=checks, final=final, final_skipped=skipped)
        if discard_snapshots:
            outcome.discarded = discard(ledger, fleet.name, [c.host for c in checks if c.clean], run_id)
        if outcome.clean:
            if keep_data:  # recorded as kept: only fleet.gc --purge-kept or this fleet's down removes it
                ledger.keep_fleet(fleet.name, [(h.name, h.address, h.port) for h in hosts], KEPT)
            else:
                ledger.forget_fleet(fleet.name)
            release = provider.release(keep_hosts=keep_lab, keep_data=keep_data, log=log)
            outcome.lab_removed, outcome.lab_note = release.destroyed, release.note
        return outcome


# --- down: the final snapshot ---------------------------------------------------------------


def final_skip_reason(inventory: Inventory, *, keep_data: bool, final_snapshot: bool,
                      discard_snapshots: bool = False) -> str | None:  # fmt: skip
    """Why fleet.down takes no final snapshot, or None when it takes one."""
    if keep_data and discard_snapshots:
        raise SpecError("--keep-data keeps the workspaces and snapshots on the hosts; --discard-snapshots "
                        "removes them: give one of them")  # fmt: skip
    if keep_data:
        return "--keep-data: the workspaces stay on the hosts"
    if discard_snapshots:
        return "--discard-snapshots"
    if not final_snapshot:
        return "--no-final-snapshot"
    if not inventory.fleet.snapshots.before_teardown:
        return "snapshots.before_teardown: false"
    return None


def _final_detail(final: list[FinalHost], skipped: str | None) -> dict[str, Any]:
    hosts = {f.host: f.model_dump(include={"stage", "snapshot", "copy_path", "error", "stopped"}) for f in final}
    return {"skipped": skipped, **hosts} if skipped else hosts


def discard(ledger: Ledger, fleet: str, hosts: list[str], run: int) -> dict[str, list[str]]:
    """After ``--discard-snapshots`` tore ``hosts`` down: forget their part of every snapshot that no
    surviving copy holds (a copy here, or on a host not torn down now), so snapshot.list shows only
    snapshots that still exist somewhere; each forgotten one is audited. Per host, the ids forgotten."""
    gone = set(hosts)
    forgotten: dict[str, list[str]] = {}
    for host in hosts:
        kept = {s for c in ledger.copies(fleet, origin=host) if c["place"] not in gone for s in c["snapshots"]}
        for row in ledger.snapshot_rows(fleet):
            if row["id"] not in kept and any(a["host"] == host for a in row["agents"]):
                ledger.forget_snapshot(fleet, row["id"], host=host)
                forgotten.setdefault(host, []).append(row["id"])
        if host in forgotten:
            ledger.audit(run, fleet, "snapshot.discard", "ok", host=host, detail={"snapshots": forgotten[host]})
    return forgotten


def _teardown_run(ledger: Ledger, plan: planning.FleetPlan, hosts: list[SshTarget], *, keep_data: bool,
                  detail: dict[str, Any], on_event: OnEvent, status: str, read: teardown.States,
                  final: list[FinalHost]) -> tuple[int, RunResult]:  # fmt: skip
    """The teardown deploy on ``hosts``, recorded, given each host's state (``read``, or a new read
    where the final snapshot did something: ``jackin.lifecycle.teardown``); with no host to tear down, only the record."""
    if not hosts:
        run_id = ledger.start_run(plan.fleet, "fleet.down", detail)
        ledger.finish_run(run_id, status)
        return run_id, RunResult(hosts=[])
    states = teardown.fresh_states(plan, hosts, read, final)  # handed to each deploy: it reads no host again
    recorded = recorded_run(ledger, fleet=plan.fleet, action="fleet.down", deploy="teardown.py", hosts=hosts,
                            data={"plan": plan.model_dump(mode="json"), "keep_data": keep_data},
                            detail=detail, on_event=on_event, host_data=states_for_deploy(hosts, states))  # fmt: skip
    return cast("tuple[int, RunResult]", recorded)  # recorded: the ledger gave it an id
