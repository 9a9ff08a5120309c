"""``FleetState``: users, directories, containers and networks of one fleet on a host.

One command, one round trip: checking must cost less than doing. The command and
its parser live in ``jackin.facts.state`` (pure, no pyinfra); this is the pyinfra fact.
"""

from __future__ import annotations

from pyinfra.api import FactBase

from jackin.facts.state import Container, HostState, Network, PathInfo, User, parse_state
from jackin.facts.state_read import state_command

__all__ = ["Container", "FleetState", "HostState", "Network", "PathInfo", "User", "parse_state", "state_command"]


class FleetState(FactBase):
    """Users, directories, containers, networks and files of one fleet on the host."""

    def command(self, fleet: str, uid_min: int, uid_max: int, images: tuple[str, ...] = (),
                bootstrap: bool = False) -> str:  # fmt: skip
        return state_command(fleet, uid_min, uid_max, list(images), bootstrap=bootstrap)

    def process(self, output: list[str]) -> HostState:
        return parse_state(output)
