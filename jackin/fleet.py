"""Fleet operations: resolve an inventory to SSH targets and run deploys on them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jackin
from jackin.engine import EngineRequest, Event, RunResult, run
from jackin.errors import JackinError, SpecError
from jackin.lab import Lab
from jackin.paths import private_dir, state_dir
from jackin.spec import Inventory, LabSpec, load_inventory
from jackin.ssh import SshTarget

DEFAULT_INVENTORY = Path("inventory/lab.yaml")
Log = Callable[[str], None]


def deploys_dir() -> Path:
    path = Path(jackin.__file__).resolve().parent.parent / "deploys"
    if not path.is_dir():
        raise JackinError(f"deploy files not found at {path}", hint="install jackin from its checkout (pip install -e .)")
    return path


def load(path: str | Path | None) -> Inventory:
    return load_inventory(path or DEFAULT_INVENTORY)


def targets(inventory: Inventory, *, log: Log = lambda _: None) -> list[SshTarget]:
    """The fleet's hosts as strict SSH targets; with provider ``lab``, bring the lab up first."""
    fleet = inventory.fleet
    if fleet.provider == "lab":
        spec = fleet.lab or LabSpec()
        lab = Lab(spec.name)
        status = lab.status()
        ready = len(status.hosts) == spec.hosts and all(h.state == "running" for h in status.hosts)
        if not ready or not lab.known_hosts.exists():
            log(f"bringing lab {spec.name!r} up with {spec.hosts} host(s)")
            status = lab.up(spec.hosts, log=log)
        return [h.target() for h in status.hosts]
    return _static_targets(inventory)


def _static_targets(inventory: Inventory) -> list[SshTarget]:
    fleet = inventory.fleet
    by_name = {h.name: h for h in inventory.hosts}
    selected: list[str] = []
    for entry in fleet.hosts or list(by_name):
        for name in inventory.groups.get(entry, [entry]):
            if name not in selected:
                selected.append(name)
    unpinned = [n for n in selected if not by_name[n].host_keys]
    if unpinned:
        raise SpecError(
            f"no pinned host key for: {', '.join(unpinned)}",
            hint="add each host's public key under host_keys (ssh-keyscan it, then verify it out of band)",
        )
    known_hosts = private_dir(state_dir() / "fleets" / fleet.name) / "known_hosts"
    lines = []
    for host in inventory.hosts:
        pattern = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        lines.extend(f"{pattern} {key}\n" for key in host.host_keys)
    known_hosts.write_text("".join(lines))
    known_hosts.chmod(0o600)

    def target(name: str) -> SshTarget:
        host = by_name[name]
        return SshTarget(
            name=host.name, address=host.address, port=host.port, user=host.user,
            key_file=host.key_file, known_hosts=known_hosts,
            jump=target(host.jump) if host.jump else None,
        )  # fmt: skip

    return [target(n) for n in selected]


def up(
    inventory: Inventory,
    *,
    dry_run: bool = False,
    on_event: Callable[[Event], None] = lambda _: None,
    log: Log = lambda _: None,
) -> RunResult:
    """Bring the fleet up on every host, in parallel; one failing host never stops the others."""
    hosts = targets(inventory, log=log)
    request = EngineRequest(
        deploy=str(deploys_dir() / "hello.py"),
        targets=hosts,
        data={"fleet": inventory.fleet.name},
        dry_run=dry_run,
    )
    return run(request, on_event)
