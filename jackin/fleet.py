"""Fleet lifecycle: resolve an inventory to hosts, plan, run deploys, record, check.

Everything that changes a host runs as a pyinfra deploy in the engine process;
reads (status, the clean check) go over strict SSH with bounded timeouts. Every
run is recorded in the ledger with an audit entry per host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import jackin
from jackin import firewall
from jackin import plan as planning
from jackin.engine import EngineRequest, Event, HostResult, RunResult, run
from jackin.errors import ConnectError, JackinError, SpecError
from jackin.state import HostState, parse_state, state_command
from jackin.lab import Lab
from jackin.ledger import Ledger
from jackin.paths import private_dir, state_dir
from jackin.remote import gather
from jackin.spec import Inventory, LabSpec, load_inventory
from jackin.spec.models import SLUG
from jackin.ssh import SshTarget
from jackin.status import FleetStatus, fleet_status

DEFAULT_INVENTORY = Path("inventory/lab.yaml")
Log = Callable[[str], None]
OnEvent = Callable[[Event], None]


def deploys_dir() -> Path:
    path = Path(jackin.__file__).resolve().parent.parent / "deploys"
    if not path.is_dir():
        raise JackinError(f"deploy files not found at {path}", hint="install jackin from its checkout (pip install -e .)")
    return path


def load(path: str | Path | None) -> Inventory:
    return load_inventory(path or DEFAULT_INVENTORY)


# --- hosts -------------------------------------------------------------------


def targets(inventory: Inventory, *, log: Log = lambda _: None, bring_up: bool = True) -> list[SshTarget]:
    """The fleet's hosts as strict SSH targets; with provider ``lab``, bring the lab up first."""
    fleet = inventory.fleet
    if fleet.provider == "lab":
        spec = fleet.lab or LabSpec()
        lab = Lab(spec.name)
        status = lab.status()
        ready = len(status.hosts) == spec.hosts and all(h.state == "running" for h in status.hosts)
        if bring_up and (not ready or not lab.known_hosts.exists()):
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


def make_plan(inventory: Inventory, ledger: Ledger, fleet_hosts: list[str] | None = None) -> planning.FleetPlan:
    fleet = inventory.fleet
    names = [instance for _, instance in planning.instances(fleet)]
    uids = ledger.allocate_uids(fleet.name, names, fleet.uid_base, planning.UIDS_PER_FLEET)
    return planning.build(fleet, uids, firewall.host_addresses(fleet_hosts or []))


def host_addresses(inventory: Inventory) -> list[str]:
    """Every address of every fleet host, always denied to agents: lab hosts on both lab networks;
    a static inventory's addresses (IP literals only: names are not resolved)."""
    if inventory.fleet.provider == "lab":
        hosts = Lab((inventory.fleet.lab or LabSpec()).name).status().hosts
        return [a for h in hosts for a in (h.lab_ip, h.public_ip) if a]
    return [h.address for h in inventory.hosts]


# --- up ----------------------------------------------------------------------


class UpResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    run: RunResult
    plan: planning.FleetPlan

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.run.hosts)


def up(
    inventory: Inventory,
    *,
    source: str | None = None,
    dry_run: bool = False,
    bring_up: bool | None = None,
    on_event: OnEvent = lambda _: None,
    log: Log = lambda _: None,
) -> UpResult:
    """Bring the fleet up on every host in parallel; one failing host never stops the others.

    ``bring_up``: with provider lab, create the lab first if it is not up (default: unless ``dry_run``).
    """
    fleet = inventory.fleet
    with Ledger() as ledger, ledger.lock(fleet.name, "fleet.up"):
        hosts = targets(inventory, log=log, bring_up=not dry_run if bring_up is None else bring_up)
        if dry_run and not hosts:
            log("the lab is not up: a real run would create its hosts first; nothing to plan against yet")
        plan = make_plan(inventory, ledger, host_addresses(inventory) if hosts else [])
        action = "fleet.up --dry-run" if dry_run else "fleet.up"
        run_id = ledger.start_run(fleet.name, action, {"hosts": [h.name for h in hosts]})
        if not dry_run:
            ledger.record_fleet(fleet.name, fleet.provider, source, "up")
        request = EngineRequest(deploy=str(deploys_dir() / "fleet.py"), targets=hosts,
                                data=plan.model_dump(mode="json"), dry_run=dry_run)  # fmt: skip
        result = run(request, on_event)
        _record(ledger, run_id, fleet.name, action, hosts, result, plan, record_agents=not dry_run)
        return UpResult(fleet=fleet.name, run=result, plan=plan)


