"""The CLI edge: turn our errors into one clear message and a documented exit code.

Exit codes: 0 ok · 1 a host or operation failed · 2 invalid spec or usage ·
3 connection or host key · 4 (fleet.status) an agent's egress policy is not enforced on a
reachable host. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from invoke.exceptions import Exit
from rich.prompt import Confirm

from jackin import lazy
from jackin.cli import render as ui
from jackin.errors import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_NOT_ENFORCED,
    EXIT_OK,
    JackinError,
    NotImplementedYet,
    SpecError,  # fmt: skip
    worst,
)
from jackin.transport import interrupts

if TYPE_CHECKING:
    from rich.table import Table

    from jackin.engine import RunResult
    from jackin.lifecycle import fleet as fleet_api
    from jackin.lifecycle import rollback as rollback_api
    from jackin.lifecycle.status import FleetStatus
    from jackin.net import probes as agent_api
    from jackin.plan.contract import Gate
    from jackin.snapshots.models import DiffResult, SnapshotRecord
    from jackin.transport.remote import HostError
else:  # loaded by the first command that uses them (jackin.lazy): the CLI's start stays short
    agent_api = lazy.module("jackin.net.probes")
    fleet_api = lazy.module("jackin.lifecycle.fleet")
    rollback_api = lazy.module("jackin.lifecycle.rollback")


@contextmanager
def guard() -> Iterator[None]:
    """Around every task: our errors as one message and their exit code; a Ctrl-C as exit 130 (the
    command has started: from here a Ctrl-C is a KeyboardInterrupt, see ``jackin.transport.interrupts``). A
    Ctrl-C that interrupted SSH work ends the process at once (``interrupts.end_if_interrupted``)."""
    interrupts.started()
    try:
        yield
    except JackinError as exc:
        ui.error(exc)
        raise Exit(code=exc.exit_code) from None
    except KeyboardInterrupt:
        ui.err.print("[yellow]interrupted[/yellow]")
        interrupts.end_if_interrupted(interrupts.INTERRUPTED)
        raise Exit(code=interrupts.INTERRUPTED) from None
    except Exit as done:  # agent.logs --follow and fleet.status --watch end with 0 at a Ctrl-C
        interrupts.end_if_interrupted(done.code)
        raise


def exit_code(result: RunResult) -> int:
    """1 when any operation failed; 3 when the only failures are connections; else 0."""
    if result.error or any(h.failed for h in result.hosts):
        return EXIT_FAILED
    if result.failed:
        return EXIT_CONNECT
    return EXIT_OK


def count(option: str, value: str | int | None, *, low: int = 1, high: int = 64) -> int | None:
    """Parse a whole-number option, or fail as a usage error (exit 2) naming the option."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SpecError(f"{option} expects a whole number from {low} to {high}, got {value!r}") from None
    if not low <= number <= high:
        raise SpecError(f"{option} expects a whole number from {low} to {high}, got {number}")
    return number


def not_yet(task: str, issue: str) -> None:
    raise NotImplementedYet(f"{task} is not yet implemented", hint=f"it arrives with the {issue} issue")


def require_terminal_or(flag: str, *, when: bool = True) -> None:
    """Changes are shown and confirmed first; with no terminal to ask, the flag must say so."""
    if when and not sys.stdin.isatty():
        raise SpecError(f"no terminal to confirm on: pass {flag} to go ahead without asking")


def confirm(question: str) -> None:
    if not Confirm.ask(question, console=ui.err, default=False):
        raise JackinError("nothing changed: not confirmed")


# --- flows that ask before they act ---------------------------------------------


