"""Snapshots of a fleet's agents: create, list, show, diff, restore, prune.

A fleet snapshot is one restic backup per (host, instance), taken together under
one id and recorded in the ledger with its audit entries; where the host has the
checkpoint tier (``snapshots.checkpoints: btrfs``) a btrfs checkpoint of the home is
taken first under the same id (``tiers``: checkpoint, restic). Hosts work in parallel;
a host that fails is reported beside the others (``HostError``), never hides them.

For the fleet lifecycle (automatic snapshots) call ``take`` while holding the
fleet's lock: ``take(ledger, inventory, targets, instances, kind="auto")`` before
``fleet.up`` recreates or removes an agent, ``kind="final"`` before ``fleet.down``.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import paramiko
from fabric import Connection

from jackin import hostpaths
from jackin.errors import ConnectError, JackinError, SpecError
from jackin.lab.providers import provider_for
from jackin.net import policy
from jackin.net import probes as agent_api
from jackin.plan import fleet as planning
from jackin.plan.make import make_plan
from jackin.snapshots import cow, restic
from jackin.snapshots import host as remote
from jackin.snapshots.models import (
    AgentDiff,
    AgentManifest,
    AgentSnapshot,
    CreateResult,
    DiffResult,
    Kind,
    SnapshotRecord,  # fmt: skip
    Tier,
    new_id,
)
from jackin.snapshots.transfer import fleet_password_file
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport import fanout
from jackin.transport.remote import HostError
from jackin.transport.ssh import SshTarget, connect

T = TypeVar("T")


# --- the fleet's password and the agents' placement --------------------------------------


def password(fleet: str) -> bytes:
    """The fleet's repository password, generated once on the operator's machine (0600), never printed
    (the file: ``jackin.snapshots.transfer.fleet_password_file``)."""
    return fleet_password_file(fleet).read_bytes().strip()


def select(inventory: Inventory, agent: str | None) -> list[str]:
    """``coder-1`` names one instance, ``coder`` every instance of that agent, None all of them."""
    if agent is None:
        return [i for _, i in planning.instances(inventory.fleet)]
    return agent_api.instances(inventory, agent)


def fleet_plan(inventory: Inventory, ledger: Ledger) -> planning.FleetPlan:
    """The plan as the fleet has it (known uids; new ones only previewed, never allocated)."""
    provider = provider_for(inventory, ledger)
    return make_plan(inventory, ledger, store=False, fleet_hosts=provider.addresses())


def placement(ledger: Ledger, plan: planning.FleetPlan, targets: Sequence[SshTarget],
              instances: Sequence[str]) -> dict[str, list[str]]:  # fmt: skip
    """Which of ``instances`` each host holds: the ledger's agents where it knows the host, else the
    instances the plan places there (jackin/plan/placement.py)."""
    known: dict[str, set[str]] = {}
    for row in ledger.agents(plan.fleet):
        known.setdefault(row["host"], set()).add(row["instance"])
    return {t.name: [i for i in instances if i in known.get(t.name, {a.instance for a in plan.at(t.name)})]
            for t in targets}  # fmt: skip


def in_parallel(targets: Sequence[SshTarget], work: Callable[[Connection, SshTarget], T]) -> dict[str, T | JackinError]:
    """``work`` on every target over its own connection; per host its result or its error. A Ctrl-C
    closes every connection at once: each host's script sees its channel end (a frozen agent is thawed
    there and then, not when its backup would have finished)."""
    opened: list[Connection] = []
    guard = threading.Lock()
    stopping = threading.Event()

    def over_ssh(target: SshTarget) -> T:
        with connect(target) as conn:
            with guard:
                if stopping.is_set():  # connected after the Ctrl-C: start nothing
                    raise ConnectError("interrupted (Ctrl-C) before anything was done here", host=target.name)
                opened.append(conn)
            return work(conn, target)

    def close_all() -> None:
        with guard:
            stopping.set()
            for conn in opened:
                conn.close()

    return per_host(targets, over_ssh, interrupted=close_all)


def per_host(targets: Sequence[SshTarget], work: Callable[[SshTarget], T], *,
             interrupted: Callable[[], None] | None = None) -> dict[str, T | JackinError]:  # fmt: skip
    """``work`` on every target in parallel (it opens its own connection); per host its result or its
    error: one host's fault never hides what happened on the others. On a Ctrl-C (or a bug of ``work``),
    ``interrupted`` runs before the hosts in flight are waited for, so it can cut them short."""
    faults = (OSError, EOFError, paramiko.SSHException)  # an SSH fault is that host's error alone
    return fanout.each_host(targets, work, faults=faults, interrupted=interrupted, grace=math.inf, workers=16).by_host()


def prepare(conn: Connection, fleet: str, *, host: str, probed: str | None = None) -> str:
    """restic on the host and the fleet's repository there; the path of restic. ``probed``: the restic
    probe's output, when the caller ran it already (``remote.backup_room``)."""
    restic_bin = remote.ensure_restic(conn, host=host, probed=probed)
    remote.ensure_repo(conn, restic_bin, fleet, password(fleet), host=host)
    return restic_bin


