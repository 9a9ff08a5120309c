"""Moving a snapshot between places: ``snapshot.pull`` (hosts -> the operator's machine) and
``snapshot.push`` (the operator's copy -> another host of the fleet), and where a restore of a
snapshot takes each agent from (``placements``: its own host, or a host its origin was pushed to).

A fleet snapshot lives in the restic repository of each host that took part (its *origins*). A
pull mirrors those repositories whole (``copies.pull_hosts``: copy, ``restic check``, ledger
``repo_copies`` place ``operator``); a push copies the operator's mirror of an origin to
``/var/lib/jackin/snapshots/<fleet>/imported/<origin>`` on the destination host and records it
(place = that host), so ``snapshot.restore`` can restore the origin's agents there after the
origin is gone: same restic ids, same fleet password, the repository path differs.

Both hold the fleet's lock and audit what they did. Per host results are data: one host that
fails never hides what happened on the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import paramiko
from fabric import Connection
from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import JackinError, SpecError
from jackin.lab.providers import provider_for
from jackin.snapshots import api, copies, restic, transfer
from jackin.snapshots import host as remote
from jackin.snapshots.models import AgentSnapshot, SnapshotRecord
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import HostError
from jackin.transport.ssh import SshTarget, connect


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PulledHost(_Model):
    """One origin host of a pull: pulled now, already on this machine (the host is gone), or failed."""

    host: str
    status: Literal["pulled", "already pulled", "failed"]
    path: str | None = None
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    error: str | None = None
    moved_aside: str | None = None  # this machine's older copy of another repository of the host, moved here


class PullResult(_Model):
    snapshot: str
    hosts: list[PulledHost] = Field(default_factory=list)
    errors: list[HostError] = Field(default_factory=list)


class PushedOrigin(_Model):
    """One origin's repository pushed onto the destination host."""

    origin: str
    path: str  # the imported repository on the destination host
    pulled_first: bool = False  # the operator's copy was missing or older than the snapshot
    moved_aside: str | None = None  # an older repository of the origin, pushed here before, now under this path
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0


class PushResult(_Model):
    snapshot: str
    host: str
    origins: list[PushedOrigin] = Field(default_factory=list)
    errors: list[HostError] = Field(default_factory=list)


class Placement(_Model):
    """Where one agent of a snapshot is restored: on ``host``, from ``repo`` (None: the host's own
    repository; else the repository pushed there from ``origin``)."""

    instance: str
    origin: str
    host: str
    restic_id: str
    repo: str | None = None


# --- pure decisions ------------------------------------------------------------------------------


def origins_to_push(record: SnapshotRecord, host: str, *, own_holds: bool = True) -> list[str]:
    """The hosts whose repositories hold agents of ``record`` and must be copied onto ``host``: every
    other origin, and ``host`` itself when it is an origin whose own repository no longer holds the
    snapshot (``own_holds`` False: the host was replaced under the same name), pushed as ``imported/<host>``."""
    others = [h for h in record.hosts if h != host]
    return sorted([*others, host]) if host in record.hosts and not own_holds else others


def restic_ids_of(record: SnapshotRecord, host: str) -> list[str]:
    """The restic ids of ``record``'s agents taken on ``host`` (a checkpoint alone has none)."""
    return [a.restic_id for a in record.agents if a.host == host and a.restic_id]


def holds(ids: set[str], restic_id: str) -> bool:
    """Whether a repository listing ``ids`` holds ``restic_id`` (either may be a short prefix)."""
    return any(i.startswith(restic_id) or restic_id.startswith(i) for i in ids)


def local_copy(rows: list[dict], snapshot: str) -> str | None:
    """The path of the operator's copy (ledger rows of place ``operator``, newest first) that holds
    ``snapshot`` and is still on disk; None when it must be pulled (missing, or older than it)."""
    for row in rows:
        if snapshot in row["snapshots"] and (Path(row["path"]) / "config").is_file():
            return row["path"]
    return None


def pushed_to(rows: list[dict], snapshot: str, current: set[str]) -> dict[str, str]:
    """Per origin, the current host its repository was pushed to holding ``snapshot`` and its path there,
    as ``host\\0path``: a copy pushed onto the origin itself (a replaced host of the same name) first,
    else the latest push (rows newest first)."""
    found: dict[str, str] = {}
    own: set[str] = set()
    for row in rows:
        origin = row["origin"]
        if row["place"] not in current or snapshot not in row["snapshots"] or origin in own:
            continue
        if origin not in found or row["place"] == origin:
            found[origin] = f"{row['place']}\0{row['path']}"
            if row["place"] == origin:
                own.add(origin)
    return found