def fleet_up(inventory: str | None, *, yes: bool, json: bool, dry_run: bool) -> int:
    """Preview, confirm, apply. ``--dry-run`` touches nothing, not even the local lab; the
    interactive preview plans against real hosts, so it may bring the lab up. The preview is the
    in-process host plan (``jackin.plan.host``, what ``fleet.plan`` shows and the deploy runs)."""
    spec = fleet_api.load(inventory)
    if dry_run:
        return exit_code(_up(spec, inventory, dry_run=True, bring_up=False, json=json).run)
    if yes:
        contract_gate(spec, yes=True, json=json)
        return exit_code(_up(spec, inventory, dry_run=False, bring_up=True, json=json).run)
    if not sys.stdin.isatty():
        contract_gate(spec, yes=False, json=json)  # a first or changed contract: refused naming each difference
        require_terminal_or("--yes")
    preview = _up(spec, inventory, dry_run=True, bring_up=True, json=json)
    terms = show_contract(preview.terms or contract_gate_of(spec), fleet=spec.fleet.name, yes=False, json=json)
    if not preview.changed and not terms.differs:
        return exit_code(preview.run)
    confirm("Apply these changes and the launch contract above?" if terms.differs else "Apply these changes?")
    return exit_code(_up(spec, inventory, dry_run=False, bring_up=True, json=json).run)


def contract_gate(spec: fleet_api.Inventory, *, yes: bool, json: bool = False) -> Gate:
    """Show the launch contract ``fleet.up`` is about to apply (jackin/plan/contract.py): its summary, and
    when it differs from the last one applied to the fleet, the difference (a first up: the whole
    contract). A difference needs a confirmation: without ``--yes`` and with no terminal to ask on,
    refused (exit 2) naming each difference; nothing is touched before. Returns the ``Gate``; the
    question itself is ``fleet_up``'s one confirmation. ``json``: shown on stderr. No host is read
    here: the hosts' facts are those of the last applied contract (the interactive preview reads them)."""
    return show_contract(contract_gate_of(spec), fleet=spec.fleet.name, yes=yes, json=json)


def contract_gate_of(spec: fleet_api.Inventory) -> Gate:
    from jackin.plan import contract as contract_api

    return contract_api.gate(spec)


def show_contract(found: Gate, *, fleet: str, yes: bool, json: bool = False, what: str = "launch contract") -> Gate:
    """Print a ``contract.Gate`` (the whole contract when first and asked; the summary; the
    difference) and refuse a difference with no terminal and no ``--yes``. Returns ``found``."""
    console = ui.err if json else ui.out
    if found.first and not yes:
        for table in ui.contract_tables(found.contract):
            console.print(table)
    console.print(ui.contract_summary(found.contract))
    if found.differs:
        console.print(ui.contract_changes(found.changes, first=found.first))
        if not yes and not sys.stdin.isatty():
            change = ("fleet has no launch contract applied yet" if found.first
                      else f"{what} changed ({len(found.changes)} difference(s))")  # fmt: skip
            raise SpecError(f"fleet {fleet!r}: the {change} and there is no terminal to confirm it on: "
                            "pass --yes to apply it without asking", problems=found.changes)  # fmt: skip
    return found


def _up(
    spec: fleet_api.Inventory, inventory: str | None, *, dry_run: bool, bring_up: bool, json: bool
) -> fleet_api.UpResult:
    with ui.progress() as view:
        result = fleet_api.up(spec, source=inventory, dry_run=dry_run, bring_up=bring_up, on_event=view.update,
                              log=ui.log)  # fmt: skip
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        if dry_run:
            ui.out.print(ui.host_plan_view(_host_plans(result)))
        title = f"fleet {spec.fleet.name}: {'plan' if dry_run else 'up'}"
        ui.out.print(ui.up_table(result.run, title=title, agents=len(result.plan.agents)))
    return result


def _host_plans(result: fleet_api.UpResult) -> fleet_api.PlanResult:
    """A dry run's in-process plan as ``fleet.plan`` shows it."""
    return fleet_api.PlanResult(fleet=result.fleet, plan=result.plan, hosts=result.changes)


