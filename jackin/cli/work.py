"""``fleet.collect`` and ``fleet.review`` (jackin/work/collect.py): each agent's branch and handoff brought back, and shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.render import work as view
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, SpecError

if TYPE_CHECKING:
    from jackin.lifecycle import fleet as fleet_api
    from jackin.store import ledger as ledger_api
    from jackin.work import collect, loop
else:  # loaded by the first command that uses them (jackin.lazy): collect brings Fabric and paramiko
    collect = lazy.module("jackin.work.collect")
    fleet_api = lazy.module("jackin.lifecycle.fleet")
    loop = lazy.module("jackin.work.loop")
    ledger_api = lazy.module("jackin.store.ledger")


def fleet_collect(inventory: str | None, *, agents: Sequence[str] | None, into: str | None, json: bool) -> int:
    """``inv fleet.collect``. Exit 1: an agent's collection failed; 3: a host is unreachable."""
    report = collect.collect(fleet_api.load(inventory), agents=agents or None, into=into)
    if json:
        ui.print_json(report.model_dump(mode="json"))
    else:
        ui.out.print(view.collect_table(report))
    return EXIT_FAILED if report.failed else EXIT_CONNECT if report.unreachable else EXIT_OK


def fleet_review(inventory: str | None, *, json: bool) -> int:
    """``inv fleet.review``. Exit 3: a host is unreachable (its agents show their state at collection). With a task
    queue, each task's chain too: its attempts side by side, its reviews and their verdicts."""
    spec = fleet_api.load(inventory)
    found = collect.review(spec)
    with ledger_api.Ledger() as ledger:
        tasks = ledger.tasks(spec.fleet.name, kind="work")
        reviews = {t.id: ledger.reviews_of(spec.fleet.name, t.id) for t in tasks}
    if json:
        data = found.model_dump(mode="json")
        data["tasks"] = [{**t.model_dump(mode="json"), "reviews": [r.model_dump(mode="json") for r in reviews[t.id]]}
                         for t in tasks]  # fmt: skip
        ui.print_json(data)
    else:
        ui.out.print(view.review_table(found))
        if tasks:
            from jackin.cli.render import task as task_view

            ui.out.print(task_view.chain_table(tasks, reviews, spec.fleet.name))
    return EXIT_CONNECT if found.unreachable else EXIT_OK


def until_deadline(until: str | None, now: float) -> float | None:
    """``--until``: ``empty`` (None: until the queue is empty), a duration from now (``90m``, ``2h``), or a time of
    day (``18:30``, today or else tomorrow); a usage error (exit 2) otherwise."""
    if until in (None, "", "empty"):
        return None
    assert until is not None
    import re
    import time

    from jackin.spec.values import parse_duration

    clock = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", until.strip())
    if clock:
        local = time.localtime(now)
        at = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, int(clock[1]), int(clock[2]), 0, 0, 0, -1))
        return at if at > now else at + 86400
    try:
        return now + parse_duration(until)
    except ValueError:
        raise SpecError(
            f"--until expects empty, a duration (90m, 2h) or a time of day (18:30), got {until!r}"
        ) from None


def fleet_work(inventory: str | None, *, until: str | None, json: bool) -> int:
    """``inv fleet.work``: serve the task queue. Exit 0: the queue is empty (every task final, or waiting for the
    operator's pick); 3: every host stayed unreachable; 4: --until passed with tasks left (nothing lost);
    130: stopped by Ctrl-C (nothing lost: run it again)."""
    import time

    spec = fleet_api.load(inventory)
    deadline = until_deadline(until, time.time())
    stream = ui.err if json else ui.out
    last: list[str] = []

    def on_event(event: loop.Event) -> None:
        stream.print(view.work_event(event))

    def on_progress(progress: loop.Progress) -> None:
        line = view.work_progress(progress)
        if [line.plain] != last:
            last[:] = [line.plain]
            stream.print(line)

    result = loop.work(spec, deadline=deadline, on_event=on_event, on_progress=on_progress)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.work_summary(result))
    return result.exit_code
