"""``fleet.run``: each phase as it starts, each agent's change of state, and the outcome, phase by phase.

Plain text (the agents' words are theirs, printed with no markup): ``fleet.run`` prints these with
``markup=False`` so a bracket in an agent's message is never read as a style.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jackin.lifecycle.runloop import PhaseResult, RunOutcome


def phase_started(phase: str, what: str) -> str:
    """``fleet.run: wait until every agent is done or failed`` (rich markup: the phase in bold)."""
    return f"[bold]fleet.run: {phase}[/bold] {what}"


def change_line(change: Any) -> str:
    """``12:01:02 h1 coder-1: working -> blocked: QUESTION``."""
    at = time.strftime("%H:%M:%S", time.localtime(getattr(change, "at", time.time())))
    text = f"{at} {change.host} {change.instance}: {change.old or 'new'} -> {change.new}"
    extra = getattr(change, "question", None) or getattr(change, "message", "")
    return text + (f": {extra}" if extra else "")


def phase_line(phase: PhaseResult) -> str:
    """``wait: ok: every agent finished (2 done)``."""
    return f"{phase.phase}: {phase.status}" + (f": {phase.detail}" if phase.detail else "")


def stopped_line(outcome: RunOutcome) -> str:
    """Where the loop stopped, what is left running and how to go on."""
    return f"error: fleet.run stopped at {outcome.stopped_at}: {outcome.left}"