# --- create ------------------------------------------------------------------------------------


def manifest(plan: planning.FleetPlan, inventory: Inventory, agent: planning.AgentPlan, *, host: str, snapshot: str,
             created: str, image_id: str | None, bundle: str) -> AgentManifest:  # fmt: skip
    spec = next(a for a in inventory.fleet.agents if a.name == agent.agent)
    return AgentManifest(fleet=plan.fleet, snapshot=snapshot, instance=agent.instance, agent=agent.agent, host=host,
                         uid=agent.uid, gid=agent.uid, user=agent.user, home=agent.home, workspace=agent.workspace,
                         container=agent.container, image=agent.image, image_id=image_id,
                         spec=spec.model_dump(mode="json"), network=agent.policy.model_dump(mode="json"),
                         firewall_hash=bundle, created=created, tiers=["restic"])  # fmt: skip


def from_row(row: dict, *, snapshot: str, created: str, image_id: str | None) -> AgentManifest:
    """The manifest of an agent the spec no longer names (fleet.up is about to remove it): what the
    ledger knows of it; its spec and policy are gone with the spec."""
    home = f"{hostpaths.fleet_dir(row['fleet'])}/{row['instance']}"
    return AgentManifest(fleet=row["fleet"], snapshot=snapshot, instance=row["instance"], agent=row["agent"],
                         host=row["host"], uid=row["uid"], gid=row["uid"], user=row["user"], home=home,
                         workspace=f"{home}/workspace", container=row["container"], image="", image_id=image_id,
                         spec={}, network={}, firewall_hash="", created=created)  # fmt: skip


