"""The launch-contract gate of ``fleet.up`` and ``fleet.rollback`` (jackin/plan/launch.py): the
contract shown, and a difference from the last one applied confirmed, or refused with no one to ask."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.render import contract as view
from jackin.errors import SpecError

if TYPE_CHECKING:
    from rich.console import Console

    from jackin.plan import launch
    from jackin.spec import Inventory
else:  # loaded by the first command that shows a contract (jackin.lazy): fleet.status never does
    launch = lazy.module("jackin.plan.launch")


def contract_gate(spec: Inventory, *, yes: bool, json: bool = False, out: Console | None = None) -> launch.Gate:
    """Show the launch contract ``fleet.up`` is about to apply (jackin/plan/contract.py): its summary, and
    when it differs from the last one applied to the fleet, the difference (a first up: the whole
    contract). A difference needs a confirmation: without ``--yes`` and with no terminal to ask on,
    refused (exit 2) naming each difference; nothing is touched before. Returns the ``Gate``; the
    question itself is ``fleet_up``'s one confirmation. ``json``: shown on stderr. No host is read
    here: the hosts' facts are those of the last applied contract (the interactive preview reads them)."""
    return show_contract(launch.gate(spec), fleet=spec.fleet.name, yes=yes, json=json, out=out)


def show_contract(found: launch.Gate, *, fleet: str, yes: bool, json: bool = False,
                  what: str = "launch contract", out: Console | None = None) -> launch.Gate:  # fmt: skip
    """Print a ``launch.Gate`` (the whole contract when first and asked; the summary; the
    difference) and refuse a difference with no terminal and no ``--yes``. Returns ``found``.
    On ``out`` (default: stdout), or on stderr with ``json``."""
    console = ui.err if json else out or ui.out
    if found.first and not yes:
        for table in view.contract_tables(found.contract):
            console.print(table)
    console.print(view.contract_summary(found.contract))
    if found.differs:
        console.print(view.contract_changes(found.changes, first=found.first))
        if not yes and not sys.stdin.isatty():
            change = ("fleet has no launch contract applied yet" if found.first
                      else f"{what} changed ({len(found.changes)} difference(s))")  # fmt: skip
            raise SpecError(f"fleet {fleet!r}: the {change} and there is no terminal to confirm it on: "
                            "pass --yes to apply it without asking", problems=found.changes)  # fmt: skip
    return found
