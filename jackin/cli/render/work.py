"""``fleet.collect`` and ``fleet.review`` (jackin/work/collect.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only
    from jackin.work.collect import CollectReport, Review


def collect_table(report: CollectReport) -> Table:
    """fleet.collect: per host and agent what was collected, under which ref, and the handoff's evidence."""
    table = Table(title=f"fleet {report.fleet}: collect", title_justify="left")
    for column in ("host", "agent", "state", "result", "commit", "ref", "handoff"):
        table.add_column(column)
    for a in report.agents:
        style = {"collected": "green", "failed": "bold red"}.get(a.result, "dim")
        handoff = "" if a.evidence is None else a.evidence.label
        table.add_row(a.host, a.instance, a.state, Text(a.result if not a.reason else f"{a.result}: {a.reason}",
                                                        style=style),
                      (a.commit or "")[:12], a.ref or "", Text(handoff, style="green" if handoff == "ok" else "yellow"))  # fmt: skip
    for host, why in report.unreachable.items():
        table.add_row(host, "", "", Text(f"unreachable: {why}", style="bold red"), "", "", "")
    return table


def review_table(review: Review) -> Table:
    """fleet.review: per host and agent its state, collected commit, diff stat, its runtime's usage, evidence
    and handoff."""
    table = Table(title=f"fleet {review.fleet}: review", title_justify="left")
    usage = any(r.usage for r in review.rows)  # a column only when some runtime reported its usage
    counted = any(r.gateway for r in review.rows)  # and when some agent went through the credential gateway
    columns = ("host", "agent", "state", "commit", "diff", *(("usage",) if usage else ()),
               *(("gateway",) if counted else ()), "evidence", "handoff")  # fmt: skip
    for column in columns:
        table.add_column(column)
    for r in review.rows:
        evidence = Text(r.evidence or "not collected", style="green" if r.evidence == "ok" else "yellow")
        used = (r.usage.label if r.usage else "",) if usage else ()
        gateway = (r.gateway.summary if r.gateway else "",) if counted else ()
        table.add_row(r.host, r.instance, r.state, (r.commit or "")[:12], r.diff or "", *used, *gateway, evidence,
                      r.handoff or "")  # fmt: skip
    for host, why in review.unreachable.items():
        table.add_row(host, "", Text(f"unreachable: {why}", style="bold red"), *[""] * (len(table.columns) - 3))
    return table
