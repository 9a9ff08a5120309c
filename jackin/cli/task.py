"""The ``task`` collection: ``task.add``, ``list``, ``show``, ``cancel`` and ``retry``: the fleet's task queue in
the operator's ledger (jackin/work/queue.py, jackin/store/tasks.py). Touches no host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.edge import count
from jackin.cli.render import task as view
from jackin.errors import EXIT_OK, SpecError
from jackin.spec.loader import load

if TYPE_CHECKING:
    from jackin.store.tasks import Task
    from jackin.work import queue
else:  # loaded by the first command that uses it (jackin.lazy)
    queue = lazy.module("jackin.work.queue")

STATES = ("queued", "running", "review", "accepted", "changes", "failed", "cancelled")


def task_id(value: str) -> int:
    number = count("ID", value, low=1, high=2**62)
    assert number is not None
    return number


def task_add(inventory: str | None, *, task: str | None, task_file: str | None, repo: str | None, ref: str | None,
             attempts: str | None, retries: str | None, label: str | None, json: bool, reviewer: str | None = None,
             rounds: str | None = None) -> int:  # fmt: skip
    """One task (--task or --task-file), or with neither the spec's ``tasks:`` (each queued once)."""
    spec = load(inventory)
    if task is None and task_file is None:
        if repo or ref or attempts or retries or label or reviewer or rounds:
            raise SpecError("--repo, --ref, --attempts, --retries, --label, --reviewer and --rounds go with --task "
                            "or --task-file")  # fmt: skip
        added = queue.from_spec(spec)
    else:
        added = [queue.add(spec, text=task, task_file=task_file, repo=repo, ref=ref,
                           attempts=count("--attempts", attempts, low=1, high=10) or 1,
                           retries=2 if retries in (None, "") else count("--retries", retries, low=0, high=10) or 0,
                           label=label, reviewer=reviewer,
                           rounds=count("--rounds", rounds, low=1, high=10) if rounds not in (None, "") else None)]  # fmt: skip
    _show(added, json=json)
    return EXIT_OK


def task_list(inventory: str | None, *, state: str | None, json: bool) -> int:
    if state is not None and state not in STATES:
        raise SpecError(f"--state expects one of {', '.join(STATES)}, got {state!r}")
    spec = load(inventory)
    _show(queue.listed(spec, state=state), json=json, title=f"tasks of fleet {spec.fleet.name}")
    return EXIT_OK


def task_show(inventory: str | None, ident: str, *, json: bool) -> int:
    found = queue.shown(load(inventory), task_id(ident))
    if json:
        ui.print_json(found.model_dump(mode="json"))
    else:
        ui.out.print(view.task_detail(found))
    return EXIT_OK


def task_cancel(inventory: str | None, ident: str, *, json: bool) -> int:
    _show([queue.cancel(load(inventory), task_id(ident))], json=json)
    return EXIT_OK


def task_accept(inventory: str | None, ident: str, *, attempt: str | None, json: bool) -> int:
    """The operator's pick of a task's attempt (best-of-N, or a task waiting for its review)."""
    chosen = count("--attempt", attempt, low=1, high=10) if attempt not in (None, "") else None
    _show([queue.accept(load(inventory), task_id(ident), chosen)], json=json)
    return EXIT_OK


def task_retry(inventory: str | None, ident: str, *, json: bool) -> int:
    _show([queue.retry(load(inventory), task_id(ident))], json=json)
    return EXIT_OK


def _show(tasks: list[Task], *, json: bool, title: str = "tasks") -> None:
    if json:
        ui.print_json([t.model_dump(mode="json") for t in tasks])
    else:
        ui.out.print(view.task_table(tasks, title=title))
