"""The CLI edge: turn our errors into one clear message and a documented exit code.

Exit codes: 0 ok · 1 a host or operation failed · 2 invalid spec or usage ·
3 connection or host key · 4 (fleet.status) an agent's egress policy is not enforced on a
reachable host · 130 interrupted (Ctrl-C). ``fleet.wait`` and ``fleet.run`` give 4 and 5 their
own meaning (their ``--help``). Anything else escaping is a bug and keeps its traceback.

Every task runs its command inside ``guard()``; the commands themselves (one module per task
collection: ``cli.lab``, ``cli.fleet``, ``cli.agent``, ``cli.snapshot``...) return the exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from invoke.exceptions import Exit

from jackin.cli import render as ui
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, JackinError, NotImplementedYet, SpecError, worst
from jackin.transport import interrupts

if TYPE_CHECKING:
    from jackin.engine import RunResult
    from jackin.transport.remote import HostError


@contextmanager
def guard() -> Iterator[None]:
    """Around every task: our errors as one message and their exit code; a Ctrl-C as exit 130 (the
    command has started: from here a Ctrl-C is a KeyboardInterrupt, see ``jackin.transport.interrupts``). A
    Ctrl-C that interrupted SSH work ends the process at once (``interrupts.end_if_interrupted``)."""
    try:
        interrupts.started()  # inside the try: a Ctrl-C the moment SIGINT is Python's again is still ours
        yield
    except JackinError as exc:
        ui.error(exc)
        raise Exit(code=exc.exit_code) from None
    except KeyboardInterrupt:
        ui.err.print("[yellow]interrupted[/yellow]")
        interrupts.end_if_interrupted(interrupts.INTERRUPTED)
        raise Exit(code=interrupts.INTERRUPTED) from None
    except Exit as done:  # agent.logs --follow and fleet.status --watch end with 0 at a Ctrl-C
        interrupts.end_if_interrupted(done.code)
        raise


def reported(command: Callable[[], int]) -> int:
    """Run a command inside another (``fleet.run``'s up and down): its error printed as ``guard``
    prints it, and returned as its exit code instead of ending the process."""
    try:
        return command()
    except JackinError as error:
        ui.error(error)
        return error.exit_code


def exit_code(result: RunResult) -> int:
    """1 when any operation failed; 3 when the only failures are connections; else 0."""
    if result.error or any(h.failed for h in result.hosts):
        return EXIT_FAILED
    if result.failed:
        return EXIT_CONNECT
    return EXIT_OK


def host_errors(errors: list[HostError]) -> int:
    """Print each host that failed, one line each; the exit code they add up to."""
    for failure in errors:
        what = "unreachable" if failure.unreachable else "failed"
        ui.err.print(f"error: {failure.host}: {what}: {failure.error}", soft_wrap=True, style="bold red")
    return worst(e.exit_code for e in errors)


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
