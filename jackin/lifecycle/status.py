"""Fleet status: hosts × agents, read in one SSH round trip per host.

Per agent: container state, uptime, CPU (from the container's cgroup, over a window of at
least SAMPLE seconds that the read's other checks run inside, measured on the host's clock),
memory, restarts and the last error. A host that does not answer within the timeout is shown
as unreachable; it never stalls the others.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from datetime import datetime
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents import state as derivation
from jackin.agents.read import (
    Inspected,
    agent_files,
    agent_states,
    inspect_command,
    parse_agents,
)
from jackin.agents.state import AgentState
from jackin.errors import ConnectError, JackinError
from jackin.facts.cow import parse_state as parse_cow
from jackin.facts.cow import quota_lines
from jackin.facts.gateway import gateway_accounts, gateway_files
from jackin.facts.sections import read_sections
from jackin.hostpaths import (
    DAEMON_JSON,
    GUARD,
    ROOT,
    WALL_TABLE,
    WALL_UNIT,
    check_timer,
    fleet_dir,
    gateway_dir,
    gateway_unit,
    guard_unit,
    table_name,
    ttl_unit,
    unit_path,
)
from jackin.lab.providers import provider_for
from jackin.net.firewall import ident
from jackin.paths import private_dir, state_dir
from jackin.plan import placement, ttl
from jackin.plan.applied import in_place
from jackin.plan.fleet import bridge_name, instances
from jackin.plan.make import record
from jackin.plan.ttl import TtlStatus
from jackin.plan.ttl import line as ttl_text
from jackin.spec import Inventory
from jackin.spec.models import FleetSpec, NetworkPolicy, enforcement, gateway_credential
from jackin.store.ledger import Ledger
from jackin.transport.remote import gather
from jackin.transport.target import SshTarget

SAMPLE = 0.1  # seconds: the shortest window CPU is measured over (see status_command)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentStatus(_Model):
    instance: str
    container: str
    state: str
    uid: int | None = None
    network: str | None = None
    uptime: float | None = None
    cpu_percent: float | None = None
    memory: int | None = None
    memory_limit: int | None = None
    disk: int | None = None  # bytes its home references (btrfs homes with quotas only; None: not read)
    disk_limit: int | None = None  # its home's disk quota (resources.disk), bytes
    restarts: int = 0
    error: str | None = None
    egress: str | None = None  # the policy's mode
    enforcement: str | None = None  # full, or partial: reasons
    drops: int | None = None  # packets the policy dropped since it was applied
    drops_new: int | None = None  # ... since the last fleet.status
    agent_state: AgentState | None = None  # what the agent is doing (jackin/agents/state.py); None: not read


class HostStatus(_Model):
    host: str
    address: str
    port: int
    reachable: bool
    error: str | None = None
    policy_loaded: bool | None = None  # is the fleet's nftables table in the kernel?
    policy: str | None = None  # enforced, lockdown, missing, altered, unverified, failed; unknown: no guard
    guard: str | None = None  # the guard service (systemctl is-active): active, inactive, failed...
    guard_timer: str | None = None  # its backstop timer
    not_enforced: str | None = None  # why the agents' egress policy is not enforced here; None if it is
    wall: str | None = None  # the wall under every fleet's table (jackin/net/wall.py): held, missing; None: not read
    nat_bridges: list[str] | None = None  # bridges Docker masquerades (its NAT); None: not read (no iptables)
    egress_broken: str | None = None  # why allowed egress cannot work here (Docker's NAT is gone); None if it can
    ttl_timer: str | None = None  # the time-to-live's timer (systemctl is-active; inactive: none here)
    gateway: str | None = None  # the fleet's credential gateway (ActiveState); None: it has none here
    gateway_behind: str | None = None  # why it does not serve fleet.up's configuration (refused it, a listener waits)
    gateway_down: str | None = None  # why its agents' API requests fail here (the gateway is not running)
    agents: list[AgentStatus] = Field(default_factory=list)


class FleetStatus(_Model):
    fleet: str
    at: float
    hosts: list[HostStatus]
    agent_states: dict[str, int] = Field(default_factory=dict)  # agents per state, over every host read
    rollup: str | None = None  # "4 agents: 1 blocked, 2 working, 1 done"
    ttl: TtlStatus | None = None  # the time-to-live: the time left (jackin/plan/ttl.py)
    login_error: str | None = None  # why a shared login could not be refreshed (jackin/net/logins.py)
    # Where each instance lives, as the ledger records it (jackin/plan/placement.py): per host its instances, and
    # those on a host that left the inventory (instance -> host); empty: the fleet was never placed
    placement: dict[str, list[str]] = Field(default_factory=dict)
    stranded: dict[str, str] = Field(default_factory=dict)

    def missing(self, host: str) -> list[str]:
        """The instances placed on ``host`` that its read did not find (none when it was not read)."""
        found = next((h for h in self.hosts if h.host == host), None)
        if found is None or not found.reachable or found.error:
            return []
        there = {a.instance for a in found.agents}
        return [i for i in self.placement.get(host, []) if i not in there]


# CPU in nanoseconds and memory in bytes of each pid's container cgroup (v2, else v1), in one awk
# for every pid given: one line "<pid> <cpu> <mem>" each (empty fields when unreadable).
SAMPLE_AWK = r"""function one(f,  v) { if ((getline v < f) <= 0) v = ""; close(f); return v }
BEGIN { for (i = 1; i < ARGC; i++) { p = ARGV[i]; f = "/proc/" p "/cgroup"; cg = m = c = cpu = mem = ""
  while ((getline l < f) > 0) {
    if (l ~ /^0::/) cg = substr(l, 4)
    else if (sub(/^[0-9]*:memory:/, "", l)) m = l
    else if (sub(/^[0-9]*:[^:]*cpuacct[^:]*:/, "", l)) c = l }
  close(f); st = "/sys/fs/cgroup" cg "/cpu.stat"
  if ((r = (getline l < st)) >= 0) {
    for (; r > 0; r = (getline l < st))
      if (l ~ /^usage_usec/) { split(l, a, " "); cpu = sprintf("%.0f", a[2] * 1000) }
    close(st); mem = one("/sys/fs/cgroup" cg "/memory.current")
  } else {
    cpu = one("/sys/fs/cgroup/cpuacct" c "/cpuacct.usage"); mem = one("/sys/fs/cgroup/memory" m "/memory.usage_in_bytes")
  }
  print p, cpu, mem } }"""


def status_command(fleet: str, *, inside: str = "") -> str:
    """The status read: sections ``##rows`` (INSPECT_FORMAT lines), ``##1``/``##2`` (the CPU samples,
    each with its host clock ``@ns``), ``##drops`` (``nft list counters``), ``##table`` (``loaded``),
    ``##guard`` (systemctl is-active: guard service, its timer, the time-to-live's timer) and
    ``##policy`` (the guard's verify), ``##wall``, ``##nat``, and ``##cowquota`` (each home's disk use
    and quota, where the fleet's homes are on its btrfs). ``inside``: more shell run within the CPU window."""
    table, mnt = shlex.quote(table_name(fleet)), shlex.quote(fleet_dir(fleet))
    units = [guard_unit(fleet), check_timer(fleet), ttl_unit(fleet, "timer"), gateway_unit(fleet)]
    checks = (f"echo '##drops'; nft list counters table inet {table} 2>/dev/null && {{ echo '##table'; echo loaded; }}; "
              f"echo '##guard'; systemctl is-active {' '.join(map(shlex.quote, units))} 2>/dev/null; "
              # the credential gateway: its unit file (its state is ##guard's fourth line), and the configuration
              # fleet.up wrote (root's file): the gateway's own record says which one it runs
              f"echo '##gateway'; [ -f {shlex.quote(unit_path(gateway_unit(fleet)))} ] && echo LoadState=loaded; "
              f"sed -n 's/^ \"digest\": \"\\([0-9a-f]*\\)\",\\{{0,1\\}}$/digest=\\1/p' "
              f"{shlex.quote(gateway_dir(fleet))}/config.json 2>/dev/null; "
              f"echo '##policy'; [ -x {GUARD} ] && {GUARD} verify {shlex.quote(fleet)} 2>/dev/null; "
              f"echo '##wall'; [ -x {GUARD} ] && {GUARD} wall verify 2>/dev/null; "
              # Docker's NAT, which a flush of the ruleset removes and nothing restores (see egress_broken);
              # not read where Docker keeps no iptables rules (iptables or ip-masq off, its nftables backend).
              "! command -v iptables >/dev/null || grep -Eqs '\"(iptables|ip-masq)\"[[:space:]]*:[[:space:]]*false"
              f"|\"firewall-backend\"[[:space:]]*:[[:space:]]*\"nftables\"' {DAEMON_JSON} || {{ echo '##nat'; "
              "iptables -w 2 -t nat -S POSTROUTING 2>/dev/null | grep -e MASQUERADE || true; }; "
              # each home's disk use and quota, where the fleet's homes are on its btrfs (``##cowquota``)
              f"if [ \"$(stat -f -c %T {mnt} 2>/dev/null)\" = btrfs ]; then {quota_lines(mnt)}; fi; ")  # fmt: skip
    # The CPU window opens after the container rows and closes after the policy checks (and ``inside``),
    # which run inside it; only what is left of SAMPLE is slept. Each sample carries its clock (@ns):
    # CPU is over the real window.
    window = (f"smp={shlex.quote(SAMPLE_AWK)}; t1=$(date +%s%N); echo '##1'; echo \"@$t1\"; "
              f"[ -z \"$pids\" ] || awk \"$smp\" $pids; {checks}{inside}"
              f"if [ -n \"$pids\" ]; then r=$(( {int(SAMPLE * 1e9)} - $(date +%s%N) + t1 )); "
              "[ \"$r\" -le 0 ] || sleep \"$(printf '0.%09d' \"$r\")\"; "
              "echo '##2'; echo \"@$(date +%s%N)\"; awk \"$smp\" $pids; fi")  # fmt: skip
    return (f"date +%s.%N; pids=; {inspect_command(fleet)}echo '##rows'; [ -z \"$info\" ] || "
            "{ printf '%s\\n' \"$info\"; pids=$(printf '%s\\n' \"$info\" | awk -F'\\t' '$6 > 0 {print $6}'); }; "
            f"{window}")  # fmt: skip


