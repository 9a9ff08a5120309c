"""One recorded run: build the engine request, run a deploy on the hosts, record it.

Every task that changes hosts (fleet.up, fleet.down, fleet.gc, the snapshot
tasks to come) goes through ``recorded_run``: a run row in the ledger, one audit
entry per host with its outcome, and the run's final status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jackin
from jackin.engine import EngineRequest, Event, HostResult, RunResult, run
from jackin.engine.client import Engine
from jackin.errors import JackinError
from jackin.facts.state import HostState
from jackin.spec.credentials import Secrets
from jackin.store.ledger import Ledger
from jackin.transport.target import SshTarget

OnEvent = Callable[[Event], None]
OnHost = Callable[[HostResult, SshTarget], None]


def deploys_dir() -> Path:
    path = Path(jackin.__file__).resolve().parent.parent / "deploys"
    if not path.is_dir():
        raise JackinError(
            f"deploy files not found at {path}", hint="install jackin from its checkout (pip install -e .)"
        )
    return path


def recorded_run(
    ledger: Ledger | None,
    *,
    fleet: str,
    action: str,
    deploy: str,
    hosts: list[SshTarget],
    data: dict[str, Any],
    dry_run: bool = False,
    detail: dict[str, Any] | None = None,
    on_event: OnEvent = lambda _: None,
    on_host: OnHost | None = None,
    on_start: Callable[[int], None] | None = None,
    secrets: Secrets | None = None,
    host_data: dict[str, dict[str, Any]] | None = None,
    engine: Engine | None = None,
) -> tuple[int | None, RunResult]:
    """Run ``deploys/<deploy>`` on ``hosts``; record the run unless ``ledger`` is None.

    ``on_host`` is called for every host's result after its audit entry (to
    record what the run left there); ``on_start`` with the run's id once it is recorded (to
    record more against it). ``secrets``: credential values for the deploy, handed to the engine on
    its stdin (never in ``data``, which is the plan, nor in the ledger). ``host_data``: per host, more for its
    deploy (``EngineRequest.host_data``). ``engine``: an engine child started ahead (``jackin.engine.client.started``).
    Returns the run's id and its result.
    """
    wire = secrets.to_wire() if secrets is not None and secrets.agents() else None
    request = EngineRequest(deploy=str(deploys_dir() / deploy), targets=hosts, data=data, dry_run=dry_run,
                            host_data=host_data or {})  # fmt: skip
    if ledger is None:
        return None, run(request, on_event, secrets=wire, engine=engine)
    run_id = ledger.start_run(fleet, action, detail)
    try:
        if on_start is not None:
            on_start(run_id)
        result = run(request, on_event, secrets=wire, engine=engine)
    except BaseException:
        ledger.finish_run(run_id, "failed")
        raise
    by_name = {h.name: h for h in hosts}
    for host in result.hosts:
        ledger.audit(run_id, fleet, action, "ok" if host.ok else "failed", host=host.host,
                     detail={"changed": host.changed, "failed": host.failed, "error": host.error})  # fmt: skip
        if on_host is not None:
            on_host(host, by_name[host.host])
    ledger.finish_run(run_id, "ok" if not result.failed and not result.error else "failed")
    return run_id, result


def states_for_deploy(
    hosts: list[SshTarget], states: Mapping[str, HostState | JackinError]
) -> dict[str, dict[str, Any]]:
    """Per host of ``hosts`` read without error, the state its deploy works from (``host.data.jackin_host``,
    ``ops.fleet_state``): fleet.up's and fleet.down's one read; a host without one is read by its deploy."""
    return {
        h.name: {"state": s.model_dump(mode="json")} for h in hosts if isinstance(s := states.get(h.name), HostState)
    }
