"""The ``fleet`` collection: ``fleet.validate``, ``fleet.up``, ``fleet.status``, ``fleet.plan``,
``fleet.down``, ``fleet.gc`` and ``fleet.wait``. ``fleet.rollback`` and ``fleet.runs`` are in
``cli.rollback``, ``fleet.run`` in ``cli.run``, ``fleet.collect`` and ``fleet.review`` in ``cli.work``.

Each command loads the fleet, calls ``jackin``, renders the result and returns the exit code.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from jackin import lazy
from jackin.agents import wait as waiting  # light beside lifecycle.status, which it shares its reads with
from jackin.cli import render as ui
from jackin.cli.ask import confirm, require_terminal_or
from jackin.cli.contract import contract_gate, show_contract
from jackin.cli.edge import exit_code, host_errors
from jackin.cli.render import agent as agent_view
from jackin.cli.render import contract as contract_view
from jackin.cli.render import fleet as view
from jackin.cli.render.status import status_view
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_NOT_ENFORCED, EXIT_OK, SpecError, worst
from jackin.lifecycle import status as status_api
from jackin.spec import DEFAULT_INVENTORY, Inventory, load_inventory
from jackin.spec.values import parse_timeout

if TYPE_CHECKING:
    from rich.console import Console

    from jackin.lifecycle import down as down_api
    from jackin.lifecycle import fleet as fleet_api
    from jackin.lifecycle.status import FleetStatus
    from jackin.plan import fleet as planning
    from jackin.plan import launch
    from jackin.snapshots import final
    from jackin.work import bundles as work
else:  # loaded by the first command that uses them (jackin.lazy): fleet.status loads none of them
    launch = lazy.module("jackin.plan.launch")
    final = lazy.module("jackin.snapshots.final")
    down_api = lazy.module("jackin.lifecycle.down")
    fleet_api = lazy.module("jackin.lifecycle.fleet")
    planning = lazy.module("jackin.plan.fleet")
    work = lazy.module("jackin.work.bundles")


def fleet_validate(inventory: str | None) -> None:
    """Check the inventory, what ``fleet.up`` refuses from the spec alone (``fleet_api.check``: credential-like
    mounts, address pools too small) and, on this machine, its repositories, refs and task files (exit 2);
    no host touched. No exit code of its own (0, or its error's): its task ends normally, as ``lab.*``'s do."""
    spec = fleet_api.load(inventory)
    fleet_api.check(spec)
    work.check(spec.fleet)
    agents = sum(a.count for a in spec.fleet.agents)
    ui.out.print(f"{inventory or DEFAULT_INVENTORY}: ok (fleet {spec.fleet.name!r}, "
                 f"provider {spec.fleet.provider}, {agents} agent(s))")  # fmt: skip


# --- flows that ask before they act ---------------------------------------------


def fleet_up(inventory: str | None, *, yes: bool, json: bool, dry_run: bool, out: Console | None = None) -> int:
    """Preview, confirm, apply. ``--dry-run`` touches nothing, not even the local lab; the
    interactive preview plans against real hosts, so it may bring the lab up. The preview is the
    in-process host plan (``jackin.lifecycle.hostplan``, what ``fleet.plan`` shows and the deploy runs).
    ``out``: where it prints (default: stdout; ``fleet.run --json`` gives stderr)."""
    spec = fleet_api.load(inventory)
    if dry_run:
        return exit_code(_up(spec, inventory, dry_run=True, bring_up=False, json=json, out=out).run)
    if yes:
        contract_gate(spec, yes=True, json=json, out=out)
        return exit_code(_up(spec, inventory, dry_run=False, bring_up=True, json=json, out=out).run)
    if not sys.stdin.isatty():
        contract_gate(spec, yes=False, json=json, out=out)  # a first or changed contract: refused naming each one
        require_terminal_or("--yes")
    preview = _up(spec, inventory, dry_run=True, bring_up=True, json=json, out=out)
    terms = show_contract(preview.terms or launch.gate(spec), fleet=spec.fleet.name, yes=False, json=json,
                          out=out)  # fmt: skip
    if not preview.changed and not terms.differs:
        return exit_code(preview.run)
    confirm("Apply these changes and the launch contract above?" if terms.differs else "Apply these changes?")
    return exit_code(_up(spec, inventory, dry_run=False, bring_up=True, json=json, out=out).run)


def _up(spec: Inventory, inventory: str | None, *, dry_run: bool, bring_up: bool, json: bool,
        out: Console | None) -> fleet_api.UpResult:  # fmt: skip
    with ui.progress() as progress:
        result = fleet_api.up(spec, source=inventory, dry_run=dry_run, bring_up=bring_up, on_event=progress.update,
                              log=ui.log)  # fmt: skip
    if json:
        ui.print_json(result.model_dump(mode="json"))
        return result
    out = out or ui.out
    if dry_run:
        out.print(view.host_plan_view(host_plans(result)))
    title = f"fleet {spec.fleet.name}: {'plan' if dry_run else 'up'}"
    out.print(view.up_table(result.run, title=title, agents=placed_counts(result.plan)))
    return result


def placed_counts(plan: planning.FleetPlan) -> dict[str, int] | int:
    """Per host the agents placed there (a plan never placed: every agent on every host)."""
    return {h: len(plan.at(h)) for h in plan.placement} if plan.placement is not None else len(plan.agents)


def host_plans(result: fleet_api.UpResult) -> fleet_api.PlanResult:
    """A dry run's in-process plan as ``fleet.plan`` shows it."""
    return fleet_api.PlanResult(fleet=result.fleet, plan=result.plan, hosts=result.changes)


def fleet_status(inventory: str | None, *, watch: bool, json: bool) -> int:
    """Show the fleet's status; the exit code says whether every agent's policy is enforced.
    It reads through jackin.lifecycle.status alone: the fleet API (jackin.lifecycle.fleet) is not loaded."""
    spec = load_inventory(inventory or DEFAULT_INVENTORY)
    if watch:
        ui.watch(lambda: status_view(status_api.read(spec)))
        return EXIT_OK
    status = status_api.read(spec)
    if json:
        ui.print_json(status.model_dump(mode="json"))
    else:
        ui.out.print(status_view(status))
    return status_exit(status)


def status_exit(status: FleetStatus) -> int:
    """4 when any agent's egress policy is not enforced on a reachable host (a script or cron job
    must notice a silent security fault first), or its allowed egress is broken; else 1 when a host answered but its read failed;
    else 3 when a host is unreachable; else 0."""
    return worst(
        EXIT_NOT_ENFORCED if h.not_enforced or h.egress_broken or h.gateway_down else EXIT_CONNECT if not h.reachable else EXIT_FAILED if h.error
        else EXIT_OK
        for h in status.hosts
    )  # fmt: skip


def fleet_plan(inventory: str | None, *, json: bool) -> int:
    """What fleet.up would change on each host, from one parallel state read; changes nothing.
    Exit 2: a spec or credential problem (before any host is read); 3: a host is unreachable; 1: a
    host answered but its state could not be read, or fleet.up would refuse to act there; else 0."""
    spec = fleet_api.load(inventory)
    result = fleet_api.plan(spec, log=ui.log)
    terms = launch.gate(spec, host_facts=result.host_facts)  # the contract fleet.up would apply, hosts read
    if json:
        document = result.model_dump(mode="json", exclude={"plan"})
        document["placement"] = result.plan.placement
        document["stranded"] = result.plan.stranded
        document["contract"] = terms.contract.model_dump(mode="json")
        document["contract_changes"] = None if terms.first else terms.changes
        ui.print_json(document)
    else:
        ui.out.print(view.host_plan_view(result))
        for table in contract_view.contract_tables(terms.contract):
            ui.out.print(table)
        if terms.differs:
            ui.out.print(contract_view.contract_changes(terms.changes, first=terms.first))
    return worst(
        EXIT_CONNECT if h.unreachable else EXIT_FAILED if h.error or (h.changes and h.changes.refused) else EXIT_OK
        for h in result.hosts
    )  # fmt: skip


# --- fleet.down and its final snapshot, fleet.gc -------------------------------------------


def fleet_down(inventory: str | None, *, yes: bool, keep_data: bool, keep_lab: bool, no_final_snapshot: bool = False,
               discard_snapshots: bool = False, out: Console | None = None) -> int:  # fmt: skip
    """Ask (unless ``yes``), tear down, show what happened. ``out``: as ``fleet_up``'s."""
    spec = fleet_api.load(inventory)
    out = out or ui.out
    preview = final_preview(
        spec, keep_data=keep_data, no_final_snapshot=no_final_snapshot, discard_snapshots=discard_snapshots
    )  # fmt: skip - checks the flags before asking
    if not yes:
        require_terminal_or("--yes")
        data = "keeping homes and workspaces" if keep_data else "including every agent's workspace"
        data += " and every snapshot kept only on the hosts" if discard_snapshots else ""
        out.print(preview)
        confirm(f"Remove fleet {spec.fleet.name!r} from its hosts, {data}?")
    with ui.progress() as progress:
        result = down_api.down(spec, keep_data=keep_data, keep_lab=keep_lab, final_snapshot=not no_final_snapshot,
                                discard_snapshots=discard_snapshots, on_event=progress.update, log=ui.log)  # fmt: skip
    _show_down(result, fleet=spec.fleet.name, out=out)
    torn_down = all(c.clean for c in result.checks) and not result.run.failed  # the hosts it tore down
    return worst([EXIT_OK if torn_down else exit_code(result.run) or EXIT_FAILED, *final_errors(result)])


def _show_down(result: down_api.DownResult, *, fleet: str, out: Console) -> None:
    for host, ids in result.discarded.items():
        out.print(f"{host}: snapshots discarded with the host (the ledger forgot them): {', '.join(ids)}",
                  soft_wrap=True)  # fmt: skip
    if result.final:
        out.print(view.final_table(result))
    if result.run.hosts:
        out.print(view.up_table(result.run, title=f"fleet {fleet}: down"))
        out.print(view.clean_table(result.checks))
    if result.lab_removed:
        out.print(f"lab of fleet {fleet!r} destroyed")
    if result.lab_note:
        out.print(result.lab_note)


def final_preview(spec: Inventory, *, keep_data: bool, no_final_snapshot: bool, discard_snapshots: bool = False) -> str:
    """What fleet.down will snapshot and pull, where the copies go, and what is lost (shown before it asks)."""
    skipped = down_api.final_skip_reason(spec, keep_data=keep_data, final_snapshot=not no_final_snapshot,
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


def final_errors(result: down_api.DownResult) -> list[int]:
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
        ui.out.print(view.up_table(result, title="fleet.gc"))
    return worst([code, *(exit_code(r) for r in results)])


# --- agent state: fleet.wait (issue 10) ----------------------------------------------------


def fleet_wait(inventory: str | None, *, until: str, timeout: str | int | None, json: bool) -> int:
    """Poll until the condition holds (jackin/agents/wait.py), one line per state change as it is seen
    (on stderr with ``--json``, whose document is the result). Exit: 0 held; 1 ``done`` held with a
    failed agent; 3 a host stayed unreadable; 4 timed out."""
    spec = fleet_api.load(inventory)
    until = waiting.check_until(until)
    try:
        seconds = parse_timeout(timeout)
    except ValueError as error:
        raise SpecError(f"--timeout: {error}, got {timeout!r}") from None
    console = ui.err if json else ui.out
    result = waiting.wait(spec, until=until, timeout=seconds,
                          on_change=lambda change: console.print(agent_view.change_line(change), soft_wrap=True))  # fmt: skip
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(agent_view.wait_summary(result), soft_wrap=True)
    return result.exit_code