def fleet_status(inventory: str | None, *, watch: bool, json: bool) -> int:
    """Show the fleet's status; the exit code says whether every agent's policy is enforced.
    It reads through jackin.lifecycle.status alone: the fleet API (jackin.lifecycle.fleet) is not loaded."""
    from jackin.lifecycle import status as status_api
    from jackin.spec import DEFAULT_INVENTORY, load_inventory

    spec = load_inventory(inventory or DEFAULT_INVENTORY)
    if watch:
        ui.watch(lambda: ui.status_view(status_api.read(spec)))
        return EXIT_OK
    status = status_api.read(spec)
    if json:
        ui.print_json(status.model_dump(mode="json"))
    else:
        ui.out.print(ui.status_view(status))
    return status_exit(status)


def status_exit(status: FleetStatus) -> int:
    """4 when any agent's egress policy is not enforced on a reachable host (a script or cron job
    must notice a silent security fault first); else 1 when a host answered but its read failed;
    else 3 when a host is unreachable; else 0."""
    return worst(
        EXIT_NOT_ENFORCED if h.not_enforced else EXIT_CONNECT if not h.reachable else EXIT_FAILED if h.error
        else EXIT_OK
        for h in status.hosts
    )  # fmt: skip


def fleet_down(inventory: str | None, *, yes: bool, keep_data: bool, keep_lab: bool,
               no_final_snapshot: bool = False, discard_snapshots: bool = False) -> int:  # fmt: skip
    spec = fleet_api.load(inventory)
    preview = final_preview(
        spec, keep_data=keep_data, no_final_snapshot=no_final_snapshot, discard_snapshots=discard_snapshots
    )  # fmt: skip - checks the flags before asking
    if not yes:
        require_terminal_or("--yes")
        data = "keeping homes and workspaces" if keep_data else "including every agent's workspace"
        data += " and every snapshot kept only on the hosts" if discard_snapshots else ""
        ui.out.print(preview)
        confirm(f"Remove fleet {spec.fleet.name!r} from its hosts, {data}?")
    with ui.progress() as view:
        result = fleet_api.down(spec, keep_data=keep_data, keep_lab=keep_lab, final_snapshot=not no_final_snapshot,
                                discard_snapshots=discard_snapshots, on_event=view.update, log=ui.log)  # fmt: skip
    for host, ids in result.discarded.items():
        ui.out.print(f"{host}: snapshots discarded with the host (the ledger forgot them): {', '.join(ids)}",
                     soft_wrap=True)  # fmt: skip
    if result.final:
        ui.out.print(final_table(result))
    if result.run.hosts:
        ui.out.print(ui.up_table(result.run, title=f"fleet {spec.fleet.name}: down"))
        ui.out.print(ui.clean_table(result.checks))
    if result.lab_removed:
        ui.out.print(f"lab of fleet {spec.fleet.name!r} destroyed")
    if result.lab_note:
        ui.out.print(result.lab_note)
    torn_down = all(c.clean for c in result.checks) and not result.run.failed  # the hosts it tore down
    return worst([EXIT_OK if torn_down else exit_code(result.run) or EXIT_FAILED, *final_errors(result)])


def fleet_gc(inventory: str | None, *, yes: bool, purge_kept: bool = False) -> int:
    """List leftovers of unknown fleets and kept data; remove the leftovers (and kept data only
    with ``--purge-kept``). Unreachable hosts are reported and the others still collected."""
    spec = fleet_api.load(inventory)
    found = fleet_api.orphans(spec)
    code = host_errors(found.errors)
    for name, hosts in sorted(found.kept.items()):
        action = "removing it (--purge-kept)" if purge_kept else "left alone (fleet.gc --purge-kept removes it)"
        ui.out.print(f"fleet {name!r}: data kept by fleet.down --keep-data on {', '.join(hosts)}: {action}")
    remove = {**found.leftovers, **(found.kept if purge_kept else {})}
    if not remove:
        ui.out.print("no leftovers of unknown fleets")
        return code
    for name, hosts in sorted(found.leftovers.items()):
        ui.out.print(f"fleet {name!r}: leftovers on {', '.join(hosts)}")
    if not yes:
        require_terminal_or("--yes")
        confirm("Remove them?")
    results = fleet_api.gc(spec, remove, purge_kept=purge_kept)
    for result in results:
        ui.out.print(ui.up_table(result, title="fleet.gc"))
    return worst([code, *(exit_code(r) for r in results)])


