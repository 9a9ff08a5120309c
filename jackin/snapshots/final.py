"""The final snapshot at ``fleet.down``: stop the agents, snapshot every agent home, pull each host's
repository here, and say which hosts may be torn down.

A host's workspaces are the only copy of its agents' work until a snapshot of them sits on
the operator's machine and checks there. So a host is torn down only when its final snapshot
and the pull (mirror + local ``restic check``, recorded in the ledger's ``repo_copies``) both
succeeded; a host where either failed keeps everything, its stopped containers are started
again (best effort), and it is reported with what failed.

Every home in the fleet dir is snapshotted, whoever names it: the plan (the spec's agents), else
the ledger's agents table, else the state read itself (an agent dropped from the spec whose home
stayed after the ledger forgot it). The containers are stopped first, so nothing an agent writes
after the snapshot is lost with the teardown.

A host with no agent home of the fleet (it never came up) needs no snapshot; its repository,
if an earlier snapshot made one, is still pulled before teardown removes it. Without a final
snapshot (``--no-final-snapshot``, ``before_teardown: false``) the repositories are still pulled
(``take_final(..., snapshot=False)``): they hold the earlier snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin import hostpaths, lazy
from jackin.errors import ConnectError, JackinError
from jackin.facts.state import HostState, parse_state
from jackin.facts.state_read import state_command
from jackin.paths import state_dir
from jackin.plan import fleet as planning
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

if TYPE_CHECKING:
    from fabric import Connection

    from jackin.snapshots import api, copies, transfer
    from jackin.snapshots import host as remote
else:  # lazy: they load Fabric and paramiko, which fleet.up and fleet.down's reads do without (jackin.lazy)
    api, copies, transfer, remote = (
        lazy.module(f"jackin.snapshots.{name}") for name in ("api", "copies", "transfer", "host")
    )

LABEL = "final, before fleet.down"
Stage = Literal["done", "nothing", "read", "stop", "snapshot", "pull"]
Log = Callable[[str], None]
Row = dict[str, Any]  # shaped like the ledger's agents table (api.take's ``extra``)


class FinalHost(BaseModel):
    """One host's final snapshot and pull. ``stage``: ``done`` (snapshotted and/or pulled),
    ``nothing`` (no home, no repository: nothing to keep), or where it failed (``error`` set)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    stage: Stage = "done"
    instances: list[str] = Field(default_factory=list)  # agents whose homes were snapshotted
    snapshot: str | None = None  # the final fleet snapshot's id
    copy_path: str | None = None  # the operator's checked copy of the host's repository
    not_in_spec: list[str] = Field(default_factory=list)  # homes only the state read describes (snapshotted too)
    stopped: list[str] = Field(default_factory=list)  # containers stopped for the snapshot
    restart_error: str | None = None  # held back: starting the stopped containers again failed
    error: str | None = None
    unreachable: bool = False

    @property
    def blocked(self) -> bool:
        """Not to be torn down: its workspaces are the only copy."""
        return self.error is not None


def pulled_root(fleet: str) -> str:
    """Where the final pull puts each host's repository (``<this>/<host>/repo``); creates nothing."""
    return str(state_dir() / "snapshots" / fleet / "pulled")


def homes(plan: planning.FleetPlan, state: HostState) -> list[str]:
    """Every agent home in the host's fleet dir (directories; ``.restore``, ``.checkpoints`` and
    other dot names are jackin's): the plan's first, in its order, then the others sorted."""
    prefix = plan.fleet_dir + "/"
    names = {p[len(prefix):] for p, info in state.paths.items()
             if p.startswith(prefix) and "/" not in p[len(prefix):] and info.kind == "d"}  # fmt: skip
    names = {n for n in names if n and not n.startswith(".")}
    planned = [a.instance for a in plan.agents if a.instance in names]
    return planned + sorted(names - set(planned))


