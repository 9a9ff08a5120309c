"""Rendering of agent state (jackin/cli/render/status.py and agent.py): the agents table blocked first with the
roll-up, a fleet.wait change line, the wait summary; the agent's text printed as text, never markup."""

from __future__ import annotations

import io

from rich.console import Console

from jackin.cli.render.agent import change_line, wait_summary
from jackin.cli.render.status import agents_table, status_view
from jackin.agents.state import AgentState
from jackin.lifecycle.status import AgentStatus, FleetStatus, HostStatus, fill_rollup
from jackin.agents.wait import AgentView, Change, WaitResult


def render(renderable: object, width: int = 120) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def agent(instance: str, state: str, message: str = "", question: str | None = None, age: float | None = 4) -> AgentStatus:
    return AgentStatus(instance=instance, container=f"jk-f--{instance}", state="running",
                       agent_state=AgentState(state=state, message=message, question=question, heartbeat_age=age))  # fmt: skip


def test_agents_table_lists_blocked_first_with_its_question_and_the_rollup() -> None:
    status = fill_rollup(FleetStatus(fleet="f", at=0, hosts=[
        HostStatus(host="h1", address="x", port=22, reachable=True,
                   agents=[agent("coder-1", "done", "committed abc1234"), agent("coder-2", "working", "wrote a.txt")]),
        HostStatus(host="h2", address="x", port=22, reachable=True,
                   agents=[agent("coder-1", "blocked", "waiting for an answer", "Which [bold]db[/bold]?"),
                           agent("coder-2", "unknown", "no status file (missing, empty or unreadable)", age=None)]),
        HostStatus(host="h3", address="x", port=22, reachable=False, error="timed out"),
    ]))  # fmt: skip
    assert render(agents_table(status)) == [
        "fleet f: agents",
        "┏━━━━━━━━━┳━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
        "┃ state   ┃ host ┃ agent   ┃ heartbeat ┃ message / question                                  ┃",
        "┡━━━━━━━━━╇━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
        "│ blocked │ h2   │ coder-1 │    4s ago │ waiting for an answer  asks: Which [bold]db[/bold]? │",
        "│ unknown │ h2   │ coder-2 │         - │ no status file (missing, empty or unreadable)       │",
        "│ working │ h1   │ coder-2 │    4s ago │ wrote a.txt                                         │",
        "│ done    │ h1   │ coder-1 │    4s ago │ committed abc1234                                   │",
        "└─────────┴──────┴─────────┴───────────┴─────────────────────────────────────────────────────┘",
        "                      4 agents: 1 blocked, 1 unknown, 1 working, 1 done",
    ]


def test_agents_table_of_no_agents() -> None:
    status = fill_rollup(FleetStatus(fleet="f", at=0, hosts=[]))
    assert render(agents_table(status))[-1].strip() == "0 agents"


def test_status_view_is_the_status_table_then_the_agents() -> None:
    status = fill_rollup(FleetStatus(fleet="f", at=0, hosts=[
        HostStatus(host="h1", address="x", port=22, reachable=True, agents=[agent("coder-1", "working")])]))  # fmt: skip
    lines = render(status_view(status), width=160)
    assert lines[0] == "fleet f" and "fleet f: agents" in lines and lines[-1].strip() == "1 agent: 1 working"


def test_change_line() -> None:
    import time

    at = time.mktime((2026, 12, 3, 12, 3, 4, 0, 0, -1))
    first = Change(at=at, host="h1", instance="coder-1", old=None, new="working", message="starting")
    blocked = Change(at=at, host="h1", instance="coder-1", old="working", new="blocked", message="waiting",
                     question="Which db?")  # fmt: skip
    assert render(change_line(first)) == ["12:03:04  h1/coder-1  working  starting"]
    assert render(change_line(blocked)) == ["12:03:04  h1/coder-1  working -> blocked  waiting  asks: Which db?"]


def test_wait_summary() -> None:
    result = WaitResult(fleet="f", until="done", held=False, reason="timeout", exit_code=4, elapsed=90, polls=45,
                        agents=[AgentView(host="h1", instance="coder-1", state="working"),
                                AgentView(host="h1", instance="coder-2", state="stuck")],
                        changes=[], errors={"h2": "connection refused"})  # fmt: skip
    assert render(wait_summary(result)) == [
        "fleet f: timed out after 1m30s (2 agents: 1 stuck, 1 working; exit 4)",
        "h2: not read: connection refused",
    ]
