"""What a ``fleet.rollback`` applies where, chosen from the fleet's history of runs (pure: the ledger's rows in).

Every ``fleet.up`` (and every rollback) records the spec it applies against its run id, with
the hosts it ran on; each host's result is its audit entry (jackin/plan/applied.py, jackin/store/runs.py).
What a rollback applies, decided from that history (``choose``):

    --to RUN          RUN's spec, on every host of the fleet (with --host H: on H only). RUN must be a
                      fleet.up or fleet.rollback of this fleet that recorded a spec and succeeded on
                      every host it ran on (with --host H: on H).
    --host H          H's last good state: if the last run on H failed there, the last spec that
                      succeeded on H; else the last spec that succeeded on H and differs from the one
                      in place there (a step back).
    (neither)         if the fleet's last run failed on some hosts: each of those hosts (and only
                      those) goes back to the last spec that succeeded on it ("repair"); else every
                      host goes back to the most recent successful run whose fleet spec differs from
                      the last run's ("step back"). A second rollback therefore goes forward again.

"Differs" compares the fleet part of the spec (``fleet_hash``). A stored spec must place the fleet
where the inventory does (same name, provider, lab, hosts), else it is refused (``check_placement``):
a rollback changes what runs, never where.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import SpecError
from jackin.spec.models import FleetSpec

SPEC_ACTIONS = ("fleet.up", "fleet.rollback")
PLACEMENT = ("name", "provider", "lab", "hosts")  # where the fleet runs: a rollback never changes it
Mode = Literal["step-back", "repair", "to", "host"]


class SpecRun(BaseModel):
    """One run that recorded a spec: its outcome overall and per host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: int
    action: str
    status: str
    fleet_hash: str
    hosts: list[str]
    results: dict[str, str] = Field(default_factory=dict)
    started: float | None = None
    finished: float | None = None
    to: int | None = None  # a rollback: the run whose spec it applied

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SpecRun:
        detail = json.loads(row.get("detail") or "{}")
        return cls(run=row["id"], action=row["action"], status=row["status"], fleet_hash=row["fleet_hash"],
                   hosts=row["spec_hosts"], results=row["results"], started=row.get("started"),
                   finished=row.get("finished"), to=detail.get("to") if isinstance(detail, dict) else None)  # fmt: skip

    def ok_on(self, host: str) -> bool:
        return host in self.hosts and self.results.get(host) == "ok"

    @property
    def failed_hosts(self) -> list[str]:
        """Hosts it ran on without succeeding (no result at all counts: the run died there)."""
        return [h for h in self.hosts if not self.ok_on(h)]

    @property
    def succeeded(self) -> bool:
        return self.status == "ok" and not self.failed_hosts


