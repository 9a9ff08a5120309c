"""Shared by our operations: many commands, one round trip."""

from __future__ import annotations


def script(commands: list[str]) -> list[str]:
    """An operation's commands as one shell script: one SSH round trip, stopping at the first failure."""
    return ["set -e\n" + "\n".join(commands)] if commands else []
