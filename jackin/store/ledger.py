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

import getpass
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jackin.errors import BusyError
from jackin.paths import private_dir, state_dir
from jackin.store import locks

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
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, fleet TEXT NOT NULL, host TEXT NOT NULL, instance TEXT NOT NULL,
    at REAL NOT NULL, who TEXT NOT NULL, result TEXT NOT NULL, state TEXT, repo TEXT, ref TEXT,
    commit_id TEXT, source_commit TEXT, handoff TEXT, evidence TEXT, detail TEXT
);
"""


def _busy(fleet: str, holder: str) -> BusyError:
    return BusyError(
        f"fleet {fleet!r} is busy: {holder or 'another run'}",
        hint="wait for that run to finish (or stop it), then try again",
    )


def _who() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not a reason to fail
        return str(os.getuid())


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or private_dir(state_dir()) / "ledger.sqlite3"
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self._copies_keyed_by_path()
        self._snapshot_instants()
        # Earlier releases marked a fleet downed with --keep-data as 'down' and kept its uids: it is kept.
        self.db.execute("UPDATE fleets SET status = 'kept' WHERE status = 'down' AND name IN (SELECT fleet FROM uids)")

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
        note = f"{action} by {_who()} (pid {os.getpid()}) since {time.strftime('%H:%M:%S')}"
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

    # --- runs and audit ------------------------------------------------------

    def start_run(self, fleet: str, action: str, detail: dict[str, Any] | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO runs (fleet, action, who, started, status, detail) VALUES (?, ?, ?, ?, 'running', ?)",
            (fleet, action, _who(), time.time(), json.dumps(detail or {})),
        )
        return int(cur.lastrowid or 0)

    def finish_run(self, run: int, status: str, detail: dict[str, Any] | None = None) -> None:
        self.db.execute(
            "UPDATE runs SET finished = ?, status = ?, detail = coalesce(?, detail) WHERE id = ?",
            (time.time(), status, json.dumps(detail) if detail is not None else None, run),
        )

    def audit(self, run: int | None, fleet: str, action: str, result: str, *, host: str | None = None,
              detail: Any = None) -> None:  # fmt: skip
        self.db.execute(
            "INSERT INTO audit (run, at, who, fleet, action, host, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run, time.time(), _who(), fleet, action, host, result, json.dumps(detail) if detail is not None else None),
        )

    def audit_trail(self, fleet: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT * FROM audit" + (" WHERE fleet = ?" if fleet else "") + " ORDER BY id"
        return [dict(r) for r in self.db.execute(query, (fleet,) if fleet else ())]

    def runs(self, fleet: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM runs WHERE fleet = ? ORDER BY id", (fleet,))]

    # --- fleets, hosts, agents ---------------------------------------------------

    def record_fleet(self, name: str, provider: str, inventory: str | None, status: str) -> None:
        now = time.time()
        self.db.execute(
            "INSERT INTO fleets (name, provider, inventory, created, updated, status) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET provider = excluded.provider, inventory = excluded.inventory, "
            "updated = excluded.updated, status = excluded.status",
            (name, provider, inventory, now, now, status),
        )
        if status == "up":  # kept data is in use again
            self.db.execute("DELETE FROM kept WHERE fleet = ?", (name,))

    def fleet(self, name: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM fleets WHERE name = ?", (name,)).fetchone()
        return dict(row) if row else None

    def fleets(self) -> list[str]:
        return [r["name"] for r in self.db.execute("SELECT name FROM fleets ORDER BY name")]

    def allocate_uids(self, fleet: str, instances: Sequence[str], base: int, size: int) -> dict[str, int]:
        """Stable uids: an instance keeps its uid; a new one takes the lowest free uid from ``base``."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            known, new = self._assign(fleet, instances, base, size)
            for instance, uid in new.items():
                self.db.execute("INSERT INTO uids (uid, fleet, instance) VALUES (?, ?, ?)", (uid, fleet, instance))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return {i: known.get(i, new.get(i)) for i in instances}  # type: ignore[misc]  # _assign gives each one a uid

    def preview_uids(self, fleet: str, instances: Sequence[str], base: int, size: int) -> dict[str, int]:
        """The uids ``allocate_uids`` would give now, stored nowhere (a dry run changes nothing)."""
        known, new = self._assign(fleet, instances, base, size)
        return {i: known.get(i, new.get(i)) for i in instances}  # type: ignore[misc]  # _assign gives each one a uid

    def _assign(
        self, fleet: str, instances: Sequence[str], base: int, size: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        known = {r["instance"]: r["uid"] for r in self.db.execute("SELECT * FROM uids WHERE fleet = ?", (fleet,))}
        taken = {r["uid"] for r in self.db.execute("SELECT uid FROM uids")}
        candidate, new = base, {}
        for instance in instances:
            if instance in known or instance in new:
                continue
            while candidate in taken:
                candidate += 1
            if candidate >= base + size:
                raise BusyError(f"no free uid left in {base}..{base + size - 1} for fleet {fleet!r}",
                                hint="raise fleet.uid_base or remove old fleets (inv fleet.down)")  # fmt: skip
            new[instance] = candidate
            taken.add(candidate)
        return known, new

    def uids(self, fleet: str) -> dict[str, int]:
        return {r["instance"]: r["uid"] for r in self.db.execute("SELECT * FROM uids WHERE fleet = ?", (fleet,))}

    def record_host(self, fleet: str, name: str, address: str, port: int, result: str) -> None:
        self.db.execute(
            "INSERT INTO hosts (fleet, name, address, port, last_result, updated) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(fleet, name) DO UPDATE SET address = excluded.address, port = excluded.port, "
            "last_result = excluded.last_result, updated = excluded.updated",
            (fleet, name, address, port, result, time.time()),
        )

    def record_agents(self, fleet: str, host: str, agents: Sequence[dict[str, Any]]) -> None:
        self.db.execute("DELETE FROM agents WHERE fleet = ? AND host = ?", (fleet, host))
        for a in agents:
            self.db.execute(
                "INSERT INTO agents (fleet, host, instance, agent, uid, user, container, network, updated) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fleet,
                    host,
                    a["instance"],
                    a["agent"],
                    a["uid"],
                    a["user"],
                    a["container"],
                    a["network"],
                    time.time(),
                ),
            )

    def agents(self, fleet: str) -> list[dict[str, Any]]:
        return [
            dict(r) for r in self.db.execute("SELECT * FROM agents WHERE fleet = ? ORDER BY host, instance", (fleet,))
        ]

    def forget_fleet(self, fleet: str, *, keep_uids: bool = False) -> None:
        """After a clean teardown: the fleet's rows go, its runs and audit trail stay.

        ``keep_uids``: data kept on the hosts is owned by these uids; they must not be given to another fleet.
        """
        for table in (
            ("agents", "hosts", "kept", "fleet_ttl") if keep_uids else ("agents", "hosts", "kept", "uids", "fleet_ttl")
        ):
            self.db.execute(f"DELETE FROM {table} WHERE fleet = ?", (fleet,))  # noqa: S608 - fixed names
        self.db.execute("UPDATE fleets SET status = 'down', updated = ? WHERE name = ?", (time.time(), fleet))

    def keep_fleet(self, fleet: str, hosts: Sequence[tuple[str, str, int]], what: Sequence[str]) -> None:
        """After ``fleet.down --keep-data``: the fleet is ``kept``; its uids stay reserved and each
        host (name, address, port) records what is kept there, until purged or brought up again."""
        now = time.time()
        for table in ("agents", "hosts", "kept", "fleet_ttl"):  # fleet.down ends the time-to-live too
            self.db.execute(f"DELETE FROM {table} WHERE fleet = ?", (fleet,))  # noqa: S608 - fixed names
        for name, address, port in hosts:
            self.db.execute("INSERT INTO kept (fleet, host, address, port, what, at) VALUES (?, ?, ?, ?, ?, ?)",
                            (fleet, name, address, port, json.dumps(list(what)), now))  # fmt: skip
        self.db.execute("UPDATE fleets SET status = 'kept', updated = ? WHERE name = ?", (now, fleet))

    def kept(self, fleet: str | None = None) -> list[dict[str, Any]]:
        """What ``fleet.down --keep-data`` kept, per fleet and host (``what`` is a list)."""
        query = "SELECT * FROM kept" + (" WHERE fleet = ?" if fleet else "") + " ORDER BY fleet, host"
        return [{**dict(r), "what": json.loads(r["what"])} for r in self.db.execute(query, (fleet,) if fleet else ())]

    def fleets_with_status(self, *statuses: str) -> list[str]:
        marks = ", ".join("?" for _ in statuses)
        return [r["name"] for r in self.db.execute(f"SELECT name FROM fleets WHERE status IN ({marks}) ORDER BY name",
                                                   statuses)]  # fmt: skip

    # --- labs: who created them, who uses them ------------------------------------

    def lab_created(self, lab: str, fleet: str | None) -> None:
        """A lab was (re)created, by ``fleet`` (None: by hand); earlier users' hosts are gone."""
        self.db.execute("DELETE FROM lab_fleets WHERE lab = ?", (lab,))
        self.db.execute("INSERT OR REPLACE INTO labs (name, created_by, created) VALUES (?, ?, ?)",
                        (lab, fleet, time.time()))  # fmt: skip

    def lab(self, lab: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM labs WHERE name = ?", (lab,)).fetchone()
        return {**dict(row), "users": self.lab_users(lab)} if row else None

    def lab_users(self, lab: str) -> list[str]:
        return [
            r["fleet"] for r in self.db.execute("SELECT fleet FROM lab_fleets WHERE lab = ? ORDER BY fleet", (lab,))
        ]

    def use_lab(self, lab: str, fleet: str) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO lab_fleets (lab, fleet, since) VALUES (?, ?, ?)", (lab, fleet, time.time())
        )

    def leave_lab(self, lab: str, fleet: str) -> None:
        self.db.execute("DELETE FROM lab_fleets WHERE lab = ? AND fleet = ?", (lab, fleet))

    def forget_lab(self, lab: str) -> None:
        self.db.execute("DELETE FROM lab_fleets WHERE lab = ?", (lab,))
        self.db.execute("DELETE FROM labs WHERE name = ?", (lab,))

    # --- snapshots: one row per fleet snapshot, one per (host, instance) in it --------------

    SNAPSHOT_AGENT = ("host", "instance", "agent", "restic_id", "size", "added", "files_new", "files_changed",
                      "instant", "frozen_ms")  # fmt: skip

    def record_snapshot(self, snapshot: dict[str, Any], agents: Sequence[dict[str, Any]],
                        run: int | None = None) -> None:  # fmt: skip
        """Store a fleet snapshot (``id``, ``fleet``, ``created``, ``label``, ``kind``) and its agents
        (host, instance, agent, restic_id, size, added, files_new, files_changed, tiers, manifest)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("INSERT OR REPLACE INTO snapshots (id, fleet, created, label, kind, run) VALUES (?, ?, ?, ?, ?, ?)",
                            (snapshot["id"], snapshot["fleet"], snapshot["created"], snapshot.get("label"),
                             snapshot.get("kind", "manual"), run))  # fmt: skip
            for a in agents:
                values = [a.get(k) for k in self.SNAPSHOT_AGENT]
                manifest = json.dumps(a["manifest"]) if a.get("manifest") is not None else None
                columns = ", ".join(("snapshot", "fleet", *self.SNAPSHOT_AGENT, "tiers", "manifest"))
                self.db.execute(
                    f"INSERT OR REPLACE INTO snapshot_agents ({columns}) VALUES ({', '.join('?' * (len(values) + 4))})",  # noqa: S608
                    (snapshot["id"], snapshot["fleet"], *values, json.dumps(list(a.get("tiers") or [])), manifest),
                )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def snapshot_rows(self, fleet: str, snapshot: str | None = None) -> list[dict[str, Any]]:
        """The fleet's snapshots, oldest first, each with its ``agents`` (manifests and tiers decoded)."""
        where, args = ("fleet = ? AND id = ?", (fleet, snapshot)) if snapshot else ("fleet = ?", (fleet,))
        rows = [dict(r) for r in self.db.execute(f"SELECT * FROM snapshots WHERE {where} ORDER BY created, id", args)]  # noqa: S608
        for row in rows:
            agents = self.db.execute(
                "SELECT * FROM snapshot_agents WHERE snapshot = ? ORDER BY host, instance", (row["id"],)
            )
            row["agents"] = [{**{k: a[k] for k in self.SNAPSHOT_AGENT}, "tiers": json.loads(a["tiers"]),
                              "manifest": json.loads(a["manifest"]) if a["manifest"] else None} for a in agents]  # fmt: skip
            row.pop("run", None)
        return rows

    def snapshot(self, fleet: str, snapshot: str) -> dict[str, Any] | None:
        rows = self.snapshot_rows(fleet, snapshot)
        return rows[0] if rows else None

    def forget_snapshot(self, fleet: str, snapshot: str, *, host: str | None = None) -> None:
        """Drop a snapshot's agents on ``host`` (or all); the snapshot goes with its last agent."""
        if host is None:
            self.db.execute("DELETE FROM snapshot_agents WHERE fleet = ? AND snapshot = ?", (fleet, snapshot))
        else:
            self.db.execute(
                "DELETE FROM snapshot_agents WHERE fleet = ? AND snapshot = ? AND host = ?", (fleet, snapshot, host)
            )
        left = self.db.execute("SELECT count(*) FROM snapshot_agents WHERE snapshot = ?", (snapshot,)).fetchone()[0]
        if not left:
            self.db.execute("DELETE FROM snapshots WHERE fleet = ? AND id = ?", (fleet, snapshot))

    def add_snapshot_tier(self, snapshot: str, host: str, instance: str, tier: str) -> None:
        """Record one more tier (e.g. ``checkpoint``) for an agent of a snapshot."""
        row = self.db.execute("SELECT tiers FROM snapshot_agents WHERE snapshot = ? AND host = ? AND instance = ?",
                              (snapshot, host, instance)).fetchone()  # fmt: skip
        if row is not None:
            tiers = sorted({*json.loads(row["tiers"]), tier})
            self.db.execute("UPDATE snapshot_agents SET tiers = ? WHERE snapshot = ? AND host = ? AND instance = ?",
                            (json.dumps(tiers), snapshot, host, instance))  # fmt: skip

    # --- copies of a host's repository (snapshot.pull, snapshot.push, fleet.down's final pull) ------

    def _snapshot_instants(self) -> None:
        """A ledger made before snapshots recorded how each home was held still gets those columns."""
        have = {r["name"] for r in self.db.execute("PRAGMA table_info(snapshot_agents)")}
        for column, kind in (("instant", "TEXT"), ("frozen_ms", "REAL")):
            if column not in have:
                self.db.execute(f"ALTER TABLE snapshot_agents ADD COLUMN {column} {kind}")

    def _copies_keyed_by_path(self) -> None:
        """A ledger made before several copies of one origin could sit at one place (a host's repository
        made anew keeps the old copy beside the new one) gets ``path`` in ``repo_copies``' key."""
        if any(r["name"] == "path" and r["pk"] for r in self.db.execute("PRAGMA table_info(repo_copies)")):
            return
        create = next(s for s in SCHEMA.split(";") if "TABLE IF NOT EXISTS repo_copies" in s)
        self.db.executescript("BEGIN; ALTER TABLE repo_copies RENAME TO repo_copies_old;" + create
                              + "; INSERT INTO repo_copies SELECT * FROM repo_copies_old; DROP TABLE repo_copies_old; COMMIT;")  # fmt: skip

    def record_copy(self, fleet: str, origin: str, place: str, path: str, snapshots: Sequence[str]) -> None:
        """A whole copy of ``origin``'s repository of ``fleet`` now sits at ``place`` (``operator``: this
        machine; else a host name) under ``path``, holding the fleet snapshots ``snapshots`` (ids). Several copies of one origin may sit at one
        place under different paths (an older repository of the host moved aside)."""
        self.db.execute("INSERT OR REPLACE INTO repo_copies (fleet, origin, place, path, at, snapshots) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (fleet, origin, place, path, time.time(), json.dumps(sorted(set(snapshots)))))  # fmt: skip

    def copies(self, fleet: str, *, origin: str | None = None, place: str | None = None) -> list[dict[str, Any]]:
        """The recorded copies of ``fleet``'s repositories (``snapshots`` decoded), newest first."""
        where, args = ["fleet = ?"], [fleet]
        for column, value in (("origin", origin), ("place", place)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        rows = self.db.execute(f"SELECT * FROM repo_copies WHERE {' AND '.join(where)} ORDER BY at DESC", args)  # noqa: S608
        return [{**dict(r), "snapshots": json.loads(r["snapshots"])} for r in rows]

    def forget_copy(self, fleet: str, origin: str, place: str, path: str | None = None) -> None:
        """Forget the copies of ``origin`` at ``place`` (only the one under ``path`` when given)."""
        extra, args = (" AND path = ?", (path,)) if path is not None else ("", ())
        self.db.execute("DELETE FROM repo_copies WHERE fleet = ? AND origin = ? AND place = ?" + extra,
                        (fleet, origin, place, *args))  # fmt: skip

    def move_copy(self, fleet: str, origin: str, place: str, path: str, new_path: str) -> None:
        """The copy recorded under ``path`` now sits under ``new_path`` (moved aside, same snapshots)."""
        self.db.execute("DELETE FROM repo_copies WHERE fleet = ? AND origin = ? AND place = ? AND path = ?",
                        (fleet, origin, place, new_path))  # fmt: skip
        self.db.execute("UPDATE repo_copies SET path = ? WHERE fleet = ? AND origin = ? AND place = ? AND path = ?",
                        (new_path, fleet, origin, place, path))  # fmt: skip

    # --- applied specs (fleet.rollback) ---------------------------------------------

    def record_spec(self, run: int, fleet: str, hosts: Sequence[str], spec: str, hash: str, fleet_hash: str) -> None:
        """The spec a run applies, as canonical JSON with no secret in it (``jackin.rollback.applied``),
        and the hosts it applies it to; recorded when the run starts, so a run that dies still has it."""
        self.db.execute("INSERT OR REPLACE INTO run_specs (run, fleet, hosts, spec, hash, fleet_hash) "
                        "VALUES (?, ?, ?, ?, ?, ?)", (run, fleet, json.dumps(list(hosts)), spec, hash, fleet_hash))  # fmt: skip

    def run(self, run: int) -> dict[str, Any] | None:
        """One run (any fleet), with its recorded spec's ``hash``/``fleet_hash``/``spec`` when it has one
        and ``results``: host -> the result of its own audit entries (``ok``/``failed``)."""
        row = self.db.execute(
            "SELECT runs.*, s.hosts AS spec_hosts, s.spec, s.hash, s.fleet_hash FROM runs "
            "LEFT JOIN run_specs s ON s.run = runs.id WHERE runs.id = ?", (run,)).fetchone()  # fmt: skip
        return self._with_results(dict(row)) if row else None

    def spec_runs(self, fleet: str) -> list[dict[str, Any]]:
        """The fleet's runs that recorded a spec, oldest first (``spec`` left out: ``run`` has it)."""
        rows = self.db.execute(
            "SELECT runs.*, s.hosts AS spec_hosts, s.hash, s.fleet_hash FROM run_specs s "
            "JOIN runs ON runs.id = s.run WHERE s.fleet = ? ORDER BY s.run", (fleet,))  # fmt: skip
        return [self._with_results(dict(r)) for r in rows]

    def _with_results(self, row: dict[str, Any]) -> dict[str, Any]:
        audit = self.db.execute("SELECT host, result FROM audit WHERE run = ? AND action = ? AND host IS NOT NULL "
                                "ORDER BY id", (row["id"], row["action"]))  # fmt: skip
        row["results"] = {r["host"]: r["result"] for r in audit}
        row["spec_hosts"] = json.loads(row["spec_hosts"]) if row.get("spec_hosts") else []
        return row

    # --- launch contracts (jackin.plan.contract) -------------------------------------------------

    def record_contract(self, run: int, fleet: str, schema_version: int, contract: str) -> None:
        """The launch contract a run applies, as JSON (names and paths only, never a credential's value)."""
        self.db.execute("INSERT OR REPLACE INTO run_contracts (run, fleet, schema_version, contract) VALUES (?, ?, ?, ?)",
                        (run, fleet, schema_version, contract))  # fmt: skip

    def last_contract(self, fleet: str) -> str | None:
        """The newest contract recorded for ``fleet`` by a run that finished ``ok`` (JSON), or None."""
        row = self.db.execute("SELECT c.contract FROM run_contracts c JOIN runs ON runs.id = c.run "
                              "WHERE c.fleet = ? AND runs.status = 'ok' ORDER BY c.run DESC LIMIT 1",
                              (fleet,)).fetchone()  # fmt: skip
        return row["contract"] if row else None

    # --- the time-to-live: when the fleet's lifecycle started (jackin/plan/ttl.py) ---------------

    def ttl_started(self, fleet: str) -> float | None:
        """When the fleet's first fleet.up of this lifecycle ran (its deadline is that plus the spec's ttl)."""
        row = self.db.execute("SELECT started FROM fleet_ttl WHERE fleet = ?", (fleet,)).fetchone()
        return None if row is None else row["started"]

    def start_ttl(self, fleet: str, now: float) -> float:
        """Fix the lifecycle's start at ``now`` unless it is already fixed (a later fleet.up keeps it);
        fleet.down (``forget_fleet``, ``keep_fleet``) ends it. Returns the start in force."""
        self.db.execute("INSERT OR IGNORE INTO fleet_ttl (fleet, started) VALUES (?, ?)", (fleet, now))
        return self.ttl_started(fleet) or now

    # --- collections (jackin.work.collect) ---------------------------------------------------

    def record_collection(self, fleet: str, host: str, instance: str, result: str, **fields: Any) -> None:
        """One agent's collection by fleet.collect: ``result`` (collected / failed), and ``fields`` among
        state, repo, ref, commit_id, source_commit, handoff, evidence, detail (a dict, kept as JSON)."""
        known = ("state", "repo", "ref", "commit_id", "source_commit", "handoff", "evidence")
        values = [fields.get(k) for k in known]
        detail = json.dumps(fields["detail"]) if fields.get("detail") is not None else None
        self.db.execute(f"INSERT INTO collections (fleet, host, instance, at, who, result, {', '.join(known)}, detail) "
                        f"VALUES (?, ?, ?, ?, ?, ?, {', '.join('?' * len(known))}, ?)",
                        (fleet, host, instance, time.time(), _who(), result, *values, detail))  # fmt: skip

    def collections(self, fleet: str) -> list[dict[str, Any]]:
        """The newest collection of each (host, instance) of ``fleet`` that succeeded, by host then instance."""
        rows = self.db.execute(
            "SELECT * FROM collections WHERE id IN (SELECT MAX(id) FROM collections WHERE fleet = ? "
            "AND result = 'collected' GROUP BY host, instance) ORDER BY host, instance", (fleet,))  # fmt: skip
        return [{**dict(r), "detail": json.loads(r["detail"]) if r["detail"] else None} for r in rows]