DOCKER_DOWN = "the Docker engine does not answer (docker ps failed): the agents' state is unknown"
POLICY_STATES = ("enforced", "lockdown", "missing", "altered", "unverified", "failed")
WHY = {
    "lockdown": "the lockdown table is loaded instead of the policy (it did not load)",
    "missing": "table {table} is not loaded",
    "altered": "table {table} differs from the one loaded (a rule or chain changed)",
    "unverified": "table {table} was not loaded by jackin (nothing to compare it with)",
    "failed": "neither the policy nor the lockdown table loads",
    "unknown": "the guard is not installed",
}


def parse_host_status(output: str) -> tuple[float, list[AgentStatus], dict[str, object]]:
    """(host time, agents, the host's policy fields of HostStatus)."""
    now, agents = parse_status(output)
    sections = read_sections(output)
    guard = sections.get("guard", [])
    policy = next((s for s in sections.get("policy", []) if s in POLICY_STATES), "unknown")
    fields: dict[str, object] = {
        "policy_loaded": "\n##table\nloaded" in output, "policy": policy,
        "guard": guard[0] if guard else "unknown", "guard_timer": guard[1] if len(guard) > 1 else "unknown",
    }  # fmt: skip
    fields["ttl_timer"] = guard[2] if len(guard) > 2 else None  # the time-to-live's timer
    unit = dict(line.split("=", 1) for line in sections.get("gateway", []) if "=" in line)
    if unit.get("LoadState") == "loaded":
        fields["gateway"] = guard[3] if len(guard) > 3 else "unknown"
        fields["gateway_behind"] = _gateway_behind(unit.get("digest", ""), gateway_accounts(output).get("gateway.json"))
    wall = sections.get("wall", [])
    fields["wall"] = wall[0] if wall and wall[0] in ("held", "missing") else "missing"
    if "nat" in sections:  # "-A POSTROUTING -s 172.18.0.0/16 ! -o jk0123abcd -j MASQUERADE"
        fields["nat_bridges"] = sorted({w[i + 2] for w in map(str.split, sections["nat"]) for i in range(len(w) - 2)
                                        if w[i : i + 2] == ["!", "-o"] and "MASQUERADE" in w})  # fmt: skip
    if "docker" in sections:  # the host answered, its Docker engine did not: its agents are unknown, not absent
        fields["error"] = DOCKER_DOWN
    disk = parse_cow([], [], sections.get("cowquota", [])).disk
    for agent in agents:
        if agent.instance in disk:
            agent.disk, agent.disk_limit = disk[agent.instance]
    return now, agents, fields