def take(ledger: Ledger, inventory: Inventory, targets: Sequence[SshTarget], instances: Sequence[str] | None = None,
         *, label: str | None = None, kind: Kind = "manual",
         extra: Mapping[tuple[str, str], dict[str, Any] | None] | None = None) -> CreateResult:  # fmt: skip
    """Snapshot ``instances`` (default: every instance of the spec) on ``targets`` under one new id,
    record it and audit it. An instance the spec no longer names (about to be removed) is taken
    from the ledger's agents table. The caller holds the fleet's lock (``create`` does; fleet.up
    and fleet.down hold theirs).

    ``extra``: (host, instance) pairs taken as well, whatever the ledger places there (fleet.down
    snapshots every home a host holds); each with a row shaped like the ledger's agents table
    (instance, agent, uid, user, container, host, fleet) to build its manifest from, or None when
    the plan or the ledger describes it."""
    fleet = inventory.fleet.name
    instances = list(instances) if instances is not None else select(inventory, None)
    plan = fleet_plan(inventory, ledger)
    agents = {a.instance: a for a in plan.agents}
    where = placement(ledger, plan, targets, instances)
    extra = dict(extra or {})
    for host, instance in extra:
        if host in where and instance not in where[host]:
            where[host].append(instance)
    created = datetime.now(UTC)
    record = SnapshotRecord(id=new_id(created), fleet=fleet, created=created.isoformat(timespec="seconds"),
                            label=label, kind=kind)  # fmt: skip
    bundle = policy.bundle_hash(plan)
    run = ledger.start_run(fleet, "snapshot.create", {"snapshot": record.id, "kind": kind, "instances": instances})

    rows = {(r["host"], r["instance"]): r for r in ledger.agents(fleet)}
    rows.update({key: row for key, row in extra.items() if row is not None and key not in rows})

    def item(target: str, instance: str, image_id: str | None) -> AgentManifest:
        if instance in agents:
            return manifest(plan, inventory, agents[instance], host=target, snapshot=record.id, created=record.created,
                            image_id=image_id, bundle=bundle)  # fmt: skip
        return from_row(rows[(target, instance)], snapshot=record.id, created=record.created, image_id=image_id)

    def work(conn: Connection, target: SshTarget) -> tuple[list[AgentSnapshot], list[str]]:
        mine = where[target.name]
        # before anything changes (restic installed, a repository made, an agent frozen): room for what it adds
        refused, probed = remote.backup_room(conn, fleet, mine, host=target.name,
                                             min_free=inventory.fleet.snapshots.min_free)  # fmt: skip
        restic_bin, unprepared = None, None
        if set(mine) - set(refused):  # nothing made for restic (not even a repository) when it backs up no one
            restic_bin, unprepared = _prepare_or_error(conn, fleet, host=target.name, probed=probed)
        names = {i: agents[i].container if i in agents else rows[(target.name, i)]["container"] for i in mine}
        states = remote.container_states(conn, list(names.values()), host=target.name)
        items = []
        for instance in mine:
            image_id = states.get(names[instance], "").split(" ")[-1] or None
            items.append(item(target.name, instance, None if image_id == "missing" else image_id))
        done, failed = [], []
        for taken, errors in _every_agent(conn, restic_bin, items, host=target.name, unprepared=unprepared,
                                          max_freeze=inventory.fleet.snapshots.max_freeze, refused=refused):  # fmt: skip
            done += [taken] if taken else []
            failed += errors
        if unprepared is not None and not done:
            raise unprepared  # no tier of any agent here: the host's error, as before the checkpoint tier
        return done, failed

    return _recorded(ledger, run, record, in_parallel(targets, work))


def _recorded(ledger: Ledger, run: int, record: SnapshotRecord,
              results: Mapping[str, tuple[list[AgentSnapshot], list[str]] | JackinError]) -> CreateResult:  # fmt: skip
    """``take``'s outcome per host, audited, and the snapshot recorded with the agents it holds."""
    fleet = record.fleet
    out = CreateResult(snapshot=record)
    for name, result in results.items():
        if isinstance(result, JackinError):
            out.errors.append(HostError.of(name, result))
            ledger.audit(run, fleet, "snapshot.create", "failed", host=name, detail={"error": result.message})
            continue
        done, failed = result
        record.agents.extend(done)
        out.errors += [HostError(host=name, error=f, unreachable=False) for f in failed]
        ledger.audit(run, fleet, "snapshot.create", "failed" if failed else "ok", host=name,
                     detail={"snapshot": record.id, "agents": [a.instance for a in done], "errors": failed,
                             "tiers": {a.instance: a.tiers for a in done},
                             "instants": {a.instance: {"how": a.instant, "frozen_ms": a.frozen_ms} for a in done}})  # fmt: skip
    if record.agents:
        ledger.record_snapshot(record.model_dump(exclude={"agents"}),
                               [a.model_dump(mode="json") for a in record.agents], run=run)  # fmt: skip
    ledger.finish_run(run, "failed" if out.errors else "ok", {"snapshot": record.id, "agents": len(record.agents)})
    return out


def _prepare_or_error(conn: Connection, fleet: str, *, host: str,
                      probed: str | None = None) -> tuple[str | None, JackinError | None]:  # fmt: skip
    """``prepare``, or its error when the host answered (the checkpoint tier may still be taken);
    a lost connection stays the host's error."""
    try:
        return prepare(conn, fleet, host=host, probed=probed), None
    except ConnectError:
        raise
    except JackinError as error:
        return None, error


def _checkpoint(conn: Connection, item: AgentManifest) -> tuple[cow.CheckpointTaken | None, str | None]:
    """The checkpoint tier of ``item`` where its host offers it (a btrfs fleet dir, the home a subvolume):
    (taken, error). Milliseconds, the agent frozen for them. Not offered: (None, None)."""
    try:
        if not cow.supported(conn, item.fleet, item.instance):
            return None, None
        return cow.checkpoint(conn, item.fleet, item.instance, item.snapshot), None
    except JackinError as error:
        return None, f"{item.instance}: checkpoint tier: {error.message}"


