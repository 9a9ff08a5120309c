"""The task queue's tables: ``task.list`` (one row a task) and ``task.show`` (a task and its attempts)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from jackin.store.tasks import Task

STYLE = {"queued": "dim", "running": "cyan", "review": "yellow", "accepted": "green", "changes": "yellow",
         "failed": "red", "cancelled": "magenta"}  # fmt: skip


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def _first_line(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def task_table(tasks: list[Task], *, title: str = "tasks") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("id", "state", "task", "label", "attempts", "failures", "repository", "updated"):
        table.add_column(column, justify="right" if column in ("id", "attempts", "failures") else "left")
    for t in tasks:
        done = sum(r.state == "done" for r in t.runs)
        state = Text(t.state, style=STYLE.get(t.state, ""))
        if t.failure_class and t.state in ("failed", "queued", "running"):
            state += Text(f" ({t.failure_class})", style="dim")
        table.add_row(str(t.id), state, Text(_first_line(t.text)), t.label or "", f"{done}/{t.attempts}",
                      f"{t.failures}/{t.retries}", f"{t.repo or ''}@{t.ref or 'HEAD'}", _when(t.updated))  # fmt: skip
    if not tasks:
        table.caption = "none"
    return table


def task_detail(task: Task) -> Group:
    head = Table(title=f"task {task.id} of fleet {task.fleet}", title_justify="left", show_header=False)
    head.add_column("field")
    head.add_column("value")
    for field, value in (("state", task.state), ("label", task.label or "-"), ("repository", f"{task.repo}@{task.ref}"),
                         ("attempts", str(task.attempts)), ("retries", f"{task.failures} used of {task.retries}"),
                         ("failure", f"{task.failure_class}: {task.evidence or ''}" if task.failure_class else "-"),
                         ("added", f"{_when(task.created)} by {task.who}"), ("task", task.text)):  # fmt: skip
        head.add_row(field, Text(value))
    runs = Table(title="attempts", title_justify="left")
    for column in ("#", "attempt", "host", "agent", "state", "claimed", "finished", "failure", "ref"):
        runs.add_column(column)
    for r in task.runs:
        failure = f"{r.failure_class}: {r.evidence or ''}" if r.failure_class else ""
        runs.add_row(str(r.id), str(r.n), r.host, r.instance, Text(r.state, style=STYLE.get(r.state, "")),
                     _when(r.claimed), _when(r.finished), Text(failure), r.ref or "")  # fmt: skip
    if not task.runs:
        runs.caption = "none yet"
    return Group(head, runs)


def _tests(detail: dict | None) -> str:
    tests = (detail or {}).get("tests") or []
    if not tests:
        return "-"
    passed = sum(1 for _, code in tests if code == 0)
    return f"{passed}/{len(tests)} passed"


def _tokens(detail: dict | None) -> str:
    usage = (detail or {}).get("usage") or {}
    total = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    return f"{total:,}" if total else "-"


def chain_table(tasks: list[Task], reviews: dict[int, list[Task]], fleet: str) -> Table:
    """``fleet.review``'s task chains: per task each attempt side by side (agent, state, diff stat, tests, tokens),
    each review with its verdict, and the accepted attempt's ref."""
    table = Table(title=f"tasks of fleet {fleet}: attempts, reviews, verdicts", title_justify="left")
    for column in ("task", "state", "round", "attempt", "agent", "result", "diff", "tests", "tokens", "verdict"):
        table.add_column(column)
    for t in tasks:
        state = Text(t.state, style=STYLE.get(t.state, ""))
        if t.failure_class and t.state == "failed":
            state += Text(f" ({t.failure_class}: {_first_line(t.evidence or '', 50)})", style="dim")
        first = True
        for r in t.runs:
            picked = " (accepted)" if r.id == t.accepted else ""
            result = Text(r.state + picked, style="green" if picked else STYLE.get(r.state, ""))
            if r.failure_class:
                result += Text(f" {r.failure_class}", style="dim")
            table.add_row(f"{t.id}" if first else "", state if first else "", str(r.round), str(r.n),
                          f"{r.instance}@{r.host}", result, (r.detail or {}).get("diff") or "-", _tests(r.detail),
                          _tokens(r.detail), "")  # fmt: skip
            first = False
        for review in reviews.get(t.id, []):
            for r in review.runs:
                verdict = r.verdict or (f"({r.state})" if r.state != "done" else "-")
                if r.notes:
                    verdict += f": {_first_line(r.notes, 40)}"
                table.add_row(f"{t.id}" if first else "", state if first else "", str(t.round), f"review {review.id}",
                              f"{r.instance}@{r.host}", Text(r.state, style=STYLE.get(r.state, "")), "-", "-",
                              _tokens(r.detail), Text(verdict))  # fmt: skip
                first = False
        if first:
            table.add_row(str(t.id), state, str(t.round), "-", "-", "-", "-", "-", "-", "")
    if not tasks:
        table.caption = "no tasks"
    else:
        table.caption = (
            f"accepted work: refs/jackin/{fleet}/accepted/<task>; each attempt: refs/jackin/{fleet}/attempts/<attempt>"
        )
    return table
