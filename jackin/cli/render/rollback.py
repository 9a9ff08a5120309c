"""``fleet.rollback`` and ``fleet.runs``: a step's spec change, and the runs it can return to."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only
    from jackin.lifecycle.rollback import PlannedStep
    from jackin.lifecycle.rollback_choice import SpecRun

INVENTORY_KEPT = "the inventory file is not rewritten: the next fleet.up -i FILE applies the file's spec again"


def _value(value: object) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value


def rollback_view(step: PlannedStep, *, fleet: str) -> Table:
    """What one rollback step changes: from the spec in place to the stored one, on which hosts."""
    table = Table.grid(padding=(0, 1))
    source = f"run {step.from_run}'s spec" if step.from_run is not None else "the spec in place"
    table.add_row(Text(f"fleet {fleet}: from {source} back to run {step.to}'s, on {', '.join(step.hosts)}",
                       style="bold"))  # fmt: skip
    diff = step.diff
    for name in diff.agents_added:
        table.add_row(Text(f"  + agent {name}", style="green"))
    for name in diff.agents_removed:
        table.add_row(Text(f"  - agent {name} (its container and network go; its user, home and workspace stay)",
                           style="red"))  # fmt: skip
    for name, changes in diff.agents_changed.items():
        for change in changes:
            table.add_row(Text(f"  ~ agent {name}: {change.field}: {_value(change.before)} -> {_value(change.after)}",
                               style="yellow"))  # fmt: skip
    for change in diff.fleet:
        table.add_row(Text(f"  ~ fleet {change.field}: {_value(change.before)} -> {_value(change.after)}",
                           style="yellow"))  # fmt: skip
    if diff.empty:
        table.add_row(Text("  the specs do not differ: the run re-applies it (repairs what drifted)", style="green"))
    return table


def runs_table(runs: list[SpecRun], *, fleet: str) -> Table:
    """The fleet's runs that recorded a spec: the targets fleet.rollback --to accepts."""
    table = Table(title=f"fleet {fleet}: applied specs", title_justify="left")
    for column in ("run", "action", "started", "status", "spec", "hosts"):
        table.add_column(column)
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started)) if run.started else "-"
        action = run.action + (f" --to {run.to}" if run.to is not None else "")
        hosts = ", ".join(f"{h} {run.results.get(h, 'no result')}" for h in run.hosts)
        style = "green" if run.succeeded else "red"
        table.add_row(str(run.run), action, started, Text(run.status, style=style), run.fleet_hash[:12], hosts)
    if not runs:
        table.caption = "none recorded"
    return table