BACKUPS_PER_HOST = 4  # restic backups side by side on one host (each waits 0.2 s for restic's lock check)


class _FirstTier(NamedTuple):
    """An agent's checkpoint (or None) and its manifest as written for its restic tier (``written``)."""

    item: AgentManifest  # with its tiers: the checkpoint's, if taken, and restic's
    took: cow.CheckpointTaken | None
    errors: list[str]
    written: bool


def _tier_here(conn: Connection, fleet: str) -> bool:
    """Whether the host has the fleet's checkpoint filesystem at all (one round trip for all its agents;
    a host that cannot say is asked again per agent)."""
    try:
        return cow.supported(conn, fleet)
    except JackinError:
        return True


def _first_tier(conn: Connection, restic_bin: str | None, item: AgentManifest, *, host: str,
                unprepared: JackinError | None = None, offered: bool = True,
                refusal: str | None = None) -> _FirstTier:  # fmt: skip
    """The checkpoint (one instant, the agent frozen for its milliseconds) where the host offers it
    (``offered=False``: the host has no checkpoint filesystem for the fleet), then the manifest its
    restic tier records (which says what tiers it has). ``refusal``: why this agent gets no restic
    snapshot (``remote.backup_room``): its checkpoint is still taken."""
    took, problem = _checkpoint(conn, item) if offered else (None, None)
    errors = [problem] if problem else []
    item = item.model_copy(update={"tiers": [*(["checkpoint"] if took else []), "restic"]})
    if refusal is not None or restic_bin is None:
        why = refusal or (unprepared.message if unprepared else "restic is not prepared")
        errors.append(f"{item.instance}: {why}")
        return _FirstTier(item, took, errors, written=False)
    remote.write_manifest(conn, item, host=host)
    return _FirstTier(item, took, errors, written=True)


def _restic_tier(conn: Connection, restic_bin: str | None, first: _FirstTier, *, host: str, max_freeze: int = 600,
                 forget_later: list[str] | None = None) -> tuple[AgentSnapshot | None, list[str]]:  # fmt: skip
    """The restic backup of the instant ``first`` holds (the checkpoint itself; without one, the home
    with the agent frozen for the backup). A tier that fails never stops the other: what was taken is
    returned (None: nothing) with the errors, each naming its tier."""
    item, took, errors = first.item, first.took, list(first.errors)
    held = {"instant": "checkpoint", "frozen_ms": took.frozen_ms} if took else {}
    if first.written and restic_bin is not None:
        frozen_copy = took.checkpoint.path if took else None
        try:
            taken = _backup(conn, restic_bin, item, host=host, checkpoint=frozen_copy, max_freeze=max_freeze,
                            manifest=False, forget_later=forget_later)  # fmt: skip
            return taken.model_copy(update=held), errors
        except JackinError as error:
            errors.append(f"{item.instance}: {error.message}")
    if not took:
        return None, errors
    tiers: list[Tier] = ["checkpoint"]
    only = item.model_copy(update={"tiers": tiers})
    return AgentSnapshot(host=host, instance=item.instance, agent=item.agent, tiers=tiers, manifest=only,
                         **held), errors  # fmt: skip


def _both_tiers(conn: Connection, restic_bin: str | None, item: AgentManifest, *, host: str,
                unprepared: JackinError | None = None, max_freeze: int = 600) -> tuple[AgentSnapshot | None, list[str]]:  # fmt: skip
    """One agent's snapshot on every tier its host has (``_first_tier``, then ``_restic_tier``)."""
    first = _first_tier(conn, restic_bin, item, host=host, unprepared=unprepared)
    return _restic_tier(conn, restic_bin, first, host=host, max_freeze=max_freeze)


