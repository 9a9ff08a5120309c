"""The CLI edge: turn our errors into one clear message and a documented exit code.

Exit codes: 0 ok · 1 a host or operation failed · 2 invalid spec or usage ·
3 connection or host key. Anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from invoke.exceptions import Exit
from rich.prompt import Confirm

from jackin import ui
from jackin.engine import RunResult
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, JackinError, NotImplementedYet, SpecError


@contextmanager
def guard() -> Iterator[None]:
    try:
        yield
    except JackinError as exc:
        ui.error(exc)
        raise Exit(code=exc.exit_code) from None
    except KeyboardInterrupt:
        ui.err.print("[yellow]interrupted[/yellow]")
        raise Exit(code=130) from None


def exit_code(result: RunResult) -> int:
    """1 when any operation failed; 3 when the only failures are connections; else 0."""
    if result.error or any(h.failed for h in result.hosts):
        return EXIT_FAILED
    if result.failed:
        return EXIT_CONNECT
    return EXIT_OK


def count(option: str, value: str | int | None, *, low: int = 1, high: int = 64) -> int | None:
    """Parse a whole-number option, or fail as a usage error (exit 2) naming the option."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SpecError(f"{option} expects a whole number from {low} to {high}, got {value!r}") from None
    if not low <= number <= high:
        raise SpecError(f"{option} expects a whole number from {low} to {high}, got {number}")
    return number


def not_yet(task: str, issue: str) -> None:
    raise NotImplementedYet(f"{task} is not yet implemented", hint=f"it arrives with the {issue} issue")


def require_terminal_or(flag: str, *, when: bool = True) -> None:
    """Changes are shown and confirmed first; with no terminal to ask, the flag must say so."""
    if when and not sys.stdin.isatty():
        raise SpecError(f"no terminal to confirm on: pass {flag} to go ahead without asking")


def confirm(question: str) -> None:
    if not Confirm.ask(question, console=ui.err, default=False):
        raise JackinError("nothing changed: not confirmed")