def host_errors(errors: list[HostError]) -> int:
    """Print each host that failed, one line each; the exit code they add up to."""
    for failure in errors:
        what = "unreachable" if failure.unreachable else "failed"
        ui.err.print(f"error: {failure.host}: {what}: {failure.error}", soft_wrap=True, style="bold red")
    return worst(e.exit_code for e in errors)


# --- agent ---------------------------------------------------------------------


def agent_netcheck(inventory: str | None, agent: str, target: str, port: str | int, *, json: bool) -> int:
    spec = fleet_api.load(inventory)
    probes = agent_api.netcheck(spec, fleet_api.targets(spec, bring_up=False), agent, target,
                                count("--port", port, high=65535) or 443)  # fmt: skip
    if json:
        ui.print_json([p.model_dump() for p in probes])
    else:
        ui.out.print(ui.probe_table(probes))
    return worst(p.exit_code for p in probes)


def agent_denials(inventory: str | None, agent: str, *, json: bool) -> int:
    spec = fleet_api.load(inventory)
    found = agent_api.denials(spec, fleet_api.targets(spec, bring_up=False), agent)
    if json:
        ui.print_json(found.model_dump(mode="json"))
    else:
        ui.out.print(ui.denials_table(found.denials, agent))
    return host_errors(found.errors)


# --- snapshot --------------------------------------------------------------------


def _snapshot_errors(errors: list[HostError]) -> int:
    return host_errors(errors)


def snapshot_create(inventory: str | None, *, agent: str | None, label: str | None, json: bool) -> int:
    from jackin.snapshots import api as snapshots

    spec = fleet_api.load(inventory)
    result = snapshots.create(spec, agent, label)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.snapshot_view(result.snapshot))
    return _snapshot_errors(result.errors)


def snapshot_list(inventory: str | None, *, json: bool) -> int:
    from jackin.snapshots import api as snapshots

    spec = fleet_api.load(inventory)
    records = snapshots.records(spec)
    copied = _copy_places(spec)
    if json:
        ui.print_json([{**r.row(), "copies": copied.get(r.id, [])} for r in records])
    else:
        ui.out.print(ui.snapshots_table(records, fleet=spec.fleet.name))
        for r in (r for r in records if r.id in copied):
            ui.out.print(f"{r.id}: copies off its hosts on {', '.join(copied[r.id])}")
    return EXIT_OK


def snapshot_show(inventory: str | None, snapshot: str, *, json: bool) -> int:
    from jackin.snapshots import api as snapshots

    record = snapshots.show(fleet_api.load(inventory), snapshot)
    if json:
        ui.print_json({**record.model_dump(mode="json"), **{k: v for k, v in record.row().items() if k != "agents"}})
    else:
        ui.out.print(ui.snapshot_view(record))
    return EXIT_OK


def snapshot_diff(inventory: str | None, snapshot: str, other: str | None, *, agent: str | None, json: bool) -> int:
    from jackin.snapshots import api as snapshots

    result = snapshots.diff(fleet_api.load(inventory), snapshot, other or None, agent)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.diff_table(result))
    return _snapshot_errors(result.errors)


def snapshot_restore(inventory: str | None, snapshot: str, *, agent: str | None, stop: bool, yes: bool,
                     from_host: str | None = None, json: bool = False) -> int:  # fmt: skip
    """Refuse without a terminal unless --yes; show what will be overwritten and ask (``json``: with
    --yes, print only the result as one JSON document; without it the preview still goes to the terminal)."""
    from jackin.snapshots import restore as restoring

    spec = fleet_api.load(inventory)
    require_terminal_or("--yes", when=not yes)

    def ask(preview: DiffResult) -> bool:
        if not (json and yes):
            (ui.err if json else ui.out).print(ui.diff_table(preview))
        if not yes:
            confirm(f"Restore snapshot {snapshot} over the live workspace(s) above?")
        return True

    result = restoring.restore(spec, snapshot, agent, stop=stop, confirm=ask, from_host=from_host or None)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.restore_table(result))
    for failed in (a for a in result.agents if not a.restored):
        ui.err.print(f"error: {failed.host}: {failed.error}", soft_wrap=True, style="bold red")
    return worst([_snapshot_errors(result.errors), EXIT_OK if result.ok else EXIT_FAILED])


