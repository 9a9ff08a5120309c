"""What each agent is doing, derived from what its host shows: pure, no I/O.

Inputs (``AgentFacts``, read by ``jackin.lifecycle.status`` in the one round trip per host): the container's
state, exit code and restart count, its Docker health (status and last check's output), the raw bytes
of the status file the role's entrypoint keeps at ``/workspace/.jackin/status.json`` (read as the
agent, capped), and the host's clock. Output (``AgentState``): one of

    working   the agent says so, its heartbeat is fresh and its healthcheck does not fail
    blocked   the agent waits for the operator (``question``): ``inv agent.answer`` unblocks it; or its
              budget at the credential gateway is spent (``budget spent: ...``): a higher one applied by
              ``fleet.up`` unblocks it
    done      the agent says so (final: a stopped container or a stale heartbeat does not change it)
    failed    the agent says so, or its container exited with an error code
    idle      the agent has no work
    stuck     not done/failed and: its heartbeat is older than the role's ``stale_after``, its
              healthcheck reports unhealthy, or its container is not running (stopped, restarting, paused)
    unknown   no container, or no status file, or one that could not be read (a FIFO, a link out of the
              workspace...), or a malformed one (``message`` says which)

The status file is the agent's (it controls every byte): it is parsed strictly (schema version 1, no
unknown or duplicate keys, finite numbers, UTF-8) and its text is stripped of control characters
before anything shows it.
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jackin.errors import JackinError
from jackin.facts.gateway import GatewayAccount
from jackin.plan import fleet as planning
from jackin.spec import roles

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jackin.spec.models import FleetSpec

STATES = ("blocked", "stuck", "failed", "unknown", "working", "idle", "done")  # the order fleet.status lists them in
State = Literal["working", "blocked", "done", "failed", "idle", "stuck", "unknown"]
Reported = Literal["idle", "working", "blocked", "done", "failed"]
STALE_AFTER = 120.0  # seconds without a heartbeat before a running agent is stuck (a role may say otherwise)
MAX_STATUS = 8192  # bytes of the status file read; a larger file is refused as malformed
MAX_TEXT = 2000  # characters of a message, question or health output kept
MAX_TOKENS = 10**12  # a runtime's reported tokens, at most (the agent writes them: bounded, as all it writes)
MAX_COST = 1e6  # USD
STOP_CODES = (0, 137, 143)  # exit codes of a container stopped (docker stop: TERM, then KILL): not a failure


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(BaseModel):
    """The tokens (and, where the runtime reports it, the cost) a runtime's own output says its run took
    (``roles/common/jackin-digest``): the status file's ``usage``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input_tokens: int = Field(ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(ge=0, le=MAX_TOKENS)
    cost_usd: float | None = Field(None, ge=0, le=MAX_COST, allow_inf_nan=False)

    @property
    def label(self) -> str:
        """``36 in, 21 out, $0.0006`` (the cost when known; ``<$0.0001`` below that)."""
        if self.cost_usd is None:
            cost = ""
        elif 0 < self.cost_usd < 0.0001:
            cost = ", <$0.0001"
        else:
            cost = f", ${self.cost_usd:.4f}"
        return f"{self.input_tokens} in, {self.output_tokens} out{cost}"

    @classmethod
    def of(cls, found: object) -> Usage | None:
        """From a status file's (or a ledger row's) ``usage``; None when absent or not one."""
        try:
            return cls.model_validate(found) if isinstance(found, dict) else None
        except ValidationError:
            return None


