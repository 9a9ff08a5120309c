"""``snapshot.*``: the list, one snapshot, a diff, a restore, a pull and a push."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from jackin.cli.render.units import size

if TYPE_CHECKING:  # annotations only
    from jackin.snapshots.models import AgentSnapshot, DiffResult, RestoreResult, SnapshotRecord
    from jackin.snapshots.moves import PullResult, PushResult


def snapshots_table(records: list[SnapshotRecord], *, fleet: str) -> Table:
    """``snapshot.list``: one row per fleet snapshot, oldest first."""
    table = Table(title=f"snapshots of fleet {fleet}", title_justify="left")
    for column, justify in (("id", "left"), ("created", "left"), ("kind", "left"), ("label", "left"),
                            ("agents", "left"), ("hosts", "left"), ("size", "right"), ("added", "right"),
                            ("tiers", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for r in records:
        table.add_row(r.id, r.created, r.kind, r.label or "", ", ".join(r.instances), ", ".join(r.hosts),
                      size(r.size), size(r.added), "+".join(r.tiers))  # fmt: skip
    if not records:
        table.caption = "none yet (inv snapshot.create takes one)"
    return table


def snapshot_view(record: SnapshotRecord) -> Table:
    """``snapshot.show``: the snapshot's agents, each with its restic id and manifest summary, and how
    its home was held still for restic (``held``: a checkpoint, or frozen and for how long)."""
    label = f"  {record.label}" if record.label else ""
    table = Table(title=f"snapshot {record.id} ({record.kind}, {record.created}){label}", title_justify="left")
    held = any(a.instant for a in record.agents)
    for column, justify in (("host", "left"), ("agent", "left"), ("restic id", "left"), ("uid", "right"),
                            ("image", "left"), ("size", "right"), ("added", "right"), ("new files", "right"),
                            ("changed", "right"), ("tiers", "left"), *([("held", "left")] if held else [])):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for a in record.agents:
        m = a.manifest
        table.add_row(a.host, a.instance, (a.restic_id or "-")[:8], str(m.uid) if m else "-", m.image if m else "-",
                      size(a.size), size(a.added), str(a.files_new), str(a.files_changed), "+".join(a.tiers),
                      *([held_text(a)] if held else []))  # fmt: skip
    return table


def held_text(agent: AgentSnapshot) -> str:
    """``frozen 0.42s``, ``checkpoint, frozen 0.05s``, ``stopped``...: how one agent's home was held
    still for its snapshot, and for how long the agent was frozen for it."""
    frozen = f"frozen {agent.frozen_ms / 1000:.2f}s" if agent.frozen_ms is not None else None
    if agent.instant == "frozen" and frozen:
        return frozen
    return ", ".join(t for t in (agent.instant or "-", frozen) if t)


def diff_table(result: DiffResult, *, limit: int = 50) -> Table:
    """``snapshot.diff`` and the restore preview: per agent, the paths added, removed and changed."""
    table = Table(title=f"diff {result.snapshot} -> {result.against}", title_justify="left")
    for column in ("host", "agent", "change", "path"):
        table.add_column(column)
    styles = {"+": "green", "-": "red", "M": "yellow"}
    shown = 0
    for a in result.agents:
        for mark, paths in (("+", a.added), ("-", a.removed), ("M", a.changed)):
            for path in paths:
                if shown < limit:
                    table.add_row(a.host, a.instance, Text(mark, style=styles[mark]), Text(path))
                shown += 1
    total = ", ".join(
        f"{a.instance}@{a.host}: +{len(a.added)} -{len(a.removed)} M{len(a.changed)}" for a in result.agents
    )
    table.caption = (total or "no agents compared") + (f" ({shown - limit} more not shown)" if shown > limit else "")
    return table


def restore_table(result: RestoreResult) -> Table:
    table = Table(title=f"restore of {result.snapshot} (undo: restore {result.pre_restore})", title_justify="left")
    for column in ("host", "agent", "result", "tier", "detail"):
        table.add_column(column)
    for a in result.agents:
        state = Text("restored", style="green") if a.restored else Text("NOT restored", style="bold red")
        detail = a.error or "; ".join(d for d in (a.note, "container started again" if a.restarted else "") if d)
        table.add_row(a.host, a.instance, state, a.tier or "-", Text(detail))
    return table


def pull_table(result: PullResult) -> Table:
    """``snapshot.pull``: per origin host, pulled (files and bytes copied, skipped), already pulled, or failed."""
    table = Table(title=f"pull of snapshot {result.snapshot}", title_justify="left")
    for column, justify in (("host", "left"), ("result", "left"), ("copied", "right"), ("skipped", "right"),
                            ("copy on this machine / error", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    styles = {"pulled": "green", "already pulled": "green", "failed": "bold red"}
    for h in result.hosts:
        moved = h.status == "pulled"
        table.add_row(h.host, Text(h.status, style=styles[h.status]),
                      f"{h.copied} ({size(h.copied_bytes)})" if moved else "-",
                      f"{h.skipped} ({size(h.skipped_bytes)})" if moved else "-", Text(h.error or h.path or ""))  # fmt: skip
    return table


def push_table(result: PushResult) -> Table:
    """``snapshot.push``: per origin, where its repository now is on the host and what was copied."""
    table = Table(title=f"push of snapshot {result.snapshot} onto {result.host}", title_justify="left")
    for column, justify in (("origin", "left"), ("repository on the host", "left"), ("copied", "right"),
                            ("skipped", "right"), ("note", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for o in result.origins:
        table.add_row(o.origin, o.path, f"{o.copied} ({size(o.copied_bytes)})",
                      f"{o.skipped} ({size(o.skipped_bytes)})", "pulled first" if o.pulled_first else "")  # fmt: skip
    if result.origins:
        table.caption = f"restore with: inv snapshot.restore {result.snapshot} --from-host ORIGIN"
    return table
