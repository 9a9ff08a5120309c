"""Host bootstrap operations: the Docker daemon's address pools and the agent image."""

from __future__ import annotations

import json
import shlex
from importlib import resources

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.files import File, FileContents

from jackin.plan import DEFAULT_IMAGE
from jackin.spec.models import AddressPool

DAEMON_JSON = "/etc/docker/daemon.json"


def daemon_config(current: str | None, pools: list[AddressPool]) -> str | None:
    """daemon.json with our address pools merged in, or None when nothing changes."""
    try:
        config = json.loads(current) if current and current.strip() else {}
    except json.JSONDecodeError:
        config = None
    if not isinstance(config, dict):
        raise ValueError(f"{DAEMON_JSON} is not a JSON object; fix it by hand first")
    wanted = [{"base": p.base, "size": p.size} for p in pools]
    if config.get("default-address-pools") == wanted:
        return None
    config["default-address-pools"] = wanted
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


@operation()
def address_pools(pools: list[AddressPool]):
    """Docker allocates agent networks from these pools, so they never clash with the host's networks.

    Changing them restarts the Docker engine (containers with a restart policy come back).
    """
    current = "\n".join(host.get_fact(FileContents, path=DAEMON_JSON) or [])
    new = daemon_config(current, pools)
    if new is None:
        host.noop("docker address pools are up to date")
        return
    yield f"install -d -m 0755 /etc/docker && printf '%s' {shlex.quote(new)} > {DAEMON_JSON}"
    yield "systemctl restart docker"


@operation()
def agent_image(image: str = DEFAULT_IMAGE, present_images: tuple[str, ...] = ()):
    """The registry-free agent image: busybox-static in an empty root, imported into Docker."""
    if image in present_images:
        host.noop(f"image {image} is present")
        return
    if image != DEFAULT_IMAGE:
        from pyinfra.api import OperationError

        raise OperationError(f"image {image} is not on the host; load it there first (no registry is used)")
    script = resources.files("jackin.lab").joinpath("recipe/agent-image.sh").read_text()
    if host.get_fact(File, path="/bin/busybox") is None:
        yield "DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static"
    yield f"sh -c {shlex.quote(script)} agent-image import {shlex.quote(image)}"
