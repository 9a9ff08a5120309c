"""Fleet lifecycle: plan, run deploys, record, check.

Providers (jackin.lab.providers) own the hosts; every run that changes hosts goes
through ``jackin.lifecycle.runs.recorded_run`` (a run in the ledger, an audit entry per
host); fleet.down lives in jackin.lifecycle.down, garbage collection in jackin.lifecycle.gc.
Reads (status, the clean check) go over strict SSH with bounded timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from jackin import lazy
from jackin.engine import Event, HostResult, RunResult
from jackin.engine import client as engine_client
from jackin.engine.client import Engine
from jackin.errors import ConnectError, JackinError
from jackin.facts.state import HostState
from jackin.images import build as images
from jackin.lab.providers import Provider, provider_for, targets
from jackin.lifecycle.gc import GC_COMMAND, gc, orphans
from jackin.lifecycle.hostplan import HostChanges, host_changes
from jackin.lifecycle.runs import deploys_dir, recorded_run, states_for_deploy
from jackin.lifecycle.status import FleetStatus
from jackin.lifecycle.status import read as read_status
from jackin.net import logins
from jackin.plan import fleet as planning
from jackin.plan import pools
from jackin.plan.applied import applied
from jackin.plan.make import make_plan, placed
from jackin.plan.placement import PlacementError
from jackin.snapshots.auto import AutoSnapshot, States, read_states, snapshot_before_up
from jackin.spec import Inventory
from jackin.spec.loader import load
from jackin.store.ledger import Ledger
from jackin.transport.target import SshTarget
from jackin.work import bundles as work

if TYPE_CHECKING:
    from jackin.plan import launch
    from jackin.spec import credentials
else:  # loaded by fleet.up and fleet.plan, not by fleet.status (jackin.lazy)
    launch = lazy.module("jackin.plan.launch")
    credentials = lazy.module("jackin.spec.credentials")

Log = Callable[[str], None]
OnEvent = Callable[[Event], None]


# --- the spec's checks ------------------------------------------------------


def check(inventory: Inventory) -> None:
    """What ``fleet.validate``, ``fleet.plan`` and ``fleet.up`` refuse (exit 2) from the spec alone, before
    any host is touched, beyond the file's own validation: credential-like mounts and credential names
    given twice (``jackin.spec.credentials.check``), and agents whose networks a host's address pools cannot
    hold (``jackin.plan.pools.check``)."""
    credentials.check(inventory.fleet)
    pools.check(inventory)


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
    check(inventory)  # refused (exit 2) before anything: credential-like mounts, duplicate names, address pools
    values = credentials.read(fleet)  # every value read here, before any host is touched; never in the plan
    if not dry_run:  # shared logins: taken from the spec's source the first time, refreshed when due
        logins.current(inventory, values)
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
        ttl_before = ledger.ttl_started(fleet.name)
        plan = _fleet_plan(inventory, ledger, provider, hosts, ready, dry_run=dry_run, log=log)
        states = read_states(plan, hosts)  # one parallel round trip: the snapshot decision and the plan
        try:
            plan = placed(plan, inventory, ledger, states)  # by the hosts' capacity; a fleet that does not fit: exit 2
        except PlacementError:
            if ttl_before is None and not dry_run:  # a refused first up does not start the time-to-live's clock
                ledger.unstart_ttl(fleet.name)
            raise
        if plan.unplaced:
            log(f"warning: {', '.join(plan.unplaced)} not placed: some of their hosts could not be read (or weighed), "
                "and the others have no room; the next fleet.up places them")  # fmt: skip
        if (
            not dry_run or bring_up
        ):  # role images some host lacks: built and archived here first (jackin/images/build.py)
            images.prepare_missing(plan, states, log=log)
        # Before anything changes: snapshot the agents this run recreates or removes (a dry run names them).
        auto, _ = snapshot_before_up(ledger, inventory, plan, hosts, action=action, dry_run=dry_run, log=log,
                                     states=states)  # fmt: skip
        split = split_hosts(plan, hosts, states, values)
        job = _Up(fleet=fleet.name, plan=plan, hosts=hosts, split=split, auto=auto)
        if dry_run:  # changes nothing, the ledger included: the in-process plan (fleet.plan's), no engine
            return _dry_run(job, ledger, inventory, _read(states))
        result = _apply(job, ledger, inventory, provider, states, values, source=source, action=action, detail=detail,
                        on_event=on_event, engine=engine, log=log)  # fmt: skip
    try:  # every host's gateway given the shared logins' current access tokens (jackin/net/logins.py)
        logins.keep(inventory, hosts, force=True)
    except JackinError as error:
        log(f"warning: {error.message}")
    return result


def _fleet_plan(inventory: Inventory, ledger: Ledger, provider: Provider, hosts: list[SshTarget],
                ready: Mapping[str, work.Prepared], *, dry_run: bool, log: Log) -> planning.FleetPlan:  # fmt: skip
    """fleet.up's plan (stored, and the time-to-live started, unless ``dry_run``), its work attached."""
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
    return plan


