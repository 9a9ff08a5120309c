"""The ledger's placements: on which host each instance of a ``placement: spread`` agent lives
(jackin/plan/placement.py). Written by a real ``fleet.up`` (and ``agent.move``), read by every command that
asks where an instance is; an ``each`` agent's instances are on every one of its hosts, so never recorded.
A mixin of ``jackin.store.ledger.Ledger`` (its table: ``jackin.store.schema``).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from jackin.store.schema import Tables


class PlacementTables(Tables):
    """Where each spread instance of a fleet lives, and since when."""

    def placements(self, fleet: str) -> dict[str, str]:
        """instance -> host, as recorded."""
        rows = self.db.execute("SELECT instance, host FROM placements WHERE fleet = ? ORDER BY instance", (fleet,))
        return {r["instance"]: r["host"] for r in rows}

    def record_placements(self, fleet: str, placed: Mapping[str, str]) -> None:
        """Record ``placed`` (instance -> host); an instance already on that host keeps its time."""
        now = time.time()
        for instance, host in placed.items():
            self.db.execute(
                "INSERT INTO placements (fleet, instance, host, at) VALUES (?, ?, ?, ?) ON CONFLICT(fleet, instance) "
                "DO UPDATE SET host = excluded.host, at = excluded.at WHERE placements.host != excluded.host",
                (fleet, instance, host, now),
            )

    def forget_placements(self, fleet: str, keep: Collection[str] | None = None) -> list[str]:
        """Forget the fleet's placements but those of ``keep`` (None: all of them); the instances forgotten."""
        gone = [i for i in self.placements(fleet) if keep is None or i not in keep]
        for instance in gone:
            self.db.execute("DELETE FROM placements WHERE fleet = ? AND instance = ?", (fleet, instance))
        return gone
