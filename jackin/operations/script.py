"""Shared by our operations: many commands, one round trip; nothing to do is said so."""

from __future__ import annotations

from pyinfra import host


def script(commands: list[str], *, noop: str) -> list[str]:
    """An operation's commands as one shell script (one SSH round trip, stopping at the first
    failure), or pyinfra's "no change" note with ``noop`` when there is nothing to do."""
    if not commands:
        host.noop(noop)
        return []
    return ["set -e\n" + "\n".join(commands)]
