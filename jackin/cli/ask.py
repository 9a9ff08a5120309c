"""Changes are shown, then confirmed: the one question a command asks, or why it cannot ask."""

from __future__ import annotations

import sys

from rich.prompt import Confirm

from jackin.cli import render as ui
from jackin.errors import JackinError, SpecError


def require_terminal_or(flag: str, *, when: bool = True) -> None:
    """Changes are shown and confirmed first; with no terminal to ask, the flag must say so."""
    if when and not sys.stdin.isatty():
        raise SpecError(f"no terminal to confirm on: pass {flag} to go ahead without asking")


def confirm(question: str) -> None:
    if not Confirm.ask(question, console=ui.err, default=False):
        raise JackinError("nothing changed: not confirmed")
