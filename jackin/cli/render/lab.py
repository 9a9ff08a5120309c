"""``lab.up`` and ``lab.status``: the lab's hosts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from jackin.lab import LabStatus


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
        if service.public_address:
            where += f" and {service.public_address}:{ports}"
        table.add_row("(test service)", service.container, service.state, "-", where)
    table.caption = f"key {status.directory}/id_ed25519 · known_hosts {status.directory}/known_hosts"
    return table
