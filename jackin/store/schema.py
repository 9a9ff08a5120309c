"""The ledger's tables: their schema, the migrations of ledgers made by earlier releases, and what
the query modules (fleets, runs, snapshots) share: the connection (``Tables``) and who acts (``who``).
"""

from __future__ import annotations

import getpass
import os
import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS fleets (
    name TEXT PRIMARY KEY, provider TEXT NOT NULL, inventory TEXT,
    created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS hosts (
    fleet TEXT NOT NULL, name TEXT NOT NULL, address TEXT NOT NULL, port INTEGER NOT NULL,
    last_result TEXT, updated REAL NOT NULL, PRIMARY KEY (fleet, name)
);
CREATE TABLE IF NOT EXISTS uids (
    uid INTEGER PRIMARY KEY, fleet TEXT NOT NULL, instance TEXT NOT NULL, UNIQUE (fleet, instance)
);
CREATE TABLE IF NOT EXISTS agents (
    fleet TEXT NOT NULL, host TEXT NOT NULL, instance TEXT NOT NULL, agent TEXT NOT NULL,
    uid INTEGER NOT NULL, user TEXT NOT NULL, container TEXT NOT NULL, network TEXT NOT NULL,
    updated REAL NOT NULL, PRIMARY KEY (fleet, host, instance)
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, fleet TEXT NOT NULL, action TEXT NOT NULL,
    who TEXT NOT NULL, started REAL NOT NULL, finished REAL, status TEXT NOT NULL, detail TEXT
);
CREATE TABLE IF NOT EXISTS kept (
    fleet TEXT NOT NULL, host TEXT NOT NULL, address TEXT NOT NULL, port INTEGER NOT NULL,
    what TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (fleet, host)
);
CREATE TABLE IF NOT EXISTS labs (
    name TEXT PRIMARY KEY, created_by TEXT, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lab_fleets (
    lab TEXT NOT NULL, fleet TEXT NOT NULL, since REAL NOT NULL, PRIMARY KEY (lab, fleet)
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run INTEGER, at REAL NOT NULL, who TEXT NOT NULL,
    fleet TEXT NOT NULL, action TEXT NOT NULL, host TEXT, result TEXT NOT NULL, detail TEXT
);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY, fleet TEXT NOT NULL, created TEXT NOT NULL, label TEXT, kind TEXT NOT NULL, run INTEGER
);
CREATE TABLE IF NOT EXISTS snapshot_agents (
    snapshot TEXT NOT NULL, fleet TEXT NOT NULL, host TEXT NOT NULL, instance TEXT NOT NULL, agent TEXT NOT NULL,
    restic_id TEXT, size INTEGER NOT NULL DEFAULT 0, added INTEGER NOT NULL DEFAULT 0,
    files_new INTEGER NOT NULL DEFAULT 0, files_changed INTEGER NOT NULL DEFAULT 0, tiers TEXT NOT NULL,
    manifest TEXT, instant TEXT, frozen_ms REAL, PRIMARY KEY (snapshot, host, instance)
);
CREATE TABLE IF NOT EXISTS repo_copies (
    fleet TEXT NOT NULL, origin TEXT NOT NULL, place TEXT NOT NULL, path TEXT NOT NULL, at REAL NOT NULL,
    snapshots TEXT NOT NULL, PRIMARY KEY (fleet, origin, place, path)
);
CREATE TABLE IF NOT EXISTS run_specs (
    run INTEGER PRIMARY KEY, fleet TEXT NOT NULL, hosts TEXT NOT NULL, spec TEXT NOT NULL,
    hash TEXT NOT NULL, fleet_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_contracts (
    run INTEGER PRIMARY KEY, fleet TEXT NOT NULL, schema_version INTEGER NOT NULL, contract TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fleet_ttl (
    fleet TEXT PRIMARY KEY, started REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS placements (
    fleet TEXT NOT NULL, instance TEXT NOT NULL, host TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (fleet, instance)
);
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, fleet TEXT NOT NULL, host TEXT NOT NULL, instance TEXT NOT NULL,
    at REAL NOT NULL, who TEXT NOT NULL, result TEXT NOT NULL, state TEXT, repo TEXT, ref TEXT,
    commit_id TEXT, source_commit TEXT, handoff TEXT, evidence TEXT, detail TEXT
);
"""


def who() -> str:
    """The operator's user name, as runs, the audit trail and collections record it."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not a reason to fail
        return str(os.getuid())


class Tables:
    """Base of the query mixins the ``Ledger`` composes: each reads and writes through ``db``."""

    db: sqlite3.Connection


def create(db: sqlite3.Connection) -> None:
    """Make the tables a ledger lacks and bring one made by an earlier release up to date."""
    db.executescript(SCHEMA)
    _copies_keyed_by_path(db)
    _snapshot_instants(db)
    # Earlier releases marked a fleet downed with --keep-data as 'down' and kept its uids: it is kept.
    db.execute("UPDATE fleets SET status = 'kept' WHERE status = 'down' AND name IN (SELECT fleet FROM uids)")


def _snapshot_instants(db: sqlite3.Connection) -> None:
    """A ledger made before snapshots recorded how each home was held still gets those columns."""
    have = {r["name"] for r in db.execute("PRAGMA table_info(snapshot_agents)")}
    for column, kind in (("instant", "TEXT"), ("frozen_ms", "REAL")):
        if column not in have:
            db.execute(f"ALTER TABLE snapshot_agents ADD COLUMN {column} {kind}")


def _copies_keyed_by_path(db: sqlite3.Connection) -> None:
    """A ledger made before several copies of one origin could sit at one place (a host's repository
    made anew keeps the old copy beside the new one) gets ``path`` in ``repo_copies``' key."""
    if any(r["name"] == "path" and r["pk"] for r in db.execute("PRAGMA table_info(repo_copies)")):
        return
    create = next(s for s in SCHEMA.split(";") if "TABLE IF NOT EXISTS repo_copies" in s)
    db.executescript("BEGIN; ALTER TABLE repo_copies RENAME TO repo_copies_old;" + create
                     + "; INSERT INTO repo_copies SELECT * FROM repo_copies_old; DROP TABLE repo_copies_old; COMMIT;")  # fmt: skip