def snapshot_prune(inventory: str | None, *, yes: bool, json: bool) -> int:
    from jackin.snapshots import restore as restoring

    spec = fleet_api.load(inventory)

    def ask(removed: list[SnapshotRecord]) -> bool:
        if not yes:
            require_terminal_or("--yes")
            ui.out.print(ui.snapshots_table(removed, fleet=spec.fleet.name))
            confirm(f"Forget these {len(removed)} snapshot(s) (keep {spec.fleet.snapshots.keep})?")
        return True

    result = restoring.prune(spec, confirm=ask)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(
            f"kept {len(result.kept)} snapshot(s); removed {len(result.removed)}: {', '.join(result.removed) or '-'}"
        )
        for note in result.notes:  # snapshots of hosts that left the fleet: kept for a copy, or forgotten
            ui.out.print(f"note: {note}", highlight=False, soft_wrap=True)
    return _snapshot_errors(result.errors)


# --- fleet.rollback ----------------------------------------------------------------


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
            ui.out.print(ui.rollback_view(step, fleet=chosen.fleet))
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


def rollback_gate(chosen: rollback_api.Rollback, *, yes: bool, json: bool) -> list:
    """The launch contract each step applies (an older spec's: a rollback changes the contract) and
    its difference from the one before it (the last applied, then the previous step's), shown like
    ``fleet.up``'s; a difference with no terminal and no ``--yes`` is refused (exit 2) before anything
    runs. Reads the ledger only; the hosts' facts are those of the last applied contract."""
    from jackin.plan import contract as contract_api
    from jackin.store.ledger import Ledger

    gates, previous = [], None
    with Ledger() as ledger:
        for step in chosen.steps:
            gates.append(contract_api.gate_of(ledger, step.inventory, previous=previous))
            previous = gates[-1].contract
    for step, found in zip(chosen.steps, gates, strict=True):
        show_contract(found, fleet=chosen.fleet, yes=yes, json=json, what=f"launch contract (run {step.to}'s spec)")
    return gates


def _rollback(chosen: rollback_api.Rollback, inventory: str | None, *, dry_run: bool, with_snapshots: bool,
              json: bool) -> list[rollback_api.StepResult]:  # fmt: skip
    stopped = None
    with ui.progress() as view:
        try:
            results = rollback_api.apply(chosen, source=inventory, dry_run=dry_run, with_snapshots=with_snapshots,
                                         on_event=view.update, log=ui.log)  # fmt: skip
        except rollback_api.RollbackStopped as error:  # a later step failed: the applied ones are shown, then it
            results, stopped = error.results, error
    if json:
        ui.print_json({"fleet": chosen.fleet, "mode": chosen.mode, "dry_run": dry_run, "note": ui.INVENTORY_KEPT,
                       "steps": [{**r.step.model_dump(mode="json"), "run": r.up.run.model_dump(mode="json")}
                                 for r in results], **({"stopped": stopped.message} if stopped else {})})  # fmt: skip
        if stopped:
            raise stopped
        return results
    for result in results:
        if dry_run:
            ui.out.print(ui.host_plan_view(_host_plans(result.up)))
        title = f"fleet {chosen.fleet}: {'plan of the ' if dry_run else ''}rollback to run {result.step.to}"
        ui.out.print(ui.up_table(result.up.run, title=title, agents=len(result.up.plan.agents)))
    if not dry_run:
        ui.out.print(ui.INVENTORY_KEPT)
    if stopped:
        raise stopped
    return results


