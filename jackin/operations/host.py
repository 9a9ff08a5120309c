"""Host bootstrap commands: the Docker daemon's settings (hardening, address pools) and the agent image (pure).

Docker daemon settings (CIS Docker Benchmark, section 2) are merged into
/etc/docker/daemon.json, keeping every other key of the operator's. Applying
them without killing running agents takes an order: ``live-restore`` is the one
key dockerd reloads live (SIGHUP, ``systemctl reload docker``), so it is made
effective first and checked in ``docker info``; only then, and only when a key
that needs it changed, is Docker restarted once, and the agents' containers
keep running through it. On a host where no container runs (a fresh one) there is
nothing to keep: the one restart applies the whole file, without the reload first.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from importlib import resources

from jackin.facts.daemon import DaemonState
from jackin.hostpaths import BUILD_DIR, DAEMON_JSON
from jackin.hostpaths import DOCKER_SOCKET as SOCKET
from jackin.operations.files import Command, Refused, Upload, file_mode, write_files
from jackin.plan.fleet import DEFAULT_IMAGE
from jackin.spec.models import AddressPool

# icc: no traffic between containers on the default bridge; no-new-privileges: no setuid gains in any
# container; live-restore: containers outlive a daemon restart; userland-proxy: published ports by
# NAT rules, no docker-proxy process per port.
HARDENING = {"icc": False, "live-restore": True, "no-new-privileges": True, "userland-proxy": False}
RELOADABLE = {"live-restore"}  # applied by SIGHUP; every other key of ours needs a restart

# A deliberate restart is not held back by systemd's start rate limit (docker.service: 3 starts a minute).
RESTART = ["systemctl reset-failed docker", "systemctl restart docker"]

# The system engine (the one `systemctl restart docker` restarts), whatever root's docker CLI context or
# DOCKER_HOST names; and an engine that hangs counts as not answering (timeout's exit 124).
SYSTEM_DOCKER = f"timeout 20 docker --host unix://{SOCKET}"
_LIVE = f"{SYSTEM_DOCKER} info --format '{{{{.LiveRestoreEnabled}}}}' 2>/dev/null"
# Reload until the running daemon reports live-restore; never restart without it (that would stop the agents).
ENSURE_LIVE_RESTORE = (
    f'if [ "$({_LIVE})" != true ]; then systemctl reload docker; fi; n=0; '
    f'until [ "$({_LIVE})" = true ]; do n=$((n+1)); if [ $n -gt 60 ]; then '
    "echo 'docker live-restore is not in effect after a reload; Docker was not restarted' >&2; exit 1; fi; "
    "sleep 0.5; done"
)
# Before a restart: only running containers need live-restore in effect (a restart without it would stop
# them). With none running (a fresh host), the restart itself takes the new file: no reload, no polling.
# A docker ps that fails or hangs (the engine busy) counts as containers running: the safe path.
KEEP_RUNNING = f'if ! ids=$({SYSTEM_DOCKER} ps -q 2>/dev/null) || [ -n "$ids" ]; then {ENSURE_LIVE_RESTORE}; fi'


def _parse(current: str | None) -> dict:
    try:
        config = json.loads(current) if current and current.strip() else {}
    except json.JSONDecodeError as error:
        raise Refused(f"{DAEMON_JSON} is not valid JSON (line {error.lineno} column {error.colno}: {error.msg}); "
                         "jackin merges its settings into it: fix or remove it by hand, then run again") from None  # fmt: skip
    if not isinstance(config, dict):
        raise Refused(f"{DAEMON_JSON} is a JSON {type(config).__name__}, not an object; "
                         "jackin merges its settings into it: fix or remove it by hand, then run again")  # fmt: skip
    return config


def wanted_settings(pools: list[AddressPool] | None) -> dict:
    """Our keys: the hardening, and the address pools when the spec names them (else the host's stay)."""
    wanted: dict = dict(HARDENING)
    if pools:
        wanted["default-address-pools"] = [{"base": p.base, "size": p.size} for p in pools]
    return wanted


def daemon_config(current: str | None, pools: list[AddressPool] | None) -> str | None:
    """daemon.json with our settings merged in (other keys kept), or None when nothing changes.

    Raises Refused (a ValueError) when the current file is not a JSON object.
    """
    config, wanted = _parse(current), wanted_settings(pools)
    if all(config.get(key) == value for key, value in wanted.items()):
        return None
    return json.dumps({**config, **wanted}, indent=2, sort_keys=True) + "\n"


def _flag(key: str) -> str:
    return "--default-address-pool" if key == "default-address-pools" else f"--{key}"


def _check_flags(args: Sequence[str], wanted: dict) -> None:
    """dockerd refuses to start when a setting is both a flag and in daemon.json: say so before writing."""
    flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    both = sorted(_flag(key) for key in wanted if _flag(key) in flags)
    if both:
        raise Refused(f"dockerd is started with {', '.join(both)}, which jackin sets in {DAEMON_JSON}, and dockerd "
                         "refuses a setting given both ways: remove the flag (systemctl cat docker), then run again")  # fmt: skip
    files = [a.split("=", 1)[1] for a in args if a.startswith("--config-file=")]
    files += [b for a, b in zip(args, args[1:], strict=False) if a == "--config-file"]
    if files and files[-1] != DAEMON_JSON:
        raise Refused(f"dockerd reads {files[-1]}, not {DAEMON_JSON}, so jackin's settings would not apply: "
                         "remove its --config-file, then run again")  # fmt: skip


def daemon_commands(
    current: str | None, live_restore: bool | None, pools: list[AddressPool] | None, args: Sequence[str] = ()
) -> list[Command]:
    """Write daemon.json if it differs (by SFTP), make live-restore effective, then restart Docker
    once if any key that needs a restart changed (live-restore is made effective first only when a
    container runs: ``KEEP_RUNNING``). Nothing when the file is as wanted and the daemon runs with it
    (live-restore on). ``args``: the running dockerd's command line."""
    config, wanted = _parse(current), wanted_settings(pools)
    _check_flags(args, wanted)
    changed = {key for key, value in wanted.items() if config.get(key) != value}
    # The file is right but the daemon never took it (an earlier run stopped between write and restart).
    pending = not changed and live_restore is False
    if not changed and not pending:
        return []
    commands: list[Command] = []
    if changed:
        commands += write_files({DAEMON_JSON: daemon_config(current, pools) or ""}, modes={DAEMON_JSON: "0644"})
    if pending or changed - RELOADABLE:
        return commands + [KEEP_RUNNING, *RESTART]
    return commands + [ENSURE_LIVE_RESTORE]  # live-restore alone: applied by a reload, no restart


def settings_commands(daemon: DaemonState | None, pools: list[AddressPool] | None) -> list[Command]:
    """``daemon_commands`` from the state read's daemon section (None, not read: as on a host without Docker)."""
    daemon = daemon or DaemonState()
    return daemon_commands(daemon.config, daemon.live_restore, pools, daemon.args)


def image_commands(image: str, present_images: Sequence[str], *, busybox: bool) -> list[Command]:
    """The registry-free agent image: busybox-static in an empty root, imported into Docker; nothing
    when it is present. ``busybox``: /bin/busybox exists on the host (else busybox-static is installed)."""
    if image in present_images:
        return []
    if image != DEFAULT_IMAGE:
        raise Refused(f"image {image} is not on the host; load it there first (no registry is used)")
    recipe = resources.files("jackin.lab").joinpath("recipe/agent-image.sh").read_text()
    commands: list[Command] = [] if busybox else ["DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static"]
    return commands + [f"sh -c {shlex.quote(recipe)} agent-image import {shlex.quote(image)}"]  # a fixed 1 KiB script


# --- role images (jackin/spec/roles.py, jackin/images/build.py) ------------------------------------------------


class ImageLoad(str):
    """A role image built on the operator's machine: ``fleet.up`` loads it over SSH before the deploy
    (jackin/images/build.py ``deliver``). In the deploy it is a check that it arrived (the host fails if not);
    shown as "load image TAG from the operator (NN MB)"."""

    image: str
    size: int | None

    def __new__(cls, image: str, size: int | None) -> ImageLoad:
        quoted = shlex.quote(image)
        why = shlex.quote(f"image {image} is not on this host: fleet.up loads it from the operator before the deploy")
        made = super().__new__(cls, f"docker image inspect --format ok {quoted} >/dev/null 2>&1 || "
                                    f"{{ echo {why} >&2; exit 1; }}")  # fmt: skip
        made.image, made.size = image, size
        return made

    @property
    def shown(self) -> str:
        size = f"{self.size / 1e6:.0f} MB" if self.size is not None else "size known once built"
        return f"load image {self.image} from the operator ({size})"


def role_image_commands(image: str, present_images: Sequence[str], *, build: str, size: int | None = None,
                        files: dict[str, bytes] | None = None) -> list[Command]:  # fmt: skip
    """A role's image on the host: nothing when present; ``build: operator``: loaded from the operator
    (``ImageLoad``); ``build: host``: the role's files (``files``: path in the build context -> bytes) sent
    by SFTP into a root-only directory, ``docker build`` there (offline only if the Dockerfile needs nothing
    from a registry), the directory removed."""
    if image in present_images:
        return []
    if build == "operator":
        return [ImageLoad(image, size)]
    if not files:
        raise Refused(f"image {image}: no build context to send")
    directory = f"{BUILD_DIR}/{image.rsplit(':', 1)[1]}"
    quoted = shlex.quote(directory)
    commands: list[Command] = [f"rm -rf {quoted}", f"install -d -m 0700 {shlex.quote(BUILD_DIR)} {quoted}"]
    for sub in sorted({p.rsplit("/", 1)[0] for p in files if "/" in p}):
        commands.append(f"install -d -m 0700 {shlex.quote(f'{directory}/{sub}')}")
    for path, data in sorted(files.items()):
        target = f"{directory}/{path}"
        commands.append(Upload(data, target, target=target, mode=file_mode(data)))
        commands.append(f"chmod {file_mode(data)} {shlex.quote(target)}")
    return commands + [f"DOCKER_BUILDKIT=0 docker build -q -t {shlex.quote(image)} {quoted}", f"rm -rf {quoted}"]
