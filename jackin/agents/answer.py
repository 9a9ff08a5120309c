"""``agent.answer``: unblock a blocked agent by writing the operator's answer into its workspace.

The answer is written AS THE AGENT, on its host, into its workspace (``jackin.facts.agent_files``'
``WRITE``: switched to the container's uid:gid, the text on stdin, never in a command line): into
``.jackin`` (checked to be inside the workspace), a file of a new name created exclusively, renamed
over ``answer``, so nothing the agent planted (a FIFO at ``answer.tmp``, a link) is opened or
followed; the agent's entrypoint consumes (removes) ``answer`` and goes on. Refused, with nothing
written, unless the agent's state (read in the same way as fleet.status) is ``blocked``; a write the
host refuses is that agent's error (exit 1), said in the host's words.
"""

from __future__ import annotations

import io
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

from jackin import hostpaths
from jackin.agents import state as derivation
from jackin.agents.read import agents_command, parse_agents
from jackin.agents.state import AgentFacts
from jackin.errors import ConnectError, JackinError, RemoteCommandError, SpecError
from jackin.facts import agent_files
from jackin.lab import providers
from jackin.plan import fleet as planning
from jackin.plan import placement
from jackin.plan.make import record
from jackin.spec import Inventory
from jackin.spec.values import decode_utf8
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.ssh import SshTarget, connect

MAX_ANSWER = 16384  # bytes (UTF-8) of an answer
ANSWER_DIR, ANSWER_NAME = ".jackin", "answer"  # /workspace/.jackin/answer in the agent's container


class NotBlocked(JackinError):
    """The agent is not waiting for an answer: nothing was written (exit 1)."""


