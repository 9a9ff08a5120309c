"""Commands that remove the restic tier of a fleet from a host (``fleet.down``); pure, no pyinfra.

The tier itself (the repository, its password, cache and manifests, and restic uploaded when the host
has none) is jackin/snapshots/restic.py's; its paths are jackin/hostpaths.py's.
"""

from __future__ import annotations

import shlex

from jackin.hostpaths import SNAPSHOTS_ROOT, UPLOADED_RESTIC, snapshots_dir


def teardown_commands(fleet: str) -> list[str]:
    """Remove the fleet's repository, password copy, cache and manifests from a host (with the fleet),
    then the uploaded restic once no other fleet's snapshot dir remains (``binary_teardown_commands``).
    Exact root-only paths that jackin names; ``--one-file-system``: never into a mount below."""
    return [shlex.join(["rm", "-rf", "--one-file-system", "--", snapshots_dir(fleet)]), *binary_teardown_commands()]


def binary_teardown_commands() -> list[str]:
    """Decided on the host, in the same script: when ``/var/lib/jackin/snapshots`` is empty (removed)
    or absent, no fleet needs the restic jackin uploaded: remove it, its temporary uploads, its sha256
    stamp (``jackin.snapshots.binary.restic_probe``), and
    ``/usr/local/lib/jackin`` when that is empty. restic the host has on PATH is never touched."""
    parent = UPLOADED_RESTIC.rsplit("/", 1)[0]
    return [f"rmdir {SNAPSHOTS_ROOT} 2>/dev/null || true",
            f"[ -e {SNAPSHOTS_ROOT} ] || {{ rm -f -- {UPLOADED_RESTIC} {UPLOADED_RESTIC}.jk-part-* {UPLOADED_RESTIC}.sha256*; "
            f"rmdir {parent} 2>/dev/null || true; }}"]  # fmt: skip
