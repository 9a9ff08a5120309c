"""Restoring a snapshot, and pruning by the spec's retention.

A restore refuses while an agent's container runs, unless ``stop`` (stop it, restore,
start it again, even when the restore failed). It first takes a pre-restore snapshot
of what it is about to overwrite (kind ``pre-restore``, on every tier the host has:
restoring that undoes the restore), shows the difference (``confirm`` decides), and
then restores each agent from the fastest tier that still holds it: the checkpoint
(``cow.restore_checkpoint``: a writable snapshot of it swapped in for the home by
rename, milliseconds) when the snapshot has that tier and the checkpoint is still on
the host, else restic (``host.restore``: verified into a root-only staging dir on the
home's filesystem, swapped in by rename). Each agent's result says which tier it used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fabric import Connection
from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import JackinError, SpecError
from jackin.lab.providers import provider_for
from jackin.snapshots import api, cow, moves
from jackin.snapshots import host as remote
from jackin.snapshots.models import AgentRestore, AgentSnapshot, DiffResult, PruneResult, RestoreResult, SnapshotRecord
from jackin.snapshots.moves import Placement
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import HostError
from jackin.transport.target import SshTarget

if TYPE_CHECKING:
    from jackin.plan.fleet import FleetPlan

Confirm = Callable[[DiffResult], bool]


def restore(inventory: Inventory, snapshot: str, agent: str | None = None, *, stop: bool = False,
            confirm: Confirm | None = None, from_host: str | None = None) -> RestoreResult:  # fmt: skip
    """``snapshot.restore``: put ``agent``'s (default: every agent's) workspace back as ``snapshot`` had it.
    ``from_host``: only the agents the snapshot took on that host (see ``_resolve``)."""
    fleet = inventory.fleet.name
    wanted = set(api.select(inventory, agent))
    with Ledger() as ledger, ledger.lock(fleet, "snapshot.restore"):
        record = api.find(ledger, fleet, snapshot)
        items = [a for a in record.agents if a.instance in wanted and (a.restic_id or "checkpoint" in a.tiers)]
        if not items:
            raise SpecError(f"snapshot {snapshot!r} holds no agent {agent!r}" if agent else
                            f"snapshot {snapshot!r} holds no agents")  # fmt: skip
        items, repos = _resolve(inventory, ledger, record, items, from_host)
        targets = _targets(inventory, ledger, record, {a.host for a in items})
        _check_room(inventory, record.id, items, targets, repos)  # before anything changes: no agent stopped yet
        plan = api.fleet_plan(inventory, ledger)
        containers = {a.instance: a.container for a in plan.agents}
        running = _running(
            targets, {t.name: [containers[a.instance] for a in items if a.host == t.name] for t in targets}
        )
        if running and not stop:
            where = ", ".join(f"{c} on {h}" for h, cs in sorted(running.items()) for c in cs)
            raise JackinError(f"restore refused: agent container(s) running: {where}",
                              hint="pass --stop to stop them, restore, and start them again")  # fmt: skip
        run = ledger.start_run(fleet, "snapshot.restore", {"snapshot": snapshot, "agent": agent, "stop": stop})
        result = RestoreResult(snapshot=snapshot)
        try:
            _set_running(targets, running, False)
            _restore(ledger, inventory, record, items, targets, plan, confirm=confirm, run=run, result=result,
                     repos=repos)  # fmt: skip
        except BaseException:
            ledger.finish_run(run, "failed", result.model_dump(mode="json"))
            raise
        finally:
            result.errors += _set_running(targets, running, True)
            for a in result.agents:
                a.restarted = any(c == containers[a.instance] for c in running.get(a.host, []))
        ledger.finish_run(run, "ok" if result.ok else "failed", result.model_dump(mode="json"))
        return result


def _restore(ledger: Ledger, inventory: Inventory, record: SnapshotRecord, items: list[AgentSnapshot],
             targets: list[SshTarget], plan: FleetPlan,
             *, confirm: Confirm | None, run: int, result: RestoreResult,
             repos: dict[tuple[str, str], str] | None = None) -> None:  # fmt: skip
    fleet = inventory.fleet.name
    instances = sorted({a.instance for a in items})
    pre = api.take(ledger, inventory, targets, instances, label=f"before restoring {record.id}", kind="pre-restore")
    if pre.errors or not pre.snapshot.agents:
        problems = "; ".join(f"{e.host}: {e.error}" for e in pre.errors) or "nothing was snapshotted"
        raise JackinError(f"restore refused: the pre-restore snapshot failed ({problems}); nothing was changed")
    result.pre_restore = pre.snapshot.id
    own = record.model_copy(update={"agents": [a for a in items if (a.host, a.instance) not in (repos or {})]})
    preview = api._diff(inventory, pre.snapshot, own, [a for a in pre.snapshot.agents], targets, plan)
    preview = preview.model_copy(update={"snapshot": record.id, "against": "live"})
    if confirm is not None and not confirm(preview):
        raise JackinError("nothing changed: not confirmed",
                          hint=f"the pre-restore snapshot {pre.snapshot.id} was kept")  # fmt: skip

    uids = {a.instance: a.uid for a in plan.agents}

    def work(conn: Connection, target: SshTarget) -> list[AgentRestore]:
        prepared: list[str] = []

        def restic_bin() -> str:  # prepared once, and only when a restic restore needs it
            prepared[:] = prepared or [api.prepare(conn, fleet, host=target.name)]
            return prepared[0]

        return [restore_one(conn, fleet, record.id, a, host=target.name, restic_bin=restic_bin,
                            repo=(repos or {}).get((target.name, a.instance)), uid=uids.get(a.instance),
                            min_free=inventory.fleet.snapshots.min_free)
                for a in items if a.host == target.name]  # fmt: skip

    for name, found in api.in_parallel(targets, work).items():
        if isinstance(found, JackinError):
            result.errors.append(HostError.of(name, found))
            ledger.audit(run, fleet, "snapshot.restore", "failed", host=name, detail={"error": found.message})
            continue
        result.agents.extend(found)
        for a in found:
            ledger.audit(run, fleet, "snapshot.restore", "ok" if a.restored else "failed", host=name,
                         detail={"snapshot": record.id, "instance": a.instance, "error": a.error,
                                 "pre_restore": pre.snapshot.id, "tier": a.tier, "note": a.note})  # fmt: skip


def _check_room(inventory: Inventory, snapshot: str, items: list[AgentSnapshot], targets: list[SshTarget],
                repos: dict[tuple[str, str], str] | None) -> None:  # fmt: skip
    """Refuse the whole restore, before anything changes (no agent stopped, no pre-restore snapshot), when
    the agents it restores from restic on a host would leave less than ``snapshots.min_free`` free on
    their homes' filesystem, their sizes added up, or when any agent's snapshot would not fit its home's
    disk quota (``resources.disk``; a snapshot with a checkpoint is checked against the quota only: its
    copy takes no new space), or when the pre-restore snapshot would not fit the repository's filesystem
    (``remote.backup_room``). Reads only: a host with no restic yet is not asked about restic snapshots
    (the restore script checks each agent again)."""
    fleet, min_free = inventory.fleet.name, inventory.fleet.snapshots.min_free

    def work(conn: Connection, target: SshTarget) -> bool:
        here = [a for a in items if a.host == target.name]
        mine = [(a.instance, a.restic_id, (repos or {}).get((target.name, a.instance))) for a in here
                if a.restic_id and "checkpoint" not in a.tiers]  # fmt: skip
        copies = [
            (a.instance, cow.checkpoint_path(fleet, a.instance, snapshot)) for a in here if "checkpoint" in a.tiers
        ]
        # the pre-restore snapshot comes first: room in the repository for it, else nothing is stopped
        refused, _ = remote.backup_room(conn, fleet, [a.instance for a in here], host=target.name, min_free=min_free)
        if refused:
            raise JackinError("the pre-restore snapshot: " + "; ".join(f"{i}: {why}" for i, why in refused.items()))
        if not mine and not copies:
            return True
        return remote.room(conn, fleet, mine, host=target.name, min_free=min_free, checkpoints=copies)

    problems = [f"{name}: {found.message}" for name, found in api.in_parallel(targets, work).items()
                if isinstance(found, JackinError)]  # fmt: skip
    if problems:
        raise JackinError("restore refused before anything changed: " + "; ".join(problems),
                          hint="free space on the host, or lower snapshots.min_free; raise the agent's resources.disk "
                               "for a quota")  # fmt: skip


def owner_change(item: AgentSnapshot, uid: int | None) -> tuple[int, int, int, int] | None:
    """(snapshot uid, gid, current uid, gid) when the agent's uid now (the plan's; its gid is its uid)
    differs from the one its manifest recorded (uids are freed at fleet.down: a snapshot restored into
    a later lifecycle may find the agent under another uid); None when the same or not known."""
    if item.manifest is None or uid is None or (item.manifest.uid, item.manifest.gid) == (uid, uid):
        return None
    return item.manifest.uid, item.manifest.gid, uid, uid


def restore_one(conn: Connection, fleet: str, snapshot: str, item: AgentSnapshot, *, host: str,
                restic_bin: Callable[[], str], repo: str | None = None, uid: int | None = None,
                min_free: int = remote.MIN_FREE) -> AgentRestore:  # fmt: skip
    """One agent back as ``snapshot`` had it: from its checkpoint when the snapshot has that tier and the
    checkpoint is still on the host, else from restic (``repo``: a repository pushed there from another host,
    snapshot.push). A checkpoint restore that fails changed nothing
    (cow's script), so restic is tried next; a refusal (the agent runs again) is never worked around."""
    done = AgentRestore(host=host, instance=item.instance, restored=False)
    if "checkpoint" in item.tiers:
        try:
            if _has_checkpoint(conn, fleet, item.instance, snapshot):
                cow.restore_checkpoint(conn, fleet, item.instance, snapshot)
                return done.model_copy(update={"restored": True, "tier": "checkpoint"})
            done.note = f"checkpoint {snapshot} of {item.instance} is no longer on {host}"
        except cow.CheckpointRefused as error:
            return done.model_copy(update={"error": error.message})
        except JackinError as error:
            done.note = f"the checkpoint tier failed: {error.message}"
    if not item.restic_id:
        return done.model_copy(update={"error": f"{done.note}; the snapshot has no restic tier to fall back on"})
    owner = owner_change(item, uid)
    try:
        remapped = remote.restore(conn, restic_bin(), fleet, item.instance, item.restic_id, host=host, repo=repo,
                                  owner=owner, min_free=min_free)  # fmt: skip
    except JackinError as error:
        return done.model_copy(update={"error": error.message})
    if remapped and owner:
        said = f"files of uid {owner[0]}:{owner[1]} in the snapshot now belong to the agent's uid {owner[2]}:{owner[3]}"
        done.note = f"{done.note}; {said}" if done.note else said
    return done.model_copy(update={"restored": True, "tier": "restic"})


def _has_checkpoint(conn: Connection, fleet: str, instance: str, snapshot: str) -> bool:
    """Whether checkpoint ``snapshot`` of ``instance`` is on the host (False when the fleet has no tier there now)."""
    if not cow.supported(conn, fleet):
        return False
    return any(c.snapshot_id == snapshot for c in cow.list_checkpoints(conn, fleet, instance))


def _targets(inventory: Inventory, ledger: Ledger, record: SnapshotRecord, hosts: set[str]) -> list[SshTarget]:
    targets = [t for t in provider_for(inventory, ledger).targets(bring_up=False) if t.name in hosts]
    missing = sorted(hosts - {t.name for t in targets})
    if missing:
        raise JackinError(f"snapshot {record.id} was taken on {', '.join(missing)}, not a host of the fleet now",
                          hint="push it onto a host of the fleet first (snapshot.push)")  # fmt: skip
    return targets


def _resolve(inventory: Inventory, ledger: Ledger, record: SnapshotRecord, items: list[AgentSnapshot],
             from_host: str | None) -> tuple[list[AgentSnapshot], dict[tuple[str, str], str]]:  # fmt: skip
    """Where ``items`` restore (``moves.placements``): each on its own host, or, for a host that is
    gone, on the host its repository was pushed to (snapshot.push), from that copy. The items come
    back with ``host`` set to where they restore (and the restic tier only: a checkpoint on that host
    is not the origin's), with the pushed repository per (host, instance)."""
    targets = provider_for(inventory, ledger).targets(bring_up=False)
    current = {t.name for t in targets}
    pushed = moves.pushed_to([c for c in ledger.copies(record.fleet) if c["place"] != "operator"], record.id, current)
    found = moves.placements(items, snapshot=record.id, current=current, pushed=pushed, from_host=from_host)
    _refuse_missing(record, [t for t in targets if any(p.host == t.name for p in found)], found, items)
    by_key = {(a.host, a.instance): a for a in items}
    moved = [
        by_key[(p.origin, p.instance)]
        if p.repo is None
        else by_key[(p.origin, p.instance)].model_copy(update={"host": p.host, "tiers": ["restic"]})
        for p in found
    ]
    return moved, {(p.host, p.instance): p.repo for p in found if p.repo}


def _refuse_missing(record: SnapshotRecord, targets: list[SshTarget], found: list[Placement],
                    items: list[AgentSnapshot]) -> None:  # fmt: skip
    """Refuse, before anything changes, when a repository a placement restores from does not hold its
    restic snapshot (and, for the host's own, no checkpoint of it is there): the host was replaced under
    its name (its repository is a new one), or a copy pushed onto a host went with the fleet's teardown."""
    by_key = {(a.host, a.instance): a for a in items}

    def work(conn: Connection, target: SshTarget) -> list[Placement]:
        listed: dict[str | None, set[str]] = {}
        missing = []
        for p in (p for p in found if p.host == target.name):
            if p.restic_id and p.repo not in listed:
                listed[p.repo] = remote.own_restic_ids(conn, record.fleet, host=target.name, repo=p.repo)
            if p.restic_id and moves.holds(listed[p.repo], p.restic_id):
                continue
            item = by_key[(p.origin, p.instance)]
            if p.repo is None and "checkpoint" in item.tiers and _has_checkpoint(conn, record.fleet, p.instance,
                                                                                 record.id):  # fmt: skip
                continue
            missing.append(p)
        return missing

    for name, missing in sorted(api.in_parallel(targets, work).items()):
        if isinstance(missing, JackinError):
            raise missing
        own = [p.instance for p in missing if p.repo is None]
        if own:
            raise JackinError(f"snapshot {record.id} is not in {name}'s repository (was {name} replaced?): "
                              f"{', '.join(own)} cannot be restored from it; nothing was changed",
                              hint=f"inv snapshot.push {record.id} --host {name} copies this machine's copy there, "
                                   "then restore again")  # fmt: skip
        if missing:
            p = missing[0]
            raise JackinError(f"snapshot {record.id}: the copy of {p.origin}'s repository pushed onto {name} "
                              f"({p.repo}) is gone or does not hold it; nothing was changed",
                              hint=f"push it again: inv snapshot.push {record.id} --host {name}")  # fmt: skip


def _running(targets: list[SshTarget], containers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per host, the given containers that run now (a host that cannot be read fails the restore)."""
    found = api.in_parallel(targets, lambda conn, t: remote.container_states(conn, containers[t.name], host=t.name))
    running = {}
    for name, states in found.items():
        if isinstance(states, JackinError):
            raise states
        running[name] = [c for c, state in states.items() if state.startswith("true")]
    return {h: cs for h, cs in running.items() if cs}


def _set_running(targets: list[SshTarget], containers: dict[str, list[str]], up: bool) -> list[HostError]:
    hosts = [t for t in targets if containers.get(t.name)]
    found = api.in_parallel(hosts, lambda conn, t: remote.set_running(conn, containers[t.name], up, host=t.name))
    errors = [HostError.of(n, e) for n, e in found.items() if isinstance(e, JackinError)]
    if errors and not up:
        raise JackinError("restore refused: stopping the agents failed: "
                          + "; ".join(f"{e.host}: {e.error}" for e in errors))  # fmt: skip
    return errors


# --- prune ---------------------------------------------------------------------------------------


class PrunePlan(BaseModel):
    """What ``snapshot.prune`` does (``prune_plan``): the snapshots retention keeps, and per host the
    snapshots it forgets there; ``gone``: per host that left the fleet, the snapshots forgotten from
    the ledger alone (no copy of that host's repository holds them); ``notes``: what it leaves and why."""

    model_config = ConfigDict(extra="forbid")

    kept: list[str] = Field(default_factory=list)
    forget: dict[str, list[str]] = Field(default_factory=dict)
    gone: dict[str, list[str]] = Field(default_factory=dict)
    removed: list[SnapshotRecord] = Field(default_factory=list)  # each with the agents it loses only
    notes: list[str] = Field(default_factory=list)


def retained(records: list[SnapshotRecord], keep: int) -> set[str]:
    """The ids retention keeps: a fleet snapshot stays while it is among the ``keep`` newest snapshots
    of its kind of ANY (host, instance) it holds; ``manual``, ``auto`` and ``pre-restore`` count
    apart (automatic snapshots never push out the ones an operator took, nor the one a restore came
    from); ``final`` ones (the copy of a torn-down fleet) are never pruned automatically."""
    newest: dict[tuple[str, str, str], list[str]] = {}
    for record in sorted(records, key=lambda r: (r.created, r.id)):
        for host, instance in sorted({(a.host, a.instance) for a in record.agents}):
            newest.setdefault((host, instance, record.kind), []).append(record.id)
    kept = {r.id for r in records if r.kind == "final"}
    for ids in newest.values():
        kept.update(ids[-keep:])
    return kept


def prune_plan(records: list[SnapshotRecord], keep: int, current: set[str], copies: list[dict]) -> PrunePlan:
    """Pure: what prune does with ``records`` (oldest first) under ``keep``, the fleet's ``current``
    hosts and the ledger's ``copies`` (``Ledger.copies``). A dropped snapshot is forgotten on each
    current host holding it; on a host that left the fleet it is forgotten from the ledger alone when
    no copy of that host's repository holds it (nothing can restore it), else kept for that copy
    (snapshot.push, restore --from-host) and noted: never an error that repeats at every prune."""
    kept = retained(records, keep)
    plan = PrunePlan(kept=[r.id for r in records if r.id in kept])
    for record in (r for r in records if r.id not in kept):
        losing = []
        for host in sorted({a.host for a in record.agents}):
            places = sorted({c["place"] for c in copies if c["origin"] == host and record.id in c["snapshots"]})
            if host in current:
                plan.forget.setdefault(host, []).append(record.id)
            elif not places:
                plan.gone.setdefault(host, []).append(record.id)
                plan.notes.append(
                    f"{record.id} on {host}: {host} is no longer a host of the fleet and no copy holds "
                    "it: forgotten from the ledger alone (a repository left on that host is not touched)"
                )
            else:
                plan.notes.append(
                    f"{record.id} on {host}: {host} is no longer a host of the fleet; kept for its copy "
                    f"at {', '.join(places)} (snapshot.push, snapshot.restore --from-host)"
                )
                continue
            losing.append(host)
        if losing:
            plan.removed.append(record.model_copy(update={"agents": [a for a in record.agents if a.host in losing]}))
    return plan


def prune(inventory: Inventory, *, confirm: Callable[[list[SnapshotRecord]], bool] | None = None) -> PruneResult:
    """``snapshot.prune``: forget the snapshots retention drops (``prune_plan``), on every host that holds
    them: delete their checkpoints and free the restic data only they used (``restic forget --prune``)."""
    fleet = inventory.fleet.name
    keep = inventory.fleet.snapshots.keep
    with Ledger() as ledger, ledger.lock(fleet, "snapshot.prune"):
        records = [SnapshotRecord.model_validate(r) for r in ledger.snapshot_rows(fleet)]
        fleet_targets = provider_for(inventory, ledger).targets(bring_up=False)
        plan = prune_plan(records, keep, {t.name for t in fleet_targets}, ledger.copies(fleet))
        result = PruneResult(keep=keep, kept=plan.kept, notes=plan.notes)
        if not plan.removed:
            return result
        if confirm is not None and not confirm(plan.removed):
            raise JackinError("nothing changed: not confirmed")
        targets = [t for t in fleet_targets if t.name in plan.forget]
        run = ledger.start_run(fleet, "snapshot.prune", {"remove": [r.id for r in plan.removed]})
        by_id = {r.id: r for r in records}

        def work(conn: Connection, target: SshTarget) -> int:
            mine = [(i, a) for i in plan.forget[target.name] for a in by_id[i].agents if a.host == target.name]
            deleted = delete_checkpoints(conn, fleet, [(a.instance, i) for i, a in mine if "checkpoint" in a.tiers])
            restic_bin = api.existing_repo(conn, fleet, host=target.name)
            if restic_bin is None:  # no repository here (torn down since): nothing left in restic to forget
                return deleted
            there = [s["id"] for s in remote.snapshots(conn, restic_bin, fleet, host=target.name)]
            ids = [a.restic_id for _, a in mine if a.restic_id]
            # a snapshot already gone from the repository (lost, or never written) is forgotten by the ledger alone
            remote.forget(conn, restic_bin, fleet, [i for i in ids if any(t.startswith(i) for t in there)],
                          host=target.name)  # fmt: skip
            return deleted

        for name, outcome in api.in_parallel(targets, work).items():
            if isinstance(outcome, JackinError):
                result.errors.append(HostError.of(name, outcome))
                ledger.audit(run, fleet, "snapshot.prune", "failed", host=name, detail={"error": outcome.message})
                continue
            result.checkpoints += outcome
            for sid in plan.forget[name]:
                ledger.forget_snapshot(fleet, sid, host=name)
            ledger.audit(run, fleet, "snapshot.prune", "ok", host=name,
                         detail={"removed": plan.forget[name], "checkpoints": outcome})  # fmt: skip
        for name, ids in plan.gone.items():
            for sid in ids:
                ledger.forget_snapshot(fleet, sid, host=name)
            ledger.audit(run, fleet, "snapshot.prune", "ok", host=name,
                         detail={"removed": ids, "ledger_only": "not a host of the fleet now; no copy holds them"})  # fmt: skip
        result.removed = [r.id for r in plan.removed if ledger.snapshot(fleet, r.id) is None]
        ledger.finish_run(run, "failed" if result.errors else "ok", {"removed": result.removed})
        return result


def delete_checkpoints(conn: Connection, fleet: str, pairs: list[tuple[str, str]]) -> int:
    """Delete these (instance, snapshot id) checkpoints from the host; how many were there. A host whose
    fleet dir is no btrfs mount now has none left to delete."""
    if not pairs or not cow.supported(conn, fleet):
        return 0
    return sum(cow.delete_checkpoint(conn, fleet, instance, snapshot) for instance, snapshot in pairs)
