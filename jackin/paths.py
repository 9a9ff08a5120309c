"""Where the operator's state lives: ``$JACKIN_STATE_DIR``, else the XDG state dir."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """The root of jackin's operator-side state (labs, keys, the ledger)."""
    override = os.environ.get("JACKIN_STATE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "jackin"


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) readable by the operator only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path