def _record(ledger: Ledger, run_id: int, fleet: str, action: str, hosts: list[SshTarget], result: RunResult,
            plan: planning.FleetPlan | None, *, record_agents: bool) -> None:  # fmt: skip
    by_name = {h.name: h for h in hosts}
    for host in result.hosts:
        outcome = "ok" if host.ok else "failed"
        target = by_name[host.host]
        ledger.audit(run_id, fleet, action, outcome, host=host.host,
                     detail={"changed": host.changed, "failed": host.failed, "error": host.error})  # fmt: skip
        if record_agents:
            ledger.record_host(fleet, host.host, target.address, target.port, outcome)
        if record_agents and host.ok and plan is not None:
            ledger.record_agents(fleet, host.host, [a.model_dump() for a in plan.agents])
    ledger.finish_run(run_id, "ok" if not result.failed and not result.error else "failed")


# --- status ------------------------------------------------------------------


def status(inventory: Inventory, *, timeout: float = 8) -> FleetStatus:
    """Hosts × agents of the fleet; never brings a lab up and never hangs on a dead host.

    Each agent also shows its egress mode, what is enforced, and how many packets
    its policy dropped in all and since the last ``status`` (kept in the state dir).
    """
    spec = inventory.fleet
    result = fleet_status(spec.name, targets(inventory, bring_up=False), timeout=timeout)
    policies = {instance: spec.agent_network(next(a for a in spec.agents if a.name == agent))
                for agent, instance in planning.instances(spec)}  # fmt: skip
    seen_file = private_dir(state_dir() / "fleets" / spec.name) / "drops.json"
    try:
        seen = json.loads(seen_file.read_text())
    except (OSError, ValueError):
        seen = {}
    for host in result.hosts:
        for agent in host.agents:
            policy = policies.get(agent.instance)
            if policy is not None:
                level, reasons = firewall.enforcement(policy)
                agent.egress = policy.mode
                agent.enforcement = level + (": " + "; ".join(reasons) if reasons else "")
                if host.not_enforced:
                    agent.enforcement = f"NOT ENFORCED: {host.not_enforced}"
            if agent.drops is not None:
                before = seen.get(host.host, {}).get(agent.instance, 0)
                agent.drops_new = agent.drops - before if agent.drops >= before else agent.drops
                seen.setdefault(host.host, {})[agent.instance] = agent.drops
    seen_file.write_text(json.dumps(seen))
    return result


# --- down --------------------------------------------------------------------


class CleanCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    clean: bool
    leftovers: dict[str, list[str]] = Field(default_factory=dict)
    error: str | None = None


class DownResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fleet: str
    run: RunResult
    checks: list[CleanCheck]
    lab_removed: bool = False

    @property
    def clean(self) -> bool:
        return all(c.clean for c in self.checks) and not self.run.failed


def clean_check(plan: planning.FleetPlan, hosts: list[SshTarget], *, keep_data: bool = False) -> list[CleanCheck]:
    """From a fresh connection: prove nothing of the fleet is left on each host."""
    command = state_command(plan.fleet, plan.uid_min, plan.uid_max)
    found = gather(hosts, command, lambda out: parse_state(out.splitlines()), timeout=15)
    checks = []
    for host in hosts:
        state = found[host.name]
        if isinstance(state, ConnectError):
            checks.append(CleanCheck(host=host.name, clean=False, error=state.message))
            continue
        leftovers = _leftovers(plan, state, keep_data=keep_data)
        checks.append(CleanCheck(host=host.name, clean=not any(leftovers.values()), leftovers=leftovers))
    return checks


def _leftovers(plan: planning.FleetPlan, state: HostState, *, keep_data: bool) -> dict[str, list[str]]:
    left = {k: v for k, v in state.model_copy(update={"fleet": plan.fleet}).leftovers.items() if v}
    if keep_data:
        left.pop("paths", None)
    return left


