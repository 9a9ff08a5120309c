"""``fleet.rollback``: return the fleet (or some of its hosts) to the spec of an earlier successful run.

What it applies where is chosen from the fleet's run history (``jackin.lifecycle.rollback_choice``:
``--to RUN``, ``--host H``, or a repair or a step back). The rollback runs ``fleet.up`` with the
stored fleet spec and the inventory's current hosts (how they are reached), recorded as a run with
action ``fleet.rollback`` and detail ``{"to": RUN}``, so it is itself a spec in the history. The
operator's inventory file is never rewritten: the next ``fleet.up -i FILE`` applies the file's spec
again. A stored spec must place the fleet where the inventory does (same name, provider, lab,
hosts), else it is refused: a rollback changes what runs, never where.

Snapshots (``--with-snapshots``): once a step's spec is back on a host, each agent of the target
spec on that host gets the snapshot that matches the target run there (``match_step``): the
newest fleet snapshot holding that (host, instance) that was taken after the target run finished
and before the next run on that host that applied a different fleet spec finished (its ``auto``
snapshot is taken inside it, before it changes anything; a run that died unfinished ends the
window where it started). ``pre-restore`` snapshots never match (they hold what a restore was
about to overwrite: after a rollback, the newer spec's data). Every match is chosen in ``prepare``,
before anything changes; a (host, instance) without one refuses the whole rollback (exit 2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import JackinError, NotImplementedYet, SpecError
from jackin.lifecycle import fleet as fleet_api
from jackin.lifecycle.rollback_choice import Mode, SpecRun, Step, check_placement, check_to, choose
from jackin.plan.applied import SpecDiff, diff, load_fleet
from jackin.plan.fleet import instances as spec_instances
from jackin.spec import Inventory
from jackin.store.ledger import Ledger

Log = Callable[[str], None]


# --- preparing and applying ---------------------------------------------------------


class SnapshotMatch(BaseModel):
    """The snapshot one (host, instance) gets back with ``--with-snapshots``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    instance: str
    snapshot: str
    kind: str
    created: str


class PlannedStep(BaseModel):
    """One step with the inventory it applies (the stored fleet spec, the inventory's hosts) and its diff."""

    model_config = ConfigDict(extra="forbid")

    to: int
    from_run: int | None
    hosts: list[str]
    diff: SpecDiff
    inventory: Inventory = Field(exclude=True)
    snapshots: list[SnapshotMatch] = Field(default_factory=list)  # with --with-snapshots: what each host gets


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    mode: Mode
    steps: list[PlannedStep]
    with_snapshots: bool = False  # the steps' snapshot matches were chosen (prepare(with_snapshots=True))


def prepare(inventory: Inventory, *, to: int | None = None, host: str | None = None,
            with_snapshots: bool = False) -> Rollback:  # fmt: skip
    """Choose what to apply where and check it can apply (and, ``with_snapshots``, the snapshot each
    (host, agent) gets: refused here when one has none); reads the ledger and the hosts' list only."""
    name = inventory.fleet.name
    fleet_hosts = [t.name for t in fleet_api.targets(inventory, bring_up=False)]
    if not fleet_hosts:
        raise JackinError(f"fleet {name!r} has no hosts up: a rollback never creates hosts",
                          hint="bring the fleet up first (fleet.up -i FILE)")  # fmt: skip
    with Ledger() as ledger:
        runs = [SpecRun.from_row(r) for r in ledger.spec_runs(name)]
        target = check_to(ledger.run(to), to, name) if to is not None else None
        mode, steps = choose(runs, fleet_hosts, fleet=name, to=target, host=host)
        planned = [_planned(ledger, inventory, step) for step in steps]
        if with_snapshots:
            taken = snapshots_taken(ledger.snapshot_rows(name), ledger.runs(name))
            for step in planned:
                step.snapshots = match_step(runs, taken, step)
    return Rollback(fleet=name, mode=mode, steps=planned, with_snapshots=with_snapshots)


