"""Providers own a fleet's hosts: where they come from, how they are trusted, when they go.

    Provider              the interface the fleet tasks use
    ├── LabProvider       lab hosts on the local Docker engine (jackin.lab)
    └── StaticProvider    the operator's own servers, host keys pinned in the inventory

``provider_for(inventory)`` picks one. ``targets`` resolves the fleet's hosts as
strict SSH targets, ``addresses`` lists every address of every host (so the
egress policy can deny agents all of them), ``release`` is called after a clean
teardown (a lab provider may destroy its lab there). Cloud providers follow
behind the same interface.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from jackin.errors import SpecError
from jackin.lab import Lab
from jackin.paths import private_dir, state_dir
from jackin.spec import Inventory, LabSpec
from jackin.ssh import SshTarget

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class Provider:
    """What the fleet tasks need of the hosts' owner."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.fleet = inventory.fleet.name

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        """The fleet's hosts as strict SSH targets; ``bring_up`` may create them first."""
        raise NotImplementedError

    def addresses(self) -> list[str]:
        """Every IP address of every host of the fleet's inventory (never creates anything)."""
        raise NotImplementedError

    def release(self, *, keep_hosts: bool = False, log: Log = _quiet) -> bool:
        """After a clean teardown: give the hosts back. True when something was destroyed."""
        return False


# --- static --------------------------------------------------------------------


class StaticProvider(Provider):
    """The operator's servers: pinned keys from the inventory, written to the fleet's known_hosts."""

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        return static_targets(self.inventory)

    def addresses(self) -> list[str]:
        found = []
        for host in self.inventory.hosts:
            try:
                found.append(str(ipaddress.ip_address(host.address)))
            except ValueError:
                continue  # a DNS name: resolved on the host, not here
        return sorted(set(found))


def static_targets(inventory: Inventory) -> list[SshTarget]:
    fleet = inventory.fleet
    by_name = {h.name: h for h in inventory.hosts}
    selected: list[str] = []
    for entry in fleet.hosts or list(by_name):
        for name in inventory.groups.get(entry, [entry]):
            if name not in selected:
                selected.append(name)
    jumping = [n for n in selected if by_name[n].jump]
    if jumping:
        raise SpecError(
            f"jump hosts are not supported by the fleet tasks yet: {', '.join(jumping)}",
            hint="reach these hosts directly (a VPN, or an SSH config the operator manages) for now",
        )
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


# --- lab -----------------------------------------------------------------------


class LabProvider(Provider):
    """Lab hosts: the fleet's lab is brought up on demand and destroyed after the fleet."""

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.spec = inventory.fleet.lab or LabSpec()
        self.lab = Lab(self.spec.name)

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        spec, lab = self.spec, self.lab
        status = lab.status()
        ready = len(status.hosts) == spec.hosts and all(h.state == "running" for h in status.hosts)
        if bring_up and (not ready or not lab.known_hosts.exists()):
            log(f"bringing lab {spec.name!r} up with {spec.hosts} host(s)")
            status = lab.up(spec.hosts, log=log)
        return [h.target() for h in status.hosts]

    def addresses(self) -> list[str]:
        status = self.lab.status()
        found = {a for h in status.hosts for a in (h.lab_ip, h.public_ip) if a}
        return sorted(found, key=ipaddress.ip_address)

    def release(self, *, keep_hosts: bool = False, log: Log = _quiet) -> bool:
        if keep_hosts:
            return False
        removed = self.lab.down(log=log)
        return any(removed.values())


def provider_for(inventory: Inventory) -> Provider:
    """The provider that owns the inventory's hosts."""
    if inventory.fleet.provider == "lab":
        return LabProvider(inventory)
    return StaticProvider(inventory)
