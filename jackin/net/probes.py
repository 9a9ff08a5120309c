"""Looking at one agent's network boundary from inside: netcheck probes, denied destinations."""

from __future__ import annotations

import ipaddress
import re
import shlex

from pydantic import BaseModel, ConfigDict

from jackin import hostpaths
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, EXIT_OK, ConnectError, JackinError, SpecError
from jackin.facts.gateway import GatewayAccount, gateway_accounts, gateway_files
from jackin.net import firewall
from jackin.plan import fleet as planning
from jackin.plan import placement
from jackin.plan.make import record
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport.remote import HostError, gather
from jackin.transport.target import SshTarget


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    target: str
    port: int
    result: str  # reachable, refused (the destination answered: not blocked), blocked, error, unreachable
    detail: str = ""

    @property
    def exit_code(self) -> int:
        """0 for an answer (reachable, refused, blocked); 3 when the host was not reached; 1 when the probe failed."""
        return {"unreachable": EXIT_CONNECT, "error": EXIT_FAILED}.get(self.result, EXIT_OK)


class Denial(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    destination: str
    port: int
    expires: str


class GatewayRefusal(BaseModel):
    """A request the credential gateway refused for the agent (jackin/net/gatewayd.py): another upstream,
    another agent's placeholder, none at all."""

    model_config = ConfigDict(extra="forbid")

    host: str
    instance: str
    time: float
    kind: str
    detail: str


class Denials(BaseModel):
    """Every host's denials, and the hosts that could not be read (never dropped)."""

    model_config = ConfigDict(extra="forbid")

    denials: list[Denial]
    errors: list[HostError]
    gateway: list[GatewayRefusal] = []


def instances(inventory: Inventory, agent: str) -> list[str]:
    """``coder-1`` names one instance, ``coder`` every instance of that agent."""
    all_instances = [i for _, i in planning.instances(inventory.fleet)]
    if agent in all_instances:
        return [agent]
    matches = [i for a, i in planning.instances(inventory.fleet) if a == agent]
    if not matches:
        raise SpecError(f"no agent {agent!r} in fleet {inventory.fleet.name!r}",
                        hint=f"expected one of: {', '.join(all_instances)}")  # fmt: skip
    return matches


def check_probe(inventory: Inventory, agent: str, target: str, port: int) -> list[str]:
    """Every argument of a probe checked before any host is looked up (SpecError, exit 2): the port
    (1 to 65535), the target (an IP address or a host name: it is part of the probe's command line)
    and the agent; the instances it names."""
    _check_target(target, port)
    return instances(inventory, agent)


def _check_target(target: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise SpecError(f"--port expects a whole number from 1 to 65535, got {port}")
    if "%" in target:
        raise SpecError(f"target {target!r}: scoped IPv6 addresses are not supported")
    try:
        ipaddress.ip_address(target)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", target):
            raise SpecError(f"target {target!r} is not an IP address or a host name") from None


def netcheck(inventory: Inventory, hosts: list[SshTarget], agent: str, target: str, port: int,
             *, timeout: int = 3) -> list[Probe]:  # fmt: skip
    """Probe ``target:port`` with TCP from inside each instance's container, on each host it is placed on."""
    names = check_probe(inventory, agent, target, port)
    fleet = inventory.fleet.name
    script = (
        "; ".join(
            f"echo '##{i}'; docker exec {shlex.quote(hostpaths.user_name(fleet, i))} "
            f"sh -c {shlex.quote(f'echo | timeout {timeout + 2} nc -w {timeout} {shlex.quote(target)} {port}')} "
            f">/dev/null 2>/tmp/.jk-nc.$$; echo \"rc=$? $(tr '\\n' ' ' </tmp/.jk-nc.$$)\""
            for i in names
        )
        + "; rm -f /tmp/.jk-nc.$$"
    )

    def parse(out: str) -> dict[str, tuple[str, str]]:
        found, current = {}, None
        for line in out.splitlines():
            if line.startswith("##"):
                current = line[2:]
            elif current and line.startswith("rc="):
                code, _, err = line[3:].partition(" ")
                found[current] = _verdict(int(code), err.strip())
        return found

    results = gather(hosts, script, parse, timeout=timeout * len(names) + 15)
    with Ledger() as ledger:  # each instance is probed on the hosts it is placed on (jackin/plan/placement.py)
        where = placement.recorded(inventory, record(inventory, ledger)).hosts
    probes = []
    for host in hosts:
        found = results[host.name]
        for instance in names:
            if any(where.values()) and instance not in where.get(host.name, []):
                continue
            if isinstance(found, JackinError):
                result = "unreachable" if isinstance(found, ConnectError) else "error"
                probes.append(Probe(host=host.name, instance=instance, target=target, port=port,
                                    result=result, detail=found.message))  # fmt: skip
            else:
                result, detail = found.get(instance, ("error", "no answer"))
                probes.append(Probe(host=host.name, instance=instance, target=target, port=port,
                                    result=result, detail=detail))  # fmt: skip
    return probes


def _verdict(code: int, err: str) -> tuple[str, str]:
    if code == 0:
        return "reachable", ""
    if "refused" in err.lower():
        return "refused", "the destination answered (port closed): not blocked"
    if "no such container" in err.lower() or "is not running" in err.lower():
        return "error", err
    return "blocked", err or f"no answer (exit {code})"


def denials(inventory: Inventory, hosts: list[SshTarget], agent: str) -> Denials:
    """Destinations the agent's policy denied in the last hour (from the policy's set), on
    every host; a host that cannot be read is one of ``errors``, the others still count."""
    names = instances(inventory, agent)
    table = hostpaths.table_name(inventory.fleet.name)
    script = "; ".join(f"echo '##{i}'; nft list set inet {table} denied_{firewall.ident(i)} 2>/dev/null" for i in names)
    # the firewall's read decides the exit (a fleet never brought up has no set: a failed read), then the gateway's
    script = f"{{ {script}; }}; rc=$?; {gateway_files(inventory.fleet.name)} exit $rc"

    def parse(out: str) -> tuple[dict[str, list[tuple[str, int, str]]], dict[str, bytes]]:
        found: dict[str, list[tuple[str, int, str]]] = {}
        current = None
        for line in out.splitlines():
            if line.startswith("##"):
                current = line[2:] if line[2:] in names else None
                if current:
                    found[current] = []
            elif current:
                for addr, port, expires in re.findall(
                    r"([0-9.]+) \. (\d+) (?:timeout \S+ )?expires (\S+?)[,\s}]", line + " "
                ):
                    found[current].append((addr, int(port), expires))
        return found, gateway_accounts(out)

    results = gather(hosts, script, parse)
    out, errors, refused = [], [], []
    for host in hosts:
        result = results[host.name]
        if isinstance(result, JackinError):
            errors.append(HostError.of(host.name, result))
            continue
        found, accounts = result
        for instance in names:
            for addr, port, expires in found.get(instance, []):
                out.append(Denial(host=host.name, instance=instance, destination=addr, port=port, expires=expires))
            account = GatewayAccount.parse(accounts.get(f"{instance}.json"))
            for d in account.denials if account else []:
                refused.append(GatewayRefusal(host=host.name, instance=instance, time=d.time, kind=d.kind,
                                              detail=d.detail))  # fmt: skip
    return Denials(denials=out, errors=errors, gateway=refused)