def _every_agent(conn: Connection, restic_bin: str | None, items: list[AgentManifest], *, host: str,
                 unprepared: JackinError | None, max_freeze: int,
                 refused: Mapping[str, str] | None = None) -> list[tuple[AgentSnapshot | None, list[str]]]:  # fmt: skip
    """Every agent of one host on every tier, in ``items``' order: the checkpoints and manifests one agent
    after another (milliseconds each, and SFTP), then the restic backups side by side, up to
    ``BACKUPS_PER_HOST`` at once, each over its own SSH channel of ``conn`` (restic spends 0.2 s of each
    backup waiting, after taking its lock, for others' locks to show: the waits overlap)."""
    offered = bool(items) and _tier_here(conn, items[0].fleet)
    firsts = [_first_tier(conn, restic_bin, m, host=host, unprepared=unprepared, offered=offered,
                          refusal=(refused or {}).get(m.instance)) for m in items]  # fmt: skip

    partial: list[str] = []  # restic snapshots of agents with an unreadable file: forgotten after the others

    def second(first: _FirstTier) -> tuple[AgentSnapshot | None, list[str]]:
        return _restic_tier(conn, restic_bin, first, host=host, max_freeze=max_freeze, forget_later=partial)

    if len(firsts) < 2:
        done = [second(f) for f in firsts]
    else:
        with ThreadPoolExecutor(max_workers=min(BACKUPS_PER_HOST, len(firsts)), thread_name_prefix="backup") as pool:
            done = list(pool.map(second, firsts))
    if partial and restic_bin is not None:
        try:
            remote.forget(conn, restic_bin, items[0].fleet, partial, host=host, prune=False)
        except JackinError as error:  # the failed agents' errors stand; this says what is left behind
            done[0][1].append(f"could not forget the partial restic snapshots {', '.join(partial)}: {error.message}")
    return done


def _backup(conn: Connection, restic_bin: str, item: AgentManifest, *, host: str, tmp: bool = False,
            checkpoint: str | None = None, max_freeze: int = 600, manifest: bool = True,
            forget_later: list[str] | None = None) -> AgentSnapshot:  # fmt: skip
    """The restic tier of ``item`` (its manifest, written first unless ``manifest=False``: written
    already, says which tiers it has), as of one instant (``remote.backup``); ``tmp``: a look at the live
    home for a diff, nothing held."""
    if manifest:
        remote.write_manifest(conn, item, host=host)
    summary = remote.backup(conn, restic_bin, item, host=host, tmp=tmp, checkpoint=checkpoint,
                            max_freeze=max_freeze, hold=not tmp, forget_later=forget_later)  # fmt: skip
    return AgentSnapshot(host=host, instance=item.instance, agent=item.agent, restic_id=summary.snapshot_id,
                         size=summary.total_bytes, added=summary.data_added, files_new=summary.files_new,
                         files_changed=summary.files_changed, tiers=list(item.tiers), manifest=item,
                         instant=summary.instant, frozen_ms=summary.frozen_ms)  # fmt: skip


def create(inventory: Inventory, agent: str | None = None, label: str | None = None, kind: Kind = "manual",
           *, bring_up: bool = False) -> CreateResult:  # fmt: skip
    """``snapshot.create``: one fleet snapshot of ``agent`` (an instance or an agent; default all)."""
    instances = select(inventory, agent)
    with Ledger() as ledger, ledger.lock(inventory.fleet.name, "snapshot.create"):
        targets = provider_for(inventory, ledger).targets(bring_up=bring_up)
        if not targets:
            raise JackinError(f"fleet {inventory.fleet.name!r} has no hosts up: nothing to snapshot")
        return take(ledger, inventory, targets, instances, label=label, kind=kind)


# --- list, show ----------------------------------------------------------------------------------


def records(inventory: Inventory) -> list[SnapshotRecord]:
    """The fleet's snapshots as the ledger knows them, oldest first."""
    with Ledger() as ledger:
        return [SnapshotRecord.model_validate(r) for r in ledger.snapshot_rows(inventory.fleet.name)]


def show(inventory: Inventory, snapshot: str) -> SnapshotRecord:
    with Ledger() as ledger:
        return find(ledger, inventory.fleet.name, snapshot)


def find(ledger: Ledger, fleet: str, snapshot: str) -> SnapshotRecord:
    row = ledger.snapshot(fleet, snapshot)
    if row is None:
        known = [r["id"] for r in ledger.snapshot_rows(fleet)][-5:]
        raise SpecError(f"no snapshot {snapshot!r} of fleet {fleet!r}",
                        hint=f"the latest: {', '.join(known)}" if known else "take one: inv snapshot.create")  # fmt: skip
    return SnapshotRecord.model_validate(row)


# --- diff ------------------------------------------------------------------------------------------