def fleet_runs(inventory: str | None, *, json: bool) -> int:
    """The fleet's runs that recorded a spec (what fleet.rollback --to accepts), oldest first."""
    spec = fleet_api.load(inventory)
    runs = rollback_api.history(spec)
    if json:
        ui.print_json([r.model_dump(mode="json") for r in runs])
    else:
        ui.out.print(ui.runs_table(runs, fleet=spec.fleet.name))
    return EXIT_OK


# --- snapshot.pull, snapshot.push ---------------------------------------------------


def snapshot_pull(inventory: str | None, snapshot: str, *, json: bool) -> int:
    """Mirror the repositories holding SNAPSHOT to this machine (jackin/snapshots/moves.py)."""
    from jackin.snapshots import moves

    result = moves.pull(fleet_api.load(inventory), snapshot)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.pull_table(result))
    return _snapshot_errors(result.errors)


def snapshot_push(inventory: str | None, snapshot: str, *, host: str | None, json: bool) -> int:
    """Copy this machine's copies of SNAPSHOT's origin repositories onto --host."""
    from jackin.snapshots import moves

    if not host:
        raise SpecError("snapshot.push needs --host HOST: the host of the fleet to push the snapshot onto")
    result = moves.push(fleet_api.load(inventory), snapshot, host)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.push_table(result))
    return _snapshot_errors(result.errors)


def _copy_places(spec: fleet_api.Inventory) -> dict[str, list[str]]:
    """Per snapshot id, where copies of it are (``operator``, pushed-onto hosts): for snapshot.list."""
    from jackin.snapshots import moves

    return moves.copy_places(spec)


# --- fleet.down: the final snapshot ---------------------------------------------------------


def final_preview(spec: fleet_api.Inventory, *, keep_data: bool, no_final_snapshot: bool,
                  discard_snapshots: bool = False) -> str:  # fmt: skip
    """What fleet.down will snapshot and pull, where the copies go, and what is lost (shown before it asks)."""
    from jackin.plan import fleet as planning
    from jackin.snapshots import final

    skipped = fleet_api.final_skip_reason(spec, keep_data=keep_data, final_snapshot=not no_final_snapshot,
                                          discard_snapshots=discard_snapshots)  # fmt: skip
    pulled = f"{final.pulled_root(spec.fleet.name)}/<host>/repo"
    if keep_data:
        return f"no final snapshot ({skipped})"
    if discard_snapshots:
        return ("no final snapshot and no pull (--discard-snapshots): every agent's workspace AND every snapshot "
                "kept only on the hosts (manual, auto, pre-restore, checkpoints; none pulled here or copied to a host "
                "that stays) are removed with no copy, and the ledger forgets those snapshots")  # fmt: skip
    if skipped:
        return (f"no final snapshot ({skipped}): the workspaces are removed with no copy; each host's repository "
                f"of earlier snapshots is still pulled to {pulled} and checked there first, and a host where that "
                "fails is not torn down (fleet.down --discard-snapshots accepts losing them)")  # fmt: skip
    instances = ", ".join(i for _, i in planning.instances(spec.fleet))
    return (f"first: the fleet's containers are stopped and a final snapshot is taken of every agent home on every "
            f"host ({instances}, and any home an agent dropped from the spec left), each host's repository pulled "
            f"to {pulled} and checked there; a host where that fails is not torn down and its containers are "
            "started again")  # fmt: skip


def final_table(result: fleet_api.DownResult) -> Table:
    """Per host: the final snapshot, the operator's copy, or what failed."""
    from rich.table import Table

    table = Table(title=f"fleet {result.fleet}: final snapshot")
    for column in ("host", "snapshot", "agents", "copy here (checked)", "teardown"):
        table.add_column(column)
    for f in result.final:
        snapshot = f.snapshot or ("[red]failed[/red]" if f.stage in ("read", "stop", "snapshot") else
                                  "none: no repository" if f.stage == "nothing" and result.final_skipped else
                                  "none needed: no home" if f.stage == "nothing" else "earlier ones only")  # fmt: skip
        table.add_row(f.host, snapshot, ", ".join(f.instances) or "-", f.copy_path or "-",
                      "[red]held back[/red]" if f.blocked else "go")  # fmt: skip
    return table


