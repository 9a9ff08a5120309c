"""fleet.down's teardown, run from this process: one script per host over the reads' SSH path.

What to remove is a pure function of the plan and the host's state read (``jackin.operations``'
teardown builders, the same ``deploys/teardown.py`` runs in the pyinfra engine for ``fleet.gc``).
fleet.down has read every host already (``jackin.snapshots.final`` decides from that read what to
snapshot and pull), so each host gets its teardown as one ``set -e`` script over
``jackin.remote.gather`` (the system's OpenSSH client on the master connection the read left open,
else Fabric), in parallel: no engine child, no second connection, no second read of a host nothing
was done to since. A host where the final snapshot stopped containers, snapshotted or pulled is
read again first (``fresh_states``). The clean check afterwards reads every host anew.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jackin import plan as planning
from jackin.engine.protocol import Event, HostResult, RunResult
from jackin.errors import ConnectError, JackinError
from jackin.ledger import Ledger
from jackin.operations.fleet import teardown_commands
from jackin.operations.ttl import teardown_commands as ttl_teardown
from jackin.remote import gather
from jackin.snapshots.final import FinalHost
from jackin.ssh import SshTarget
from jackin.state import HostState, parse_state, state_command

OnEvent = Callable[[Event], None]
States = dict[str, HostState | JackinError]
COMMAND_TIMEOUT = 900  # seconds for one host's teardown script (the engine's command timeout)


def read_states(plan: planning.FleetPlan, hosts: Sequence[SshTarget], *, timeout: float = 30) -> States:
    """Every host's state of the fleet, in one parallel round trip (per host its state or error)."""
    command = state_command(plan.fleet, plan.uid_min, plan.uid_max)
    return gather(hosts, command, lambda out: parse_state(out.split("\n")), timeout=timeout)


def fresh_states(plan: planning.FleetPlan, hosts: Sequence[SshTarget], read: States,
                 final: Sequence[FinalHost]) -> States:  # fmt: skip
    """The state to tear each host down from: ``read`` where nothing was done to the host since
    (no container stopped, no snapshot, no pull), else read again now."""
    touched = {f.host for f in final if f.stage != "nothing" or f.stopped}
    again = [h for h in hosts if h.name in touched or h.name not in read]
    return {**{h.name: read[h.name] for h in hosts if h.name in read}, **read_states(plan, again)}


def script(plan: planning.FleetPlan, state: HostState, *, keep_data: bool) -> str | None:
    """The host's teardown as one ``set -e`` script (None: nothing of the fleet is there). The
    time-to-live's timer goes first: it must not stop what is being torn down."""
    commands = ttl_teardown(plan.fleet, state.ttl) + teardown_commands(plan, state, keep_data=keep_data)
    return "\n".join(["set -e", *commands]) + "\n" if commands else None


def run(ledger: Ledger, plan: planning.FleetPlan, hosts: Sequence[SshTarget], states: States, *,
        keep_data: bool, detail: dict[str, Any], on_event: OnEvent) -> tuple[int, RunResult]:  # fmt: skip
    """Tear ``hosts`` down in parallel, recorded as the engine's runs are (a run, an audit entry per
    host, its status); one failing host never stops the others."""
    op = f"remove fleet {plan.fleet}"
    start = time.time()
    run_id = ledger.start_run(plan.fleet, "fleet.down", detail)
    on_event(Event(event="start", t=start, data={"hosts": [h.name for h in hosts]}))
    scripts: dict[str, str | None] = {}
    results: dict[str, HostResult] = {}
    for host in hosts:
        state = states.get(host.name)
        if isinstance(state, HostState):
            scripts[host.name] = script(plan, state, keep_data=keep_data)
            on_event(Event(event="op_start", t=time.time(), host=host.name, op=op))
        else:
            results[host.name] = _unread(host.name, state)
    ran = _run_scripts([h for h in hosts if scripts.get(h.name)], scripts)
    for host in hosts:
        if host.name not in results:
            output, seconds = ran.get(host.name, (None, 0.0))
            results[host.name] = _result(host.name, op, output, elapsed=seconds)
            event = "op_ok" if results[host.name].ok else "op_error"
            on_event(Event(event=event, t=time.time(), host=host.name, op=op, error=results[host.name].error))
        on_event(Event(event="host_done", t=time.time(), host=host.name, result=results[host.name]))
    result = RunResult(hosts=[results[h.name] for h in hosts], elapsed=time.time() - start)
    for host in result.hosts:
        ledger.audit(run_id, plan.fleet, "fleet.down", "ok" if host.ok else "failed", host=host.host,
                     detail={"changed": host.changed, "failed": host.failed, "error": host.error, "engine": False})  # fmt: skip
    ledger.finish_run(run_id, "ok" if not result.failed else "failed")
    on_event(Event(event="done", t=time.time()))
    return run_id, result


Ran = tuple[str | JackinError, float]  # a host's output or error, and its seconds


def _run_scripts(hosts: Sequence[SshTarget], scripts: dict[str, str | None]) -> dict[str, Ran]:
    """Each host's own script, all at once (``gather`` runs one command on many hosts; here each
    host's differs): per host its output or error, and how long it took."""
    if not hosts:
        return {}

    def one(host: SshTarget) -> Ran:
        command = "sh -c " + shlex.quote(scripts[host.name] or "")  # as the engine runs it: sh, whatever root's shell
        start = time.monotonic()
        output = gather([host], command, lambda out: out, timeout=COMMAND_TIMEOUT)[host.name]
        return output, time.monotonic() - start

    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        return dict(zip([h.name for h in hosts], pool.map(one, hosts)))


def _unread(host: str, error: JackinError | None) -> HostResult:
    """A host whose state could not be read: not torn down (what is there is unknown)."""
    message = f"not torn down: its state read failed: {error.message if error else 'no state was read'}"
    if isinstance(error, ConnectError):
        return HostResult(host=host, connected=False, error=message)
    return HostResult(host=host, connected=True, ops=1, failed=1, error=message)


def _result(host: str, op: str, ran: str | JackinError | None, *, elapsed: float) -> HostResult:
    """One host's outcome as the engine reports it: one operation, changed unless there was nothing
    to do (``ran`` None: no script was run)."""
    if isinstance(ran, ConnectError):  # not reached: unreachable (exit 3), as the engine reports it
        return HostResult(host=host, connected=False, ops=1, error=f"{op}: {ran.message}", elapsed=elapsed)
    if isinstance(ran, JackinError):
        return HostResult(host=host, connected=True, ops=1, failed=1, error=f"{op}: {ran.message}", elapsed=elapsed)
    return HostResult(host=host, connected=True, ops=1, changed=1 if ran is not None else 0, elapsed=elapsed)
