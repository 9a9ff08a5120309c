"""fleet.down's state reads: one parallel read of every host before anything, and which hosts to read again.

What ``deploys/teardown.py`` removes is a pure function of the plan and the host's state
(``jackin.operations``' teardown builders). fleet.down has read every host already
(``jackin.snapshots.final`` decides from that read what to snapshot and pull), so it hands each
host's state to its deploy (``host.data.jackin_host["state"]``, ``EngineRequest.host_data``) instead of the deploy reading every
host again; a host where the final snapshot stopped containers, snapshotted or pulled is read
again first (``fresh_states``). The clean check afterwards reads every host anew.
"""

from __future__ import annotations

from collections.abc import Sequence

from jackin.errors import JackinError
from jackin.facts.state import HostState, parse_state
from jackin.facts.state_read import state_command
from jackin.plan import fleet as planning
from jackin.snapshots.final import FinalHost
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

States = dict[str, HostState | JackinError]


def read_states(plan: planning.FleetPlan, hosts: Sequence[SshTarget], *, timeout: float = 30) -> States:
    """Every host's state of the fleet, in one parallel round trip (per host its state or error)."""
    command = state_command(plan.fleet, plan.uid_min, plan.uid_max)
    return gather(hosts, command, lambda out: parse_state(out.split("\n")), timeout=timeout)


def fresh_states(plan: planning.FleetPlan, hosts: Sequence[SshTarget], read: States,
                 final: Sequence[FinalHost]) -> States:  # fmt: skip
    """The state to tear each host down from: ``read`` where nothing was done to the host since
    (no container stopped, no snapshot, no pull), else read again now."""
    touched = {f.host for f in final if f.stage != "nothing" or f.stopped}
    again = [h for h in hosts if h.name in touched or h.name not in read]
    return {**{h.name: read[h.name] for h in hosts if h.name in read}, **read_states(plan, again)}