def final_errors(result: fleet_api.DownResult) -> list[int]:
    """Print each host kept because its final snapshot or pull failed, and the way out; their exit codes."""
    codes = []
    for f in result.blocked:
        ui.err.print(f"error: {f.host}: not torn down, its workspaces are the only copy: {f.error}",
                     soft_wrap=True, style="bold red")  # fmt: skip
        codes.append(EXIT_CONNECT if f.unreachable else EXIT_FAILED)
        if f.restart_error:
            ui.err.print(f"warning: {f.host}: its containers ({', '.join(f.stopped)}) stopped for the snapshot could "
                         f"not be started again: {f.restart_error}", soft_wrap=True)  # fmt: skip
    if codes:
        ui.err.print("fix it and run fleet.down again (hosts already torn down are left as they are); "
                     "fleet.down --no-final-snapshot takes no new snapshot but still pulls each host's earlier "
                     "snapshots; fleet.down --discard-snapshots tears down losing the workspaces and the snapshots "
                     "kept only on the hosts", soft_wrap=True)  # fmt: skip
    return codes


# --- fleet.plan --------------------------------------------------------------------


def fleet_plan(inventory: str | None, *, json: bool) -> int:
    """What fleet.up would change on each host, from one parallel state read; changes nothing.
    Exit 2: a spec or credential problem (before any host is read); 3: a host is unreachable; 1: a
    host answered but its state could not be read, or fleet.up would refuse to act there; else 0."""
    from jackin.plan import contract as contract_api

    spec = fleet_api.load(inventory)
    result = fleet_api.plan(spec, log=ui.log)
    terms = contract_api.gate(spec, host_facts=result.host_facts)  # the contract fleet.up would apply, hosts read
    if json:
        document = result.model_dump(mode="json", exclude={"plan"})
        document["contract"] = terms.contract.model_dump(mode="json")
        document["contract_changes"] = None if terms.first else terms.changes
        ui.print_json(document)
    else:
        ui.out.print(ui.host_plan_view(result))
        for table in ui.contract_tables(terms.contract):
            ui.out.print(table)
        if terms.differs:
            ui.out.print(ui.contract_changes(terms.changes, first=terms.first))
    return worst(
        EXIT_CONNECT if h.unreachable else EXIT_FAILED if h.error or (h.changes and h.changes.refused) else EXIT_OK
        for h in result.hosts
    )  # fmt: skip


# --- agent state: fleet.wait, agent.answer (issue 10) ----------------------------------


def fleet_wait(inventory: str | None, *, until: str, timeout: str | int | None, json: bool) -> int:
    """Poll until the condition holds (jackin/agents/wait.py), one line per state change as it is seen
    (on stderr with ``--json``, whose document is the result). Exit: 0 held; 1 ``done`` held with a
    failed agent; 3 a host stayed unreadable; 4 timed out."""
    from jackin.agents import wait as waiting
    from jackin.spec.models import parse_duration

    spec = fleet_api.load(inventory)
    until = waiting.check_until(until)
    seconds = None
    if timeout not in (None, ""):
        try:
            seconds = parse_duration(timeout)
        except ValueError as error:
            raise SpecError(f"--timeout: {error}, got {timeout!r}") from None
    console = ui.err if json else ui.out
    result = waiting.wait(spec, until=until, timeout=seconds,
                          on_change=lambda change: console.print(ui.change_line(change), soft_wrap=True))  # fmt: skip
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(ui.wait_summary(result), soft_wrap=True)
    return result.exit_code


def agent_answer(inventory: str | None, agent: str, text: str, *, host: str | None) -> int:
    """Write TEXT (``-``: stdin) to the blocked agent's answer file; refused unless it is blocked."""
    from jackin.agents import answer

    if text == "-":
        text = sys.stdin.read()
    result = answer.answer(fleet_api.load(inventory), agent, text, host=host or None)
    ui.out.print(ui.answered_line(result), soft_wrap=True)
    return EXIT_OK
