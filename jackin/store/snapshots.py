"""The ledger's snapshots: one row per fleet snapshot and one per (host, instance) in it, and the
copies of a host's snapshot repository kept elsewhere (``snapshot.pull``, ``snapshot.push``,
``fleet.down``'s final pull). A mixin of ``jackin.store.ledger.Ledger``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from jackin.store.schema import Tables


class SnapshotTables(Tables):
    """Fleet snapshots and their agents; copies of a host's repository."""

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
        query = f"SELECT * FROM snapshots WHERE {where} ORDER BY created, run, rowid"  # noqa: S608 - where: one of two
        rows = [dict(r) for r in self.db.execute(query, args)]
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