def _read(states: States) -> dict[str, HostState]:
    """The hosts whose state was read, without error."""
    return {name: state for name, state in states.items() if isinstance(state, HostState)}


class _Up:
    """One fleet.up after its hosts were read and split: what it reports whether or not the engine runs."""

    def __init__(self, *, fleet: str, plan: planning.FleetPlan, hosts: list[SshTarget], split: HostSplit,
                 auto: list[AutoSnapshot]) -> None:  # fmt: skip
        self.fleet, self.plan, self.hosts, self.split, self.auto = fleet, plan, hosts, split, auto
        self.not_run = [_not_run(name, error) for name, error in split.unread.items()]
        self.kept = [_unchanged(name) for name in split.unchanged]
        # what the ledger records: where each spread instance lives (stranded ones stay recorded where they are)
        self.placed = plan.spread_placement()

    def result(self, run: RunResult, **more: Any) -> UpResult:
        return UpResult(fleet=self.fleet, run=run, plan=self.plan, snapshots=self.auto,
                        unchanged=self.split.unchanged, **more)  # fmt: skip


def _dry_run(job: _Up, ledger: Ledger, inventory: Inventory, read: dict[str, HostState]) -> UpResult:
    """A dry run's result: the in-process plan per host, and the launch contract with the hosts' facts."""
    planned = [_planned(job.split.plans[h.name]) for h in job.split.run]
    result = RunResult(hosts=_in_order(planned + job.kept + job.not_run, job.hosts), dry_run=True)
    return job.result(result, changes=_host_plans(job.hosts, job.split),
                      terms=launch.gate_of(ledger, inventory, job.plan, read))  # fmt: skip


class _Record:
    """What fleet.up records against its run beside the engine's hosts: the spec and the launch contract it
    applies, the hosts not run and those with nothing to change, and every host's outcome."""

    def __init__(self, job: _Up, ledger: Ledger, inventory: Inventory, read: dict[str, HostState], *,
                 action: str) -> None:  # fmt: skip
        self.job, self.ledger, self.action = job, ledger, action
        self.names, self.applied = [h.name for h in job.hosts], applied(inventory)
        self.terms = launch.current(inventory, ledger, job.plan, read)  # the launch contract this run applies
        self.by_name = {h.name: h for h in job.hosts}

    def host(self, host: HostResult, target: SshTarget) -> None:
        fleet, ledger = self.job.fleet, self.ledger
        ledger.record_host(fleet, host.host, target.address, target.port, "ok" if host.ok else "failed")
        if host.ok:
            ledger.record_agents(fleet, host.host, [a.model_dump() for a in self.job.plan.at(host.host)])

    def spec(self, run_id: int) -> None:
        fleet, ledger, spec, action = self.job.fleet, self.ledger, self.applied, self.action
        with ledger.transaction():  # one commit for the spec, the contract, the placement and every host's rows
            ledger.record_spec(run_id, fleet, self.names, spec.spec, spec.hash, spec.fleet_hash)
            ledger.record_placements(fleet, self.job.placed)
            launch.record(ledger, run_id, self.terms)
            for host in self.job.not_run:
                ledger.audit(run_id, fleet, action, "failed", host=host.host, detail={"error": host.error})
            for host in self.job.kept:  # nothing to change: recorded as an ok run that changed nothing, no engine
                ledger.audit(run_id, fleet, action, "ok", host=host.host,
                             detail={"changed": 0, "failed": 0, "error": None, "engine": False})  # fmt: skip
                self.host(host, self.by_name[host.host])


