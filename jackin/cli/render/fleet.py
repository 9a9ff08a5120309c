"""``fleet.up``, ``fleet.plan``, ``fleet.down`` and ``fleet.gc``: per-host run summaries, plans, clean checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only: the engine's protocol is not loaded by commands that run no engine
    from jackin.engine import RunResult
    from jackin.lifecycle.down import CleanCheck, DownResult
    from jackin.lifecycle.fleet import PlanResult
    from jackin.plan.fleet import FleetPlan


def up_table(result: RunResult, *, title: str, agents: Mapping[str, int] | int | None = None) -> Table:
    """host, status, agents, changed, failed, time: the summary of a fleet run (``agents``: per host, the agents
    placed there, for a host the engine did not report on)."""
    table = Table(title=title, title_justify="left")
    for column, justify in (("host", "left"), ("status", "left"), ("agents", "right"), ("changed", "right"),
                            ("failed", "right"), ("time", "right"), ("detail", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for host in result.hosts:
        status = Text("ok", style="green") if host.ok else Text("FAILED", style="bold red")
        count = host.facts.get("agents", agents.get(host.host) if isinstance(agents, Mapping) else agents)
        detail = host.error or " ".join(str(host.facts[k]) for k in ("distro", "kernel") if k in host.facts)
        table.add_row(host.host, status, "-" if count is None else str(count), str(host.changed), str(host.failed),
                      f"{host.elapsed:.1f}s", Text(detail, style="red" if host.error else ""))  # fmt: skip
    verb = "would change" if result.dry_run else "changed"
    changed = sum(h.changed for h in result.hosts)
    table.caption = f"{len(result.succeeded)} ok, {len(result.failed)} failed, {changed} {verb}, {result.elapsed:.1f}s"
    return table


def clean_table(checks: list[CleanCheck]) -> Table:
    table = Table(title="clean check", title_justify="left")
    table.add_column("host")
    table.add_column("result")
    table.add_column("left behind")
    for check in checks:
        if check.error:
            table.add_row(check.host, Text("UNKNOWN", style="bold red"), Text(check.error, style="red"))
        elif check.clean:
            table.add_row(check.host, Text("clean", style="green"), "nothing")
        else:
            left = "; ".join(f"{kind}: {', '.join(items)}" for kind, items in check.leftovers.items())
            table.add_row(check.host, Text("LEFTOVERS", style="bold red"), left)
    return table


def placement_lines(plan: FleetPlan) -> list[Text]:
    """Where each instance lives (jackin/plan/placement.py): per host its instances, then those on a host that left
    the inventory (fleet.up leaves them alone) and those not placed yet."""
    if plan.placement is None:
        return []
    lines = [
        Text(f"{host}: {', '.join(placed) or 'no agents'}", style="cyan") for host, placed in plan.placement.items()
    ]
    for instance, host in plan.stranded.items():
        lines.append(Text(f"{instance}: on {host}, which left the inventory (fleet.up leaves it alone): "
                          f"inv agent.move {instance} --to HOST", style="yellow"))  # fmt: skip
    if plan.unplaced:
        lines.append(Text(f"not placed yet (fleet.up places them by the hosts' capacity): {', '.join(plan.unplaced)}",
                          style="yellow"))  # fmt: skip
    return lines


def host_plan_view(result: PlanResult) -> Table:
    """fleet.plan: per host what fleet.up would change, by category; an unchanged host in one line.
    Credentials show by name and agent only (``jackin.lifecycle.hostplan``), never a value."""
    table = Table.grid(padding=(0, 1))
    if result.note:
        table.add_row(Text(f"fleet {result.fleet}: {result.note}", style="yellow"))
    where = placement_lines(result.plan)
    if where:
        table.add_row(Text(f"fleet {result.fleet}: where each agent lives", style="bold"))
        for placed in where:
            table.add_row(Text("  ") + placed)
    for host in result.hosts:
        if host.error is not None:
            why = "unreachable" if host.unreachable else "state read failed"
            table.add_row(Text(f"{host.host}: cannot plan ({why}): {host.error}", style="red"))
            continue
        changes = host.changes
        if changes is None or changes.empty:
            table.add_row(Text(f"{host.host}: unchanged (fleet.up would not touch it)", style="green"))
            continue
        for refusal in changes.refused:
            table.add_row(Text(f"{host.host}: fleet.up would refuse: {refusal}", style="red"))
        if changes.changes:
            table.add_row(Text(f"{host.host}: would change {', '.join(changes.categories())}", style="bold"))
        for change in changes.changes:
            table.add_row(Text(f"  {change.category}: {change.step}", style="yellow"))
            for line in change.lines:
                for part in line.splitlines():
                    if part != "set -e":
                        table.add_row(Text(f"    {part}", style="dim"))
    return table


def final_table(result: DownResult) -> Table:
    """fleet.down: per host the final snapshot, the operator's copy, or what failed."""
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
