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
    """Ask on the terminal; anything but yes, an end of input (Ctrl-D) or bytes that are not UTF-8 included,
    changes nothing."""
    try:
        answered = Confirm.ask(question, console=ui.err, default=False)
    except (EOFError, UnicodeDecodeError):
        answered = False
    if not answered:
        raise JackinError("nothing changed: not confirmed")