def from_state(plan: planning.FleetPlan, state: HostState, host: str, instance: str) -> Row:
    """The agents-table row of a home only the state read describes: its uid is the home's group
    (homes are root:<agent> 0750), its user the state's user of that uid (else the naming rule's),
    its container the naming rule's. Raises when the home's group is no agent uid of the fleet."""
    home = f"{plan.fleet_dir}/{instance}"
    uid = state.paths[home].gid
    if not plan.uid_min <= uid <= plan.uid_max:
        raise JackinError(f"home {home} belongs to group {uid}, not an agent uid of the fleet "
                          f"({plan.uid_min}-{plan.uid_max}): cannot say whose it is")  # fmt: skip
    user = next((u.name for u in state.users.values() if u.uid == uid), None)
    name = hostpaths.user_name(plan.fleet, instance)
    base, _, number = instance.rpartition("-")
    return {"fleet": plan.fleet, "host": host, "instance": instance, "agent": base if base and number.isdigit()
            else instance, "uid": uid, "user": user or name, "container": name, "network": name}  # fmt: skip


def take_final(ledger: Ledger, inventory: Inventory, plan: planning.FleetPlan, hosts: Sequence[SshTarget], *,
               log: Log = lambda _: None, snapshot: bool = True,
               states: dict[str, HostState | JackinError] | None = None) -> list[FinalHost]:  # fmt: skip
    """Stop the fleet's containers and snapshot every agent home on every host (kind ``final``),
    then pull every host's repository here and check it; a host held back gets its containers
    started again. ``snapshot=False``: only the pull of the hosts that have a repository. The
    caller holds the fleet's lock. ``states``: each host's state read just now by the caller (else
    read here). One FinalHost per host, in ``hosts``' order."""
    # Executed here, on this thread: a jackin.lazy stand-in first touched by two fan-out threads at once
    # can show one of them a half-executed module (LazyLoader is not thread-safe on Python 3.11).
    for module in (api, copies, transfer, remote):
        module.__name__  # noqa: B018
    if states is None:
        states = gather(hosts, state_command(plan.fleet, plan.uid_min, plan.uid_max),
                        lambda out: parse_state(out.split("\n")), timeout=30)  # fmt: skip
    out: dict[str, FinalHost] = {}
    groups: dict[tuple[str, ...], list[SshTarget]] = {}
    extra: dict[tuple[str, str], Row | None] = {}
    running: dict[str, list[str]] = {}
    pull: set[str] = set()
    for target in hosts:
        state = states[target.name]
        if isinstance(state, JackinError):
            out[target.name] = _failed(target.name, "read", f"could not read what it holds: {state.message}", state)
            continue
        entry = out[target.name] = FinalHost(host=target.name)
        if snapshot:
            _describe(ledger, plan, state, entry, extra)
        if entry.error:
            continue
        if entry.instances:
            groups.setdefault(tuple(entry.instances), []).append(target)
            running[target.name] = sorted(c.name for c in state.containers.values() if c.running)
        elif state.snapshots.repo:
            pull.add(target.name)  # earlier snapshots: pulled before teardown removes them
        else:
            entry.stage = "nothing"
    stopped = _stop([t for g in groups.values() for t in g], running, out, log)
    for instances, group in groups.items():
        ready = [t for t in group if t.name in stopped]
        if ready:
            pull |= _snapshot(ledger, inventory, ready, list(instances), extra, out, log)
    _pull(ledger, plan.fleet, [t for t in hosts if t.name in pull], out, log)
    _restart([t for t in hosts if out[t.name].blocked and out[t.name].stopped], out, log)
    return [out[t.name] for t in hosts]


def _describe(ledger: Ledger, plan: planning.FleetPlan, state: HostState, entry: FinalHost,
              extra: dict[tuple[str, str], Row | None]) -> None:  # fmt: skip
    """Fill ``entry.instances`` with every home on the host and ``extra`` with how api.take describes
    each (None: the plan or the ledger; else a row from the state read); a home nobody can describe
    holds the host back."""
    known = {r["instance"] for r in ledger.agents(plan.fleet) if r["host"] == entry.host}
    planned = {a.instance for a in plan.agents}
    for name in homes(plan, state):
        row = None
        if name not in planned and name not in known:
            try:
                row = from_state(plan, state, entry.host, name)
            except JackinError as error:
                entry.stage, entry.error = "read", error.message
                return
            entry.not_in_spec.append(name)
        entry.instances.append(name)
        extra[(entry.host, name)] = row


def _failed(host: str, stage: Stage, message: str, error: JackinError | None = None) -> FinalHost:
    return FinalHost(host=host, stage=stage, error=message, unreachable=isinstance(error, ConnectError))


