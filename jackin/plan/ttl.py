"""The fleet's time-to-live on the operator's side: its deadline, and the time left.

A fleet's lifecycle starts at its first ``fleet.up`` (recorded in the ledger, ``fleet_ttl``) and
ends at ``fleet.down``. Its deadline is that start plus the spec's ``ttl``: a later ``fleet.up``
keeps it (an unchanged ttl, an unchanged deadline), and changing the spec's ``ttl`` moves the
deadline relative to the same start (the way to extend a fleet that needs longer). Each host
enforces the deadline by itself (``jackin.operations.ttl``: a systemd timer that stops the
fleet's containers), so a fleet the operator forgot stops even when no ``inv`` runs again.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from jackin.spec.models import FleetSpec
from jackin.store.ledger import Ledger


class TtlStatus(BaseModel):
    """The fleet's time-to-live as ``fleet.status`` shows it."""

    model_config = ConfigDict(extra="forbid")

    ttl: int | None = None  # seconds, from the spec (None: no time-to-live)
    deadline: float | None = None  # epoch seconds (None: not started: no fleet.up yet)
    left: float | None = None  # seconds left at the read (negative: passed)


def deadline(ledger: Ledger, spec: FleetSpec, *, start: bool, now: float | None = None) -> int | None:
    """The fleet's deadline (epoch seconds), or None when its spec sets no ttl. ``start``: a real
    ``fleet.up``, which fixes the lifecycle's start when none is (a later one keeps it); otherwise
    (a dry run, a plan) an unstarted fleet's deadline is previewed from ``now``."""
    if spec.ttl is None:
        return None
    now = time.time() if now is None else now
    began = ledger.start_ttl(spec.name, now) if start else (ledger.ttl_started(spec.name) or now)
    return int(began + spec.ttl)


def status(spec: FleetSpec, *, now: float | None = None, ledger: Ledger | None = None) -> TtlStatus:
    """The time left of the fleet's time-to-live, from the ledger (no host is read)."""
    if spec.ttl is None:
        return TtlStatus()
    now = time.time() if now is None else now
    if ledger is None:
        with Ledger() as opened:
            began = opened.ttl_started(spec.name)
    else:
        began = ledger.ttl_started(spec.name)
    if began is None:
        return TtlStatus(ttl=spec.ttl)
    end = int(began + spec.ttl)
    return TtlStatus(ttl=spec.ttl, deadline=end, left=end - now)


def duration(seconds: float) -> str:
    """``1d 2h``, ``3h 5m``, ``4m 10s``, ``12s``: the two largest units."""
    seconds = int(abs(seconds))
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n]
    return " ".join(shown[:2]) or "0s"


def line(fleet: str, found: TtlStatus, timers: dict[str, str] | None = None) -> str:
    """The one line ``fleet.status`` prints about the time-to-live (``timers``: per host, its timer's state)."""
    if found.ttl is None:
        return f"time-to-live: none (fleet {fleet} runs until fleet.down)"
    if found.deadline is None or found.left is None:
        return f"time-to-live: {duration(found.ttl)}, not started (the first fleet.up starts it)"
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(found.deadline))
    text = (f"time-to-live: {duration(found.left)} left (until {at})" if found.left > 0 else
            f"time-to-live: passed {duration(found.left)} ago ({at}): the hosts stopped the agents; "
            "fleet.down ends the fleet")  # fmt: skip
    if timers:
        text += "; timer " + ", ".join(f"{host} {state or 'unknown'}" for host, state in sorted(timers.items()))
    return text
