"""``fleet.rollback`` and ``fleet.runs`` (jackin/lifecycle/rollback.py): return the fleet, or a host, to
the spec of an earlier successful run; list the runs it can return to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.ask import confirm, require_terminal_or
from jackin.cli.contract import show_contract
from jackin.cli.edge import count, exit_code
from jackin.cli.fleet import host_plans, placed_counts
from jackin.cli.render import fleet as fleet_view
from jackin.cli.render import rollback as view
from jackin.errors import EXIT_OK, SpecError, worst
from jackin.store.ledger import Ledger

if TYPE_CHECKING:
    from jackin.lifecycle import fleet as fleet_api
    from jackin.lifecycle import rollback as rollback_api
    from jackin.plan import launch
else:  # loaded by the first command that uses them (jackin.lazy)
    launch = lazy.module("jackin.plan.launch")
    fleet_api = lazy.module("jackin.lifecycle.fleet")
    rollback_api = lazy.module("jackin.lifecycle.rollback")


def fleet_rollback(inventory: str | None, *, to: str | int | None, host: str | None, yes: bool, json: bool,
                   dry_run: bool, with_snapshots: bool) -> int:  # fmt: skip
    """Show the spec change and the plan, confirm, apply the stored spec (jackin/lifecycle/rollback.py).
    ``--dry-run`` changes nothing; ``--json`` prints one document and needs ``--yes`` or ``--dry-run``."""
    spec = fleet_api.load(inventory)
    if json and not (yes or dry_run):
        raise SpecError("--json needs --yes or --dry-run (there is no one to ask)")
    rollback_api.check_snapshots(with_snapshots)
    chosen = rollback_api.prepare(spec, to=count("--to", to, high=2**63 - 1), host=host or None,
                                  with_snapshots=with_snapshots)  # fmt: skip
    if not json:
        for step in chosen.steps:
            ui.out.print(view.rollback_view(step, fleet=chosen.fleet))
            for line in rollback_api.snapshot_lines(step):  # --with-snapshots: what each host gets back
                ui.out.print(line, highlight=False, soft_wrap=True)
    differs = any(g.differs for g in rollback_gate(chosen, yes=yes or dry_run, json=json))
    if not dry_run and not yes:
        require_terminal_or("--yes")
    if dry_run or not yes:
        preview = _rollback(chosen, inventory, dry_run=True, with_snapshots=with_snapshots, json=json)
        if dry_run:
            return worst(exit_code(r.up.run) for r in preview)
        confirm("Roll back, applying the launch contract above?" if differs else "Roll back?")
    done = _rollback(chosen, inventory, dry_run=False, with_snapshots=with_snapshots, json=json)
    return worst(exit_code(r.up.run) for r in done)


def rollback_gate(chosen: rollback_api.Rollback, *, yes: bool, json: bool) -> list[launch.Gate]:
    """The launch contract each step applies (an older spec's: a rollback changes the contract) and
    its difference from the one before it (the last applied, then the previous step's), shown like
    ``fleet.up``'s; a difference with no terminal and no ``--yes`` is refused (exit 2) before anything
    runs. Reads the ledger only; the hosts' facts are those of the last applied contract."""
    gates: list[launch.Gate] = []
    previous = None
    with Ledger() as ledger:
        for step in chosen.steps:
            gates.append(launch.gate_of(ledger, step.inventory, previous=previous))
            previous = gates[-1].contract
    for step, found in zip(chosen.steps, gates, strict=True):
        show_contract(found, fleet=chosen.fleet, yes=yes, json=json, what=f"launch contract (run {step.to}'s spec)")
    return gates


def _rollback(chosen: rollback_api.Rollback, inventory: str | None, *, dry_run: bool, with_snapshots: bool,
              json: bool) -> list[rollback_api.StepResult]:  # fmt: skip
    """Apply (or plan) every step; the applied ones are shown even when a later one stopped it."""
    stopped = None
    with ui.progress() as progress:
        try:
            results = rollback_api.apply(chosen, source=inventory, dry_run=dry_run, with_snapshots=with_snapshots,
                                         on_event=progress.update, log=ui.log)  # fmt: skip
        except rollback_api.RollbackStopped as error:  # a later step failed: the applied ones are shown, then it
            results, stopped = error.results, error
    if json:
        ui.print_json({"fleet": chosen.fleet, "mode": chosen.mode, "dry_run": dry_run, "note": view.INVENTORY_KEPT,
                       "steps": [{**r.step.model_dump(mode="json"), "run": r.up.run.model_dump(mode="json")}
                                 for r in results], **({"stopped": stopped.message} if stopped else {})})  # fmt: skip
    else:
        _show_steps(chosen, results, dry_run=dry_run)
    if stopped:
        raise stopped
    return results


def _show_steps(chosen: rollback_api.Rollback, results: list[rollback_api.StepResult], *, dry_run: bool) -> None:
    for result in results:
        if dry_run:
            ui.out.print(fleet_view.host_plan_view(host_plans(result.up)))
        title = f"fleet {chosen.fleet}: {'plan of the ' if dry_run else ''}rollback to run {result.step.to}"
        ui.out.print(fleet_view.up_table(result.up.run, title=title, agents=placed_counts(result.up.plan)))
    if not dry_run:
        ui.out.print(view.INVENTORY_KEPT)


def fleet_runs(inventory: str | None, *, json: bool) -> int:
    """The fleet's runs that recorded a spec (what fleet.rollback --to accepts), oldest first."""
    spec = fleet_api.load(inventory)
    runs = rollback_api.history(spec)
    if json:
        ui.print_json([r.model_dump(mode="json") for r in runs])
    else:
        ui.out.print(view.runs_table(runs, fleet=spec.fleet.name))
    return EXIT_OK
