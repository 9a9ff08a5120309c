"""Where the operator's files that an agent receives are read from: a credential's ``from_file`` and a
task's ``task_file``, resolved as reading them resolves them (``~`` expanded, symlinks followed).

The launch contract (``jackin.plan.contract``) shows each resolved path, and names as a risk one
outside the inventory file's directory and the operator's home: a ``from_file`` that is a symlink to
``/etc/shadow``, or a path that reaches into another user's files, hands that file's content to the
agent, and nothing in the spec's own text says so. Reads only this machine's filesystem (no file is
opened); a path that does not exist resolves as far as it can (reading it fails later, exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path


def resolved(path: str | Path) -> str:
    """``path`` as reading it finds it: ``~`` expanded, relative to the working directory, symlinks followed."""
    return os.path.realpath(Path(path).expanduser())


def home() -> str | None:
    """The operator's home, resolved; None when it cannot be told (no ``HOME``, no passwd entry)."""
    try:
        return resolved(Path.home())
    except (RuntimeError, KeyError):
        return None


def trusted(source_dir: str) -> list[str]:
    """The directories a source may lie in without being a risk: the inventory file's and the operator's
    home, resolved; ``/`` never counts (it would hold everything)."""
    found = [resolved(source_dir), home()]
    return [d for d in dict.fromkeys(found) if d and d != os.sep]


def outside(path: str, dirs: list[str]) -> bool:
    """Whether the resolved ``path`` lies in none of ``dirs`` (resolved directories)."""
    return not any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def risk(what: str, given: str, path: str, dirs: list[str]) -> str | None:
    """The contract's risk line for a source (``what``: "credential GH_TOKEN's from_file") read from
    ``path`` (resolved from ``given``), or None when it lies in one of ``dirs``."""
    if not outside(path, dirs):
        return None
    via = "" if os.path.normpath(Path(given).expanduser().absolute()) == path else f" ({given} resolves there)"
    return (
        f"{what} is read from {path}{via}, outside the inventory's directory and the operator's home "
        f"({', '.join(dirs) or 'neither is known'}): the agent receives that file's content"
    )
