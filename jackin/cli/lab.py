"""The ``lab`` collection: ``lab.up``, ``lab.status``, ``lab.down`` (disposable Debian servers on the local Docker engine).

They have no exit code of their own (0, or their error's, given by ``edge.guard``): they return None, so
a chain such as ``inv lab.up fleet.up`` goes on to the next task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.edge import count
from jackin.cli.render.lab import lab_table
from jackin.lab import Lab

if TYPE_CHECKING:
    from jackin.lab import providers
else:  # loaded by lab.down alone (jackin.lazy)
    providers = lazy.module("jackin.lab.providers")


def lab_up(name: str, *, hosts: str | int | None) -> None:
    status = Lab(name).up(count("--hosts", hosts), log=ui.log)
    ui.out.print(lab_table(status))


def lab_status(name: str, *, json: bool) -> None:
    status = Lab(name).status()
    if json:
        ui.print_json(status.model_dump(mode="json"))
    elif not status.exists:
        ui.out.print(f"lab {name!r} does not exist (inv lab.up creates it)")
    else:
        ui.out.print(lab_table(status))


def lab_down(name: str) -> None:
    removed = providers.destroy_lab(name, log=ui.log)
    ui.out.print(f"lab {name!r} is gone" if any(removed.values()) else f"lab {name!r}: nothing to remove")
