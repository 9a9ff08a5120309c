"""``DockerDaemon``: the Docker daemon's config file, its command line and whether live-restore
is in effect, in one round trip (the pyinfra fact; the pure parts live in ``jackin.facts.daemon``)."""

from __future__ import annotations

from pyinfra.api import FactBase

from jackin.facts.daemon import DaemonState, daemon_command, parse_daemon
from jackin.hostpaths import DAEMON_JSON

__all__ = ["DAEMON_JSON", "DaemonState", "DockerDaemon", "daemon_command", "parse_daemon"]


class DockerDaemon(FactBase):
    """daemon.json's text, dockerd's command line and its live-restore setting."""

    def command(self) -> str:
        return daemon_command()

    def process(self, output: list[str]) -> DaemonState:
        return parse_daemon(output)
