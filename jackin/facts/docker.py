"""``DockerDaemon``: the Docker daemon's config file, its command line and whether live-restore
is in effect, in one round trip."""

from __future__ import annotations

from pydantic import BaseModel
from pyinfra.api import FactBase

DAEMON_JSON = "/etc/docker/daemon.json"
_LIVE, _ARGS, _FILE, _NO_FILE = "##jackin-live-restore", "##jackin-dockerd-args", "##jackin-file", "##jackin-no-file"


class DaemonState(BaseModel):
    config: str | None = None  # daemon.json's text; None when the file is missing
    live_restore: bool | None = None  # what the running daemon reports; None when it does not answer
    args: list[str] = []  # the running dockerd's command line


def daemon_command() -> str:
    """Ours first, the file last: whatever the file holds cannot be taken for our markers."""
    return (f"echo '{_LIVE}'; docker info --format '{{{{.LiveRestoreEnabled}}}}' 2>/dev/null || true; "
            f"echo '{_ARGS}'; p=$(systemctl show -p MainPID --value docker 2>/dev/null); "
            f'if [ -n "$p" ] && [ "$p" != 0 ]; then tr "\\0" "\\n" < /proc/$p/cmdline; echo; fi; '
            f"if [ -e {DAEMON_JSON} ]; then echo '{_FILE}'; cat {DAEMON_JSON}; else echo '{_NO_FILE}'; fi")  # fmt: skip


def parse_daemon(lines: list[str]) -> DaemonState:
    ends = [n for n, line in enumerate(lines) if line in (_FILE, _NO_FILE)]
    if not ends or _LIVE not in lines[: ends[0]] or _ARGS not in lines[: ends[0]]:
        return DaemonState()
    head, end = lines[: ends[0]], ends[0]
    live, args = head.index(_LIVE), head.index(_ARGS)
    answer = "".join(head[live + 1 : args]).strip()
    return DaemonState(
        config="\n".join(lines[end + 1 :]) if lines[end] == _FILE else None,
        live_restore={"true": True, "false": False}.get(answer),
        args=[a for a in head[args + 1 :] if a],
    )


class DockerDaemon(FactBase):
    """daemon.json's text, dockerd's command line and its live-restore setting."""

    def command(self) -> str:
        return daemon_command()

    def process(self, output: list[str]) -> DaemonState:  # type: ignore[override]
        return parse_daemon(output)
