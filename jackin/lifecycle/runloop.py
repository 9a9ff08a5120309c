"""``fleet.run``: the whole loop in one command: up, wait, collect, down.

Each phase runs only when the one before it left the fleet in a state to go on:

    up       fleet.up, through the same launch-contract gate and confirmation (the CLI's ``fleet.up``)
    wait     until every agent is done or failed (``jackin.waiting.wait``, ``until="done"``), or the
             ``--timeout`` or the fleet's time-to-live passes, whichever comes first; each change of
             state is reported as it is seen (``on_change``)
    collect  every finished agent's branch and handoff, to the operator's machine (``jackin.work.collect.collect``)
    down     fleet.down, with its final snapshot (the CLI's ``fleet.down``)

A phase that fails stops the loop: what is left running is said, and how to go on by hand. Nothing
is torn down before its work is collected: a failed collect leaves the fleet up (retry with
``fleet.collect``, then ``fleet.down``). A wait ended by the timeout or the time-to-live still
collects what finished and tears down (the exit status says so).

Exit status (``RunOutcome.exit_code``): 0 every agent done, its work collected, the fleet torn down;
1 a phase failed and the loop stopped there (the message names it and what is left); 2 invalid spec
or usage (before anything ran); 3 a host could not be reached (the loop stopped); 4 the wait ended
at the ``--timeout`` or the time-to-live before every agent finished (what finished was collected,
the fleet torn down); 5 the loop ran to the end but some agent reported ``failed``.

With ``tasks:`` in the spec the wait is ``fleet.work``'s loop over them (``queue_wait``): queued once each, served
until the queue is empty; exit 5 when one of them failed. The wait and the collect are looked up lazily (``jackin.agents.wait.wait``, ``jackin.work.collect.collect``)
and may be given as parameters (the unit tests give fakes). The loop prints nothing: it reports each
phase as it starts (``on_phase``) and each agent's change (``on_change``), and returns a ``RunOutcome``;
the CLI (jackin/cli/run.py) renders them and exits with its ``exit_code``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents.state import clean
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, ConnectError, JackinError
from jackin.plan import ttl
from jackin.spec import FleetSpec

EXIT_TIMEOUT = 4  # the wait ended at --timeout or the time-to-live; collected and torn down
EXIT_AGENT_FAILED = 5  # ran to the end; some agent reported failed
TTL_MARGIN = 60.0  # seconds before the time-to-live's deadline the wait ends (at most; a tenth of a short ttl)
Phase = Literal["up", "wait", "collect", "down"]
PHASES: tuple[Phase, ...] = ("up", "wait", "collect", "down")


class PhaseResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: Phase
    status: Literal["ok", "failed", "skipped"]
    detail: str = ""
    exit_code: int = EXIT_OK


class RunOutcome(BaseModel):
    """What ``fleet.run`` did, phase by phase, and where it stopped."""

    model_config = ConfigDict(extra="forbid")

    fleet: str
    phases: list[PhaseResult] = Field(default_factory=list)
    stopped_at: Phase | None = None  # the phase that failed (None: ran to the end)
    left: str | None = None  # what is left running, and how to go on, when it stopped
    exit_code: int = EXIT_OK
    agents: list[dict[str, Any]] = Field(default_factory=list)  # the agents' last states (from the wait)


class Phases(BaseModel):
    """The four phases as callables (the CLI's up and down; the wait and collect of their modules)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    up: Callable[[], int]
    wait: Callable[..., Any]
    collect: Callable[..., Any]
    down: Callable[[], int]


def default_wait() -> Callable[..., Any]:
    from jackin.agents.wait import wait  # lazy: the agents' wait loop, needed by fleet.run alone

    return wait


class QueueWait(BaseModel):
    """fleet.work's end as the run's wait phase reads a wait's (``held``, ``reason``, ``agents``, ``errors``)."""

    model_config = ConfigDict(extra="forbid")

    held: bool
    reason: str
    agents: list[dict[str, Any]] = Field(default_factory=list)  # one per task failed: the run's exit 5
    errors: dict[str, str] = Field(default_factory=dict)


def queue_wait(spec: Any, *, until: str = "done", timeout: float | None = None,
               on_change: Callable[[Any], None] = lambda _: None) -> QueueWait:  # fmt: skip
    """The wait phase of a fleet whose spec has ``tasks:``: they are queued (each once) and served by fleet.work's
    loop until the queue is empty or ``timeout`` passes (``jackin.work.loop``)."""
    from jackin.work import loop, queue  # lazy: the loop, needed by a run with tasks alone

    ids = [t.id for t in queue.from_spec(spec)]
    result = loop.work(spec, deadline=None if timeout is None else time.time() + timeout)
    states = {t.id: t.state for t in queue.listed(spec)}
    failed = [{"state": "failed"} for i in ids if states.get(i) == "failed"]  # this run's tasks, not earlier ones
    return QueueWait(held=result.reason == "empty", reason=result.reason, agents=failed,
                     errors=result.progress.unreachable)  # fmt: skip


def default_collect() -> Callable[..., Any]:
    from jackin.work.collect import collect  # lazy: Fabric and paramiko, needed by fleet.run alone

    return collect


def wait_limit(timeout: float | None, ttl_left: float | None) -> tuple[float | None, str]:
    """How long the wait may last: the smaller of ``--timeout`` and the time-to-live left (never
    below zero), and which of them it is."""
    limits = [(t, why) for t, why in ((timeout, "--timeout"), (ttl_left, "the time-to-live")) if t is not None]
    if not limits:
        return None, ""
    seconds, why = min(limits, key=lambda item: item[0])
    return max(0.0, seconds), why


def ttl_left(fleet: FleetSpec) -> float | None:
    """Seconds the wait may last under the fleet's time-to-live (None: it has none), ending a little
    before the hosts stop the agents so the collect runs while they still do. Asked after the up,
    which fixes the deadline."""
    found = ttl.status(fleet)
    left = None if found.ttl is None else found.left if found.left is not None else float(found.ttl)
    if left is not None and found.ttl:
        left -= min(TTL_MARGIN, found.ttl / 10)
    return left


def _left(fleet: str, inventory: str | None, phase: Phase) -> str:
    i = f" -i {inventory}" if inventory else ""
    if phase == "up":
        return (f"whatever fleet.up brought up of fleet {fleet} is left as it is (inv fleet.status{i} shows it); "
                f"fix the cause and run inv fleet.run{i} again, or remove it with inv fleet.down{i}")  # fmt: skip
    if phase == "wait":
        return (f"fleet {fleet} is left running, nothing collected; go on by hand: inv fleet.wait{i}, "
                f"inv fleet.collect{i}, then inv fleet.down{i}")  # fmt: skip
    if phase == "collect":
        return (f"fleet {fleet} is left running and NOT torn down (its agents' work is only on the hosts); "
                f"retry with inv fleet.collect{i}, then inv fleet.down{i}")  # fmt: skip
    return (f"the agents' work was collected; fleet.down of fleet {fleet} did not finish: what it says above "
            f"is left; run inv fleet.down{i} again")  # fmt: skip


def _failed(outcome: RunOutcome, phase: Phase, detail: str, code: int, inventory: str | None) -> RunOutcome:
    detail = clean(detail, 2000) or ""  # it may carry a host's or an agent's text (stderr, a reason)
    outcome.phases.append(PhaseResult(phase=phase, status="failed", detail=detail, exit_code=code or EXIT_FAILED))
    outcome.stopped_at, outcome.exit_code = phase, code or EXIT_FAILED
    outcome.left = _left(outcome.fleet, inventory, phase)
    for later in PHASES[PHASES.index(phase) + 1 :]:
        outcome.phases.append(PhaseResult(phase=later, status="skipped", detail=f"not run: {phase} failed"))
    return outcome


def _problems(result: Any) -> tuple[list[str], bool]:
    """A collect result's failures, whatever its shape (``jackin.work.collect.CollectReport``: ``failed``
    agents and ``unreachable`` hosts; else ``errors`` or ``ok``), and whether a host was unreachable."""
    found = [f"{getattr(a, 'host', '?')} {getattr(a, 'instance', '?')}: {getattr(a, 'reason', None) or 'failed'}"
             for a in (getattr(result, "failed", None) or [])]  # fmt: skip
    unreachable = getattr(result, "unreachable", None) or {}
    found += [f"{host}: unreachable: {why}" for host, why in unreachable.items()]
    errors = getattr(result, "errors", None) or []
    found += [f"{k}: {v}" for k, v in errors.items()] if isinstance(errors, dict) else [str(e) for e in errors]
    if not found and getattr(result, "ok", True) is False:
        found.append("collect did not succeed")
    return found, bool(unreachable)


def run(spec: Any, phases: Phases, *, inventory: str | None = None, timeout: float | None = None,
        ttl_left: float | None | Callable[[], float | None] = None,
        on_phase: Callable[[Phase, str], None] = lambda *_: None,
        on_change: Callable[[Any], None] = lambda _: None) -> RunOutcome:  # fmt: skip
    """Run the four phases in order, stopping at the first that fails (see the module's docstring).
    ``ttl_left``: seconds of the time-to-live left (None: no time-to-live), or a function that says
    so, asked once the up is done: the deadline is fixed by the up, and the wait starts after it."""
    outcome = RunOutcome(fleet=spec.fleet.name)
    on_phase("up", "start")
    code = phases.up()
    if code != EXIT_OK:
        return _failed(outcome, "up", f"fleet.up exited {code}", code, inventory)
    outcome.phases.append(PhaseResult(phase="up", status="ok"))

    limit, why = wait_limit(timeout, ttl_left() if callable(ttl_left) else ttl_left)
    on_phase("wait", "until every agent is done or failed" + (f" (at most {limit:.0f} s: {why})" if why else ""))
    started = time.monotonic()
    try:
        waited = phases.wait(spec, until="done", timeout=limit, on_change=on_change)
    except JackinError as error:
        return _failed(outcome, "wait", error.message, EXIT_CONNECT if isinstance(error, ConnectError) else 1,
                       inventory)  # fmt: skip
    outcome.agents = [a.model_dump() if hasattr(a, "model_dump") else dict(a) for a in getattr(waited, "agents", [])]
    states = [a.get("state") for a in outcome.agents]
    reason = getattr(waited, "reason", "")
    if reason == "unreachable":
        return _failed(outcome, "wait", "a host could not be read: " + "; ".join(
            f"{h}: {e}" for h, e in (getattr(waited, "errors", {}) or {}).items()), EXIT_CONNECT, inventory)  # fmt: skip
    timed_out = not getattr(waited, "held", False)
    detail = (f"{why} passed after {time.monotonic() - started:.0f} s before every agent finished" if timed_out
              else "every agent finished")  # fmt: skip
    detail += f" ({', '.join(f'{states.count(s)} {s}' for s in sorted(set(map(str, states))))})" if states else ""
    outcome.phases.append(PhaseResult(phase="wait", status="ok", detail=detail,
                                      exit_code=EXIT_TIMEOUT if timed_out else EXIT_OK))  # fmt: skip

    on_phase("collect", "each finished agent's branch and handoff")
    try:
        # Every agent, whatever its state (failed, or still working at the timeout, too): nothing is
        # torn down before its work is collected; an agent that cannot be collected stops the loop.
        collected = phases.collect(spec, agents=[a.name for a in spec.fleet.agents], into=None)
    except JackinError as error:
        return _failed(outcome, "collect", error.message, EXIT_CONNECT if isinstance(error, ConnectError) else 1,
                       inventory)  # fmt: skip
    problems, unreachable = _problems(collected)
    if problems:
        return _failed(outcome, "collect", "; ".join(problems), EXIT_CONNECT if unreachable else EXIT_FAILED,
                       inventory)  # fmt: skip
    outcome.phases.append(PhaseResult(phase="collect", status="ok"))

    on_phase("down", "fleet.down, with its final snapshot")
    code = phases.down()
    if code != EXIT_OK:
        return _failed(outcome, "down", f"fleet.down exited {code}", code, inventory)
    outcome.phases.append(PhaseResult(phase="down", status="ok"))
    outcome.exit_code = EXIT_TIMEOUT if timed_out else EXIT_AGENT_FAILED if "failed" in states else EXIT_OK
    return outcome
