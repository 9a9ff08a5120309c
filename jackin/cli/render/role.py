"""``role.list``: the roles, one row each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from jackin.spec.roles import RoleRow


def roles_table(found: list[RoleRow], *, directory: Path) -> Table:
    """name (and image tag), how the image is built, credentials, default egress, command, and whether a test
    of jackin has run it (``verified``)."""
    table = Table(title=f"roles ({directory})", title_justify="left")
    for column in ("name", "image build", "credentials", "egress", "command", "verified"):
        table.add_column(column, overflow="fold")
    for row in found:
        table.add_row(f"{row.name}\n[dim]{row.tag}[/dim]", row.image, ", ".join(row.credentials) or "-",
                      ", ".join(row.egress) or "-", " ".join(row.command), row.verified)  # fmt: skip
    return table