def placements(items: list[AgentSnapshot], *, snapshot: str, current: set[str], pushed: dict[str, str],
               from_host: str | None = None) -> list[Placement]:  # fmt: skip
    """Where each of ``items`` (one snapshot's agents) restores. An item taken on a current host
    restores there from its own repository; an item of a host that is gone restores on the host its
    repository was pushed to (``pushed``: origin -> ``host\\0path``), from that copy. ``from_host``
    keeps only the items taken on that origin. Refused: an origin gone and never pushed (the push
    hint), and two items restoring onto the same (host, instance) (choose one with ``--from-host``)."""
    origins = sorted({a.host for a in items})
    if from_host is not None:
        if from_host not in origins:
            raise SpecError(f"snapshot {snapshot} holds none of these agents from host {from_host!r}",
                            hint=f"--from-host expects one of: {', '.join(origins)}")  # fmt: skip
        items = [a for a in items if a.host == from_host]
    gone = sorted({a.host for a in items} - current - set(pushed))
    if gone:
        others = [h for h in origins if h not in gone and (h in current or h in pushed)]
        also = f", or restore only another host's agents: --from-host {' or '.join(others)}" if others else ""
        raise JackinError(f"snapshot {snapshot} was taken on {', '.join(gone)}, not a host of the fleet now, "
                          "and was not pushed onto one",
                          hint=f"pull it (inv snapshot.pull {snapshot}) and push it onto a host of the fleet first: "
                               f"inv snapshot.push {snapshot} --host HOST{also}")  # fmt: skip
    found: list[Placement] = []
    for a in sorted(items, key=lambda a: (a.instance, a.host)):
        host, _, path = pushed.get(a.host, "").partition("\0")
        if a.host in current and (host != a.host or not a.restic_id):  # its own repository (or checkpoint)
            found.append(Placement(instance=a.instance, origin=a.host, host=a.host, restic_id=a.restic_id or ""))
        elif not a.restic_id:
            raise JackinError(f"snapshot {snapshot} holds {a.instance} from {a.host} as a checkpoint only (no restic "
                              f"tier): it never left {a.host}, which is not a host of the fleet now",
                              hint="restore the snapshot's other agents (--agent NAME or --from-host HOST)")  # fmt: skip
        else:  # a copy pushed onto another host, or onto a replaced host of the origin's name
            found.append(Placement(instance=a.instance, origin=a.host, host=host, restic_id=a.restic_id, repo=path))
    _refuse_ambiguous(found, snapshot)
    return found


def _refuse_ambiguous(found: list[Placement], snapshot: str) -> None:
    by_target: dict[tuple[str, str], list[Placement]] = {}
    for p in found:
        by_target.setdefault((p.host, p.instance), []).append(p)
    clashes = {k: v for k, v in by_target.items() if len(v) > 1}
    if clashes:
        (host, instance), same = sorted(clashes.items())[0]
        choices = [f"--from-host {p.origin}" + (f" (pushed onto {host})" if p.repo else " (its own)") for p in same]
        raise SpecError(f"snapshot {snapshot} holds {instance} from {len(same)} hosts that would all restore onto "
                        f"{host}: {', '.join(p.origin for p in same)}",
                        hint=f"choose whose to restore: {'; '.join(choices)}")  # fmt: skip


def places(rows: list[dict]) -> dict[str, list[str]]:
    """Per snapshot id, where whole copies of its repositories are recorded (ledger ``repo_copies``
    rows): ``operator`` (this machine) and the hosts they were pushed onto."""
    found: dict[str, set[str]] = {}
    for row in rows:
        for snapshot in row["snapshots"]:
            found.setdefault(snapshot, set()).add(row["place"])
    return {s: sorted(p, key=lambda p: (p != copies.OPERATOR, p)) for s, p in found.items()}


def copy_places(inventory: Inventory) -> dict[str, list[str]]:
    """``places`` of the fleet's recorded copies (for ``snapshot.list``)."""
    with Ledger() as ledger:
        return places(ledger.copies(inventory.fleet.name))


