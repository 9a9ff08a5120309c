"""``agent.netcheck``, ``agent.denials``, and agent state: ``fleet.wait``'s changes, ``agent.answer``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from jackin.agents.state import rollup
from jackin.cli.render.units import duration

if TYPE_CHECKING:  # annotations only
    from jackin.agents.answer import Answered
    from jackin.agents.wait import Change, WaitResult
    from jackin.net.probes import Denial, GatewayRefusal, Probe


def probe_table(probes: list[Probe]) -> Table:
    table = Table(title="netcheck", title_justify="left")
    for column in ("host", "agent", "destination", "result", "detail"):
        table.add_column(column)
    styles = {"reachable": "green", "refused": "yellow", "blocked": "bold red", "error": "red"}
    for p in probes:
        table.add_row(p.host, p.instance, f"{p.target}:{p.port}", Text(p.result, style=styles.get(p.result, "")),
                      Text(p.detail))  # fmt: skip
    return table


def denials_table(denials: list[Denial], agent: str) -> Table:
    table = Table(title=f"denied destinations of {agent} (last hour)", title_justify="left")
    for column in ("host", "agent", "destination", "expires in"):
        table.add_column(column)
    for d in denials:
        table.add_row(d.host, d.instance, f"{d.destination}:{d.port}", d.expires)
    if not denials:
        table.caption = "none"
    return table


def refusals_table(refused: list[GatewayRefusal], agent: str) -> Table:
    """Requests the credential gateway refused for the agent (its last 100 per instance), oldest first."""
    table = Table(title=f"requests the credential gateway refused for {agent}", title_justify="left")
    for column in ("host", "agent", "when", "kind", "why"):
        table.add_column(column)
    for r in sorted(refused, key=lambda r: r.time):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.time))
        table.add_row(r.host, r.instance, when, r.kind, Text(r.detail))
    return table


STATE_STYLE = {"blocked": "bold yellow", "stuck": "bold red", "failed": "red", "unknown": "magenta",
               "working": "cyan", "idle": "dim", "done": "green"}  # fmt: skip


def agent_state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def said(message: str, question: str | None) -> Text:
    """The agent's message, and its question when blocked (plain text: it is the agent's)."""
    text = Text(message or "")
    if question:
        text += Text(("  " if message else "") + "asks: ", style="bold yellow") + Text(question)
    return text


def change_line(change: Change) -> Text:
    """``12:03:04  lab-0/coder-1  working -> blocked  asks: Which database?`` (a fleet.wait change)."""
    when = time.strftime("%H:%M:%S", time.localtime(change.at))
    line = Text(f"{when}  ", style="dim") + Text(f"{change.host}/{change.instance}  ", style="bold")
    if change.old is not None:
        line += agent_state_text(change.old) + Text(" -> ")
    line += agent_state_text(change.new)
    words = said(change.message, change.question)
    return line + (Text("  ") + words if words.plain else Text(""))


def wait_summary(result: WaitResult) -> Text:
    """How fleet.wait ended, and the agents' last states in roll-up form."""
    why = {"done": "every agent finished", "blocked": "an agent is blocked", "any": "an agent changed state",
           "timeout": "timed out", "unreachable": "a host could not be read"}.get(result.reason, result.reason)  # fmt: skip
    style = "green" if result.exit_code == 0 else "bold red"
    text = Text(f"fleet {result.fleet}: {why} after {duration(result.elapsed)} ", style=style)
    text += Text(f"({rollup([a.state for a in result.agents])}; exit {result.exit_code})")
    for host, error in result.errors.items():
        text += Text(f"\n{host}: not read: {error}", style="red")
    if result.login_error:
        text += Text(f"\nshared login NOT REFRESHED: {result.login_error}", style="red")
    return text


def answered_line(result: Answered) -> Text:
    asked = f" (it asked: {result.question})" if result.question else ""
    return Text(f"answer delivered to {result.instance} on {result.host}: {result.size} bytes{asked}")
