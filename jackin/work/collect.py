"""fleet.collect and fleet.review: bring each agent's branch and handoff back, and what a review shows of them
(as data: the CLI renders it, jackin/cli/work.py).

``collect`` reads, over strict SSH (one Fabric connection per host, hosts in parallel), for each
agent it collects: its status file, its handoff, its ``work.json`` (the commit it started from) and
its branch as a git bundle. The status file and the handoff are read on the host *as the agent*,
never blocking, checked to be regular files inside its workspace, capped and under a deadline
(``jackin.facts.agent_files``): one that is a FIFO, a link out of the workspace or unreadable fails
that agent's collection, saying so, before anything is fetched. ``work.json`` (root's, mounted
read-only) and the bundle are read *inside the agent's container as the agent* (``docker exec --user
UID:GID``, a byte cap on the stream): root never follows a path the agent controls, and every name
in those commands (container, uid, the branch ``jackin/<instance>``) is jackin's own, quoted. On
this machine the bundle is streamed into a file of a quarantine repository (never held whole in
memory), checked there with ``git fsck --strict`` and only then fetched (``jackin.work.quarantine``) under
``refs/jackin/<fleet>/<host>/<instance>`` into the local repository: the agent's source
repository when it is a local path (refs only: its branches, index and worktree are never
touched), else a bare repository under the state dir; ``into`` overrides. A bundle that fails the
check fails that agent's collection alone, naming fsck's message ids. The handoff is kept
at ``<state dir>/work/<fleet>/handoffs/<host>/<instance>.md`` and checked for evidence
(``jackin.work.handoffs``). Each collection is recorded in the ledger (``collections``).

Every agent of a fleet runs on every host, so the ref and the handoff path name the host too.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents.state import Usage, clean
from jackin.errors import ConnectError, JackinError, RemoteCommandError, SpecError
from jackin.facts import agent_files
from jackin.facts.gateway import MAX_SECTION, GatewayAccount, gateway_accounts, gateway_files
from jackin.lab.providers import targets
from jackin.paths import private_dir, state_dir
from jackin.plan import fleet as planning
from jackin.plan.make import make_plan
from jackin.spec import Inventory
from jackin.spec.models import is_git_url
from jackin.store.ledger import Ledger
from jackin.transport import channel as reader
from jackin.transport import fanout
from jackin.transport.ssh import SshTarget, connect
from jackin.work import handoffs, quarantine
from jackin.work.bundles import WorkError, fleet_repo, git

if TYPE_CHECKING:
    from fabric import Connection

MAX_BUNDLE = 512 * 1024 * 1024
MAX_STATUS = 64 * 1024
STATUS_FILE = ".jackin/status.json"  # in the agent's workspace (/workspace in its container)
HANDOFF_FILE = ".jackin/handoff.md"
REPO_DIR = "/workspace/repo"
READ_TIMEOUT = 600
_SSH_FAULTS = (Exception,)  # over SSH, any fault of a host (paramiko raises many kinds) is that host's error
STATES = ("idle", "working", "blocked", "done", "failed")


class AgentCollect(BaseModel):
    """One agent instance on one host: what was collected, or why not."""

    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    agent: str
    state: str = "unknown"  # from its status file when read
    result: str = "skipped"  # collected, skipped (not done and not asked for), failed
    reason: str | None = None
    repo: str | None = None  # the local repository the branch was fetched into
    ref: str | None = None
    commit: str | None = None
    source_commit: str | None = None  # the commit the agent started from (its work.json)
    handoff: str | None = None  # where the handoff was kept on this machine
    evidence: handoffs.Evidence | None = None
    checks: list[str] = Field(default_factory=list)  # git fsck's message ids that refused its bundle
    usage: Usage | None = None  # the tokens (and cost) its runtime reported (its status file's usage)
    gateway: GatewayAccount | None = None  # what the credential gateway counted and refused for it


class CollectReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    agents: list[AgentCollect] = Field(default_factory=list)
    unreachable: dict[str, str] = Field(default_factory=dict)  # host -> why

    @property
    def collected(self) -> list[AgentCollect]:
        return [a for a in self.agents if a.result == "collected"]

    @property
    def failed(self) -> list[AgentCollect]:
        return [a for a in self.agents if a.result == "failed"]


# --- the local side -----------------------------------------------------------------------


def ref_name(fleet: str, host: str, instance: str) -> str:
    ref = f"refs/jackin/{fleet}/{host}/{instance}"
    if git("check-ref-format", ref, check=False).returncode != 0:
        raise SpecError(f"host name {host!r} cannot be part of a git ref ({ref})")
    return ref


PSEUDO_FILESYSTEMS = ("/proc", "/sys")  # the kernel's: nothing can be created there, whatever access() says to root
INTO_HINT = "give a git repository you can write to, or a path that does not exist yet in a directory you can write to"


def check_into(into: str) -> str:
    """``--into`` checked before any host is touched (SpecError, exit 2), its real path (symlinks resolved):
    an existing git repository whose git directory this user can write in, or a path where ``git init``
    can make one (its nearest existing parent a directory this user can create in). Never under /proc or
    /sys. Writing is tried, not inferred from permission bits (root passes those): a file is made and
    removed. Nothing else is created here."""
    where = f"--into {into}"
    real = Path(os.path.realpath(Path(into).expanduser()))
    pseudo = next((p for p in PSEUDO_FILESYSTEMS if real == Path(p) or Path(p) in real.parents), None)
    if pseudo:
        raise SpecError(f"{where}: {real} is under {pseudo}, a filesystem of the kernel's: no git repository "
                        "can be made there", hint=INTO_HINT)  # fmt: skip
    if real.exists():
        if not real.is_dir():
            raise SpecError(f"{where}: {real} exists and is not a directory", hint=INTO_HINT)
        found = git("-C", str(real), "rev-parse", "--absolute-git-dir", check=False)
        if found.returncode != 0:
            raise SpecError(f"{where}: {real} is not a git repository", hint=INTO_HINT)
        _writable(Path(found.stdout.decode(errors="replace").strip()), where)
        return str(real)
    parent = next(p for p in real.parents if p.exists())  # "/" exists
    if not parent.is_dir():
        raise SpecError(f"{where}: {real} cannot be made: {parent} is not a directory", hint=INTO_HINT)
    _writable(parent, where)
    return str(real)


def _writable(directory: Path, where: str) -> None:
    """Make and remove a file in ``directory``; SpecError when that fails (read-only, no permission...)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".jackin-check-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        raise SpecError(f"{where}: cannot write in {directory} ({error.strerror or type(error).__name__})",
                        hint=INTO_HINT) from None  # fmt: skip


