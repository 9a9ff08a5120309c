"""``fleet.collect`` and ``fleet.review`` (jackin/work/collect.py): each agent's branch and handoff brought back, and shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.render import work as view
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from jackin.lifecycle import fleet as fleet_api
    from jackin.work import collect
else:  # loaded by the first command that uses them (jackin.lazy): collect brings Fabric and paramiko
    collect = lazy.module("jackin.work.collect")
    fleet_api = lazy.module("jackin.lifecycle.fleet")


def fleet_collect(inventory: str | None, *, agents: Sequence[str] | None, into: str | None, json: bool) -> int:
    """``inv fleet.collect``. Exit 1: an agent's collection failed; 3: a host is unreachable."""
    report = collect.collect(fleet_api.load(inventory), agents=agents or None, into=into)
    if json:
        ui.print_json(report.model_dump(mode="json"))
    else:
        ui.out.print(view.collect_table(report))
    return EXIT_FAILED if report.failed else EXIT_CONNECT if report.unreachable else EXIT_OK


def fleet_review(inventory: str | None, *, json: bool) -> int:
    """``inv fleet.review``. Exit 3: a host is unreachable (its agents show their state at collection)."""
    found = collect.review(fleet_api.load(inventory))
    if json:
        ui.print_json(found.model_dump(mode="json"))
    else:
        ui.out.print(view.review_table(found))
    return EXIT_CONNECT if found.unreachable else EXIT_OK
