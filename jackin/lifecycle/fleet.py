"""Fleet lifecycle: plan, run deploys, record, check.

Providers (jackin.lab.providers) own the hosts; every run that changes hosts goes
through ``jackin.lifecycle.runs.recorded_run`` (a run in the ledger, an audit entry per
host); garbage collection lives in jackin.lifecycle.gc. Reads (status, the clean check) go
over strict SSH with bounded timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from jackin import lazy
from jackin.engine import Event, HostResult, RunResult
from jackin.engine import client as engine_client
from jackin.errors import ConnectError, JackinError, SpecError
from jackin.facts.state import HostState, parse_state, state_command
from jackin.images import build as images
from jackin.lab.providers import LabProvider, provider_for, targets
from jackin.lifecycle import teardown
from jackin.lifecycle.gc import GC_COMMAND, gc, orphans
from jackin.lifecycle.hostplan import HostChanges, host_changes
from jackin.lifecycle.runs import deploys_dir, recorded_run
from jackin.lifecycle.status import FleetStatus
from jackin.lifecycle.status import read as read_status
from jackin.plan import fleet as planning
from jackin.plan.applied import applied
from jackin.plan.make import make_plan
from jackin.snapshots.auto import AutoSnapshot, States, read_states, snapshot_before_up
from jackin.snapshots.final import FinalHost, take_final
from jackin.spec import Inventory
from jackin.spec.loader import load
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget
from jackin.work import bundles as work

if TYPE_CHECKING:
    from jackin.plan import launch
    from jackin.spec import credentials
else:  # loaded by fleet.up and fleet.plan, not by fleet.status (jackin.lazy)
    launch = lazy.module("jackin.plan.launch")
    credentials = lazy.module("jackin.spec.credentials")

KEPT = ["homes", "workspaces", "uids"]  # what fleet.down --keep-data keeps
Log = Callable[[str], None]
OnEvent = Callable[[Event], None]


# --- hosts -------------------------------------------------------------------


# --- up ----------------------------------------------------------------------


class UpResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    run: RunResult
    plan: planning.FleetPlan
    snapshots: list[AutoSnapshot] = Field(default_factory=list)  # automatic, before agents were recreated or removed
    unchanged: list[str] = Field(default_factory=list)  # hosts with nothing to change: not handed to the engine
    changes: list[HostPlan] = Field(default_factory=list)  # a dry run: per host what the deploy would do
    terms: launch.Gate | None = Field(default=None, exclude=True)  # a dry run: the launch contract, hosts read

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.run.hosts)


def up(
    inventory: Inventory,
    *,
    source: str | None = None,
    dry_run: bool = False,
    bring_up: bool | None = None,
    on_event: OnEvent = lambda _: None,
    log: Log = lambda _: None,
    action: str = "fleet.up",
    detail: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> UpResult:
    """Bring the fleet up on every host in parallel; one failing host never stops the others.

    ``bring_up``: with provider lab, create the lab first if it is not up (default: unless ``dry_run``).
    ``action``/``detail``/``only``: how the run is recorded and on which of the fleet's hosts it
    runs (``fleet.rollback`` applies a stored spec through here). The applied spec is recorded
    against the run (``jackin.plan.applied``), so a later ``fleet.rollback`` can return to it.
    First every host's state is read in one parallel round trip; from it, on this side:
    - unless the spec's ``snapshots.before_changes`` is off, the agents the run will recreate or
      remove are snapshotted (``jackin.snapshots.auto``; their ids in the run's detail, ``auto_snapshots``);
      a failed snapshot raises before anything changed;
    - what the deploy would do on each host (``jackin.lifecycle.hostplan``): a host with nothing to change is
      not handed to the pyinfra engine (recorded in the run as ok, no change; ``unchanged`` in the
      run's detail), and a host whose state cannot be read is not run.
    ``dry_run`` stops there: no engine, nothing recorded; the result carries that in-process plan per host
    (``changes``, what ``fleet.plan`` shows) and the launch contract with the hosts' facts (``terms``).
    On a fleet's first up (the ledger does not have it up) the engine child is started first, so its
    load of pyinfra overlaps the read and the plan; it ends unused if no host turns out to need it.
    """
    fleet = inventory.fleet
    credentials.check(fleet)  # refused (exit 2) before anything: credential-like mounts, duplicate names
    values = credentials.read(fleet)  # every value read here, before any host is touched; never in the plan
    ready = work.prepare(fleet)  # every repository checked and bundled here, before any host is touched
    with (
        Ledger() as ledger,
        ledger.lock(fleet.name, action),
        engine_client.started(
            not dry_run and (ledger.fleet(fleet.name) or {}).get("status") != "up"  # a first up: the engine will run
        ) as engine,
    ):  # the engine child loads pyinfra while this process reads and plans the hosts
        provider = provider_for(inventory, ledger)
        hosts = _only(provider.targets(log=log, bring_up=not dry_run if bring_up is None else bring_up), only)
        if dry_run and not hosts:
            log("the lab is not up: a real run would create its hosts first; nothing to plan against yet")
        plan = make_plan(inventory, ledger, store=not dry_run, fleet_hosts=provider.addresses() if hosts else [],
                         start_ttl=not dry_run)  # fmt: skip
        plan = work.attach(plan, ready)
        for name in provider.unresolved():
            log(
                f"warning: host {name} is given by name: its address is not in the agents' always-denied set "
                "(give it as an IP address to deny it)"
            )
        states = read_states(plan, hosts)  # one parallel round trip: the snapshot decision and the plan
        if (
            not dry_run or bring_up
        ):  # role images some host lacks: built and archived here first (jackin/images/build.py)
            images.prepare_missing(plan, states, log=log)
        # Before anything changes: snapshot the agents this run recreates or removes (a dry run names them).
        auto, _ = snapshot_before_up(ledger, inventory, plan, hosts, action=action, dry_run=dry_run, log=log,
                                     states=states)  # fmt: skip
        split = split_hosts(plan, hosts, states, values)
        not_run = [_not_run(name, error) for name, error in split.unread.items()]
        kept = [_unchanged(name) for name in split.unchanged]
        read = {name: state for name, state in states.items() if isinstance(state, HostState)}
        if dry_run:  # changes nothing, the ledger included: the in-process plan (fleet.plan's), no engine
            planned = [_planned(split.plans[h.name]) for h in split.run]
            result = RunResult(hosts=_in_order(planned + kept + not_run, hosts), dry_run=True)
            return UpResult(fleet=fleet.name, run=result, plan=plan, snapshots=auto, unchanged=split.unchanged,
                            changes=_host_plans(hosts, split), terms=launch.gate_of(ledger, inventory, plan, read))  # fmt: skip
        # Role images a host lacks are loaded over SSH before the deploy; a host that cannot load one is not deployed.
        not_run += images.load_missing(plan, split, states, log=log)
        read = {name: state for name, state in states.items() if isinstance(state, HostState)}  # with the loaded images
        ledger.record_fleet(fleet.name, fleet.provider, source, "up")
        provider.claim()

        def record_host(host: HostResult, target: SshTarget) -> None:
            ledger.record_host(fleet.name, host.host, target.address, target.port, "ok" if host.ok else "failed")
            if host.ok:
                ledger.record_agents(fleet.name, host.host, [a.model_dump() for a in plan.agents])

        names, spec = [h.name for h in hosts], applied(inventory)
        terms = launch.current(inventory, ledger, plan, read)  # the launch contract this run applies
        by_name = {h.name: h for h in hosts}

        def record_spec(run_id: int) -> None:
            with ledger.transaction():  # one commit for the spec, the contract and every host's rows
                ledger.record_spec(run_id, fleet.name, names, spec.spec, spec.hash, spec.fleet_hash)
                launch.record(ledger, run_id, terms)
                for host in not_run:
                    ledger.audit(run_id, fleet.name, action, "failed", host=host.host, detail={"error": host.error})
                for host in kept:  # nothing to change: recorded as an ok run that changed nothing, no engine
                    ledger.audit(run_id, fleet.name, action, "ok", host=host.host,
                                 detail={"changed": 0, "failed": 0, "error": None, "engine": False})  # fmt: skip
                    record_host(host, by_name[host.host])

        run_detail = {**(detail or {}), "hosts": names, "unchanged": split.unchanged,
                      "auto_snapshots": sorted({a.snapshot for a in auto if a.snapshot})}  # fmt: skip
        if not split.run:  # nothing to change anywhere (or nothing readable): no engine, only the record
            with ledger.transaction():  # the run and all it records, one commit
                run_id = ledger.start_run(fleet.name, action, run_detail)
                record_spec(run_id)
                ledger.finish_run(run_id, "failed" if not_run else "ok")
            return UpResult(fleet=fleet.name, run=RunResult(hosts=_in_order(kept + not_run, hosts)), plan=plan,
                            snapshots=auto, unchanged=split.unchanged)  # fmt: skip
        recorded = recorded_run(ledger, fleet=fleet.name, action=action, deploy="fleet.py", hosts=split.run,
                                data=plan.model_dump(mode="json"), detail=run_detail,
                                on_event=on_event, on_host=record_host, on_start=record_spec,
                                secrets=values, host_data=_host_data(split.run, read), engine=engine)  # fmt: skip
        run_id, result = cast("tuple[int, RunResult]", recorded)  # recorded: the ledger gave it an id
        result.hosts = _in_order(result.hosts + kept + not_run, hosts)
        if not_run:
            ledger.finish_run(run_id, "failed")
        return UpResult(fleet=fleet.name, run=result, plan=plan, snapshots=auto, unchanged=split.unchanged)


class HostSplit(BaseModel):
    """fleet.up's hosts by what its in-process plan found: to run the deploy on, unchanged, unreadable."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    run: list[SshTarget] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    unread: dict[str, JackinError] = Field(default_factory=dict)
    plans: dict[str, HostChanges] = Field(default_factory=dict)


def split_hosts(plan: planning.FleetPlan, hosts: list[SshTarget], states: States,
                values: credentials.Secrets) -> HostSplit:  # fmt: skip
    """Which hosts the deploy runs on: those whose plan (``jackin.lifecycle.hostplan.host_changes``, the deploy's own
    decision) is not empty. A host whose state read failed is in ``unread`` (not run: what the run would
    change, and lose, there is unknown)."""
    split = HostSplit()
    for host in hosts:
        state = states.get(host.name)
        if isinstance(state, JackinError) or state is None:
            split.unread[host.name] = state or JackinError("no state was read", host=host.name)
            continue
        split.plans[host.name] = changes = host_changes(plan, state, values, host=host.name)
        if changes.empty:
            split.unchanged.append(host.name)
        else:
            split.run.append(host)
    return split


def _host_data(hosts: list[SshTarget], states: Mapping[str, HostState | JackinError]) -> dict[str, dict[str, Any]]:
    """Per host of ``hosts`` read without error, the state its deploy works from (``host.data.jackin_host``,
    ``ops.fleet_state``): fleet.up's and fleet.down's one read; a host without one is read by its deploy."""
    return {
        h.name: {"state": s.model_dump(mode="json")} for h in hosts if isinstance(s := states.get(h.name), HostState)
    }


def _in_order(results: list[HostResult], hosts: list[SshTarget]) -> list[HostResult]:
    """Per-host results in the inventory's order, whether the engine ran there or not."""
    order = {h.name: n for n, h in enumerate(hosts)}
    return sorted(results, key=lambda r: order.get(r.host, len(order)))


def _unchanged(host: str) -> HostResult:
    """A host with nothing to change: ok, no change, not handed to the engine."""
    return HostResult(host=host, connected=True)


def _not_run(host: str, error: JackinError) -> HostResult:
    """A host fleet.up did not run on: its state read (before the automatic snapshot) failed, so what
    the run would recreate there, and lose, is unknown. Unreachable stays unreachable (exit 3)."""
    message = f"not changed: its state read before any change failed: {error.message}"
    if isinstance(error, ConnectError):
        return HostResult(host=host, connected=False, error=message)
    return HostResult(host=host, connected=True, failed=1, error=message)


# --- plan --------------------------------------------------------------------


class HostPlan(BaseModel):
    """What ``fleet.up`` would do to one host (``changes``), or why that is unknown (``error``)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    changes: HostChanges | None = None
    error: str | None = None
    unreachable: bool = False


class PlanResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    plan: planning.FleetPlan
    hosts: list[HostPlan] = Field(default_factory=list)
    note: str | None = None  # e.g. the lab is not up: nothing to plan against
    host_facts: dict[str, HostState] = Field(default_factory=dict, exclude=True)  # for the contract's host lines


UpResult.model_rebuild()


def plan(inventory: Inventory, *, log: Log = lambda _: None) -> PlanResult:
    """Per host what ``fleet.up`` would change, from one parallel state read; changes nothing on any
    host or in the ledger (preview uids, no lock, no lab bring-up). The same checks as ``fleet.up``
    come first: the credential-deny check, then every credential readable (exit 2)."""
    fleet = inventory.fleet
    credentials.check(fleet)
    values = credentials.read(fleet)
    ready = work.prepare(fleet)
    with Ledger() as ledger:
        provider = provider_for(inventory, ledger)
        hosts = provider.targets(log=log, bring_up=False)
        fleet_plan = work.attach(make_plan(inventory, ledger, store=False,
                                           fleet_hosts=provider.addresses() if hosts else []), ready)  # fmt: skip
    if not hosts:
        return PlanResult(fleet=fleet.name, plan=fleet_plan,
                          note="the lab is not up: fleet.up would create its hosts first; nothing to plan against yet")  # fmt: skip
    states = read_states(fleet_plan, hosts)
    split = split_hosts(fleet_plan, hosts, states, values)
    return PlanResult(fleet=fleet.name, plan=fleet_plan, hosts=_host_plans(hosts, split),
                      host_facts={n: s for n, s in states.items() if isinstance(s, HostState)})  # fmt: skip


def _host_plans(hosts: list[SshTarget], split: HostSplit) -> list[HostPlan]:
    """Per host, in order: what the deploy would change there, or why that is unknown."""
    found = []
    for host in hosts:
        error = split.unread.get(host.name)
        if error is not None:
            found.append(HostPlan(host=host.name, error=error.message, unreachable=isinstance(error, ConnectError)))
        else:
            found.append(HostPlan(host=host.name, changes=split.plans[host.name]))
    return found


def _planned(changes: HostChanges) -> HostResult:
    """A dry run's host with changes: how many of the deploy's steps would change something; a step
    the deploy would refuse fails the host, as the deploy would while preparing."""
    refused = "; ".join(changes.refused)
    return HostResult(host=changes.host, connected=True, changed=len({c.step for c in changes.changes}),
                      failed=1 if refused else 0, error=f"fleet.up would refuse: {refused}" if refused else None)  # fmt: skip


def _only(hosts: list[SshTarget], only: list[str] | None) -> list[SshTarget]:
    """The fleet's hosts, or those of them named in ``only`` (each must be one of them)."""
    if only is None:
        return hosts
    missing = [name for name in only if name not in {h.name for h in hosts}]
    if missing:
        raise JackinError(f"not among the fleet's hosts: {', '.join(missing)}",
                          hint="a rollback never creates hosts: bring the fleet's hosts up first (fleet.up -i FILE)")  # fmt: skip
    return [h for h in hosts if h.name in only]


# --- status ------------------------------------------------------------------


def status(inventory: Inventory, *, timeout: float = 8) -> FleetStatus:
    """Hosts × agents of the fleet (``jackin.lifecycle.status.read``, which fleet.status calls without this module)."""
    return read_status(inventory, timeout=timeout)


# --- down --------------------------------------------------------------------


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


__all__ = [
    "GC_COMMAND",
    "HostResult",
    "clean_check",
    "deploys_dir",
    "down",
    "gc",
    "load",
    "make_plan",
    "orphans",
    "plan",
    "status",
    "targets",
    "up",
]


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
                            detail=detail, on_event=on_event, host_data=_host_data(hosts, states))  # fmt: skip
    return cast("tuple[int, RunResult]", recorded)  # recorded: the ledger gave it an id
