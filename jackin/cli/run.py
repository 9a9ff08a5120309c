"""``fleet.run`` (jackin/lifecycle/runloop.py): the whole loop, up, wait, collect, down, asked for once.

The up and the down are ``fleet.up``'s and ``fleet.down``'s own commands (``cli.fleet``), printing on
the console given to them: stdout, or stderr under ``--json``, whose stdout is one JSON document
of the outcome. The loop reports each phase and each agent's change through callbacks, rendered here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jackin import lazy
from jackin.cli import fleet as fleet_cli
from jackin.cli import render as ui
from jackin.cli.ask import confirm, require_terminal_or
from jackin.cli.edge import reported
from jackin.cli.render import run as view
from jackin.errors import SpecError
from jackin.lifecycle import runloop
from jackin.spec.values import parse_timeout

if TYPE_CHECKING:
    from jackin.lifecycle import fleet as fleet_api
else:  # loaded by the first command that uses it (jackin.lazy)
    fleet_api = lazy.module("jackin.lifecycle.fleet")


def fleet_run(inventory: str | None, *, yes: bool, timeout: str | float | None, json: bool,
              keep_lab: bool = False) -> int:  # fmt: skip
    """``inv fleet.run``: ask once for the whole loop (or ``--yes``), then run it, printing each phase.
    ``json``: the phases' own output goes to stderr, one JSON document of the outcome to stdout."""
    spec = fleet_api.load(inventory)
    seconds = timeout_seconds(timeout)
    if json and not yes:
        raise SpecError("--json needs --yes (there is no one to ask)")
    if not yes:
        require_terminal_or("--yes")
        confirm(f"Run fleet {spec.fleet.name!r} to the end: up, wait until every agent is done or failed, "
                "collect their work, then tear it down (fleet.down, final snapshot first)?")  # fmt: skip
    say = ui.err if json else ui.out
    wait = runloop.queue_wait if spec.fleet.tasks else runloop.default_wait()  # with tasks: fleet.work's loop
    collect = runloop.default_collect()
    phases = runloop.Phases(
        up=lambda: reported(lambda: fleet_cli.fleet_up(inventory, yes=yes, json=False, dry_run=False, out=say)),
        wait=wait, collect=collect,
        down=lambda: reported(lambda: fleet_cli.fleet_down(inventory, yes=True, keep_data=False, keep_lab=keep_lab,
                                                           out=say)),
    )  # fmt: skip
    outcome = runloop.run(spec, phases, inventory=inventory, timeout=seconds,
                          ttl_left=lambda: runloop.ttl_left(spec.fleet),  # asked after the up, which fixes it
                          on_phase=lambda p, what: say.print(view.phase_started(p, what), soft_wrap=True),
                          on_change=lambda c: say.print(view.change_line(c), soft_wrap=True, highlight=False,
                                                        markup=False))  # fmt: skip
    if json:
        ui.print_json(outcome.model_dump(mode="json"))
    else:
        for phase in outcome.phases:
            ui.out.print(view.phase_line(phase), soft_wrap=True, highlight=False, markup=False)
    if outcome.stopped_at:
        ui.err.print(view.stopped_line(outcome), soft_wrap=True, style="bold red", markup=False)
    return outcome.exit_code


def timeout_seconds(value: str | float | None) -> float | None:
    """``--timeout``: seconds, or a duration like fleet.wait's (``90s``, ``10m``, ``2h``); else exit 2."""
    try:
        seconds = parse_timeout(value)
    except ValueError as error:
        raise SpecError(f"--timeout expects seconds or a duration such as 90s, 10m or 2h, got {value!r} "
                        f"({error})") from None  # fmt: skip
    return None if seconds is None else float(seconds)