def history(inventory: Inventory) -> list[SpecRun]:
    """The fleet's runs that recorded a spec, oldest first (``fleet.runs``)."""
    with Ledger() as ledger:
        return [SpecRun.from_row(r) for r in ledger.spec_runs(inventory.fleet.name)]


def _planned(ledger: Ledger, inventory: Inventory, step: Step) -> PlannedStep:
    stored = load_fleet(_spec(ledger, step.to))
    check_placement(stored, inventory.fleet, step.to)
    before = load_fleet(_spec(ledger, step.from_run)) if step.from_run is not None else stored
    return PlannedStep(to=step.to, from_run=step.from_run, hosts=step.hosts, diff=diff(before, stored),
                       inventory=inventory.model_copy(update={"fleet": stored}))  # fmt: skip


def _spec(ledger: Ledger, run: int) -> str:
    row = ledger.run(run)
    if row is None or not row.get("spec"):
        raise JackinError(f"run {run}'s spec is missing from the ledger")
    return str(row["spec"])


# --- the matching snapshots (pure, from the ledger's rows) --------------------------------------


class TakenSnapshot(BaseModel):
    """A fleet snapshot, when it was taken (its ``snapshot.create`` run's start, else its id's second)
    and which (host, instance) it holds with a restic snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: str
    created: str
    taken: float
    holds: frozenset[tuple[str, str]]


def snapshots_taken(snapshot_rows: list[dict[str, Any]], run_rows: list[dict[str, Any]]) -> list[TakenSnapshot]:
    """``Ledger.snapshot_rows`` with the start of the run that took each (``Ledger.runs``: a
    ``snapshot.create`` run's detail names its snapshot), oldest first."""
    started = {}
    for row in run_rows:
        detail = json.loads(row.get("detail") or "{}") if isinstance(row.get("detail"), str) else row.get("detail")
        if row.get("action") == "snapshot.create" and isinstance(detail, dict) and detail.get("snapshot"):
            started[detail["snapshot"]] = float(row["started"])
    taken = [TakenSnapshot(id=r["id"], kind=r["kind"], created=r["created"],
                           taken=started.get(r["id"], datetime.fromisoformat(r["created"]).timestamp()),
                           holds=frozenset((a["host"], a["instance"]) for a in r["agents"] if a.get("restic_id")))
             for r in snapshot_rows]  # fmt: skip
    return sorted(taken, key=lambda t: (t.taken, t.id))


def window(runs: list[SpecRun], target: int, host: str) -> tuple[float, float]:
    """When run ``target``'s spec held ``host``: from its finish to the finish of the next run on
    ``host`` that applied another fleet spec (whose own ``auto`` snapshot is taken inside it, before
    it changes anything); a next run that never finished ends it where it started; none: open."""
    run = next(r for r in runs if r.run == target)
    after = next((r for r in runs if r.run > target and host in r.hosts and r.fleet_hash != run.fleet_hash), None)
    start = run.finished if run.finished is not None else (run.started or 0.0)
    if after is None:
        return start, math.inf
    return start, after.finished if after.finished is not None else (after.started or start)


def match(runs: list[SpecRun], taken: list[TakenSnapshot], target: int, host: str,
          instances: list[str]) -> tuple[list[SnapshotMatch], list[str]]:  # fmt: skip
    """Per instance, the newest snapshot of it on ``host`` taken in ``window`` (never a
    ``pre-restore`` one); and the instances that have none."""
    low, high = window(runs, target, host)
    found, missing = [], []
    for instance in instances:
        best = next((t for t in reversed(taken) if low <= t.taken <= high and t.kind != "pre-restore"
                     and (host, instance) in t.holds), None)  # fmt: skip
        if best is None:
            missing.append(instance)
        else:
            found.append(SnapshotMatch(host=host, instance=instance, snapshot=best.id, kind=best.kind,
                                       created=best.created))  # fmt: skip
    return found, missing


def match_step(runs: list[SpecRun], taken: list[TakenSnapshot], step: PlannedStep) -> list[SnapshotMatch]:
    """Every (host, instance) of the step's target spec gets its match, or the rollback is refused
    (exit 2) before anything changes; so is a match that would also restore a host the step does
    not choose it for (a restore takes an instance from every host its fleet snapshot holds)."""
    instances = [i for _, i in spec_instances(step.inventory.fleet)]
    matches, problems = [], []
    for host in step.hosts:
        found, missing = match(runs, taken, step.to, host, instances)
        matches += found
        if missing:
            problems.append(
                f"{host}: no snapshot of {', '.join(missing)} was taken while run {step.to}'s spec "
                "was in place there (after it finished, before the next run with another spec did)"
            )
    by_id = {t.id: t for t in taken}
    for (snap, instance), hosts in sorted(_groups(matches).items()):
        extra = sorted(h for h, i in by_id[snap].holds if i == instance and h not in hosts)
        if extra:
            problems.append(
                f"snapshot {snap} also holds {instance} on {', '.join(extra)}, which this rollback "
                f"does not restore from it (a restore takes an instance from every host it holds)"
            )
    if problems:
        raise SpecError(f"--with-snapshots: no matching snapshot for every agent of run {step.to}'s spec; "
                        "nothing was changed", problems=problems,
                        hint="take one (inv snapshot.create) while that spec is in place, or roll back the "
                             "spec alone (without --with-snapshots)")  # fmt: skip
    return matches


def _groups(matches: list[SnapshotMatch]) -> dict[tuple[str, str], set[str]]:
    groups: dict[tuple[str, str], set[str]] = {}
    for m in matches:
        groups.setdefault((m.snapshot, m.instance), set()).add(m.host)
    return groups


def snapshot_lines(step: PlannedStep) -> list[str]:
    """The snapshot each (host, instance) gets back, for the plan shown before asking."""
    return [f"  snapshot {m.snapshot} ({m.kind}, {m.created}) -> {m.instance} on {m.host}" for m in step.snapshots]


# --- restoring them ---------------------------------------------------------------------------------

RestoreSnapshots = Callable[[PlannedStep, list[str], Log], None]


def restore_matches(step: PlannedStep, ok_hosts: list[str], log: Log) -> None:
    """Restore the step's matches on the hosts its spec succeeded on (``snapshot.restore`` with ``stop``:
    running agents are stopped, restored, started again; a pre-restore snapshot first; the operator
    confirmed the plan that listed them). A snapshot whose hosts did not all succeed is left alone
    and reported; so is a failed restore (raised once all were tried)."""
    from jackin.snapshots import (
        restore as restoring,  # lazy: Fabric (snapshots.restore); a rollback that restores no snapshot needs none
    )

    failed = []
    for (snap, instance), hosts in sorted(_groups(step.snapshots).items()):
        if not hosts <= set(ok_hosts):
            failed.append(f"{instance} on {', '.join(sorted(hosts - set(ok_hosts)))}: its spec rollback failed there, "
                          f"snapshot {snap} was not restored")  # fmt: skip
            continue
        log(f"restoring snapshot {snap} into {instance} on {', '.join(sorted(hosts))}")
        try:
            result = restoring.restore(step.inventory, snap, instance, stop=True, confirm=None)
        except JackinError as error:
            failed.append(f"{instance} from {snap}: {error.message}")
            continue
        problems = [f"{a.host}: {a.error}" for a in result.agents if not a.restored] + [
            f"{e.host}: {e.error}" for e in result.errors
        ]
        if problems:
            failed.append(f"{instance} from {snap}: {'; '.join(problems)}")
        else:
            log(f"restored {instance} from {snap} (undo: inv snapshot.restore {result.pre_restore} --stop)")
    if failed:
        raise JackinError("; ".join(failed))


restore_snapshots: RestoreSnapshots | None = restore_matches
"""The seam ``--with-snapshots`` runs after a step's spec is back, with the step (its ``snapshots``
were chosen by ``prepare``) and the hosts it succeeded on; tests may replace it."""


def check_snapshots(with_snapshots: bool) -> None:
    """Refuse ``--with-snapshots`` before anything changes when snapshot restore is disconnected."""
    if with_snapshots and restore_snapshots is None:
        raise NotImplementedYet("fleet.rollback --with-snapshots is not available: snapshot restore is not connected",
                                hint="without it the spec alone is rolled back")  # fmt: skip


class StepResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: PlannedStep
    up: fleet_api.UpResult


def apply(rollback: Rollback, *, source: str | None = None, dry_run: bool = False, with_snapshots: bool = False,
          on_event: fleet_api.OnEvent = lambda _: None, log: Log = lambda _: None) -> list[StepResult]:  # fmt: skip
    """Run each step as a recorded ``fleet.rollback`` (``dry_run``: preview only, nothing recorded); with
    ``with_snapshots``, then restore each step's matching snapshots on the hosts its spec succeeded on
    (a failed restore is raised after every step ran, naming each). A step after the first whose
    ``fleet.up`` raises stops the rollback: ``RollbackStopped`` carries the steps already applied."""
    check_snapshots(with_snapshots)
    if with_snapshots and not rollback.with_snapshots:
        raise JackinError("--with-snapshots: the snapshots were not chosen (prepare(..., with_snapshots=True))")
    results: list[StepResult] = []
    failures: list[str] = []
    for number, step in enumerate(rollback.steps, 1):
        try:
            up = fleet_api.up(step.inventory, source=source, dry_run=dry_run, bring_up=False, on_event=on_event,
                              log=log, action="fleet.rollback", detail={"to": step.to}, only=step.hosts)  # fmt: skip
        except JackinError as error:
            if dry_run or not results:
                raise  # nothing was applied yet: the step's own error says it all
            raise RollbackStopped(rollback, results, number, error, failures) from error
        results.append(StepResult(step=step, up=up))
        if with_snapshots and not dry_run and restore_snapshots is not None:
            try:
                restore_snapshots(step, [h.host for h in up.run.hosts if h.ok], log)
            except JackinError as error:
                failures.append(f"run {step.to}'s snapshots: {error.message}")
    if failures:
        raise JackinError("the spec was rolled back, but restoring snapshots failed: " + "; ".join(failures),
                          hint="each restore took a pre-restore snapshot first; inv snapshot.list shows them")  # fmt: skip
    return results


class RollbackStopped(JackinError):
    """A step after the first could not run (its ``fleet.up`` raised: a failed automatic snapshot, a busy
    lock, ...): the steps before it were applied and stay applied, so they are reported (``results``, exit 1),
    never dropped; the later steps are not run."""

    def __init__(self, rollback: Rollback, results: list[StepResult], number: int, error: JackinError,
                 failures: list[str]) -> None:  # fmt: skip
        step = rollback.steps[number - 1]
        applied = "; ".join(f"step {i} (run {r.step.to}'s spec on {', '.join(r.step.hosts)}): "
                            + ", ".join(f"{h.host} {'ok' if h.ok else 'failed'}" for h in r.up.run.hosts)
                            for i, r in enumerate(results, 1))  # fmt: skip
        later = len(rollback.steps) - number
        message = (f"fleet.rollback stopped at step {number} of {len(rollback.steps)} (run {step.to}'s spec on "
                   f"{', '.join(step.hosts)}), which failed: {error.message}. Applied before it, and still in place: "
                   f"{applied}" + (f"; {later} later step(s) not run" if later else "")
                   + (f". Restoring snapshots failed: {'; '.join(failures)}" if failures else ""))  # fmt: skip
        super().__init__(message, hint="inv fleet.runs lists what was applied; fix the cause, then "
                                       f"fleet.rollback --to {step.to} --host H applies the missing step on H")  # fmt: skip
        self.results = results
