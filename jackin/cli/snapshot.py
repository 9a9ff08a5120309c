"""The ``snapshot`` collection: ``snapshot.create``, ``list``, ``show``, ``diff``, ``restore``, ``prune``,
``pull`` and ``push`` (jackin/snapshots/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.ask import confirm, require_terminal_or
from jackin.cli.edge import host_errors
from jackin.cli.render import snapshot as view
from jackin.errors import EXIT_FAILED, EXIT_OK, SpecError, worst

if TYPE_CHECKING:
    from jackin.lifecycle import fleet as fleet_api
    from jackin.snapshots import api as snapshots
    from jackin.snapshots import moves
    from jackin.snapshots import restore as restoring
    from jackin.snapshots.models import DiffResult, SnapshotRecord
else:  # loaded by the first command that uses them (jackin.lazy)
    fleet_api = lazy.module("jackin.lifecycle.fleet")
    moves = lazy.module("jackin.snapshots.moves")
    restoring = lazy.module("jackin.snapshots.restore")
    snapshots = lazy.module("jackin.snapshots.api")


def snapshot_create(inventory: str | None, *, agent: str | None, label: str | None, json: bool) -> int:
    spec = fleet_api.load(inventory)
    result = snapshots.create(spec, agent, label)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.snapshot_view(result.snapshot))
    return host_errors(result.errors)


def snapshot_list(inventory: str | None, *, json: bool) -> int:
    spec = fleet_api.load(inventory)
    records = snapshots.records(spec)
    copied = moves.copy_places(spec)  # per snapshot id, where copies of it are (operator, pushed-onto hosts)
    if json:
        ui.print_json([{**r.row(), "copies": copied.get(r.id, [])} for r in records])
    else:
        ui.out.print(view.snapshots_table(records, fleet=spec.fleet.name))
        for r in (r for r in records if r.id in copied):
            ui.out.print(f"{r.id}: copies off its hosts on {', '.join(copied[r.id])}")
    return EXIT_OK


def snapshot_show(inventory: str | None, snapshot: str, *, json: bool) -> int:
    record = snapshots.show(fleet_api.load(inventory), snapshot)
    if json:
        ui.print_json({**record.model_dump(mode="json"), **{k: v for k, v in record.row().items() if k != "agents"}})
    else:
        ui.out.print(view.snapshot_view(record))
    return EXIT_OK


def snapshot_diff(inventory: str | None, snapshot: str, other: str | None, *, agent: str | None, json: bool) -> int:
    result = snapshots.diff(fleet_api.load(inventory), snapshot, other or None, agent)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.diff_table(result))
    return host_errors(result.errors)


def snapshot_restore(inventory: str | None, snapshot: str, *, agent: str | None, stop: bool, yes: bool,
                     from_host: str | None = None, json: bool = False) -> int:  # fmt: skip
    """Refuse without a terminal unless --yes; show what will be overwritten and ask (``json``: with
    --yes, print only the result as one JSON document; without it the preview still goes to the terminal)."""
    spec = fleet_api.load(inventory)
    require_terminal_or("--yes", when=not yes)

    def ask(preview: DiffResult) -> bool:
        if not (json and yes):
            (ui.err if json else ui.out).print(view.diff_table(preview))
        if not yes:
            confirm(f"Restore snapshot {snapshot} over the live workspace(s) above?")
        return True

    result = restoring.restore(spec, snapshot, agent, stop=stop, confirm=ask, from_host=from_host or None)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.restore_table(result))
    for failed in (a for a in result.agents if not a.restored):
        ui.err.print(f"error: {failed.host}: {failed.error}", soft_wrap=True, style="bold red")
    return worst([host_errors(result.errors), EXIT_OK if result.ok else EXIT_FAILED])


def snapshot_prune(inventory: str | None, *, yes: bool, json: bool) -> int:
    spec = fleet_api.load(inventory)

    def ask(removed: list[SnapshotRecord]) -> bool:
        if not yes:
            require_terminal_or("--yes")
            ui.out.print(view.snapshots_table(removed, fleet=spec.fleet.name))
            confirm(f"Forget these {len(removed)} snapshot(s) (keep {spec.fleet.snapshots.keep})?")
        return True

    result = restoring.prune(spec, confirm=ask)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(
            f"kept {len(result.kept)} snapshot(s); removed {len(result.removed)}: {', '.join(result.removed) or '-'}"
        )
        for note in result.notes:  # snapshots of hosts that left the fleet: kept for a copy, or forgotten
            ui.out.print(f"note: {note}", highlight=False, soft_wrap=True)
    return host_errors(result.errors)


# --- snapshot.pull, snapshot.push: copies off the hosts (jackin/snapshots/moves.py) -----------------


def snapshot_pull(inventory: str | None, snapshot: str, *, json: bool) -> int:
    """Mirror the repositories holding SNAPSHOT to this machine (jackin/snapshots/moves.py)."""
    result = moves.pull(fleet_api.load(inventory), snapshot)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.pull_table(result))
    return host_errors(result.errors)


def snapshot_push(inventory: str | None, snapshot: str, *, host: str | None, json: bool) -> int:
    """Copy this machine's copies of SNAPSHOT's origin repositories onto --host."""
    if not host:
        raise SpecError("snapshot.push needs --host HOST: the host of the fleet to push the snapshot onto")
    result = moves.push(fleet_api.load(inventory), snapshot, host)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(view.push_table(result))
    return host_errors(result.errors)
