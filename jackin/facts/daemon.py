"""The Docker daemon's config file, its command line and whether live-restore is in effect, read in
one round trip; pure (no pyinfra). ``jackin.facts.state`` reads the same as its ``##daemon`` section (hex,
``daemon_section``/``parse_section``) for the in-process plan; ``jackin.facts.docker`` keeps the fact."""

from __future__ import annotations

from pydantic import BaseModel

from jackin.hostpaths import DAEMON_JSON

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


MAIN_PID = "$(systemctl show -p MainPID --value docker 2>/dev/null)"  # the running dockerd's pid


def daemon_section(*, live: bool = True, pid: str = MAIN_PID) -> str:
    """``##daemon`` of the state read: ``live=``, ``args=`` (hex of /proc/PID/cmdline) and ``config=``
    (hex of daemon.json, absent when there is none). Hex: no byte of the file can forge a section.
    ``live=False``: no ``live=`` line (``jackin.facts.state`` reads it with the other Docker reads); ``pid``:
    the shell text giving dockerd's pid (``jackin.facts.state``: from its one ``systemctl show``)."""
    return (
        "echo '##daemon'; "
        + ("echo \"live=$(docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null)\"; " if live else "")
        + f"p={pid}; printf 'args='; "
        'if [ -n "$p" ] && [ "$p" != 0 ]; then od -An -v -tx1 < /proc/$p/cmdline | tr -d \' \\n\'; fi; echo; '
        f"if [ -e {DAEMON_JSON} ]; then printf 'config='; od -An -v -tx1 < {DAEMON_JSON} | tr -d ' \\n'; echo; fi"
    )


def parse_section(lines: list[str]) -> DaemonState | None:
    """The ``##daemon`` section's lines as a DaemonState; None when the section was not read."""
    if not lines:
        return None
    fields = dict(line.strip().split("=", 1) for line in lines if "=" in line)
    try:
        args = bytes.fromhex(fields.get("args", "")).decode("utf-8", "replace").split("\0")
        config = bytes.fromhex(fields["config"]).decode("utf-8", "replace") if "config" in fields else None
    except ValueError:
        return DaemonState()
    return DaemonState(config=config, live_restore={"true": True, "false": False}.get(fields.get("live", "")),
                       args=[a for a in args if a])  # fmt: skip
