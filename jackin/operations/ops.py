"""The pyinfra side of the deploys: the state fact, one operation per step, and teardown.

Everything a deploy decides is decided by pure code (``jackin.lifecycle.hostplan`` for ``fleet.up``, the
builders in ``jackin.operations`` for teardown); each operation here only yields the commands it
is given, joined by ``script`` into as few round trips as possible. The deploy reads the one
``FleetState`` fact per host before any operation: pyinfra runs each operation's generator twice
(to predict changes, then to execute), and every fact lookup inside it would be another round trip.
"""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.api.command import PyinfraCommand
from pyinfra.operations import apt, systemd

from jackin.facts.fleet import FleetState
from jackin.facts.state import HostState
from jackin.operations.files import Step
from jackin.operations.fleet import teardown_commands
from jackin.operations.script import script
from jackin.operations.ttl import teardown_commands as ttl_teardown
from jackin.plan.fleet import FleetPlan


def fleet_state(plan: FleetPlan, *, bootstrap: bool = False) -> HostState:
    """The fleet's state on this host (``bootstrap``: with the Docker daemon's settings, for an up).

    The state the caller read with this same command just before the run (``fleet.up`` reads every
    host in one parallel round trip to plan, ``jackin.lifecycle.hostplan``), when it hands it over in
    ``host.data.jackin_host["state"]``: the deploy then runs exactly the steps that were planned and
    the host is not read twice. Otherwise (a deploy run by hand) it is read now, in one round trip."""
    given = (host.data.get("jackin_host") or {}).get("state")
    if given is not None:
        state = HostState.model_validate(given)
        if state.fleet == plan.fleet and (state.daemon is not None or not bootstrap):
            return state
    images = tuple(sorted({a.image for a in plan.agents}))
    return host.get_fact(FleetState, fleet=plan.fleet, uid_min=plan.uid_min, uid_max=plan.uid_max, images=images,
                         bootstrap=bootstrap)  # fmt: skip


@operation()
def commands(step: Step) -> Generator[PyinfraCommand, None, None]:
    """One step of ``jackin.lifecycle.hostplan.steps``: its commands, or its refusal (the host fails, nothing ran)."""
    if step.refused:
        raise OperationError(step.refused)
    yield from script(step.commands, noop=step.noop or f"{step.name}: nothing to do")


def apply(step: Step) -> None:
    """Add one step to the deploy: pyinfra's own operation for packages and the Docker service, else ours."""
    if step.refused:  # fail the host while preparing: nothing of this run is applied to it
        raise OperationError(step.refused)
    if step.packages:
        apt.packages(name=step.name, packages=step.packages, update=True)
    elif step.service:
        systemd.service(name=step.name, service="docker", running=True, enabled=True)
    else:
        commands(name=step.name, step=step)


@operation()
def teardown(plan: FleetPlan, state: HostState, keep_data: bool = False) -> Generator[PyinfraCommand, None, None]:
    """Remove the fleet's containers, networks, users, directories, marker and firewall table."""
    # The time-to-live's timer goes first (it must not stop what is being torn down), and its
    # directory before the state dir's rmdir at the end of teardown_commands.
    commands = ttl_teardown(plan.fleet, state.ttl) + teardown_commands(plan, state, keep_data=keep_data)
    yield from script(commands, noop=f"nothing of fleet {plan.fleet} is left")
