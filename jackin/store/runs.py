"""The ledger's record of runs: each run and its audit trail, the spec and launch contract it
applied (``fleet.rollback``, ``jackin.plan.launch``), and the agents' work ``fleet.collect`` brought
back. A mixin of ``jackin.store.ledger.Ledger``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from jackin.store.schema import Tables, who


class RunTables(Tables):
    """Runs, the audit trail, applied specs and contracts, collections."""

    # --- runs and audit ------------------------------------------------------

    def start_run(self, fleet: str, action: str, detail: dict[str, Any] | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO runs (fleet, action, who, started, status, detail) VALUES (?, ?, ?, ?, 'running', ?)",
            (fleet, action, who(), time.time(), json.dumps(detail or {})),
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
            (run, time.time(), who(), fleet, action, host, result, json.dumps(detail) if detail is not None else None),
        )

    def audit_trail(self, fleet: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT * FROM audit" + (" WHERE fleet = ?" if fleet else "") + " ORDER BY id"
        return [dict(r) for r in self.db.execute(query, (fleet,) if fleet else ())]

    def runs(self, fleet: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM runs WHERE fleet = ? ORDER BY id", (fleet,))]

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

    # --- collections (jackin.work.collect) ---------------------------------------------------

    def record_collection(self, fleet: str, host: str, instance: str, result: str, **fields: Any) -> None:
        """One agent's collection by fleet.collect: ``result`` (collected / failed), and ``fields`` among
        state, repo, ref, commit_id, source_commit, handoff, evidence, detail (a dict, kept as JSON)."""
        known = ("state", "repo", "ref", "commit_id", "source_commit", "handoff", "evidence")
        values = [fields.get(k) for k in known]
        detail = json.dumps(fields["detail"]) if fields.get("detail") is not None else None
        self.db.execute(f"INSERT INTO collections (fleet, host, instance, at, who, result, {', '.join(known)}, detail) "
                        f"VALUES (?, ?, ?, ?, ?, ?, {', '.join('?' * len(known))}, ?)",
                        (fleet, host, instance, time.time(), who(), result, *values, detail))  # fmt: skip

    def collections(self, fleet: str) -> list[dict[str, Any]]:
        """The newest collection of each (host, instance) of ``fleet`` that succeeded, by host then instance."""
        rows = self.db.execute(
            "SELECT * FROM collections WHERE id IN (SELECT MAX(id) FROM collections WHERE fleet = ? "
            "AND result = 'collected' GROUP BY host, instance) ORDER BY host, instance", (fleet,))  # fmt: skip
        return [{**dict(r), "detail": json.loads(r["detail"]) if r["detail"] else None} for r in rows]
