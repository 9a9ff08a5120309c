"""The ``agent`` collection: ``agent.netcheck``, ``agent.denials``, ``agent.answer``, ``agent.move``, and
``agent.exec``, ``agent.logs``, ``agent.shell`` (whose exit status is the remote command's, passed through)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import render as ui
from jackin.cli.edge import count, host_errors
from jackin.cli.render import agent as view
from jackin.errors import EXIT_OK, SpecError, worst

if TYPE_CHECKING:
    from jackin.agents import answer as answering
    from jackin.agents import tools as agent_tools
    from jackin.lifecycle import fleet as fleet_api
    from jackin.lifecycle import move as moving
    from jackin.net import probes as agent_api
else:  # loaded by the first command that uses them (jackin.lazy)
    moving = lazy.module("jackin.lifecycle.move")
    agent_api = lazy.module("jackin.net.probes")
    agent_tools = lazy.module("jackin.agents.tools")
    answering = lazy.module("jackin.agents.answer")
    fleet_api = lazy.module("jackin.lifecycle.fleet")


def agent_netcheck(inventory: str | None, agent: str, target: str, port: str | int | None, *, json: bool) -> int:
    """Every argument (the port, the target, the agent) is checked before any host is looked up (exit 2)."""
    if port is not None and not str(port).strip():  # given, and empty: not the default
        raise SpecError(f"--port expects a whole number from 1 to 65535, got {port!r}")
    number = count("--port", port, high=65535) or 443
    spec = fleet_api.load(inventory)
    agent_api.check_probe(spec, agent, target, number)
    probes = agent_api.netcheck(spec, fleet_api.targets(spec, bring_up=False), agent, target, number)
    if json:
        ui.print_json([p.model_dump() for p in probes])
    else:
        ui.out.print(view.probe_table(probes))
    return worst(p.exit_code for p in probes)


def agent_denials(inventory: str | None, agent: str, *, json: bool) -> int:
    spec = fleet_api.load(inventory)
    found = agent_api.denials(spec, fleet_api.targets(spec, bring_up=False), agent)
    if json:
        ui.print_json(found.model_dump(mode="json"))
    else:
        ui.out.print(view.denials_table(found.denials, agent))
        if found.gateway:
            ui.out.print(view.refusals_table(found.gateway, agent))
    return host_errors(found.errors)


def agent_answer(inventory: str | None, agent: str, text: str, *, host: str | None) -> int:
    """Write TEXT (``-``: stdin) to the blocked agent's answer file; refused unless it is blocked. Text
    that is not UTF-8 (stdin's, or the argument's bytes) is refused first (exit 2), naming its offset."""
    if text == "-":
        text = answering.read_text(sys.stdin.buffer)
    else:
        text = answering.decoded(os.fsencode(text), what="the answer")
    result = answering.answer(fleet_api.load(inventory), agent, text, host=host or None)
    ui.out.print(view.answered_line(result), soft_wrap=True)
    return EXIT_OK


# --- in the agent's container, as the agent (jackin/agents/tools.py) -------------------------


def agent_exec(inventory: str | None, agent: str, argv_all: Sequence[str], *, host: str | None) -> int:
    """``inv agent.exec AGENT -- CMD...``: the command is read from the process's argv after ``--``,
    verbatim, before any host is asked."""
    argv = agent_tools.command_of(argv_all)
    return agent_tools.run_exec(agent_tools.resolve(fleet_api.load(inventory), agent, host=host), argv)


def agent_logs(inventory: str | None, agent: str, *, follow: bool, tail: str | int | None, host: str | None) -> int:
    lines = count("--tail", tail, low=0, high=10**9)
    return agent_tools.run_logs(agent_tools.resolve(fleet_api.load(inventory), agent, host=host), follow=follow,
                                tail=lines)  # fmt: skip


def agent_shell(inventory: str | None, agent: str, *, host: str | None) -> int:
    return agent_tools.run_shell(agent_tools.resolve(fleet_api.load(inventory), agent, host=host))


def agent_attach(inventory: str | None, agent: str, *, host: str | None) -> int:
    """The runtime's own session, resumed on this terminal (its role's ``attach``); the headless run stops."""
    spec = fleet_api.load(inventory)
    argv = agent_tools.attach_argv(spec, agent)
    return agent_tools.run_attach(agent_tools.resolve(spec, agent, host=host), argv)


def agent_move(inventory: str | None, agent: str, to: str, *, json: bool) -> int:
    """Move one instance with its workspace onto another of its hosts; refused (exit 2, nothing changed) when it
    cannot move there. Exit 1 when a step failed (the error says what is where)."""
    spec = fleet_api.load(inventory)
    from jackin.plan import launch  # lazy: the contract, for this command's check alone

    found = launch.gate(spec)  # a move runs fleet.up on two hosts: it may apply nothing but the placement
    if found.differs:
        raise SpecError(f"fleet {spec.fleet.name!r}: the spec differs from the launch contract last applied "
                        f"({'none applied yet' if found.first else f'{len(found.changes)} difference(s)'}): agent.move "
                        "applies no change but the instance's placement, and nothing was changed",
                        hint="review and apply the spec with inv fleet.up first, then move")  # fmt: skip
    with ui.progress() as progress:
        result = moving.move(spec, agent, to, log=ui.log, on_event=progress.update)
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        ui.out.print(f"{result.instance}: moved from {result.source} to {result.to} with its workspace "
                     f"(snapshot {result.snapshot})")  # fmt: skip
        for line in result.left_behind:
            ui.out.print(f"left behind on {result.source}: {line}", style="yellow")
    return EXIT_OK if not result.left_behind else 1
