"""A live per-host line while the engine runs (``fleet.up``, ``fleet.down``, ``fleet.rollback``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # annotations only: the engine's protocol is not loaded by commands that run no engine
    from jackin.engine import Event


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
            "host_done": Text("done", style="green")
            if event.result and event.result.ok
            else Text("failed", style="red"),
        }.get(event.event)
        if text:
            self.lines[event.host] = text
