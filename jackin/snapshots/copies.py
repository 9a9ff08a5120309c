"""Copies of hosts' repositories on the operator's machine: pull them, verify them, record them.

``snapshot.pull`` and ``fleet.down``'s final pull both go through ``pull_hosts``: each host's
repository of the fleet is mirrored (``transfer.pull_repo``), checked locally with restic
(``restic check``: a copy that does not check is an error, never a silent success), and
recorded in the ledger (``repo_copies``, place ``operator``) with the fleet snapshots it
holds, so a later ``snapshot.push`` knows where a snapshot of a destroyed host survives.
"""

from __future__ import annotations

from collections.abc import Sequence

from jackin.errors import JackinError
from jackin.ledger import Ledger
from jackin.snapshots import api, transfer
from jackin.ssh import SshTarget

OPERATOR = "operator"  # the place of a copy on this machine (ledger ``repo_copies.place``)


def held_by(ledger: Ledger, fleet: str, origin: str) -> list[str]:
    """The fleet snapshots (ids) with an agent on ``origin``: what a whole copy of its repository holds."""
    return [row["id"] for row in ledger.snapshot_rows(fleet) if any(a["host"] == origin for a in row["agents"])]


def pull_hosts(ledger: Ledger, fleet: str, targets: Sequence[SshTarget]) -> dict[str, transfer.TransferResult | JackinError]:
    """Pull every target's repository in parallel, then check and record each copy; per host its result
    or its error (one never hides another). The ledger is written from this thread only (sqlite
    connections are not shared across threads)."""
    found = api.per_host(targets, lambda target: transfer.pull_repo(target, fleet))
    for name, result in found.items():
        if isinstance(result, JackinError):
            continue
        repo = transfer.pulled_repo(fleet, name)
        try:
            transfer.verify_local(repo, transfer.fleet_password_file(fleet))
        except JackinError as error:
            error.host = error.host or name
            found[name] = error
            continue
        ledger.record_copy(fleet, name, OPERATOR, str(repo), held_by(ledger, fleet, name))
    return found