def _gateway_behind(written: str, record: bytes | None) -> str | None:
    """Why the running gateway does not serve what fleet.up wrote: it refused that configuration (the one before
    stays in force: a budget not raised, an agent not served), or an agent's bridge has no listener yet."""
    try:
        found = json.loads(record or b"{}")
    except ValueError:
        return None
    if not isinstance(found, dict) or not record:
        return None
    if written and found.get("config") not in (None, written):
        return f"it runs an older configuration ({found.get('config')}, not {written}): it refused the new one"
    waiting = found.get("waiting")
    if isinstance(waiting, list) and waiting:
        return (
            "no listener yet for " + ", ".join(str(w)[:40] for w in waiting[:10]) + " (their bridges have no address)"
        )
    return None


def gateway_down(fleet: str, host: HostStatus) -> str | None:
    """Why the agents' API requests fail on this host: its credential gateway is not running, or not serving
    what fleet.up wrote (None: it is, or the fleet has none here). The agents have no other way to their APIs:
    they fail fast, nothing leaks."""
    if not host.reachable or host.gateway is None:
        return None
    see = f"journalctl -u {gateway_unit(fleet)}"
    if host.gateway != "active":
        return (f"the credential gateway ({gateway_unit(fleet)}) is {host.gateway}: its agents' API requests fail "
                f"(they have no other way out to their APIs); run fleet.up to start it, or see {see}")  # fmt: skip
    if host.gateway_behind and host.agents:
        return f"the credential gateway ({gateway_unit(fleet)}) is behind: {host.gateway_behind}; see {see}"
    return None


