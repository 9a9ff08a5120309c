"""Providers own a fleet's hosts: where they come from, how they are trusted, when they go.

Beside the lab, the one provider with a life of its own: the lifecycle, the snapshots and the agent
tools all resolve a fleet's hosts here (``targets``), so it sits below all three.

    Provider              the interface the fleet tasks use
    ├── LabProvider       lab hosts on the local Docker engine (jackin.lab)
    └── StaticProvider    the operator's own servers, host keys pinned in the inventory

``provider_for(inventory)`` picks one. ``targets`` resolves the fleet's hosts as
strict SSH targets, ``addresses`` lists every address of every host (so the
egress policy can deny agents all of them), ``claim`` records that the fleet now
has state on its hosts, ``release`` is called after a clean teardown. Cloud
providers follow behind the same interface.

Lab ownership (in the ledger): a lab that ``fleet.up`` had to create records that
fleet as its creator; every fleet brought up on a lab is one of its users. A
fleet's ``up`` never shrinks a lab (it may add hosts, which no other fleet uses)
and uses the lab's first ``lab.hosts`` hosts. A fleet's ``down`` leaves the lab;
the lab is destroyed only when a fleet created it and no fleet uses it any more
(the last to leave removes it). A lab made by ``lab.up`` is the operator's:
fleets never destroy it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict

from jackin.errors import SpecError
from jackin.lab.lab import Lab
from jackin.lab.models import LabHost, LabStatus
from jackin.paths import private_dir, state_dir
from jackin.spec import Inventory, LabSpec
from jackin.store.ledger import Ledger
from jackin.transport.target import SshTarget

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


class Provider:
    """What the fleet tasks need of the hosts' owner."""

    def __init__(self, inventory: Inventory, ledger: Ledger | None = None) -> None:
        self.inventory = inventory
        self.fleet = inventory.fleet.name
        self._ledger = ledger

    @contextmanager
    def ledger(self) -> Iterator[Ledger]:
        """The caller's open ledger, else one opened for this call."""
        if self._ledger is not None:
            yield self._ledger
        else:
            with Ledger() as ledger:
                yield ledger

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        """The fleet's hosts as strict SSH targets; ``bring_up`` may create them first."""
        raise NotImplementedError

    def addresses(self) -> list[str]:
        """Every IP address of every host of the fleet's inventory (never creates anything)."""
        raise NotImplementedError

    def unresolved(self) -> list[str]:
        """Hosts whose addresses ``addresses`` could not give (named, not IP literals)."""
        return []

    def reach(self, name: str) -> SshTarget | None:
        """A host by name that is not one of the fleet's now (one that left its inventory), as a strict SSH target
        when the provider still knows it; None otherwise (never creates anything)."""
        return None

    def claim(self) -> None:
        """The fleet now has state on its hosts (after a real ``fleet.up``)."""

    def release(self, *, keep_hosts: bool = False, keep_data: bool = False, log: Log = _quiet) -> Release:
        """After a clean teardown: give the hosts back (``keep_data``: the fleet's data stays on them)."""
        return Release()


class Release(BaseModel):
    """What ``release`` did with the hosts: destroyed them, or why not."""

    model_config = ConfigDict(extra="forbid")

    destroyed: bool = False
    note: str | None = None


# --- static --------------------------------------------------------------------


class StaticProvider(Provider):
    """The operator's servers: pinned keys from the inventory, written to the fleet's known_hosts."""

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        return static_targets(self.inventory)

    def reach(self, name: str) -> SshTarget | None:
        """A host still under the file's ``hosts`` (with its pinned keys), outside ``fleet.hosts``."""
        if name not in {h.name for h in self.inventory.hosts}:
            return None
        return static_targets(self.inventory, [name])[0]

    def addresses(self) -> list[str]:
        found = []
        for host in self.inventory.hosts:
            try:
                found.append(str(ipaddress.ip_address(host.address)))
            except ValueError:
                continue  # a DNS name is not resolved here (see unresolved): give fleet hosts as IP addresses
        return sorted(set(found))

    def unresolved(self) -> list[str]:
        """Hosts given by DNS name: their addresses cannot join the always-denied set (the operator's
        resolver may not answer what the hosts' does), so fleet.up warns about each."""
        names = []
        for host in self.inventory.hosts:
            try:
                ipaddress.ip_address(host.address)
            except ValueError:
                names.append(f"{host.name} ({host.address})")
        return names


