"""Rendering for the CLI: the library returns data, only this package prints (rich).

Here: the two streams every command prints on (``out``, ``err``), the log and error lines, JSON for
scripts, and the live views (the engine's per-host progress, ``fleet.status --watch``). The tables
and lines of each area are in its own module (``render.fleet``, ``render.snapshot``...), pure:
data in, a rich renderable out.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from jackin.cli.render.progress import Progress
from jackin.errors import JackinError, SpecError


def _console(*, stderr: bool = False) -> Console:
    """A terminal gets its own width; a pipe or file gets wide lines, never truncated cells."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=200)
    return console


out = _console()
err = _console(stderr=True)


def log(message: str) -> None:
    err.print(Text("· ", style="dim") + Text(message), soft_wrap=True)


def error(exc: JackinError) -> None:
    """One clear message: what failed, where, and what to do next."""
    err.print(Text(f"error: {exc}", style="bold red"), soft_wrap=True)
    if isinstance(exc, SpecError):
        for line in exc.problems:  # one line per problem, never wrapped: scripts grep these
            err.print(Text(f"  {line}"), soft_wrap=True)
    if exc.hint:
        err.print(Text(f"hint: {exc.hint}", style="yellow"), soft_wrap=True)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


@contextmanager
def progress(hosts: list[str] | None = None) -> Iterator[Progress]:
    view = Progress(hosts or [])
    with Live(view, console=err, refresh_per_second=8, transient=True, redirect_stdout=False) as live:
        yield view
        live.refresh()


def watch(render: Callable[[], RenderableType], *, every: float = 2.0) -> None:
    """Refresh ``render()`` in place until Ctrl-C, which ends it cleanly at any moment, the first
    render included (its SSH reads are interrupted at once: ``jackin.transport.remote.gather``)."""
    try:
        with Live(render(), console=out, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(every)
                live.update(render())
    except KeyboardInterrupt:
        pass