def _record_only(job: _Up, record: _Record, run_detail: dict[str, Any]) -> UpResult:
    """Nothing to change anywhere (or nothing readable): no engine, only the run and all it records, one commit."""
    ledger = record.ledger
    with ledger.transaction():
        run_id = ledger.start_run(job.fleet, record.action, run_detail)
        record.spec(run_id)
        ledger.finish_run(run_id, "failed" if job.not_run else "ok")
        if not job.not_run:
            _forget_gone(ledger, job)
    return job.result(RunResult(hosts=_in_order(job.kept + job.not_run, job.hosts)))


def _forget_gone(ledger: Ledger, job: _Up) -> None:
    """After an up that succeeded on every host: the placements of instances the spec no longer names go."""
    ledger.forget_placements(job.fleet, keep={*job.placed, *job.plan.stranded})


def _apply(job: _Up, ledger: Ledger, inventory: Inventory, provider: Provider, states: States,
           values: credentials.Secrets, *, source: str | None, action: str, detail: dict[str, Any] | None,
           on_event: OnEvent, engine: Engine | None, log: Log) -> UpResult:  # fmt: skip
    """fleet.up past its dry run: the fleet recorded and claimed, the deploy run on the hosts with changes
    (on ``engine`` when it was started ahead), and everything recorded against the run."""
    fleet, plan, split, hosts = inventory.fleet, job.plan, job.split, job.hosts
    # Role images a host lacks are loaded over SSH before the deploy; a host that cannot load one is not deployed.
    job.not_run += images.load_missing(plan, split, states, log=log)
    read = _read(states)  # with the loaded images
    ledger.record_fleet(fleet.name, fleet.provider, source, "up")
    provider.claim()
    record = _Record(job, ledger, inventory, read, action=action)
    run_detail = {**(detail or {}), "hosts": record.names, "unchanged": split.unchanged,
                  "auto_snapshots": sorted({a.snapshot for a in job.auto if a.snapshot})}  # fmt: skip
    if not split.run:  # nothing to change anywhere (or nothing readable): no engine, only the record
        return _record_only(job, record, run_detail)
    recorded = recorded_run(ledger, fleet=fleet.name, action=action, deploy="fleet.py", hosts=split.run,
                            data=plan.model_dump(mode="json"), detail=run_detail,
                            on_event=on_event, on_host=record.host, on_start=record.spec,
                            secrets=values, host_data=states_for_deploy(split.run, read), engine=engine)  # fmt: skip
    run_id, result = cast("tuple[int, RunResult]", recorded)  # recorded: the ledger gave it an id
    result.hosts = _in_order(result.hosts + job.kept + job.not_run, hosts)
    if job.not_run:
        ledger.finish_run(run_id, "failed")
    elif not result.failed and not result.error and all(h.ok for h in result.hosts):
        _forget_gone(ledger, job)
    return job.result(result)


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
        split.plans[host.name] = changes = host_changes(plan.for_host(host.name), state, values, host=host.name)
        if changes.empty:
            split.unchanged.append(host.name)
        else:
            split.run.append(host)
    return split


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
    come first: ``check``, then every credential readable (exit 2)."""
    fleet = inventory.fleet
    check(inventory)
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
    with Ledger() as ledger:  # every instance placed by the hosts' capacity; a fleet that does not fit: exit 2
        fleet_plan = placed(fleet_plan, inventory, ledger, states)
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
    """A dry run's host with changes: how many of the deploy's operations would change something (as the
    engine counts them); a step the deploy would refuse fails the host, as the deploy would while preparing."""
    refused = "; ".join(changes.refused)
    return HostResult(host=changes.host, connected=True, changed=changes.operations,
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


__all__ = [
    "GC_COMMAND",
    "HostResult",
    "check",
    "deploys_dir",
    "gc",
    "load",
    "make_plan",
    "orphans",
    "plan",
    "status",
    "targets",
    "up",
]
