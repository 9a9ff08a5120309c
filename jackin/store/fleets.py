"""The ledger's fleets: their rows and status, their hosts and agents, the uids allocated to their
agent instances, what ``fleet.down --keep-data`` kept, the labs they created or use, and the start
of their time-to-live. A mixin of ``jackin.store.ledger.Ledger``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from jackin.errors import BusyError
from jackin.store.schema import Tables


class FleetTables(Tables):
    """Fleets, their hosts and agents, uids, kept data, labs and the time-to-live's start."""

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

    def forget_agent(self, fleet: str, host: str, instance: str) -> None:
        """One instance is no longer on ``host`` (agent.move took it elsewhere)."""
        self.db.execute("DELETE FROM agents WHERE fleet = ? AND host = ? AND instance = ?", (fleet, host, instance))

    def agents(self, fleet: str) -> list[dict[str, Any]]:
        return [
            dict(r) for r in self.db.execute("SELECT * FROM agents WHERE fleet = ? ORDER BY host, instance", (fleet,))
        ]

    def forget_fleet(self, fleet: str, *, keep_uids: bool = False) -> None:
        """After a clean teardown: the fleet's rows go, its runs and audit trail stay.

        ``keep_uids``: data kept on the hosts is owned by these uids; they must not be given to another fleet.
        """
        for table in (
            ("agents", "hosts", "kept", "fleet_ttl", "placements")
            if keep_uids
            else ("agents", "hosts", "kept", "uids", "fleet_ttl", "placements")
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

    # --- the time-to-live: when the fleet's lifecycle started (jackin/plan/ttl.py) ---------------

    def ttl_started(self, fleet: str) -> float | None:
        """When the fleet's first fleet.up of this lifecycle ran (its deadline is that plus the spec's ttl)."""
        row = self.db.execute("SELECT started FROM fleet_ttl WHERE fleet = ?", (fleet,)).fetchone()
        return None if row is None else row["started"]

    def unstart_ttl(self, fleet: str) -> None:
        """A start ``start_ttl`` fixed for a fleet.up that was then refused before any host changed: undone."""
        self.db.execute("DELETE FROM fleet_ttl WHERE fleet = ?", (fleet,))

    def start_ttl(self, fleet: str, now: float) -> float:
        """Fix the lifecycle's start at ``now`` unless it is already fixed (a later fleet.up keeps it);
        fleet.down (``forget_fleet``, ``keep_fleet``) ends it. Returns the start in force."""
        self.db.execute("INSERT OR IGNORE INTO fleet_ttl (fleet, started) VALUES (?, ?)", (fleet, now))
        return self.ttl_started(fleet) or now