def not_enforced(fleet: str, host: HostStatus) -> str | None:
    """Why the egress policy of this host's agents is not enforced, or None (also with no agents)."""
    if not host.reachable or not host.agents:
        return None
    reasons = []
    if host.policy != "enforced":
        reasons.append(WHY.get(host.policy or "unknown", WHY["unknown"]).format(table=table_name(fleet)))
    if host.guard != "active":
        reasons.append(f"the guard (jackin-nft-guard-{fleet}) is {host.guard or 'unknown'}")
    if host.guard_timer != "active":
        reasons.append(f"the guard's backstop timer ({check_timer(fleet)}) is {host.guard_timer or 'unknown'}")
    if host.wall != "held":
        reasons.append(f"the wall under the policy (table {WALL_TABLE}, {WALL_UNIT}) is not held: a flush of the "
                       "host's ruleset would let the agents' traffic through until the guard reloads the table")  # fmt: skip
    return "; ".join(reasons) + " (run fleet.up to restore it)" if reasons else None


def parse_status(output: str) -> tuple[float, list[AgentStatus]]:
    lines = output.split("\n")
    now = float(lines[0]) if lines and lines[0].replace(".", "", 1).isdigit() else time.time()
    sections: dict[str, list[str]] = {"rows": []}
    current = "rows"
    for line in lines[1:]:
        if line.startswith("##"):
            current = line[2:].strip()
            sections.setdefault(current, [])
        elif line.strip():
            sections[current].append(line)
    drops = _drops(sections.get("drops", []))
    samples: dict[str, dict[str, tuple[int, int]]] = {"1": {}, "2": {}}
    clock: dict[str, int] = {}  # each sample's host clock in ns (@ns), when the read printed it
    for key in samples:
        for line in sections.get(key, []):
            if line.startswith("@") and line[1:].strip().isdigit():
                clock[key] = int(line[1:])
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                samples[key][parts[0]] = (int(parts[1]), int(parts[2]))
    agents = []
    for line in sections["rows"]:
        try:
            row = Inspected.of(line)
        except ValueError:  # not a line of docker inspect: no container (the agent read says why, if it fails)
            continue
        state, pid = row.state, str(row.pid)
        uptime = None
        if state.get("Status") == "running" and row.started and not row.started.startswith("0001"):
            uptime = max(0.0, now - _parse_time(row.started))
        cpu = mem = None
        if pid in samples["1"] and pid in samples["2"]:
            window = clock["2"] - clock["1"] if len(clock) == 2 and clock["2"] > clock["1"] else SAMPLE * 1e9
            cpu = round((samples["2"][pid][0] - samples["1"][pid][0]) / window * 100, 1)
            mem = samples["2"][pid][1]
        uid = row.user.split(":")[0]
        agents.append(
            AgentStatus(
                instance=row.instance or row.name.lstrip("/"),
                container=row.name.lstrip("/"),
                state=str(state.get("Status") or ""),
                uid=int(uid) if uid.isdigit() else None,
                network=row.network or None,
                uptime=uptime,
                cpu_percent=cpu,
                memory=mem,
                memory_limit=row.memory or None,
                restarts=row.restarts,
                error=str(state.get("Error") or "") or None,
                drops=drops.get(ident(row.instance)) if drops else None,
            )  # fmt: skip
        )
    agents.sort(key=lambda a: a.instance)
    return now, agents


