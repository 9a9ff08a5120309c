"""``fleet.collect`` and ``fleet.review`` (jackin/work/collect.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only
    from jackin.work import loop
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


# --- fleet.work ----------------------------------------------------------------------------------------------

_EVENT_STYLE = {"accepted": "green", "failed": "red", "changes": "yellow", "review": "yellow", "delivered": "cyan",
                "stopped": "magenta"}  # fmt: skip


def work_event(event: loop.Event) -> Text:
    """One line of fleet.work: ``12:03:04 lab-1 coder-2 delivered task 7 (0.84 s): work task, attempt 1``."""
    at = time.strftime("%H:%M:%S", time.localtime(event.at))
    line = Text(f"{at} {event.host} {event.instance} ")
    line += Text(event.what, style=_EVENT_STYLE.get(event.what, "bold"))
    if event.task is not None:
        line += Text(f" task {event.task}")
    if event.seconds is not None:
        line += Text(f" ({event.seconds:.2f} s)", style="dim")
    if event.detail:
        line += Text(f": {event.detail}")
    return line


def work_progress(progress: loop.Progress) -> Text:
    """``done 12 · failed 1 · running 4 · queued 13 · review 0 · 3.2/min · empty in ~4 min``."""
    line = Text("queue: ", style="bold")
    line += Text(f"done {progress.done}", style="green") + Text(" · ")
    line += Text(f"failed {progress.failed}", style="red" if progress.failed else "") + Text(" · ")
    line += Text(f"running {progress.running} · queued {progress.queued} · review {progress.review}")
    if progress.rate:
        line += Text(f" · {progress.rate:g}/min")
    if progress.eta is not None:
        line += Text(f" · empty in ~{max(1, round(progress.eta / 60))} min", style="dim")
    if progress.unreachable:
        line += Text(f" · unreachable: {', '.join(sorted(progress.unreachable))}", style="red")
    busy = sorted(f"{k} {v}" for k, v in progress.agents.items() if not v.startswith("idle"))
    if busy:
        line += Text("\n  " + "\n  ".join(busy[:20]), style="dim")
    return line


def work_summary(result: loop.WorkResult) -> Text:
    why = {"empty": "the queue is empty", "deadline": "--until passed: tasks are left (run fleet.work again)",
           "interrupted": "stopped: nothing is lost (run fleet.work again to go on)",
           "unreachable": "every host stayed unreachable"}.get(result.reason, result.reason)  # fmt: skip
    line = Text(f"fleet {result.fleet}: {why} after {result.elapsed:.0f} s; ", style="bold")
    p = result.progress
    line += Text(f"{p.done} accepted, {p.failed} failed, {p.queued} queued, {p.running} running, {p.review} in review")
    if result.handovers:
        ordered = sorted(result.handovers)
        line += Text(f"; {len(ordered)} handover(s), median {ordered[len(ordered) // 2]:.2f} s", style="dim")
    return line