def diff(inventory: Inventory, snapshot: str, other: str | None = None, agent: str | None = None) -> DiffResult:
    """Files added, removed and changed from ``snapshot`` to ``other`` (another snapshot) or, without it,
    to the live workspace (a temporary snapshot tagged ``tmp``, forgotten right after). Holds the fleet's
    lock (the temporary snapshot writes the agent's manifest file and the repository, as create does)
    and reads only repositories that exist: a host where the fleet has none is that host's error."""
    fleet = inventory.fleet.name
    wanted = set(select(inventory, agent))
    with Ledger() as ledger, ledger.lock(fleet, "snapshot.diff"):
        first = find(ledger, fleet, snapshot)
        second = find(ledger, fleet, other) if other else None
        targets = [t for t in provider_for(inventory, ledger).targets(bring_up=False) if t.name in first.hosts]
        plan = fleet_plan(inventory, ledger) if second is None else None
        pairs = [a for a in first.agents if a.instance in wanted]
        return _diff(inventory, first, second, pairs, targets, plan)


def _diff(inventory: Inventory, first: SnapshotRecord, second: SnapshotRecord | None, pairs: list[AgentSnapshot],
          targets: Sequence[SshTarget], plan: planning.FleetPlan | None, *, reverse: bool = False) -> DiffResult:  # fmt: skip
    fleet = inventory.fleet.name
    against = second.id if second else "live"
    live_id = f"tmp-{secrets.token_hex(4)}"

    def work(conn: Connection, target: SshTarget) -> list[AgentDiff]:
        mine = [p for p in pairs if p.host == target.name and p.restic_id]
        if not mine:
            return []
        restic_bin = repo_or_refuse(conn, fleet, host=target.name)  # never prepare: a diff creates no repository
        found = []
        for item in mine:
            other_item = second.agent(target.name, item.instance) if second else None
            if second is not None and (other_item is None or not other_item.restic_id):
                continue
            tmp = None
            if second is None:
                assert plan is not None  # diff() reads the plan whenever the live side is compared
                agent = next(a for a in plan.agents if a.instance == item.instance)
                now = datetime.now(UTC).isoformat(timespec="seconds")
                live = manifest(plan, inventory, agent, host=target.name, snapshot=live_id, created=now,
                                image_id=None, bundle="")  # fmt: skip
                tmp = _backup(conn, restic_bin, live, host=target.name, tmp=True).restic_id
            to = other_item.restic_id if other_item else tmp
            ids = (to, item.restic_id) if reverse else (item.restic_id, to)
            try:
                found.append(remote.diff(conn, restic_bin, fleet, ids[0], ids[1], host=target.name,  # type: ignore[arg-type]  # ids set: checked above
                                         instance=item.instance, against=against))  # fmt: skip
            finally:
                if tmp:
                    remote.forget(conn, restic_bin, fleet, [tmp], host=target.name, prune=False)
        return found

    result = DiffResult(snapshot=first.id, against=against)
    for name, found in in_parallel(targets, work).items():
        if isinstance(found, JackinError):
            result.errors.append(HostError.of(name, found))
        else:
            result.agents.extend(found)
    return result


def existing_repo(conn: Connection, fleet: str, *, host: str) -> str | None:
    """restic's path when the fleet has its repository (and password) on the host, else None; creates
    nothing (never ``prepare``): a read-only command or a prune must not leave a repository behind."""
    config, secret = restic.repo_path(fleet) + "/config", restic.password_path(fleet)
    found = remote.run(conn, f"if [ -f {restic.q(config)} ] && [ -f {restic.q(secret)} ]; then echo yes; else echo no; fi",
                       host=host, what="looking for the fleet's snapshot repository")  # fmt: skip
    return remote.ensure_restic(conn, host=host) if found.strip() == "yes" else None


def repo_or_refuse(conn: Connection, fleet: str, *, host: str) -> str:
    """``existing_repo``, or a clear refusal when the fleet has no repository on the host."""
    restic_bin = existing_repo(conn, fleet, host=host)
    if restic_bin is None:
        raise JackinError(f"fleet {fleet!r} has no snapshot repository on {host} (torn down, or never snapshotted "
                          "there): nothing to read", host=host)  # fmt: skip
    return restic_bin
