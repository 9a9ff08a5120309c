"""``DockerDaemon``: the Docker daemon's config file and whether live-restore is in effect, in one round trip."""

from __future__ import annotations

from pydantic import BaseModel
from pyinfra.api import FactBase

DAEMON_JSON = "/etc/docker/daemon.json"
_MARK = "##jackin-live-restore"


class DaemonState(BaseModel):
    config: str | None = None  # daemon.json's text; None when the file is missing
    live_restore: bool | None = None  # what the running daemon reports; None when it does not answer


def daemon_command() -> str:
    return (f"if [ -e {DAEMON_JSON} ]; then cat {DAEMON_JSON}; echo; fi; echo '{_MARK}'; "
            "docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null || true")  # fmt: skip


def parse_daemon(lines: list[str]) -> DaemonState:
    """Everything up to the last mark line is the file (if any), the line after it the daemon's answer."""
    if _MARK not in lines:
        return DaemonState()
    at = len(lines) - 1 - lines[::-1].index(_MARK)
    answer = "".join(lines[at + 1 : at + 2]).strip()
    return DaemonState(
        config="\n".join(lines[:at]) if at else None,
        live_restore={"true": True, "false": False}.get(answer),
    )


class DockerDaemon(FactBase):
    """daemon.json's text and the running daemon's live-restore setting."""

    def command(self) -> str:
        return daemon_command()

    def process(self, output: list[str]) -> DaemonState:  # type: ignore[override]
        return parse_daemon(output)