class StatusFile(BaseModel):
    """The status file's document, schema version 1 (written by ``roles/common/jackin-entrypoint``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[1]
    state: Reported
    message: str
    question: str | None = None
    heartbeat: float
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,64}$")
    usage: Usage | None = None


class AgentFacts(_Model):
    """What the host shows of one agent: the raw inputs of ``derive``."""

    container: str  # running, exited, restarting, paused, created, dead, removing; or missing (no container)
    user: str | None = None  # the container's configured user ("uid:gid"): whom agent.answer writes as
    exit_code: int | None = None
    restarts: int = 0
    health: str = "none"  # healthy, unhealthy, starting; none (no healthcheck)
    health_output: str | None = None  # the last check's output
    status: bytes | None = None  # the status file's bytes; None: missing, empty or not read
    status_problem: str | None = None  # why it was not read ("is a FIFO, not a regular file"...); None: it was
    now: float  # the host's clock (epoch seconds)
    gateway: GatewayAccount | None = None  # its record at the credential gateway; None: none (or not read)


class AgentState(_Model):
    """An agent's state as the operator sees it (see the module's docstring)."""

    state: State
    message: str = ""  # the agent's own message, or why jackin says stuck/unknown/failed
    question: str | None = None  # blocked: what the agent asks
    reported: Reported | None = None  # the state the status file says, when it parses
    commit: str | None = None
    heartbeat_age: float | None = None  # seconds since the last heartbeat, on the host's clock
    health: str = "none"
    health_output: str | None = None
    usage: Usage | None = None  # what the runtime reported its run took (its status file's usage)
    gateway: GatewayAccount | None = None  # what the credential gateway counted and refused for it


def clean(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """The text with control and format characters (escape sequences, bidi overrides) replaced by a
    space, whitespace runs collapsed, and capped: it comes from the agent and reaches a terminal."""
    if text is None:
        return None
    shown = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)
    shown = " ".join(shown.split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_status_file(raw: bytes) -> StatusFile:
    """The document, or ValueError saying what is wrong with it (one line, safe to show)."""
    if len(raw) > MAX_STATUS:
        raise ValueError(f"larger than {MAX_STATUS} bytes")
    try:  # invalid UTF-8 (e.g. a long message cut inside a character) is replaced, not refused: the
        # state and the question stay readable, and every string is cleaned before it is shown
        data = json.loads(raw.decode("utf-8", errors="replace"), object_pairs_hook=_no_duplicates,
                          parse_constant=_no_constant)  # fmt: skip
    except ValueError as error:
        raise ValueError(f"not JSON: {clean(str(error), 200)}") from None
    try:
        document = StatusFile.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise ValueError(f"{where}: {clean(first['msg'], 200)}") from None
    if not math.isfinite(document.heartbeat):
        raise ValueError("heartbeat: not a finite number")
    return document


def derive(facts: AgentFacts, *, stale_after: float = STALE_AFTER) -> AgentState:
    """The agent's state from what its host shows; see the module's docstring for the rules. A budget the
    gateway says is spent makes a working, failed, stuck or idle agent ``blocked`` with the gateway's words
    (its runtime waits or fails on the 429s; the operator raises the budget): only done stays done."""
    found = _derive(facts, stale_after=stale_after)
    account = facts.gateway
    if account is None:
        return found
    if account.spent and found.state != "done":
        return found.model_copy(update={"state": "blocked", "message": clean(account.spent) or "", "gateway": account,
                                        "question": None})  # fmt: skip
    return found.model_copy(update={"gateway": account})


def _derive(facts: AgentFacts, *, stale_after: float = STALE_AFTER) -> AgentState:
    health: dict[str, object] = {"health": facts.health, "health_output": clean(facts.health_output)}
    if facts.container == "missing":
        return AgentState(state="unknown", message="no container", **health)
    document, problem = None, "no status file (missing or empty)"
    if facts.status_problem:
        problem = f"status file {clean(facts.status_problem, 300)}"
    if facts.status is not None:
        try:
            document = parse_status_file(facts.status)
        except ValueError as error:
            problem = f"malformed status file: {error}"
    said: dict[str, object] = {}
    if document is not None:
        said = {"reported": document.state, "commit": document.commit, "message": clean(document.message) or "",
                "heartbeat_age": round(max(0.0, facts.now - document.heartbeat), 1), "usage": document.usage}  # fmt: skip
        if document.state in ("done", "failed"):  # final, whatever the container or heartbeat does since
            return AgentState(state=document.state, **said, **health)
    if facts.container != "running":
        return _not_running(facts, said, health)
    if facts.health == "unhealthy":
        why = clean(facts.health_output) or "no output"
        return AgentState(state="stuck", **{**said, "message": f"healthcheck unhealthy: {why}"}, **health)
    if document is None:
        return AgentState(state="unknown", message=problem, **health)
    age = facts.now - document.heartbeat
    if age > stale_after:
        message = f"no heartbeat for {int(age)}s (more than {stale_after:g}s); last said {document.state}"
        message += f": {said['message']}" if said["message"] else ""
        return AgentState(state="stuck", **{**said, "message": message}, **health)
    question = clean(document.question) if document.state == "blocked" else None
    return AgentState(state=document.state, question=question, **said, **health)


def _not_running(facts: AgentFacts, said: dict[str, object], health: dict[str, object]) -> AgentState:
    """A container that is not running and whose agent has not reported done or failed."""
    code = facts.exit_code
    if facts.container in ("exited", "dead") and code not in (None, *STOP_CODES):
        return AgentState(state="failed", **{**said, "message": f"container {facts.container} with code {code}"},
                          **health)  # fmt: skip
    if facts.container == "created":
        return AgentState(state="unknown", **{**said, "message": "container created, never started"}, **health)
    was = f"; last said {said['reported']}" if said else ""
    if facts.container == "restarting":
        message = f"container restarting (exit code {code}, {facts.restarts} restart(s)){was}"
    else:
        message = f"container {facts.container}" + (f" (exit code {code})" if code is not None else "") + was
    return AgentState(state="stuck", **{**said, "message": message}, **health)


def rollup(states: Sequence[str]) -> str:
    """``4 agents: 1 blocked, 2 working, 1 done`` (states in ``STATES`` order; none: ``0 agents``)."""
    counts = [f"{states.count(s)} {s}" for s in STATES if s in states]
    noun = "agent" if len(states) == 1 else "agents"
    return f"{len(states)} {noun}" + (": " + ", ".join(counts) if counts else "")


def order(state: str) -> int:
    """Sort key: blocked first, then the ones needing a look (stuck, failed, unknown), then the rest."""
    return STATES.index(state) if state in STATES else len(STATES)


def stale_after(fleet: FleetSpec) -> dict[str, float]:
    """Per instance of ``fleet`` (a FleetSpec), its role's ``state.stale_after`` (jackin/spec/roles.py). A
    role that does not load leaves its instances at STALE_AFTER: role.validate reports what is wrong."""
    found: dict[str, float] = {}
    for agent in fleet.agents:
        try:
            seconds = float(roles.load(agent.role).state.stale_after)
        except JackinError:
            continue
        found.update({i: seconds for a, i in planning.instances(fleet) if a == agent.name})
    return found
