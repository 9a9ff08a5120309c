"""Copies of hosts' repositories on the operator's machine: pull them, verify them, record them.

``snapshot.pull`` and ``fleet.down``'s final pull both go through ``pull_hosts``: each host's
repository of the fleet is mirrored (``transfer.pull_repo``), checked locally with restic
(``restic check``: a copy that does not check is an error, never a silent success), and
recorded in the ledger (``repo_copies``, place ``operator``) with the fleet snapshots it
holds, so a later ``snapshot.push`` knows where a snapshot of a destroyed host survives.

A host's repository made anew (the fleet torn down and brought up again with the same host
names, or the host replaced) does not overwrite the older copy: the pull moves it aside
(``pulled/<host>/repo-<sha>``, ``transfer``) and both stay recorded, each with the snapshots
its restic listing holds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from jackin.errors import JackinError
from jackin.snapshots import api, binary, transfer
from jackin.store.ledger import Ledger
from jackin.transport.target import SshTarget

OPERATOR = "operator"  # the place of a copy on this machine (ledger ``repo_copies.place``)


def held_by(ledger: Ledger, fleet: str, origin: str, restic_ids: set[str] | None = None) -> list[str]:
    """The fleet snapshots (ids) with an agent on ``origin`` that has a restic snapshot (a checkpoint
    alone never leaves the host): what a whole copy of its repository holds. ``restic_ids``: only those
    whose restic snapshots are among these (a copy's own listing; ids or their short prefixes)."""

    def kept(a: dict) -> bool:
        return (
            a["host"] == origin
            and bool(a.get("restic_id"))
            and (restic_ids is None or _among(a["restic_id"], restic_ids))
        )

    return [row["id"] for row in ledger.snapshot_rows(fleet) if any(kept(a) for a in row["agents"])]


def _among(restic_id: str, ids: set[str]) -> bool:
    return any(i.startswith(restic_id) or restic_id.startswith(i) for i in ids)


SNAPSHOT_FILE = re.compile(r"[0-9a-f]{64}")


def restic_ids(repo: Path) -> set[str]:
    """The restic snapshot ids in the local repository ``repo``: the names of its snapshot files, which
    restic names by the hash of their content (run after ``verify_local``, whose ``restic check`` has
    loaded every one of them; no second restic process, no second wait for its lock)."""
    try:
        return {name for name in os.listdir(repo / "snapshots") if SNAPSHOT_FILE.fullmatch(name)}
    except OSError as error:
        raise transfer.TransferError(f"cannot list the snapshots of {repo}: {error.strerror}") from None


def pull_hosts(ledger: Ledger, fleet: str,
               targets: Sequence[SshTarget]) -> dict[str, transfer.TransferResult | JackinError]:  # fmt: skip
    """Pull every target's repository in parallel, then check and record each copy; per host its result
    or its error (one never hides another). The ledger is written from this thread only (sqlite
    connections are not shared across threads)."""

    def pull_and_check(target: SshTarget) -> tuple[transfer.TransferResult, set[str] | JackinError]:
        """The pull, then the copy's check and listing (in this host's thread: the checks of all hosts
        run side by side); a failed check is returned beside the pull's result, whose move aside counts."""
        result = transfer.pull_repo(target, fleet)
        repo = transfer.pulled_repo(fleet, target.name)
        try:
            binary.verify_local(repo, transfer.fleet_password_file(fleet))
            return result, restic_ids(repo)
        except JackinError as error:
            error.host = error.host or target.name
            return result, error

    pulled = api.per_host(targets, pull_and_check)
    found: dict[str, transfer.TransferResult | JackinError] = {}
    for name, outcome in pulled.items():  # the ledger: from this thread only
        if isinstance(outcome, JackinError):
            found[name] = outcome
            continue
        result, checked = outcome
        repo = transfer.pulled_repo(fleet, name)
        if result.moved_aside:  # the older copy keeps its record, under its new path
            ledger.move_copy(fleet, name, OPERATOR, str(repo), result.moved_aside)
        if isinstance(checked, JackinError):
            found[name] = checked
            continue
        ledger.record_copy(fleet, name, OPERATOR, str(repo), held_by(ledger, fleet, name, checked))
        found[name] = result
    return found