def local_repo(inventory: Inventory, agent: str, into: str | None) -> str:
    """Where an agent's branch is fetched: ``into``, else its source repository when that is a local
    path, else a bare repository under the state dir (made on first use)."""
    if into:
        path = Path(into).expanduser().absolute()
    else:
        spec = next(a for a in inventory.fleet.agents if a.name == agent)
        if spec.work is not None and not is_git_url(spec.work.repo):
            return spec.work.repo
        return fleet_repo(inventory.fleet.name)
    if not path.exists():
        git("init", "--quiet", "--bare", str(path))
    elif git("-C", str(path), "rev-parse", "--git-dir", check=False).returncode != 0:
        raise SpecError(
            f"--into {path}: not a git repository", hint="give a git repository, or a path that does not exist yet"
        )
    return str(path)


def on_branch(repo: str, ref: str, since: str | None = None) -> Callable[[str], str | None]:
    """``handoffs.check``'s lookup: a word naming a commit reachable from ``ref`` -> its full id.
    ``since``: the commit the agent started from; a commit already in it is not the agent's work."""

    def lookup(word: str) -> str | None:
        found = git("-C", repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{word}^{{commit}}",
                    check=False)  # fmt: skip
        commit = found.stdout.decode().strip()
        if found.returncode != 0 or not commit:
            return None
        inside = git("-C", repo, "merge-base", "--is-ancestor", commit, ref, check=False).returncode == 0
        if inside and since:
            inside = git("-C", repo, "merge-base", "--is-ancestor", commit, since, check=False).returncode != 0
        return commit if inside else None

    return lookup


def handoff_path(fleet: str, host: str, instance: str) -> Path:
    return private_dir(state_dir() / "work" / fleet / "handoffs" / host) / f"{instance}.md"


