"""Modules loaded on first use: the CLI's start is part of every command's latency.

``inv --list`` and ``inv fleet.status`` need a fraction of what ``fleet.up`` or ``snapshot.*``
import (the launch contract, snapshots, credentials, the rollback planner...). A module bound with
``module("jackin.plan.launch")`` is a stand-in: the real module is executed on the first attribute
read, so ``launch.current(...)`` works unchanged and costs nothing until a command calls it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def module(name: str) -> ModuleType:
    """``name``, already imported or to be executed on its first attribute access."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    lazy = importlib.util.module_from_spec(spec)
    sys.modules[name] = lazy
    loader.exec_module(lazy)
    parent, _, child = name.rpartition(".")
    if parent:  # as an ordinary import does: `jackin.plan.launch` is an attribute of `jackin.plan`
        setattr(sys.modules[parent], child, lazy)
    return lazy