# --- pull ------------------------------------------------------------------------------------------


def pull(inventory: Inventory, snapshot: str) -> PullResult:
    """``snapshot.pull``: mirror, check and record the repository of every reachable host holding
    ``snapshot``; a host that is gone but whose copy already holds it is ``already pulled``."""
    fleet = inventory.fleet.name
    with Ledger() as ledger, ledger.lock(fleet, "snapshot.pull"):
        record = api.find(ledger, fleet, snapshot)
        targets = [t for t in provider_for(inventory, ledger).targets(bring_up=False) if t.name in record.hosts]
        run = ledger.start_run(fleet, "snapshot.pull", {"snapshot": snapshot})
        result = PullResult(snapshot=snapshot)
        for name, found in copies.pull_hosts(ledger, fleet, targets).items():
            if isinstance(found, JackinError):
                result.hosts.append(PulledHost(host=name, status="failed", error=found.message))
                result.errors.append(HostError.of(name, found))
            else:
                result.hosts.append(PulledHost(host=name, status="pulled", path=found.destination,
                                               **found.model_dump(include={"copied", "copied_bytes", "skipped",
                                                                           "skipped_bytes", "moved_aside"})))  # fmt: skip
        for name in sorted(set(record.hosts) - {t.name for t in targets}):
            path = local_copy(ledger.copies(fleet, origin=name, place=copies.OPERATOR), snapshot)
            if path:
                result.hosts.append(PulledHost(host=name, status="already pulled", path=path))
            else:
                error = (
                    f"not a host of the fleet now, and no copy of its repository holding {snapshot} is on this machine"
                )
                result.hosts.append(PulledHost(host=name, status="failed", error=error))
                result.errors.append(HostError(host=name, error=error, unreachable=False))
        for h in result.hosts:
            ledger.audit(run, fleet, "snapshot.pull", "failed" if h.status == "failed" else "ok", host=h.host,
                         detail=h.model_dump(mode="json"))  # fmt: skip
        ledger.finish_run(run, "failed" if result.errors else "ok", result.model_dump(mode="json"))
        return result


# --- push ------------------------------------------------------------------------------------------


def push(inventory: Inventory, snapshot: str, host: str) -> PushResult:
    """``snapshot.push``: copy the operator's copy of each origin of ``snapshot`` (pulled first when
    missing or older than it) into ``host``'s ``imported/<origin>``, check it there with the fleet's
    password, and record it. ``host`` must be a host of the fleet now."""
    fleet = inventory.fleet.name
    with Ledger() as ledger, ledger.lock(fleet, "snapshot.push"):
        record = api.find(ledger, fleet, snapshot)
        targets = {t.name: t for t in provider_for(inventory, ledger).targets(bring_up=False)}
        if host not in targets:
            raise SpecError(f"{host!r} is not a host of fleet {fleet!r} now",
                            hint=f"--host expects one of: {', '.join(sorted(targets)) or '(no hosts up)'}")  # fmt: skip
        own_holds = host not in record.hosts or _own_holds(targets[host], fleet, restic_ids_of(record, host))
        origins = origins_to_push(record, host, own_holds=own_holds)
        if not origins:
            raise SpecError(f"snapshot {snapshot} was taken on {host} alone, and {host}'s repository holds it: "
                            "there is nothing to push there",
                            hint=f"restore it directly: inv snapshot.restore {snapshot}")  # fmt: skip
        result = PushResult(snapshot=snapshot, host=host)
        sources: dict[str, tuple[str, bool]] = {}
        failed: list[JackinError] = []
        for origin in origins:
            try:
                # the host itself (replaced under its name) is never pulled from: its repository is another one
                sources[origin] = _source(
                    ledger, fleet, snapshot, origin, targets.get(origin) if origin != host else None
                )
            except JackinError as error:
                error.host = error.host or origin
                failed.append(error)
        if not sources:  # nothing to push: the error itself (with its hint), nothing changed on the host
            raise (
                failed[0]
                if len(failed) == 1
                else JackinError(
                    "nothing to push: " + "; ".join(f"{e.host}: {e.message}" for e in failed), hint=failed[0].hint
                )
            )
        result.errors = [HostError.of(e.host or "", e) for e in failed]
        run = ledger.start_run(fleet, "snapshot.push", {"snapshot": snapshot, "host": host, "origins": origins})
        result.origins, errors = _push_all(ledger, fleet, targets[host], sources)
        result.errors += errors
        for item in result.origins:
            ledger.audit(run, fleet, "snapshot.push", "ok", host=host, detail=item.model_dump(mode="json"))
        for e in result.errors:
            ledger.audit(run, fleet, "snapshot.push", "failed", host=e.host, detail={"error": e.error})
        ledger.finish_run(run, "failed" if result.errors else "ok", result.model_dump(mode="json"))
        return result


