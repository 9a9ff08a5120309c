"""The operator's ledger: an embedded SQLite database of fleets, hosts, agents,
runs and an audit trail of every action (who, what, when, host, result).

It lives at ``<state>/ledger.sqlite3``. uids are allocated here, once per agent
instance, so they are stable across runs and unique across the fleets it knows.
A fleet's status is ``up``, ``down``, or ``kept`` (``fleet.down --keep-data``:
its homes and workspaces stay on the hosts listed in ``kept``, and nothing but an
explicit ``fleet.gc --purge-kept`` or the fleet's own ``fleet.down`` removes them).
Labs record which fleet created them and which fleets use them, so one fleet never
resizes or destroys a lab another fleet still uses.
A fleet is changed by one run at a time: ``Ledger.lock`` holds a per-fleet lock
file and refuses a second run with a clear message.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jackin.errors import BusyError
from jackin.paths import private_dir, state_dir
from jackin.store import locks
from jackin.store.fleets import FleetTables
from jackin.store.placements import PlacementTables
from jackin.store.runs import RunTables
from jackin.store.schema import create, who
from jackin.store.snapshots import SnapshotTables
from jackin.store.tasks import TaskTables, migrate


def _busy(fleet: str, holder: str) -> BusyError:
    return BusyError(
        f"fleet {fleet!r} is busy: {holder or 'another run'}",
        hint="wait for that run to finish (or stop it), then try again",
    )


class Ledger(FleetTables, PlacementTables, RunTables, SnapshotTables, TaskTables):
    """The ledger at ``path`` (default: ``<state>/ledger.sqlite3``), its tables made or migrated on
    opening; its queries are the mixins', one module per concern (fleets, runs, snapshots)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or private_dir(state_dir()) / "ledger.sqlite3"
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        create(self.db)
        migrate(self.db)  # the task queue (jackin/store/tasks.py)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- locking -------------------------------------------------------------

    @contextmanager
    def lock(self, fleet: str, action: str) -> Iterator[None]:
        """Hold the fleet's lock for one run; a second run at once is refused."""
        path = private_dir(self.path.parent / "locks") / f"{fleet}.lock"
        note = f"{action} by {who()} (pid {os.getpid()}) since {time.strftime('%H:%M:%S')}"
        with locks.held(path, busy=lambda holder: _busy(fleet, holder), note=note):
            yield

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The writes inside as one commit (one sync of the journal instead of one per statement): a
        no-change fleet.up records a run, its spec and contract and each host in one. All or none is
        kept; inside another transaction, it is part of that one."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
