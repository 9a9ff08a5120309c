"""``fleet.wait``: poll the fleet's agent states until a condition holds, reporting each change.

One round trip per host per poll (``jackin.agents.read.agents_command``: no CPU sampling, no policy
read), every ``every`` seconds. The agents waited on are the spec's instances on the hosts they are placed on
(jackin/plan/placement.py): one without a container is ``unknown`` until it has one, as is one placed on no host
yet or on a host that left the inventory. Conditions (``until``):

    done     every agent is done, failed or idle (idle: it has no work, so it will never be done)
    blocked  some agent is blocked (waiting for the operator's answer); it ends unheld, reason ``settled``,
             when every agent is done, failed or idle (none can block any more)
    any      some agent's state changed since the first poll

Exit status of the result (``WaitResult.exit_code``, documented in the README's "Agent state"):
0 the condition held (``done``: no agent failed); 1 ``done`` held and some agent failed (or a ``blocked``
wait ended settled with one failed; settled without a failure: 0);
3 a host could not be read on ``UNREACHABLE_POLLS`` polls in a row; 4 the timeout passed first.

The clock, the sleep and the poll are parameters, so the logic is tested without hosts or time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents import state as derivation
from jackin.agents.read import agent_states, agents_command, parse_agents
from jackin.agents.state import AgentState
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, ConnectError, JackinError, SpecError
from jackin.lab import providers
from jackin.plan import placement
from jackin.plan.make import record
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

Until = Literal["done", "blocked", "any"]
UNTIL = ("done", "blocked", "any")
EXIT_TIMEOUT = 4
EVERY = 2.0  # seconds between polls
UNREACHABLE_POLLS = 5  # a host that fails this many polls in a row ends the wait (exit 3)
SETTLED = ("done", "failed", "idle")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentView(_Model):
    """One agent on one host, as the last poll saw it."""

    host: str
    instance: str
    state: str
    message: str = ""
    question: str | None = None
    commit: str | None = None


class Change(_Model):
    """An agent's state changed (``old`` None: its first state, from the first poll)."""

    at: float  # epoch seconds on the operator's clock
    host: str
    instance: str
    old: str | None
    new: str
    message: str = ""
    question: str | None = None


class Poll(_Model):
    """One poll: each agent's state (key ``host/instance``), and the hosts that could not be read."""

    agents: dict[str, AgentView]
    errors: dict[str, str] = Field(default_factory=dict)  # host -> why it could not be read
    unreachable: list[str] = Field(default_factory=list)  # hosts not reached (a subset of errors' keys)
    login_error: str | None = None  # why a shared login was not refreshed or pushed (jackin/net/logins.py)


class WaitResult(_Model):
    """How a wait ended. ``reason``: the condition's name when it held, else ``timeout``, ``unreachable``,
    or ``settled`` (``blocked``: every agent is done, failed or idle, so none can block)."""

    fleet: str
    until: Until
    held: bool
    reason: str
    exit_code: int
    elapsed: float
    polls: int
    agents: list[AgentView]
    changes: list[Change]
    errors: dict[str, str] = Field(default_factory=dict)  # hosts the last poll could not read
    login_error: str | None = None  # the last poll's: a shared login not refreshed or pushed

    @property
    def failed(self) -> list[AgentView]:
        return [a for a in self.agents if a.state == "failed"]


def check_until(until: str) -> Until:
    if until not in UNTIL:
        raise SpecError(f"--until expects one of {', '.join(UNTIL)}, got {until!r}")
    return cast(Until, until)  # one of UNTIL: checked just above


def condition(until: Until, poll: Poll, changed: bool) -> tuple[bool, int]:
    """(held, exit code if it held) for one poll; ``changed``: some agent changed since the first poll."""
    states = [a.state for a in poll.agents.values()]
    if until == "blocked":
        return "blocked" in states, EXIT_OK
    if until == "any":
        return changed, EXIT_OK
    held = bool(states) and not poll.errors and all(s in SETTLED for s in states)
    return held, EXIT_FAILED if "failed" in states else EXIT_OK


def settled(poll: Poll) -> bool:
    """Every agent done, failed or idle, every host read: no agent of this poll can change any more."""
    states = [a.state for a in poll.agents.values()]
    return bool(states) and not poll.errors and all(s in SETTLED for s in states)


def changes(before: dict[str, AgentView], after: dict[str, AgentView], at: float) -> list[Change]:
    """The agents whose state differs (new agents included: ``old`` None), in roll-up order."""
    found = [Change(at=at, host=a.host, instance=a.instance, old=before[k].state if k in before else None,
                    new=a.state, message=a.message, question=a.question)
             for k, a in after.items() if k not in before or before[k].state != a.state]  # fmt: skip
    return sorted(found, key=lambda c: (derivation.order(c.new), c.host, c.instance))