def static_targets(inventory: Inventory, names: list[str] | None = None) -> list[SshTarget]:
    """The fleet's hosts (``names``: these hosts of the file instead) as strict SSH targets."""
    fleet = inventory.fleet
    by_name = {h.name: h for h in inventory.hosts}
    selected = inventory.fleet_host_names() if names is None else names
    needed = list(selected)  # the selected hosts and every jump host on their way: each hop is pinned
    for name in needed:
        jump = by_name[name].jump
        if jump and jump not in needed:
            needed.append(jump)
    unpinned = [n for n in needed if not by_name[n].host_keys]
    if unpinned:
        raise SpecError(
            f"no pinned host key for: {', '.join(unpinned)}",
            hint="add each host's public key under host_keys (ssh-keyscan it, then verify it out of band)",
        )
    known_hosts = private_dir(state_dir() / "fleets" / fleet.name) / "known_hosts"
    lines: list[str] = []
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
    """Lab hosts: the lab is brought up on demand, shared between fleets, destroyed after the last."""

    def __init__(self, inventory: Inventory, ledger: Ledger | None = None) -> None:
        super().__init__(inventory, ledger)
        self.spec = inventory.fleet.lab or LabSpec()
        self.lab = Lab(self.spec.name)
        self._seen: LabStatus | None = None  # the lab as targets() last saw it

    def _mine(self, hosts: list[LabHost]) -> list[LabHost]:
        wanted = {self.lab.host_name(i) for i in range(1, self.spec.hosts + 1)}
        return [h for h in hosts if h.name in wanted]

    def targets(self, *, bring_up: bool = True, log: Log = _quiet) -> list[SshTarget]:
        spec, lab = self.spec, self.lab
        status = lab.status()
        mine = self._mine(status.hosts)
        ready = len(mine) == spec.hosts and all(h.state == "running" and h.pinned for h in mine)
        if bring_up and (not ready or not lab.known_hosts.exists()):
            size = max(spec.hosts, len(status.hosts))  # never shrink: other fleets may use the hosts beyond ours
            log(f"bringing lab {spec.name!r} up with {size} host(s)")
            created = not status.hosts
            with self.ledger() as ledger:  # never replace hosts under another fleet (a kept one stays a user)
                others = [f for f in ledger.lab_users(spec.name) if f != self.fleet]
            status = lab.up(size, log=log, used_by=others, sizes=spec.sizes)
            if created:
                with self.ledger() as ledger:
                    ledger.lab_created(spec.name, self.fleet)
            mine = self._mine(status.hosts)
        self._seen = status  # addresses() right after (fleet.up, fleet.plan): the same look, not a second one
        return [h.target() for h in mine]

    def reach(self, name: str) -> SshTarget | None:
        """A host of the lab beyond the fleet's (the lab never shrinks while fleets use it), when it runs."""
        found = next((h for h in self.lab.status().hosts if h.name == name), None)
        return found.target() if found is not None and found.state == "running" and found.pinned else None

    def addresses(self) -> list[str]:
        status = self._seen or self.lab.status()
        found = {a for h in status.hosts for a in (h.lab_ip, h.public_ip) if a}
        return sorted(found, key=ipaddress.ip_address)

    def claim(self) -> None:
        with self.lab.locked(), self.ledger() as ledger:  # never between another fleet's last look and its lab.down
            ledger.use_lab(self.spec.name, self.fleet)

    def release(self, *, keep_hosts: bool = False, keep_data: bool = False, log: Log = _quiet) -> Release:
        name = self.spec.name
        with self.ledger() as ledger:
            if keep_data:
                return Release(note=f"lab {name!r} kept: fleet {self.fleet!r}'s kept data lives on its hosts")
            ledger.leave_lab(name, self.fleet)
            record = ledger.lab(name)
            if keep_hosts:
                return Release(note=f"lab {name!r} kept (--keep-lab)")
            if record is None or record["created_by"] is None:
                return Release(note=f"lab {name!r} kept: no fleet created it (lab.up did); "
                                    f"inv lab.down --name {name} removes it")  # fmt: skip
            if record["users"]:
                return Release(note=f"lab {name!r} kept: still used by fleet(s) {', '.join(record['users'])}")

            def joined() -> bool:  # under the lab's lock: a fleet that claimed it since keeps it
                with self.ledger() as fresh:
                    return bool((fresh.lab(name) or {}).get("users"))

            removed = self.lab.down(log=log, unless=joined)
            if not any(removed.values()) and joined():
                return Release(note=f"lab {name!r} kept: another fleet joined it meanwhile")
            ledger.forget_lab(name)
            return Release(destroyed=any(removed.values()))


def provider_for(inventory: Inventory, ledger: Ledger | None = None) -> Provider:
    """The provider that owns the inventory's hosts (recording in ``ledger`` when given)."""
    if inventory.fleet.provider == "lab":
        return LabProvider(inventory, ledger)
    return StaticProvider(inventory, ledger)


def targets(inventory: Inventory, *, log: Log = _quiet, bring_up: bool = True) -> list[SshTarget]:
    """The fleet's hosts as strict SSH targets; with provider ``lab``, bring the lab up first."""
    return provider_for(inventory).targets(bring_up=bring_up, log=log)


def destroy_lab(name: str, *, log: Log = _quiet) -> dict[str, list[str]]:
    """``lab.down`` by hand: remove the lab whoever uses it, and forget its owners in the ledger."""
    removed = Lab(name).down(log=log)
    with Ledger() as ledger:
        ledger.forget_lab(name)
    return removed