def down(
    inventory: Inventory,
    *,
    keep_data: bool = False,
    keep_lab: bool = False,
    on_event: OnEvent = lambda _: None,
    log: Log = lambda _: None,
) -> DownResult:
    """Remove everything of the fleet from every host, check it is gone, and (lab) destroy the lab."""
    fleet = inventory.fleet
    with Ledger() as ledger, ledger.lock(fleet.name, "fleet.down"):
        hosts = targets(inventory, bring_up=False)
        lab_spec = (fleet.lab or LabSpec()) if fleet.provider == "lab" else None
        if lab_spec is not None and not hosts:
            ledger.forget_fleet(fleet.name)
            removed = not keep_lab and _destroy_lab(lab_spec, log)
            return DownResult(fleet=fleet.name, run=RunResult(hosts=[]), checks=[], lab_removed=removed)
        plan = make_plan(inventory, ledger)
        run_id = ledger.start_run(fleet.name, "fleet.down", {"keep_data": keep_data})
        request = EngineRequest(deploy=str(deploys_dir() / "teardown.py"), targets=hosts,
                                data={"plan": plan.model_dump(mode="json"), "keep_data": keep_data})  # fmt: skip
        result = run(request, on_event)
        _record(ledger, run_id, fleet.name, "fleet.down", hosts, result, None, record_agents=False)
        checks = clean_check(plan, hosts, keep_data=keep_data)
        for check in checks:
            ledger.audit(run_id, fleet.name, "clean-check", "clean" if check.clean else "dirty",
                         host=check.host, detail=check.leftovers or check.error)  # fmt: skip
        outcome = DownResult(fleet=fleet.name, run=result, checks=checks)
        if outcome.clean:
            ledger.forget_fleet(fleet.name, keep_uids=keep_data)
            if lab_spec is not None and not keep_data and not keep_lab:  # kept data lives on the lab hosts
                outcome.lab_removed = _destroy_lab(lab_spec, log)
        return outcome


def _destroy_lab(spec: LabSpec, log: Log) -> bool:
    removed = Lab(spec.name).down(log=log)
    return any(removed.values())


# --- gc ----------------------------------------------------------------------

GC_COMMAND = (
    "{ docker ps -a --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "docker network ls --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "getent passwd | awk -F: '$5 ~ /^jackin\\// {split($5, a, \"/\"); print a[2]}'; "
    "ls /srv/jackin 2>/dev/null; "
    "ls /var/lib/jackin 2>/dev/null | sed -n 's/^fleet-\\(.*\\)\\.json$/\\1/p'; } | sort -u"
)


def orphans(inventory: Inventory) -> dict[str, list[str]]:
    """Fleets found on the inventory's hosts that the ledger does not know (or knows as down)."""
    with Ledger() as ledger:
        live = {name for name in ledger.fleets() if (ledger.fleet(name) or {}).get("status") == "up"}
    hosts = targets(inventory, bring_up=False)
    found = gather(hosts, GC_COMMAND, lambda out: sorted({line.strip() for line in out.splitlines() if line.strip()}))
    result: dict[str, list[str]] = {}
    for host, names in found.items():
        if isinstance(names, ConnectError):
            raise names
        for name in names:
            if name not in live and re.fullmatch(SLUG, name):  # anything else is not a fleet name of ours
                result.setdefault(name, []).append(host)
    return result


def gc(inventory: Inventory, fleets: dict[str, list[str]], *, on_event: OnEvent = lambda _: None) -> list[RunResult]:
    """Remove the leftovers of ``fleets`` ({fleet: [hosts]}) found by ``orphans``."""
    hosts = {t.name: t for t in targets(inventory, bring_up=False)}
    results = []
    with Ledger() as ledger:
        for name, host_names in sorted(fleets.items()):
            with ledger.lock(name, "fleet.gc"):
                if (ledger.fleet(name) or {}).get("status") == "up":
                    continue  # brought up since it was found: no longer a leftover
                plan = planning.FleetPlan(fleet=name, uid_min=0, uid_max=-1, agents=[])
                request = EngineRequest(deploy=str(deploys_dir() / "teardown.py"),
                                        targets=[hosts[h] for h in host_names],
                                        data={"plan": plan.model_dump(mode="json"), "keep_data": False})  # fmt: skip
                result = run(request, on_event)
                run_id = ledger.start_run(name, "fleet.gc")
                _record(ledger, run_id, name, "fleet.gc", list(hosts.values()), result, None, record_agents=False)
                results.append(result)
    return results


__all__ = ["HostResult", "clean_check", "down", "gc", "load", "orphans", "status", "targets", "up"]