def _drops(lines: list[str]) -> dict[str, int]:
    """Packets each agent's drop counter counted, by its nftables ident, from ``nft list counters``."""
    drops, name = {}, ""
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "counter":
            name = words[1]
        elif len(words) >= 2 and words[0] == "packets" and words[1].isdigit() and name.startswith("drops_"):
            drops[name[len("drops_") :]] = int(words[1])
    return drops


def _parse_time(text: str) -> float:
    # Docker prints RFC 3339 with nanoseconds: 2026-12-02T16:40:01.123456789Z
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0")[:6])


def fleet_status(fleet: str, targets: list[SshTarget], *, timeout: float = 8,
                 stale_after: Mapping[str, float] | None = None) -> FleetStatus:  # fmt: skip
    """``stale_after``: per instance, its role's seconds without a heartbeat before it is stuck."""
    parse = partial(parse_host_status_with_agents, stale_after=stale_after or {})
    results = gather(targets, status_with_agents_command(fleet), parse, timeout=timeout)
    hosts = []
    for target in targets:
        result = results[target.name]
        if isinstance(result, JackinError):  # a failed read on a host that answered is not "unreachable"
            hosts.append(HostStatus(host=target.name, address=target.address, port=target.port,
                                    reachable=not isinstance(result, ConnectError), error=result.message))  # fmt: skip
        else:
            host = HostStatus(host=target.name, address=target.address, port=target.port,
                              reachable=True, agents=result[1], **result[2])  # fmt: skip
            host.not_enforced = not_enforced(fleet, host)
            host.gateway_down = gateway_down(fleet, host)
            hosts.append(host)
    return fill_rollup(FleetStatus(fleet=fleet, at=time.time(), hosts=hosts))


# --- fleet.status: the read, with what the operator's side knows -------------------------------
#
# Here rather than in jackin.lifecycle.fleet: fleet.status loads neither the fleet API nor the models of
# fleet.up's results (snapshots, host plans, the engine's protocol) it does not need.


def keep_logins(inventory: Inventory, targets: list[SshTarget]) -> str | None:
    """Refresh the fleet's shared logins that are due, and push them (None: done, or nothing to do); else why not."""
    if not any(c.kind == "oauth" for a in inventory.fleet.agents for c in a.credentials):
        return None
    from jackin.net import logins  # only for a fleet with one: fleet.status's start stays as light

    try:
        logins.keep(inventory, targets)
    except JackinError as error:
        return error.message
    return None


def read(inventory: Inventory, *, timeout: float = 8) -> FleetStatus:
    """Hosts × agents of the fleet; never brings a lab up and never hangs on a dead host.

    Each agent also shows its egress mode and what is enforced (from the spec last applied on its
    host, which after a ``fleet.rollback`` is not the file's), and how many packets
    its policy dropped in all and since the last ``status`` (kept in the state dir).
    """
    spec = inventory.fleet
    targets = provider_for(inventory).targets(bring_up=False)
    login_error = keep_logins(inventory, targets)  # a shared login due for its refresh gets it (jackin/net/logins.py)
    result = fleet_status(spec.name, targets, timeout=timeout, stale_after=derivation.stale_after(spec))
    result.login_error = login_error
    applied_there = in_place(spec.name, [h.host for h in result.hosts])  # after a rollback: not the file's
    seen_file = private_dir(state_dir() / "fleets" / spec.name) / "drops.json"
    try:
        seen = json.loads(seen_file.read_text())
    except (OSError, ValueError):
        seen = {}
    for host in result.hosts:
        here = applied_there.get(host.host, spec)
        policies = _policies(here)
        here_agents = {name for name, instance in instances(here) if instance in {a.instance for a in host.agents}}
        through = any(gateway_credential(a) for a in here.agents if a.name in here_agents)  # this host's agents only
        if host.reachable and host.agents and host.gateway is None and through:
            host.gateway = "missing"  # its agents go through one (their spec says so), and its unit is not there
            host.gateway_down = gateway_down(spec.name, host)
        for agent in host.agents:
            policy = policies.get(agent.instance)
            if policy is not None:
                level, reasons = enforcement(policy)
                agent.egress = policy.mode
                agent.enforcement = level + (": " + "; ".join(reasons) if reasons else "")
                if host.not_enforced:
                    agent.enforcement = f"NOT ENFORCED: {host.not_enforced}"
            if agent.drops is not None:
                before = seen.get(host.host, {}).get(agent.instance, 0)
                agent.drops_new = agent.drops - before if agent.drops >= before else agent.drops
                seen.setdefault(host.host, {})[agent.instance] = agent.drops
        host.egress_broken = egress_broken(spec.name, host, policies)
    seen_file.write_text(json.dumps(seen))
    with Ledger() as ledger:  # where each instance lives, as recorded (no host read for it)
        where = placement.recorded(inventory, record(inventory, ledger))
    result.placement, result.stranded = where.hosts, where.stranded
    result.ttl = ttl.status(spec)  # the time left (from the ledger; each host's timer is in its HostStatus)
    return result