def wait(
    spec: Inventory,
    *,
    until: Until = "done",
    timeout: float | None = None,
    on_change: Callable[[Change], None] = lambda _: None,
    every: float = EVERY,
    poll: Callable[[], Poll] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Poll until ``until`` holds, ``timeout`` seconds pass (None: no limit), or a host stays
    unreadable for UNREACHABLE_POLLS polls; ``on_change`` gets each change as it is seen.
    ``poll`` defaults to reading the fleet's hosts (never bringing a lab up)."""
    until = check_until(until)
    read = poll or poller(spec)
    start = clock()
    seen: dict[str, AgentView] = {}
    history: list[Change] = []
    failing: dict[str, int] = {}
    count = 0
    reason: str
    while True:
        current = keep_last(read(), seen)
        count += 1
        new = changes(seen, current.agents, wall())
        for change in new:
            on_change(change)
        history += new
        changed = count > 1 and bool(new)
        seen = current.agents
        failing = {h: failing.get(h, 0) + 1 for h in current.errors}
        held, code = condition(until, current, changed)
        reason, stop = until if held else "", held
        if not held and until == "blocked" and settled(current):  # none of them can block any more
            reason, code, stop = (
                "settled",
                EXIT_FAILED if any(a.state == "failed" for a in seen.values()) else EXIT_OK,
                True,
            )
        elif not held and any(n >= UNREACHABLE_POLLS for n in failing.values()):
            reason, code, stop = "unreachable", EXIT_CONNECT, True
        elif not held and timeout is not None and clock() - start >= timeout:
            reason, code, stop = "timeout", EXIT_TIMEOUT, True
        if stop:
            agents = sorted(seen.values(), key=lambda a: (derivation.order(a.state), a.host, a.instance))
            return WaitResult(fleet=spec.fleet.name, until=until, held=held, reason=reason, exit_code=code,
                              elapsed=round(clock() - start, 1), polls=count, agents=agents, changes=history,
                              errors=current.errors, login_error=current.login_error)  # fmt: skip
        pause = every if timeout is None else max(0.0, min(every, timeout - (clock() - start)))
        sleep(pause)


def keep_last(current: Poll, seen: dict[str, AgentView]) -> Poll:
    """A host this poll could not read keeps its agents' last seen states (a passing SSH fault is not a
    state change; the host's error is in ``errors``, and ``done`` does not hold while there is one)."""
    agents = {k: seen[k] if a.host in current.errors and k in seen else a for k, a in current.agents.items()}
    return current.model_copy(update={"agents": agents})


def poller(spec: Inventory, *, timeout: float = 8) -> Callable[[], Poll]:
    """Read the fleet's agent states from every host (one round trip each), as ``wait`` polls them."""
    targets = providers.targets(spec, bring_up=False)
    if not targets:
        raise JackinError(f"fleet {spec.fleet.name!r} has no hosts to wait on", hint="bring it up first: inv fleet.up")
    with Ledger() as ledger:  # where each instance lives (jackin/plan/placement.py)
        where = placement.recorded(spec, record(spec, ledger))
    instances = {t.name: where.hosts.get(t.name, []) for t in targets}
    elsewhere = {
        i: f"its host {h} left the inventory (inv agent.move {i} --to HOST)" for i, h in where.stranded.items()
    }
    elsewhere.update({i: "not placed on any host yet (run fleet.up)" for i in where.unplaced})
    stale = derivation.stale_after(spec.fleet)

    shared = any(c.kind == "oauth" for a in spec.fleet.agents for c in a.credentials)

    def poll() -> Poll:
        problem = None
        try:  # a shared login due for its refresh gets it at each poll, before the agents need it
            if shared:
                from jackin.net import logins  # only for a fleet with one: fleet.wait's start stays as light

                logins.keep(spec, targets)
        except JackinError as error:  # said with the result; the agents' 401s show in their states meanwhile
            problem = error.message
        found = read_poll(spec.fleet.name, targets, instances, stale, timeout=timeout)
        for instance, why in elsewhere.items():  # on no host read: unknown, so done does not hold without it
            found.agents[f"-/{instance}"] = view("-", instance, AgentState(state="unknown", message=why))
        return found.model_copy(update={"login_error": problem}) if problem else found

    return poll


def read_poll(fleet: str, targets: list[SshTarget], instances: Mapping[str, list[str]] | list[str],
              stale_after: dict[str, float], *, timeout: float = 8) -> Poll:  # fmt: skip
    """One poll over ``targets``: per host the instances placed there (a list: the same on every host; no
    container: ``unknown``)."""
    results = gather(targets, agents_command(fleet), parse_agents, timeout=timeout)
    agents: dict[str, AgentView] = {}
    errors: dict[str, str] = {}
    unreachable: list[str] = []
    for target in targets:
        result = results[target.name]
        here = instances if isinstance(instances, list) else instances.get(target.name, [])
        if isinstance(result, JackinError):
            errors[target.name] = result.message
            if isinstance(result, ConnectError):
                unreachable.append(target.name)
            states = {i: AgentState(state="unknown", message=f"host not read: {result.message}") for i in here}
        else:
            states = agent_states(result, stale_after)
        for instance in here:
            state = states.get(instance) or AgentState(state="unknown", message="no container")
            agents[f"{target.name}/{instance}"] = view(target.name, instance, state)
    return Poll(agents=agents, errors=errors, unreachable=unreachable)


def view(host: str, instance: str, state: AgentState) -> AgentView:
    return AgentView(host=host, instance=instance, state=state.state, message=state.message,
                     question=state.question, commit=state.commit)  # fmt: skip
