"""``agent.move INSTANCE --to HOST``: one instance of a ``placement: spread`` agent, with its workspace, onto another
of its hosts (jackin/plan/placement.py).

In order, each step only once the one before it succeeded:

1. refused, nothing changed (exit 2): an unknown instance, an ``each`` agent's, a host that is not one of its
   agent's, the host it is on already, a host without room for it (the numbers, as fleet.up says them);
2. on its host: its container stopped, a snapshot of it taken (``snapshot.create``), pulled to this machine and
   checked (``snapshot.pull``), pushed onto the new host (``snapshot.push``);
3. its new placement recorded, and ``fleet.up`` of the new host makes it there (user, home, network, container,
   firewall, credentials, work);
4. its workspace restored there from the pushed copy (its container stopped meanwhile, then started);
5. on its old host: its container, network, processes, user, home, credentials and work removed, then (the old
   host still one of the fleet's) ``fleet.up`` of that host renders its firewall, gateway and records without it.

Its old host must answer: a host that left the inventory and is gone cannot give its workspace (say so: the
move is refused, nothing changed). A step that fails says what is where: the instance is never removed from
its old host before its workspace is restored on the new one.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from jackin.engine import Event
from jackin.errors import JackinError, SpecError
from jackin.facts.state import HostState
from jackin.lab.providers import Provider, provider_for
from jackin.operations.agent_paths import end_processes
from jackin.plan import fleet as planning
from jackin.plan import placement, pools
from jackin.plan.make import make_plan, present, record
from jackin.snapshots import api, moves
from jackin.snapshots.auto import read_states
from jackin.snapshots.host import run as remote_run
from jackin.snapshots.models import AgentSnapshot
from jackin.snapshots.restore import restore_one
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.ssh import connect
from jackin.transport.target import SshTarget

Log = Callable[[str], None]
OnEvent = Callable[[Event], None]


class MoveResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    instance: str
    source: str  # the host it was on
    to: str
    snapshot: str | None = None  # the snapshot its workspace moved in
    restored: bool = False
    removed: bool = False  # from its old host
    left_behind: list[str] = Field(default_factory=list)  # what of it is still on its old host, and why


def check(inventory: Inventory, instance: str, to: str, recorded: dict[str, str]) -> tuple[str, str]:
    """(its agent's name, the host it is on), or SpecError (exit 2) saying why it cannot move there."""
    fleet = inventory.fleet
    known = [i for _, i in planning.instances(fleet)]
    if instance not in known:
        raise SpecError(
            f"no agent instance {instance!r} in fleet {fleet.name!r}", hint=f"expected one of: {', '.join(known)}"
        )
    agent = next(a for a in fleet.agents if instance.rsplit("-", 1)[0] == a.name)
    if agent.placement == "each":
        raise SpecError(f"agent {agent.name} has placement each: an instance of it runs on every one of its hosts, "
                        "so there is nowhere to move it",
                        hint="change its hosts (agents[].hosts) and run fleet.up instead")  # fmt: skip
    hosts = inventory.fleet_host_names()
    if to not in hosts:
        raise SpecError(f"--to {to!r} is not a host of fleet {fleet.name!r}", hint=f"its hosts: {', '.join(hosts)}")
    if to not in inventory.agent_host_names(agent):
        raise SpecError(f"--to {to!r} is not one of agent {agent.name}'s hosts ({', '.join(inventory.agent_host_names(agent))})",
                        hint="add it to the agent's hosts (agents[].hosts) first")  # fmt: skip
    source = recorded.get(instance)
    if source is None:
        raise SpecError(f"{instance} is not placed on any host yet: fleet.up places it (nothing to move)")
    if source == to:
        raise SpecError(f"{instance} is on {to} already")
    return agent.name, source


def fits(inventory: Inventory, plan: planning.FleetPlan, state: HostState, instance: str, to: str) -> None:
    """Refuse (PlacementError, exit 2) a host without room for the instance beside those placed on it."""
    agent = next(a for a in inventory.fleet.agents if instance.rsplit("-", 1)[0] == a.name)
    one = placement.need(inventory, agent)
    here = present(plan, state)
    used = placement.ZERO
    for other in plan.placement.get(to, []) if plan.placement else []:
        spec = next(a for a in inventory.fleet.agents if other.rsplit("-", 1)[0] == a.name)
        used = placement.add(used, placement.need(inventory, spec), disk=other not in here)
    cap = state.capacity
    problems = []
    if cap is None:
        problems.append(f"{to}'s capacity could not be read")
    else:
        problems += [f"{r}: {to} has {placement.amount(r, f)} free, {instance} needs {placement.amount(r, getattr(one, r))}"
                     f": short by {placement.amount(r, getattr(one, r) - f)}"
                     for r in placement.RESOURCES if (f := placement.free(cap, used, r)) < getattr(one, r) - 1e-9]  # fmt: skip
    most = pools.held(inventory)
    if len(plan.placement.get(to, []) if plan.placement else []) >= most:
        problems.append(f"{to} holds {most} agent networks at most (its Docker address pools), and has as many")
    if problems:
        raise placement.PlacementError(f"{instance} does not fit on {to}: nothing was changed", problems=problems,
                                       hint="move another instance off it first, or choose another host")  # fmt: skip


def _reach(provider: Provider, targets: dict[str, SshTarget], host: str) -> SshTarget | None:
    """The host it is on: one of the fleet's, else one the provider still reaches by name (a static host still
    in the file, a lab host the lab still runs)."""
    return targets.get(host) or provider.reach(host)


def move(inventory: Inventory, instance: str, to: str, *, log: Log = lambda _: None,
         on_event: OnEvent = lambda _: None) -> MoveResult:  # fmt: skip
    """Move ``instance`` with its workspace onto ``to`` (see the module's docstring)."""
    from jackin.lifecycle.fleet import up  # the fleet API: only agent.move needs it here

    fleet = inventory.fleet.name
    with Ledger() as ledger:
        _, source = check(inventory, instance, to, record(inventory, ledger))
    result = MoveResult(fleet=fleet, instance=instance, source=source, to=to)
    with Ledger() as ledger, ledger.lock(fleet, "agent.move"):
        provider = provider_for(inventory, ledger)
        targets = {t.name: t for t in provider.targets(bring_up=False)}
        if to not in targets:
            raise JackinError(f"host {to} is not up", hint="bring the fleet up first: inv fleet.up")
        old = _reach(provider, targets, source)
        if old is None:
            raise JackinError(f"{instance} is on {source}, which this inventory no longer reaches: its workspace cannot "
                              "be taken from there; nothing was changed",
                              hint=f"put {source} back in the inventory (hosts:) to move {instance} with its workspace")  # fmt: skip
        plan = make_plan(inventory, ledger, store=False, fleet_hosts=provider.addresses())
        state = read_states(plan, [targets[to]])[to]
        if not isinstance(state, HostState):
            raise state
        fits(inventory, plan, state, instance, to)  # exit 2 before anything changes
        agent = next(a for a in plan.agents if a.instance == instance)
        _docker(old, "stop", agent.container)
        run = ledger.start_run(fleet, "agent.move", {"instance": instance, "from": source, "to": to})
        try:
            taken = api.take(ledger, inventory, [old], [instance], label=f"agent.move {instance} to {to}")
            item = next((a for a in taken.snapshot.agents if a.instance == instance and a.restic_id), None)
            if taken.errors or item is None:
                raise JackinError("its snapshot failed: " + ("; ".join(f"{e.host}: {e.error}" for e in taken.errors)
                                                             or "it holds no restic snapshot of it"))  # fmt: skip
            result.snapshot = taken.snapshot.id
            path, pulled = moves._source(ledger, fleet, taken.snapshot.id, source, old)  # pulled here, checked
            pushed, errors = moves._push_all(ledger, fleet, targets[to], {source: (path, pulled)})
            if errors or not pushed:
                raise JackinError(
                    "its push onto " + to + " failed: " + "; ".join(f"{e.host}: {e.error}" for e in errors)
                )
            ledger.record_placements(fleet, {instance: to})
        except BaseException:
            ledger.finish_run(run, "failed", result.model_dump(mode="json"))
            _docker(old, "start", agent.container, check=False)  # as it was: running on its host
            raise
        ledger.finish_run(run, "ok", result.model_dump(mode="json"))
    log(f"{instance}: snapshot {result.snapshot} pushed onto {to}; bringing it up there")
    made = up(inventory, only=[to], action="agent.move", detail={"instance": instance, "from": source},
              on_event=on_event, log=log)  # fmt: skip
    if not all(h.ok for h in made.run.hosts):
        raise JackinError(f"fleet.up of {to} failed, so {instance} was not restored there; it is placed on {to} now and "
                          f"still on {source} (stopped), with its workspace",
                          hint=f"fix {to}, run inv fleet.up, then inv snapshot.restore {result.snapshot} --agent "
                               f"{instance} --stop; or move it back: inv agent.move {instance} --to {source}")  # fmt: skip
    with Ledger() as ledger, ledger.lock(fleet, "agent.move"):
        _restore(inventory, targets[to], item.model_copy(update={"host": to, "tiers": ["restic"]}), result,
                 repo=pushed[0].path, agent=agent)  # fmt: skip
        result.left_behind = _remove(old, plan, agent)
        result.removed = not result.left_behind
        ledger.forget_agent(fleet, source, instance)
    if source in targets:  # its old host is still the fleet's: its firewall, gateway and records without it
        up(inventory, only=[source], action="agent.move", detail={"instance": instance, "to": to}, on_event=on_event,
           log=log)  # fmt: skip
    return result


def _restore(inventory: Inventory, target: SshTarget, item: AgentSnapshot, result: MoveResult, *, repo: str,
             agent: planning.AgentPlan) -> None:  # fmt: skip
    """The workspace restored on the new host from the pushed copy, its container stopped meanwhile."""
    fleet, name, uid = inventory.fleet.name, agent.container, agent.uid
    with connect(target) as conn:
        remote_run(conn, f"docker stop {shlex.quote(name)}", host=target.name, what=f"docker stop {name}")
        try:
            done = restore_one(conn, fleet, result.snapshot or "", item, host=target.name,
                               restic_bin=lambda: api.prepare(conn, fleet, host=target.name), repo=repo, uid=uid,
                               min_free=inventory.fleet.snapshots.min_free)  # fmt: skip
        finally:
            remote_run(conn, f"docker start {shlex.quote(name)}", host=target.name, what=f"docker start {name}")
    if not done.restored:
        raise JackinError(f"{item.instance}'s workspace was not restored on {target.name}: {done.error}; it is still on "
                          f"{result.source} (stopped), with its workspace",
                          hint=f"inv snapshot.restore {result.snapshot} --agent {item.instance} --stop")  # fmt: skip
    result.restored = True


def _docker(target: SshTarget, verb: str, container: str, *, check: bool = True) -> None:
    try:
        with connect(target) as conn:
            remote_run(conn, f"docker {verb} {shlex.quote(container)}", host=target.name,
                       what=f"docker {verb} {container}")  # fmt: skip
    except JackinError:
        if check:
            raise


def removal_commands(plan: planning.FleetPlan, agent: planning.AgentPlan) -> list[str]:
    """Shell removing one instance from a host: its container and network, its processes, user and group, its home
    (a btrfs subvolume or a directory; never following a link), its credentials and work directories."""
    q = shlex.quote
    home = q(agent.home)
    return [
        f"docker rm -f {q(agent.container)} >/dev/null 2>&1 || true",
        f"docker network rm {q(agent.network)} >/dev/null 2>&1 || true",
        end_processes([agent.uid]),
        f"! getent passwd {q(agent.user)} >/dev/null || userdel {q(agent.user)}",
        f"! getent group {q(agent.user)} >/dev/null || groupdel {q(agent.user)}",
        f"if btrfs subvolume show {home} >/dev/null 2>&1; then btrfs subvolume delete {home} >/dev/null; "
        f"else rm -rf --one-file-system {home}; fi",
        f"rm -rf --one-file-system {q(agent.credentials_dir)} {q(agent.work_dir)}",
    ]


def _remove(target: SshTarget, plan: planning.FleetPlan, agent: planning.AgentPlan) -> list[str]:
    """Remove the instance from its old host; what is left there, and why (empty: nothing)."""
    try:
        with connect(target) as conn:
            remote_run(conn, "set -e; " + "; ".join(removal_commands(plan, agent)), host=target.name,
                       what=f"removing {agent.instance}")  # fmt: skip
    except JackinError as error:
        return [f"{agent.instance} on {target.name} (container, user, home): {error.message}"]
    return []