def egress_broken(fleet: str, host: HostStatus, policies: Mapping[str, NetworkPolicy]) -> str | None:
    """Why the agents with egress cannot use it on this host: Docker's NAT (masquerade) for their
    bridges is gone, as after an ``nft flush ruleset``, which removes Docker's rules with every
    other table, and nothing but a restart of Docker puts back. None if it is there, or not read."""
    if host.nat_bridges is None:
        return None
    lost = [a.instance for a in host.agents if a.state == "running" and a.instance in policies
            and policies[a.instance].mode != "none" and bridge_name(fleet, a.instance) not in host.nat_bridges]  # fmt: skip
    if not lost:
        return None
    return (f"Docker's NAT for the bridges of {', '.join(lost)} is gone (a flush of the host's ruleset removes it): "
            "their allowed egress cannot leave the host; restart Docker there (systemctl restart docker), "
            "which keeps the agents running under live-restore")  # fmt: skip


def _policies(spec: FleetSpec) -> dict[str, NetworkPolicy]:
    """Each instance's egress policy under ``spec``."""
    return {instance: spec.agent_network(next(a for a in spec.agents if a.name == agent))
            for agent, instance in instances(spec)}  # fmt: skip


def parse_host_status_with_agents(output: str, *, stale_after: Mapping[str, float]
                                  ) -> tuple[float, list[AgentStatus], dict[str, object]]:  # fmt: skip
    """``parse_host_status`` with each agent's ``agent_state`` filled in from the appended read (a read
    that does not parse leaves the host's other columns and makes its agents ``unknown``, saying why)."""
    now, agents, fields = parse_host_status(output)
    if "docker" in read_sections(output) or not agents:
        return now, agents, fields
    try:
        states = agent_states(parse_agents(output, section="rows"), stale_after)
    except JackinError as error:  # the rest of the host's status still stands
        states = {a.instance: AgentState(state="unknown", message=error.message) for a in agents}
    for agent in agents:
        agent.agent_state = states.get(agent.instance) or AgentState(
            state="unknown", message="container not in the agent state read (removed meanwhile?)"
        )
    return now, agents, fields


def status_with_agents_command(fleet: str, *, root: str = ROOT) -> str:
    """The status read with the agent-state read inside its CPU window (one round trip): the agent
    sections of ``agents_command`` but ``##agents``, whose lines are the ``##rows`` already printed."""
    agents = (f"echo '##agents-now'; date +%s; [ -z \"$info\" ] || {{ {agent_files(fleet, root=root)}}}; "
              f"{gateway_files(fleet)}")  # fmt: skip
    return status_command(fleet, inside=agents)


def fill_rollup(status: FleetStatus) -> FleetStatus:
    """``agent_states`` (count per state) and ``rollup`` (one line) over every agent read."""
    states = [a.agent_state.state for h in status.hosts for a in h.agents if a.agent_state]
    status.agent_states = {s: states.count(s) for s in derivation.STATES if s in states}
    status.rollup = derivation.rollup(states)
    return status


# --- the time-to-live ------------------------------------------------------------------


def ttl_line(status: FleetStatus) -> str | None:
    """The line fleet.status prints about the time left (None: status read without it)."""
    if status.ttl is None:
        return None
    timers = {h.host: h.ttl_timer or "unknown" for h in status.hosts if h.reachable} if status.ttl.ttl else None
    return ttl_text(status.fleet, status.ttl, timers)