class Answered(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    container: str
    question: str | None
    size: int  # bytes delivered


def read_text(stream: BinaryIO) -> str:
    """The answer read from ``stream`` (``-``: stdin) as bytes, at most ``MAX_ANSWER`` of them, then decoded."""
    data = stream.read(MAX_ANSWER + 1)
    if len(data) > MAX_ANSWER:
        raise SpecError(f"stdin holds more than {MAX_ANSWER} bytes (at most {MAX_ANSWER} are sent); nothing was sent")
    return decoded(data, what="stdin")


def decoded(data: bytes, *, what: str) -> str:
    """``data`` (stdin's, or an argument's as the command line gave it) as text; SpecError (exit 2, before
    anything is read or sent anywhere) naming the first byte that is not UTF-8 and its offset."""
    try:
        return decode_utf8(data)
    except ValueError as error:
        raise SpecError(f"{what} is not UTF-8 text: {error}; nothing was sent") from None


def check_text(text: str) -> bytes:
    """The answer as it is written (UTF-8, ending in a newline), or SpecError: empty or too large."""
    if not text.strip():
        raise SpecError("the answer is empty: give the text to send (or - to read it from stdin)")
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8")
    if len(data) > MAX_ANSWER:
        raise SpecError(f"the answer is {len(data)} bytes; at most {MAX_ANSWER} are sent")
    return data


def check_instance(spec: Inventory, instance: str) -> None:
    names = [i for _, i in planning.instances(spec.fleet)]
    if instance not in names:
        raise SpecError(f"no agent instance {instance!r} in fleet {spec.fleet.name!r}",
                        hint=f"expected one of: {', '.join(names)}")  # fmt: skip


def choose(instance: str, found: dict[str, derivation.AgentState | JackinError]) -> str:
    """The host to answer on, from each host's state of ``instance`` (or the error reading it): the
    one host where it is blocked. Raises NotBlocked when it is blocked nowhere that was read, and
    SpecError when it is blocked on several (name one with --host)."""
    states = {h: s for h, s in found.items() if not isinstance(s, JackinError)}
    blocked = [h for h, s in states.items() if s.state == "blocked"]
    if len(blocked) == 1:
        return blocked[0]
    if blocked:
        raise SpecError(f"{instance} is blocked on {len(blocked)} hosts ({', '.join(blocked)}): name one with --host")
    errors = [e for e in found.values() if isinstance(e, JackinError)]
    if not states and errors:
        raise errors[0]
    shown = "; ".join(f"{h}: {s.state}" + (f" ({s.message})" if s.message else "") for h, s in states.items())
    unread = f" (not read: {', '.join(h for h, s in found.items() if isinstance(s, JackinError))})" if errors else ""
    raise NotBlocked(f"{instance} is not blocked, nothing written: {shown or 'no container'}{unread}",
                     hint="inv fleet.status shows each agent's state; only a blocked agent takes an answer")  # fmt: skip


def answer(spec: Inventory, instance: str, text: str, *, host: str | None = None) -> Answered:
    """Deliver ``text`` to ``instance`` (on ``host``, or the one host where it is blocked)."""
    check_instance(spec, instance)
    data = check_text(text)
    targets = providers.targets(spec, bring_up=False)
    with Ledger() as ledger:  # the hosts it is placed on (jackin/plan/placement.py); each: every one of its agent's
        placed = placement.recorded(spec, record(spec, ledger)).hosts
    if any(placed.values()):
        targets = [t for t in targets if instance in placed.get(t.name, [])]
    if host:
        if host not in [t.name for t in targets]:
            raise SpecError(f"--host {host!r} is not a host of fleet {spec.fleet.name!r}",
                            hint=f"its hosts: {', '.join(t.name for t in targets) or 'none (is it up?)'}")  # fmt: skip
        targets = [t for t in targets if t.name == host]
    stale = derivation.stale_after(spec.fleet)
    reads = gather(targets, agents_command(spec.fleet.name), parse_agents)
    found: dict[str, derivation.AgentState | JackinError] = {}
    facts: dict[str, AgentFacts] = {}
    for target in targets:
        read = reads[target.name]
        if isinstance(read, JackinError):
            found[target.name] = read
            continue
        facts[target.name] = read.get(instance) or AgentFacts(container="missing", now=0)
        found[target.name] = derivation.derive(facts[target.name],
                                               stale_after=stale.get(instance, derivation.STALE_AFTER))  # fmt: skip
    chosen = choose(instance, found)
    state = found[chosen]
    assert not isinstance(state, JackinError)
    container = hostpaths.user_name(spec.fleet.name, instance)
    workspace = f"{hostpaths.fleet_dir(spec.fleet.name)}/{instance}/workspace"
    deliver(next(t for t in targets if t.name == chosen), workspace, _user(facts[chosen], chosen), data)
    return Answered(host=chosen, instance=instance, container=container, question=state.question, size=len(data))


def _user(facts: AgentFacts, host: str) -> str:
    """The container's ``uid:gid``, checked: an agent never runs as root or a system user."""
    uid, _, gid = (facts.user or "").partition(":")
    gid = gid or uid
    if not (uid.isdigit() and gid.isdigit() and int(uid) >= 1000 and int(gid) >= 1000):
        raise JackinError(f"the container runs as {facts.user!r}, not an agent's uid:gid: nothing written", host=host)
    return f"{int(uid)}:{int(gid)}"


def deliver(target: SshTarget, workspace: str, user: str, data: bytes) -> None:
    """Write ``data`` to the agent's answer file as ``user`` (``uid:gid``), in ``workspace`` on the host."""
    uid, _, gid = user.partition(":")
    command = agent_files.write_command(int(uid), int(gid), workspace, ANSWER_DIR, ANSWER_NAME, cap=MAX_ANSWER)
    try:
        with connect(target) as conn:
            result = conn.run(command, hide=True, warn=True, timeout=30, in_stream=io.StringIO(data.decode("utf-8")))
    except ConnectError:
        raise
    except Exception as error:  # noqa: BLE001 - a dropped connection or timeout: that host's error
        raise ConnectError(f"answer not delivered: {type(error).__name__}: {' '.join(str(error).split())[:200]}",
                           host=target.name) from None  # fmt: skip
    if result.exited != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:]) or "no message"
        raise RemoteCommandError(f"answer not delivered (exit {result.exited}): {tail}", host=target.name)