def _stop(targets: list[SshTarget], running: dict[str, list[str]], out: dict[str, FinalHost], log: Log) -> set[str]:
    """``docker stop`` the fleet's running containers on each target, so the snapshot is the last word
    of their work; the names of the hosts ready to snapshot (a host where stopping failed is held back)."""

    def stop(conn: Connection, target: SshTarget) -> None:
        remote.set_running(conn, running[target.name], False, host=target.name)

    ready = set()
    for name, result in api.in_parallel([t for t in targets if running.get(t.name)], stop).items():
        entry = out[name]
        if isinstance(result, JackinError):
            entry.stage, entry.error = "stop", f"stopping its containers failed: {result.message}"
            entry.unreachable = isinstance(result, ConnectError)
            entry.stopped = list(running[name])  # some may have stopped: started again below
            continue
        entry.stopped = list(running[name])
        log(f"{name}: stopped {', '.join(entry.stopped)} for the final snapshot")
    for target in targets:
        if not out[target.name].blocked:
            ready.add(target.name)
    return ready


def _restart(targets: list[SshTarget], out: dict[str, FinalHost], log: Log) -> None:
    """Best effort: start again the containers stopped on hosts held back (they keep running there);
    a failure is reported on the host's entry, never raised."""

    def start(conn: Connection, target: SshTarget) -> None:
        remote.set_running(conn, out[target.name].stopped, True, host=target.name)

    for name, result in api.in_parallel(targets, start).items():
        if isinstance(result, JackinError):
            out[name].restart_error = result.message
            log(f"warning: {name}: starting {', '.join(out[name].stopped)} again failed: {result.message}")
        else:
            log(f"{name}: held back, started {', '.join(out[name].stopped)} again")


def _snapshot(ledger: Ledger, inventory: Inventory, group: list[SshTarget], instances: list[str],
              extra: dict[tuple[str, str], Row | None], out: dict[str, FinalHost], log: Log) -> set[str]:  # fmt: skip
    """One final fleet snapshot of ``instances`` on ``group`` (every one taken on every host of it,
    whatever the ledger places there); the names of the hosts where every one of them was backed up
    (the others get their error)."""
    mine = {(t.name, i): extra.get((t.name, i)) for t in group for i in instances}
    try:
        result = api.take(ledger, inventory, group, instances, kind="final", label=LABEL, extra=mine)
    except JackinError as error:
        for target in group:
            failed = _failed(target.name, "snapshot", f"final snapshot failed: {error.message}", error)
            out[target.name] = failed.model_copy(update={"instances": instances, "stopped": out[target.name].stopped,
                                                         "not_in_spec": out[target.name].not_in_spec})  # fmt: skip
        return set()
    ok = set()
    for target in group:
        entry = out[target.name]
        errors = [e for e in result.errors if e.host == target.name]
        done = {a.instance for a in result.snapshot.agents if a.host == target.name}
        missing = [i for i in instances if i not in done]
        if errors or missing:
            why = "; ".join(e.error for e in errors) or f"not backed up: {', '.join(missing)}"
            entry.stage, entry.error = "snapshot", f"final snapshot failed: {why}"
            entry.unreachable = bool(errors) and all(e.unreachable for e in errors)
            continue
        entry.snapshot = result.snapshot.id
        ok.add(target.name)
        log(f"{target.name}: final snapshot {result.snapshot.id} of {', '.join(instances)}")
    return ok


def _pull(ledger: Ledger, fleet: str, targets: list[SshTarget], out: dict[str, FinalHost], log: Log) -> None:
    """Pull and check each target's repository here (``copies.pull_hosts``: recorded in the ledger)."""
    import paramiko  # lazy: fleet.up and fleet.down import this module, and their read path needs no SSH library

    try:
        results = copies.pull_hosts(ledger, fleet, targets)
    except paramiko.SSHException as error:  # pull_hosts lets this one through: hold every host back
        lost = ConnectError(f"{type(error).__name__}: {' '.join(str(error).split())[:200]}")
        results = dict.fromkeys((t.name for t in targets), lost)
    for name, result in results.items():
        entry = out[name]
        if isinstance(result, JackinError):
            entry.stage, entry.error = "pull", f"pulling its repository here failed: {result.message}"
            entry.unreachable = isinstance(result, ConnectError)
            continue
        entry.copy_path = str(transfer.pulled_repo(fleet, name))
        log(f"{name}: repository pulled and checked: {entry.copy_path}")