class Step(BaseModel):
    """Apply run ``to``'s spec on ``hosts``; ``from_run`` is the run whose spec is in place there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    to: int
    hosts: list[str]
    from_run: int | None = None


def check_to(row: dict[str, Any] | None, run: int, fleet: str) -> SpecRun:
    """``--to RUN`` names a run of this fleet that recorded a spec; refused otherwise (exit 2)."""
    if row is None:
        raise SpecError(f"--to {run}: no run {run} in the ledger", hint=_LIST_HINT)
    if row["fleet"] != fleet:
        raise SpecError(f"--to {run}: run {run} belongs to fleet {row['fleet']!r}, not {fleet!r}", hint=_LIST_HINT)
    if row["action"] not in SPEC_ACTIONS:
        raise SpecError(f"--to {run}: run {run} was a {row['action']}, not a fleet.up or fleet.rollback",
                        hint=_LIST_HINT)  # fmt: skip
    if not row.get("spec"):
        raise SpecError(f"--to {run}: run {run} recorded no spec (it predates the ledger's spec records)",
                        hint=_LIST_HINT)  # fmt: skip
    return SpecRun.from_row(row)


_LIST_HINT = "inv fleet.runs -i FILE lists the fleet's runs with their specs and results"


def choose(runs: list[SpecRun], fleet_hosts: list[str], *, fleet: str, to: SpecRun | None = None,
           host: str | None = None) -> tuple[Mode, list[Step]]:  # fmt: skip
    """What to apply where (see the module docstring); a SpecError (exit 2) when nothing fits."""
    if not runs:
        raise SpecError(f"nothing to roll back to: no fleet.up of fleet {fleet!r} recorded its spec",
                        hint="the ledger keeps the spec of every fleet.up from this release on")  # fmt: skip
    latest = runs[-1]
    if host is not None:
        if host not in fleet_hosts:
            raise SpecError(
                f"--host {host!r} is not one of the hosts of fleet {fleet!r} ({', '.join(fleet_hosts) or 'none'})"
            )
        mine = [r for r in runs if host in r.hosts]
        current = mine[-1].run if mine else None
        if to is not None:
            if not to.ok_on(host):
                raise SpecError(f"--to {to.run}: run {to.run} did not succeed on {host}", hint=_LIST_HINT)
            return "host", [Step(to=to.run, hosts=[host], from_run=current)]
        return "host", [Step(to=_host_target(mine, host, fleet).run, hosts=[host], from_run=current)]
    if to is not None:
        if not to.succeeded:
            raise SpecError(f"--to {to.run}: run {to.run} did not succeed (failed on {', '.join(to.failed_hosts) or 'its run'})",
                            hint="--host H --to RUN applies a run that succeeded on H to H alone")  # fmt: skip
        return "to", [Step(to=to.run, hosts=fleet_hosts, from_run=latest.run)]
    failed = [h for h in latest.failed_hosts if h in fleet_hosts]
    if failed:
        return "repair", _repair(runs, failed, fleet)
    target = next((r for r in reversed(runs[:-1]) if r.succeeded and r.fleet_hash != latest.fleet_hash), None)
    if target is None:
        raise SpecError(f"nothing to roll back to: no earlier successful run of fleet {fleet!r} has a spec "
                        f"different from run {latest.run}'s", hint=_LIST_HINT)  # fmt: skip
    return "step-back", [Step(to=target.run, hosts=fleet_hosts, from_run=latest.run)]


def _host_target(mine: list[SpecRun], host: str, fleet: str) -> SpecRun:
    """The last good state of ``host`` among the runs that ran on it (oldest first)."""
    if not mine:
        raise SpecError(f"nothing to roll back to on {host}: no run of fleet {fleet!r} ran there")
    current, earlier = mine[-1], mine[:-1]
    if current.ok_on(host):
        found = next((r for r in reversed(earlier) if r.ok_on(host) and r.fleet_hash != current.fleet_hash), None)
        why = f"no earlier run that succeeded on {host} has a spec different from run {current.run}'s"
    else:
        found = next((r for r in reversed(earlier) if r.ok_on(host)), None)
        why = f"no run before run {current.run} (which failed there) succeeded on {host}"
    if found is None:
        raise SpecError(f"nothing to roll back to on {host}: {why}", hint=_LIST_HINT)
    return found


def _repair(runs: list[SpecRun], failed: list[str], fleet: str) -> list[Step]:
    """Each host the last run failed on, back to the last spec that succeeded on it, grouped by run."""
    targets: dict[int, list[str]]
    latest, targets, missing = runs[-1], {}, []
    for host in failed:
        try:
            targets.setdefault(_host_target([r for r in runs if host in r.hosts], host, fleet).run, []).append(host)
        except SpecError:
            missing.append(host)
    if missing:
        raise SpecError(f"run {latest.run} failed on {', '.join(missing)}, and no earlier run succeeded there: "
                        "there is no good state to return to", hint="fix the host and run fleet.up again; "
                        "fleet.rollback --host H repairs the other hosts one by one")  # fmt: skip
    return [Step(to=run, hosts=hosts, from_run=latest.run) for run, hosts in sorted(targets.items())]


def check_placement(stored: FleetSpec, current: FleetSpec, run: int) -> None:
    """The stored fleet spec must run where the inventory's does (name, provider, lab, hosts)."""
    problems = [f"fleet.{field}: run {run} had {getattr(stored, field)!r}, the inventory has {getattr(current, field)!r}"
                for field in PLACEMENT if getattr(stored, field) != getattr(current, field)]  # fmt: skip
    if problems:
        raise SpecError(f"run {run}'s spec cannot be applied to this inventory's hosts", problems=problems,
                        hint="a rollback changes what runs on the fleet's hosts, never where: "
                             "move the fleet with fleet.up -i FILE")  # fmt: skip