def _own_holds(target: SshTarget, fleet: str, ids: list[str]) -> bool:
    """Whether ``target``'s own repository of ``fleet`` holds every one of ``ids`` (read on the host,
    nothing created there)."""
    with connect(target) as conn:
        there = remote.own_restic_ids(conn, fleet, host=target.name)
    return all(holds(there, i) for i in ids)


def _source(ledger: Ledger, fleet: str, snapshot: str, origin: str, target: SshTarget | None) -> tuple[str, bool]:
    """The operator's copy of ``origin`` holding ``snapshot`` (path, pulled now?): pulled first from
    ``origin`` when there is none, if ``origin`` is still a host of the fleet."""
    path = local_copy(ledger.copies(fleet, origin=origin, place=copies.OPERATOR), snapshot)
    if path:
        return path, False
    if target is None:
        raise JackinError(f"snapshot {snapshot}: no copy of {origin}'s repository holding it is on this machine, "
                          f"and {origin}'s repository no longer holds it (the host is gone or was replaced)",
                          hint="a snapshot of a host is only kept off it once pulled (inv snapshot.pull ID) "
                               "before the host goes")  # fmt: skip
    found = copies.pull_hosts(ledger, fleet, [target])[origin]
    if isinstance(found, JackinError):
        raise found
    path = local_copy(ledger.copies(fleet, origin=origin, place=copies.OPERATOR), snapshot)
    if path is None:
        raise JackinError(f"the pulled copy of {origin}'s repository does not hold snapshot {snapshot}", host=origin)
    return path, True


def _push_all(ledger: Ledger, fleet: str, target: SshTarget,
              sources: dict[str, tuple[str, bool]]) -> tuple[list[PushedOrigin], list[HostError]]:  # fmt: skip
    """Over one connection to the destination: restic and the fleet's password there, then each
    origin's copy pushed, checked (``restic check`` with the fleet's password) and recorded."""
    done: list[PushedOrigin] = []
    errors: list[HostError] = []
    try:
        with connect(target) as conn:
            restic_bin = api.prepare(conn, fleet, host=target.name)  # restic (uploaded if missing), password, own repo
            for origin, (path, pulled) in sorted(sources.items()):
                try:
                    done.append(_push_one(ledger, conn, restic_bin, fleet, target.name, origin, Path(path), pulled))
                except JackinError as error:
                    error.host = error.host or target.name
                    errors.append(HostError.of(error.host, error))
    except JackinError as error:
        errors.append(HostError.of(target.name, error))
    except (OSError, EOFError, paramiko.SSHException) as error:  # an SSH fault of the destination
        errors.append(HostError(host=target.name, error=f"{type(error).__name__}: {error}", unreachable=True))
    return done, errors


def _push_one(ledger: Ledger, conn: Connection, restic_bin: str, fleet: str, host: str, origin: str, src: Path,
              pulled: bool) -> PushedOrigin:  # fmt: skip
    moved = transfer.push_with(conn, host, fleet, src, origin)
    dest = restic.imported_path(fleet, origin)
    remote.run(conn, restic.q(*restic.check_argv(restic_bin, fleet, repo=dest)), host=host,
               what=f"restic check of {dest}", timeout=remote.LONG)  # fmt: skip
    held = next(
        r["snapshots"] for r in ledger.copies(fleet, origin=origin, place=copies.OPERATOR) if r["path"] == str(src)
    )
    if moved.moved_aside:  # an older repository of the origin pushed here before: it keeps its record
        ledger.move_copy(fleet, origin, host, dest, moved.moved_aside)
    ledger.record_copy(fleet, origin, host, dest, held)
    return PushedOrigin(
        origin=origin,
        path=dest,
        pulled_first=pulled,
        moved_aside=moved.moved_aside,
        **moved.model_dump(include={"copied", "copied_bytes", "skipped", "skipped_bytes"}),
    )