# --- the remote side ----------------------------------------------------------------------


def _exec(conn: Connection, command: str, *, cap: int, host: str, timeout: float = READ_TIMEOUT,
          into: BinaryIO | None = None) -> tuple[int, bytes, bytes]:  # fmt: skip
    """Run ``command`` on the host; its exit, stdout as bytes (or, with ``into``, written there as it
    comes and never held whole: b""), stderr. More than ``cap`` bytes of stdout is an error, found
    before they are kept."""
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise ConnectError("the SSH connection is closed", host=host)
    channel = transport.open_session()
    channel.settimeout(timeout)
    out, err = bytearray(), bytearray()
    size = 0

    def stdout(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > cap:
            raise RemoteCommandError(f"output larger than {cap} bytes: refused", host=host)
        if into is None:
            out.extend(data)
            return
        try:
            into.write(data)
        except OSError as error:  # this machine's disk, not the connection
            raise WorkError(f"the output cannot be written here: {error.strerror or error}") from None

    def stderr(data: bytes) -> None:
        err.extend(data[: max(0, 65536 - len(err))])

    try:
        channel.exec_command(command)
        try:
            reader.pump(channel, out=stdout, err=stderr, deadline=time.monotonic() + timeout, poll=0.02)
        except TimeoutError:
            raise ConnectError(f"no answer within {timeout:.0f}s", host=host) from None
        return channel.recv_exit_status(), bytes(out), bytes(err)
    except (OSError, EOFError) as error:
        raise ConnectError(f"the connection failed: {error}", host=host) from None
    finally:
        channel.close()


def as_agent(agent: planning.AgentPlan, *argv: str) -> str:
    """``docker exec`` of ``argv`` in the agent's container as the agent (its uid and group)."""
    return shlex.join(["docker", "exec", "--user", f"{agent.uid}:{agent.uid}", agent.container, *argv])


def read_file(conn: Connection, agent: planning.AgentPlan, path: str, cap: int, *, host: str) -> bytes | None:
    """A file in the agent's container (jackin's own, read-only: ``work.json``), read as the agent and
    capped; None when it cannot be read."""
    code, out, _ = _exec(conn, as_agent(agent, "head", "-c", str(cap), path), cap=cap, host=host, timeout=30)
    return out if code == 0 else None


def read_workspace_file(conn: Connection, agent: planning.AgentPlan, relative: str, cap: int, *,
                        host: str) -> bytes | None:  # fmt: skip
    """A file of the agent's workspace (``relative`` to it), read on the host as the agent (see the
    module's docstring): its first ``cap`` bytes, or None when there is no such file (or it is empty).
    RemoteCommandError when it cannot be read: a FIFO, a link out of the workspace, a denied open..."""
    command = agent_files.read_command([("file", agent.uid, agent.uid, agent.workspace, relative)], cap=cap)
    code, out, err = _exec(conn, command, cap=2 * cap + 4096, host=host, timeout=60)
    try:
        read = agent_files.parse_answers(out.decode("ascii")).get("file") if code == 0 else None
    except (ValueError, UnicodeDecodeError):
        read = None
    if read is None:
        tail = " ".join(err.decode(errors="replace").split())[-200:] or "no message"
        raise RemoteCommandError(f"/workspace/{relative}: the host's reader failed (exit {code}): {tail}", host=host)
    if read.problem:
        raise RemoteCommandError(f"/workspace/{relative} {read.problem}", host=host)
    return read.data[:cap] if read.data else None


def read_gateway(conn: Connection, agents: Sequence[planning.AgentPlan], *, host: str) -> dict[str, GatewayAccount]:
    """The agents' records at the host's credential gateway, in one round trip (an agent with none, or one that
    cannot be read, is left out: the collection goes on without it)."""
    through = [a for a in agents if a.gateway is not None]
    if not through:
        return {}
    try:
        code, out, _ = _exec(conn, gateway_files(through[0].fleet), cap=MAX_SECTION + 4096, host=host, timeout=30)
    except JackinError:
        return {}
    found = gateway_accounts(out.decode("ascii", errors="replace")) if code == 0 else {}
    return {a.instance: account for a in through
            if (account := GatewayAccount.parse(found.get(f"{a.instance}.json"))) is not None}  # fmt: skip


def read_status(conn: Connection, agent: planning.AgentPlan, *, host: str) -> dict:
    """The agent's status file as a dict ({} when absent or not JSON); RemoteCommandError when it
    cannot be read (``read_workspace_file``)."""
    data = read_workspace_file(conn, agent, STATUS_FILE, MAX_STATUS, host=host)
    try:
        found = json.loads(data or b"")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def state_of(status: dict) -> str:
    """The state a status file names, when it is one of the contract's (agent-written text is never shown raw)."""
    state = status.get("state")
    return state if state in STATES else "unknown"


def _started_from(data: bytes | None) -> str | None:
    """The commit in a work.json (the agent's starting point), when it is a commit id."""
    try:
        found = json.loads(data or b"")
    except ValueError:
        return None
    commit = found.get("commit") if isinstance(found, dict) else None
    return commit if isinstance(commit, str) and len(commit) in (40, 64) and commit.isalnum() else None


def collect_agent(conn: Connection, inventory: Inventory, agent: planning.AgentPlan, *, host: str, into: str | None,
         asked: bool, counted: GatewayAccount | None = None) -> AgentCollect:  # fmt: skip
    fleet = inventory.fleet.name
    result = AgentCollect(host=host, instance=agent.instance, agent=agent.agent)
    try:
        status = read_status(conn, agent, host=host)
    except JackinError as error:  # not read (a FIFO...): that agent's failure, nothing fetched
        result.result, result.reason = "failed", clean(error.message, 500)
        return result
    result.state = state_of(status)
    result.usage = Usage.of(status.get("usage"))
    result.gateway = counted
    if not asked and result.state != "done":
        result.reason = f"state {result.state} (not done; --agent collects any state)"
        return result
    if agent.work is None:
        result.result, result.reason = "skipped", "the agent has no work in the spec"
        return result
    try:
        text = read_workspace_file(conn, agent, HANDOFF_FILE, handoffs.MAX_HANDOFF, host=host)  # before any fetch
        result.source_commit = _started_from(read_file(conn, agent, f"{planning.WORK_TARGET}/work.json", 4096,
                                                       host=host))  # fmt: skip
        result.repo = local_repo(inventory, agent.agent, into)
        result.ref = ref_name(fleet, host, agent.instance)
        result.commit = _bring_branch(conn, agent, agent.work.branch, result.repo, result.ref, host=host)
        path = handoff_path(fleet, host, agent.instance)
        if text is not None:
            path.write_bytes(text)
            result.handoff = str(path)
        elif path.exists():
            path.unlink()  # an older collection's handoff is not this one's
        result.evidence = handoffs.check(None if text is None else text.decode(errors="replace"),
                                         on_branch(result.repo, result.ref, result.source_commit))  # fmt: skip
        result.result = "collected"
    except quarantine.BundleRefused as error:
        result.result, result.reason, result.checks = "failed", clean(error.message, 500), error.checks
    except JackinError as error:
        result.result, result.reason = "failed", clean(error.message, 500)  # it may carry the container's stderr
    return result


def _bring_branch(conn: Connection, agent: planning.AgentPlan, branch: str, repo: str, ref: str, *,
                  host: str) -> str:  # fmt: skip
    """The agent's ``branch`` streamed as a bundle into a quarantine of ``repo``, checked there, then
    fetched into ``repo`` as ``ref`` (``jackin.work.quarantine``); its commit."""
    with quarantine.opened(repo) as place:
        with place.bundle.open("wb") as handle:
            code, _, err = _exec(conn, as_agent(agent, "sh", "-c", bundle_script(branch)), cap=MAX_BUNDLE, host=host,
                                 into=handle)  # fmt: skip
        said = clean(err.decode(errors="replace"), 300)
        if code == FIFO_FOUND:
            raise RemoteCommandError(f"the agent's repository holds a FIFO ({said}): git would wait on it, "
                                     "so its branch was not bundled", host=host)  # fmt: skip
        if code in (124, 137):
            raise RemoteCommandError(f"git bundle create did not finish within {BUNDLE_WAIT} s in the container "
                                     "and was stopped (a FIFO or a file that never ends in the agent's repository?)",
                                     host=host)  # fmt: skip
        if code != 0:
            raise RemoteCommandError(f"git bundle create failed in the container (exit {code}): {said}", host=host)
        return place.land(branch, ref)


BUNDLE_WAIT = 300  # seconds git bundle create may run in the container before it is stopped there
FIFO_FOUND = 97  # bundle_script's exit status when the repository's git directory holds a FIFO


def bundle_script(branch: str) -> str:
    """Run in the agent's container as the agent: refuse a git directory that holds a FIFO (git would
    block opening it: a ref or an object that is one), then ``git bundle create`` of ``branch`` under a
    deadline that ends it *in the container* (a FIFO planted after the look, a file that never ends), so
    that one agent holds up its host's other collections by at most BUNDLE_WAIT, and leaves no git behind."""
    git_dir = shlex.quote(f"{REPO_DIR}/.git")
    return (
        f"f=$(timeout -k 2 30 find {git_dir} -xdev -type p -print -quit 2>/dev/null); "
        f'if [ -n "$f" ]; then printf %s "$f" >&2; exit {FIFO_FOUND}; fi; '
        f"exec timeout -k 5 {BUNDLE_WAIT} git -C {shlex.quote(REPO_DIR)} bundle create --quiet - "
        f"{shlex.quote(f'refs/heads/{branch}')}"
    )


def _host(target: SshTarget, inventory: Inventory, agents: list[planning.AgentPlan], *, into: str | None,
          asked: bool) -> list[AgentCollect]:  # fmt: skip
    with connect(target, timeout=10) as conn:
        counted = read_gateway(conn, agents, host=target.name)
        return [collect_agent(conn, inventory, a, host=target.name, into=into, asked=asked, counted=counted.get(a.instance))
                for a in agents]  # fmt: skip


def select(plan: planning.FleetPlan, names: Sequence[str] | None) -> list[planning.AgentPlan]:
    """The plan's agents named (instance ``coder-1`` or agent ``coder``), or all; an unknown name is exit 2."""
    if not names:
        return list(plan.agents)
    known = {a.instance for a in plan.agents} | {a.agent for a in plan.agents}
    missing = [n for n in names if n not in known]
    if missing:
        raise SpecError(f"no agent {', '.join(missing)} in fleet {plan.fleet}",
                        hint=f"agents: {', '.join(sorted(known))}")  # fmt: skip
    return [a for a in plan.agents if a.instance in names or a.agent in names]


def collect(inventory: Inventory, *, agents: Sequence[str] | None = None, into: str | None = None) -> CollectReport:
    """Collect the fleet's finished agents (``agents``: these, in any state) from every host; recorded.
    ``into`` and ``agents`` are checked first (exit 2): no host is touched when either is wrong."""
    into = check_into(into) if into else None
    with Ledger() as ledger:
        plan = make_plan(inventory, ledger, store=False)
    chosen = select(plan, agents)
    hosts = targets(inventory, bring_up=False)
    if not hosts:  # a lab that is not up: nothing could be collected, and saying "0 collected" would hide it
        raise JackinError(f"fleet {plan.fleet} has no host up: nothing to collect",
                          hint="bring it up with inv fleet.up, or check the inventory's hosts")  # fmt: skip
    report = CollectReport(fleet=plan.fleet)
    found = fanout.each_host(hosts, lambda t: _host(t, inventory, [a for a in chosen if a in plan.at(t.name)], into=into,
                                                    asked=bool(agents)),
                             faults=_SSH_FAULTS, grace=math.inf, workers=8)  # fmt: skip
    report.unreachable.update({name: error.message for name, error in found.failed.items()})
    for outcome in found.succeeded.values():
        report.agents += outcome
    with Ledger() as ledger:
        for item in report.agents:
            if item.result != "skipped":
                ledger.record_collection(plan.fleet, item.host, item.instance, item.result, state=item.state,
                                         repo=item.repo, ref=item.ref, commit_id=item.commit,
                                         source_commit=item.source_commit, handoff=item.handoff,
                                         evidence=item.evidence.label if item.evidence else None,
                                         detail=_detail(item))  # fmt: skip
    return report


def _detail(item: AgentCollect) -> dict | None:
    """A collection's ledger detail: why it failed (and git fsck's checks), the runtime's usage."""
    detail: dict[str, Any] = {}
    if item.reason:
        detail = {"reason": item.reason, **({"checks": item.checks} if item.checks else {})}
    if item.usage is not None:
        detail["usage"] = item.usage.model_dump()
    if item.gateway is not None:  # the audit: requests, status codes, bytes, tokens, upstreams, refusals
        detail["gateway"] = item.gateway.model_dump()
    return detail or None


# --- review ---------------------------------------------------------------------------------


class ReviewRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    state: str  # live from the status file, else "<state> (at collection)", else unknown
    commit: str | None = None
    source_commit: str | None = None
    diff: str | None = None  # git diff --shortstat SOURCE..REF
    evidence: str | None = None  # ok, or without evidence: reasons
    handoff: str | None = None
    ref: str | None = None
    repo: str | None = None
    usage: Usage | None = None  # live from the status file, else as collected
    gateway: GatewayAccount | None = None  # what the credential gateway counted: live, else as collected


class Review(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    rows: list[ReviewRow] = Field(default_factory=list)
    unreachable: dict[str, str] = Field(default_factory=dict)


def diff_stat(repo: str | None, source: str | None, ref: str | None) -> str | None:
    if not (repo and source and ref):
        return None
    found = git("-C", repo, "diff", "--shortstat", f"{source}..{ref}", "--", check=False)
    if found.returncode != 0:
        return None
    return found.stdout.decode(errors="replace").strip() or "no changes"


Live = tuple[str, Usage | None, GatewayAccount | None]


def _live(target: SshTarget, agents: list[planning.AgentPlan]) -> dict[str, Live]:
    with connect(target, timeout=10) as conn:
        counted = read_gateway(conn, agents, host=target.name)
        return {a.instance: (*_live_state(conn, a, host=target.name), counted.get(a.instance)) for a in agents}


def _live_state(conn: Connection, agent: planning.AgentPlan, *, host: str) -> tuple[str, Usage | None]:
    """(its state, its runtime's usage) from its status file."""
    try:
        status = read_status(conn, agent, host=host)
    except RemoteCommandError:  # its status file cannot be read (fleet.status says why)
        return "unknown", None
    return state_of(status), Usage.of(status.get("usage"))


def review(inventory: Inventory) -> Review:
    """Per host and agent: its state (live when the host answers, else at its last collection), the
    collected commit, the diff stat against the commit it started from, and the handoff's evidence."""
    with Ledger() as ledger:
        plan = make_plan(inventory, ledger, store=False)
        collected = {(r["host"], r["instance"]): r for r in ledger.collections(plan.fleet)}
    hosts = targets(inventory, bring_up=False)
    result = Review(fleet=plan.fleet)
    live: dict[tuple[str, str], Live] = {}
    if hosts:
        found = fanout.each_host(hosts, lambda t: _live(t, plan.at(t.name)), faults=_SSH_FAULTS, grace=math.inf,
                                 workers=8)  # fmt: skip
        result.unreachable.update({name: error.message for name, error in found.failed.items()})
        for name, states in found.succeeded.items():
            live.update({(name, i): s for i, s in states.items()})
    for key in sorted(set(live) | set(collected)):
        row = collected.get(key, {})
        now, usage, counted = live.get(key, (None, None, None))
        state = now or (f"{row['state']} (at collection)" if row.get("state") else "unknown")
        usage = usage or Usage.of((row.get("detail") or {}).get("usage"))
        if counted is None and (row.get("detail") or {}).get("gateway"):
            counted = GatewayAccount.parse(json.dumps(row["detail"]["gateway"]).encode())
        result.rows.append(ReviewRow(host=key[0], instance=key[1], state=state, commit=row.get("commit_id"),
                                     source_commit=row.get("source_commit"), evidence=row.get("evidence"),
                                     handoff=row.get("handoff"), ref=row.get("ref"), repo=row.get("repo"), usage=usage,
                                     gateway=counted,
                                     diff=diff_stat(row.get("repo"), row.get("source_commit"), row.get("ref"))))  # fmt: skip
    return result
