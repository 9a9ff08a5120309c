"""Rendering for the CLI: the library returns data, only this module prints (rich)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jackin.engine import Event, RunResult
from jackin.errors import JackinError, SpecError
from jackin.lab import LabStatus

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


def lab_table(status: LabStatus) -> Table:
    table = Table(title=f"lab {status.name}  ({status.image})", title_justify="left")
    for column in ("host", "container", "state", "ssh", "lab address"):
        table.add_column(column)
    for host in status.hosts:
        state = Text(host.state, style="green" if host.state == "running" else "red")
        table.add_row(host.name, host.container, state, f"{host.user}@{host.address}:{host.port}", host.lab_ip or "-")
    if status.service:
        service = status.service
        ports = ",".join(map(str, service.ports))
        where = f"{service.address}:{ports}" if service.address else "-"
        table.add_row("(test service)", service.container, service.state, "-", where)
    table.caption = f"key {status.directory}/id_ed25519 · known_hosts {status.directory}/known_hosts"
    return table


def run_table(result: RunResult, *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column, justify in (("host", "left"), ("status", "left"), ("ops", "right"),
                            ("changed", "right"), ("failed", "right"), ("time", "right"),
                            ("facts / error", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for host in result.hosts:
        status = Text("ok", style="green") if host.ok else Text("FAILED", style="bold red")
        detail = host.error or " ".join(str(v) for k, v in host.facts.items() if k != "hostname")
        table.add_row(host.host, status, str(host.ops), str(host.changed), str(host.failed),
                      f"{host.elapsed:.1f}s", Text(detail, style="red" if host.error else ""))  # fmt: skip
    verb = "would change" if result.dry_run else "changed"
    changed = sum(h.changed for h in result.hosts)
    table.caption = (
        f"{len(result.succeeded)} ok, {len(result.failed)} failed, {changed} {verb}, {result.elapsed:.1f}s"
    )
    return table


class Progress:
    """A live per-host line while the engine runs."""

    def __init__(self, hosts: list[str]) -> None:
        self.lines: dict[str, Text | str] = {h: "waiting" for h in hosts}

    def __rich__(self) -> Table:
        table = Table.grid(padding=(0, 2))
        for host, line in self.lines.items():
            table.add_row(Text(host, style="bold"), line)
        return table

    def update(self, event: Event) -> None:
        if event.event == "start":
            for host in event.data.get("hosts", []):
                self.lines.setdefault(host, "connecting")
        if event.host is None:
            return
        op, error = event.op or "", event.error or ""  # plain text: errors often hold [brackets]
        text = {
            "connected": Text("connected"),
            "connect_error": Text(f"cannot connect: {error}", style="red"),
            "facts": Text("facts gathered"),
            "op_start": Text(f"{op} …"),
            "op_ok": Text(f"{op} ok"),
            "op_error": Text(f"{op} failed{': ' + error if error else ''}", style="red"),
            "host_done": Text("done", style="green") if event.result and event.result.ok else Text("failed", style="red"),
        }.get(event.event)
        if text:
            self.lines[event.host] = text


@contextmanager
def progress(hosts: list[str] | None = None) -> Iterator[Progress]:
    view = Progress(hosts or [])
    with Live(view, console=err, refresh_per_second=8, transient=True, redirect_stdout=False) as live:
        yield view
        live.refresh()
