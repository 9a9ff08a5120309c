"""Fleet status: hosts × agents, read in one SSH round trip per host.

Per agent: container state, uptime, CPU (from the container's cgroup, over a window of at
least SAMPLE seconds that the read's other checks run inside, measured on the host's clock),
memory, restarts and the last error. A host that does not answer within the timeout is shown
as unreachable; it never stalls the others.
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
import time
from collections.abc import Mapping
from datetime import datetime
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from jackin import agent_state as derivation
from jackin.agent_state import AgentFacts, AgentState
from jackin.errors import ConnectError, JackinError
from jackin.firewall import GUARD, ident
from jackin.plan import ROOT
from jackin.remote import gather
from jackin.ssh import SshTarget
from jackin.ttl import TtlStatus
from jackin.ttl import line as ttl_text

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
    restarts: int = 0
    error: str | None = None
    egress: str | None = None  # the policy's mode
    enforcement: str | None = None  # full, or partial: reasons
    drops: int | None = None  # packets the policy dropped since it was applied
    drops_new: int | None = None  # ... since the last fleet.status
    agent_state: AgentState | None = None  # what the agent is doing (jackin/agent_state.py); None: not read


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
    ttl_timer: str | None = None  # the time-to-live's timer (systemctl is-active; inactive: none here)
    agents: list[AgentStatus] = Field(default_factory=list)


class FleetStatus(_Model):
    fleet: str
    at: float
    hosts: list[HostStatus]
    agent_states: dict[str, int] = Field(default_factory=dict)  # agents per state, over every host read
    rollup: str | None = None  # "4 agents: 1 blocked, 2 working, 1 done"
    ttl: TtlStatus | None = None  # the time-to-live: the time left (jackin/ttl.py)


def status_command(fleet: str) -> str:
    table = shlex.quote(f"jackin-{fleet}")
    drops = (f"echo '##drops'; nft list counters table inet {table} 2>/dev/null | "
             "awk '/counter drops_/{n=$2} /packets/{print n, $2}'; "
             f"echo '##table'; nft list table inet {table} >/dev/null 2>&1 && echo loaded; "
             f"echo '##guard'; systemctl is-active {shlex.quote(f'jackin-nft-guard-{fleet}.service')} "
             f"{shlex.quote(f'jackin-nft-check-{fleet}.timer')} 2>/dev/null; "
             f"echo '##policy'; [ -x {GUARD} ] && {GUARD} verify {shlex.quote(fleet)} 2>/dev/null; ")  # fmt: skip
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    fmt = (
        "{{.Id}}|{{.Name}}|{{.State.Status}}|{{.State.StartedAt}}|{{.RestartCount}}|"
        '{{index .Config.Labels "jackin.agent"}}|{{.Config.User}}|{{.HostConfig.NetworkMode}}|'
        "{{.HostConfig.Memory}}|{{.State.Pid}}|{{.State.Error}}"
    )
    # CPU in nanoseconds and memory in bytes from the container's cgroup (v2, else v1).
    sample = (
        "for p in $pids; do cg=$(sed -n 's/^0:://p' /proc/$p/cgroup 2>/dev/null); "
        'if [ -f "/sys/fs/cgroup$cg/cpu.stat" ]; then '
        "cpu=$(awk '/^usage_usec/{printf \"%.0f\", $2*1000}' /sys/fs/cgroup$cg/cpu.stat); "
        "mem=$(cat /sys/fs/cgroup$cg/memory.current); "
        "else m=$(sed -n 's/^[0-9]*:memory://p' /proc/$p/cgroup 2>/dev/null); "
        "c=$(sed -n 's/^[0-9]*:[^:]*cpuacct[^:]*://p' /proc/$p/cgroup 2>/dev/null); "
        "cpu=$(cat /sys/fs/cgroup/cpuacct$c/cpuacct.usage 2>/dev/null); "
        "mem=$(cat /sys/fs/cgroup/memory$m/memory.usage_in_bytes 2>/dev/null); fi; "
        'echo "$p $cpu $mem"; done'
    )
    # The CPU window opens after the container rows and closes after the policy checks, which run inside
    # it; only what is left of SAMPLE is slept. Each sample carries its clock (@ns): CPU is over the real window.
    window = (f"t1=$(date +%s%N); echo '##1'; echo \"@$t1\"; {sample}; {drops}{ttl_section(fleet)}"
              f"if [ -n \"$pids\" ]; then r=$(( {int(SAMPLE * 1e9)} - $(date +%s%N) + t1 )); "
              "[ \"$r\" -le 0 ] || sleep \"$(printf '0.%09d' \"$r\")\"; "
              f"echo '##2'; echo \"@$(date +%s%N)\"; {sample}; fi")  # fmt: skip
    return (
        f"date +%s.%N; pids=; echo '##rows'; if ids=$(docker ps -aq --no-trunc --filter {label}); then "
        f"if [ -n \"$ids\" ]; then rows=$(docker inspect --format '{fmt}' $ids); printf '%s\\n' \"$rows\"; "
        "pids=$(printf '%s\\n' \"$rows\" | awk -F'|' '$10 > 0 {print $10}'); fi; "
        f"else echo '##docker'; echo down; fi; {window}"
    )


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
    sections = _sections(output)
    guard = sections.get("guard", [])
    policy = next((s for s in sections.get("policy", []) if s in POLICY_STATES), "unknown")
    fields: dict[str, object] = {
        "policy_loaded": "\n##table\nloaded" in output, "policy": policy,
        "guard": guard[0] if guard else "unknown", "guard_timer": guard[1] if len(guard) > 1 else "unknown",
    }  # fmt: skip
    timer = sections.get("ttltimer", [])
    fields["ttl_timer"] = timer[0] if timer else None
    if "docker" in sections:  # the host answered, its Docker engine did not: its agents are unknown, not absent
        fields["error"] = DOCKER_DOWN
    return now, agents, fields


def not_enforced(fleet: str, host: HostStatus) -> str | None:
    """Why the egress policy of this host's agents is not enforced, or None (also with no agents)."""
    if not host.reachable or not host.agents:
        return None
    reasons = []
    if host.policy != "enforced":
        reasons.append(WHY.get(host.policy or "unknown", WHY["unknown"]).format(table=f"jackin-{fleet}"))
    if host.guard != "active":
        reasons.append(f"the guard (jackin-nft-guard-{fleet}) is {host.guard or 'unknown'}")
    if host.guard_timer != "active":
        reasons.append(f"the guard's backstop timer (jackin-nft-check-{fleet}.timer) is {host.guard_timer or 'unknown'}")
    return "; ".join(reasons) + " (run fleet.up to restore it)" if reasons else None


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("##"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    return sections


def parse_status(output: str) -> tuple[float, list[AgentStatus]]:
    lines = output.splitlines()
    now = float(lines[0]) if lines and lines[0].replace(".", "", 1).isdigit() else time.time()
    sections: dict[str, list[str]] = {"rows": []}
    current = "rows"
    for line in lines[1:]:
        if line.startswith("##"):
            current = line[2:].strip()
            sections.setdefault(current, [])
        elif line.strip():
            sections[current].append(line)
    rows = [line.split("|", 10) for line in sections["rows"] if line.count("|") >= 10]
    drops = {}
    for line in sections.get("drops", []):
        name, _, count = line.partition(" ")
        if name.startswith("drops_") and count.strip().isdigit():
            drops[name[len("drops_") :]] = int(count)
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
    for _id, name, state, started, restarts, instance, user, network, memory, pid, error in rows:
        uptime = None
        if state == "running" and started and not started.startswith("0001"):
            uptime = max(0.0, now - _parse_time(started))
        cpu = mem = None
        if pid in samples["1"] and pid in samples["2"]:
            window = clock["2"] - clock["1"] if len(clock) == 2 and clock["2"] > clock["1"] else SAMPLE * 1e9
            cpu = round((samples["2"][pid][0] - samples["1"][pid][0]) / window * 100, 1)
            mem = samples["2"][pid][1]
        agents.append(
            AgentStatus(
                instance=instance or name.lstrip("/"), container=name.lstrip("/"), state=state,
                uid=int(user.split(":")[0]) if user.split(":")[0].isdigit() else None,
                network=network or None, uptime=uptime, cpu_percent=cpu, memory=mem,
                memory_limit=int(memory) or None if memory.isdigit() else None,
                restarts=int(restarts or 0), error=error or None,
                drops=drops.get(ident(instance)) if drops else None,
            )  # fmt: skip
        )
    agents.sort(key=lambda a: a.instance)
    return now, agents


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
            hosts.append(host)
    return fill_rollup(FleetStatus(fleet=fleet, at=time.time(), hosts=hosts))


# --- agent state (issue 10): what each agent is doing ---------------------------------------------
#
# Appended to the status read (one round trip per host) and read alone by fleet.wait each poll.
# Per container: ``docker inspect`` (state, exit code, restarts, health with its last output, one
# line of tab-separated JSON: Docker escapes every tab and newline), and the status file read AS THE
# AGENT (setpriv to the container's uid:gid, never root following the agent's path), capped, base64
# so that NULs, newlines or a "##" line in it cannot reach the section parser. Derivation: jackin/agent_state.py.

STATUS_FILE = ".jackin/status.json"  # the status file, under the agent's workspace (/workspace in its container)
AGENT_FORMAT = ('{{.Id}}\t{{.RestartCount}}\t{{json .Config.User}}\t{{json (index .Config.Labels "jackin.agent")}}'
                "\t{{json .State}}")  # fmt: skip


def agents_command(fleet: str, *, root: str = ROOT) -> str:
    """The agent-state read of ``fleet``'s containers on one host: sections ``##agents-now`` (the
    host's clock), ``##agents`` (one inspect line per container) and ``##agent-files`` (``<id> <base64
    of the status file's first MAX_STATUS+1 bytes>`` or ``<id> -``). A uid or gid below 1000, or an
    instance label that is not a plain name, is never read (``-``)."""
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    path = f'{shlex.quote(f"{root}/{fleet}")}/"$inst"/workspace/{STATUS_FILE}'
    plain = "'{{.Id}} {{.Config.User}} {{index .Config.Labels \"jackin.agent\"}}'"
    return (
        "echo '##agents-now'; date +%s; "
        f"ids=$(docker ps -aq --no-trunc --filter {label}) || {{ echo '##docker'; echo down; exit 0; }}; "
        "[ -n \"$ids\" ] || exit 0; echo '##agents'; "
        f"docker inspect --format {shlex.quote(AGENT_FORMAT)} $ids; echo '##agent-files'; "
        f"docker inspect --format {plain} $ids | while read -r id user inst rest; do "
        'u=${user%%:*}; g=${user#*:}; ok=1; '
        'case "$u" in ""|*[!0-9]*) ok=;; esac; case "$g" in ""|*[!0-9]*) ok=;; esac; '
        'case "$inst" in ""|-*|*[!a-z0-9-]*) ok=;; esac; '
        '{ [ -n "$ok" ] && [ "$u" -ge 1000 ] && [ "$g" -ge 1000 ]; } || { echo "$id -"; continue; }; '
        f'b=$(setpriv --reuid="$u" --regid="$g" --clear-groups -- head -c {derivation.MAX_STATUS + 1} -- {path} '
        '2>/dev/null | base64 -w0); echo "$id ${b:--}"; done'
    )


def parse_agents(output: str) -> dict[str, AgentFacts]:
    """Per instance, the facts ``agents_command`` printed (none when the fleet has no container there).
    A line Docker printed that does not parse fails the host's read (JackinError): it is not the agent's."""
    sections = _sections(output)
    now_lines = sections.get("agents-now", [])
    if len(now_lines) != 1 or not now_lines[0].isdigit():
        raise JackinError(f"agent state read: no host clock in the output ({now_lines[:1]!r})")
    now = float(now_lines[0])
    files: dict[str, bytes | None] = {}
    for line in sections.get("agent-files", []):
        cid, _, data = line.partition(" ")
        try:
            files[cid] = None if data == "-" else base64.b64decode(data, validate=True) or None
        except (binascii.Error, ValueError):
            raise JackinError(f"agent state read: status file of container {cid[:12]} is not base64") from None
    found: dict[str, AgentFacts] = {}
    for line in sections.get("agents", []):
        instance, facts = _agent_row(line, now, files)
        if instance:
            found[instance] = facts
    return found


def _agent_row(line: str, now: float, files: Mapping[str, bytes | None]) -> tuple[str | None, AgentFacts]:
    """(instance, facts) of one ``AGENT_FORMAT`` line."""
    try:
        cid, restarts, user, label, state_json = line.split("\t")
        instance, state, user = json.loads(label), json.loads(state_json), json.loads(user)
        health = state.get("Health") or {}
        log = health.get("Log") or []
        facts = AgentFacts(
            container=str(state["Status"]), exit_code=int(state["ExitCode"]), restarts=int(restarts),
            health=str(health.get("Status") or "none"), now=now, status=files.get(cid), user=str(user or "") or None,
            health_output=str(log[-1].get("Output", "")) if log else None,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise JackinError(f"agent state read: a line of docker inspect does not parse ({type(error).__name__})") from None
    return (instance if isinstance(instance, str) and instance else None), facts


def agent_states(facts: Mapping[str, AgentFacts], stale_after: Mapping[str, float]
                 ) -> dict[str, AgentState]:  # fmt: skip
    """Each instance's derived state, with its role's ``stale_after`` (default derivation.STALE_AFTER)."""
    return {i: derivation.derive(f, stale_after=stale_after.get(i, derivation.STALE_AFTER)) for i, f in facts.items()}


def parse_host_status_with_agents(output: str, *, stale_after: Mapping[str, float]
                                  ) -> tuple[float, list[AgentStatus], dict[str, object]]:  # fmt: skip
    """``parse_host_status`` with each agent's ``agent_state`` filled in from the appended read (a read
    that does not parse leaves the host's other columns and makes its agents ``unknown``, saying why)."""
    now, agents, fields = parse_host_status(output)
    if "docker" in _sections(output) or not agents:
        return now, agents, fields
    try:
        states = agent_states(parse_agents(output), stale_after)
    except JackinError as error:  # the rest of the host's status still stands
        states = {a.instance: AgentState(state="unknown", message=error.message) for a in agents}
    for agent in agents:
        agent.agent_state = states.get(agent.instance) or AgentState(
            state="unknown", message="container not in the agent state read (removed meanwhile?)")
    return now, agents, fields


def status_with_agents_command(fleet: str) -> str:
    """The status read with the agent-state read appended (one round trip)."""
    return f"{status_command(fleet)}\n{agents_command(fleet)}"


def fill_rollup(status: FleetStatus) -> FleetStatus:
    """``agent_states`` (count per state) and ``rollup`` (one line) over every agent read."""
    states = [a.agent_state.state for h in status.hosts for a in h.agents if a.agent_state]
    status.agent_states = {s: states.count(s) for s in derivation.STATES if s in states}
    status.rollup = derivation.rollup(states)
    return status


# --- the time-to-live ------------------------------------------------------------------


def ttl_section(fleet: str) -> str:
    """``##ttltimer``: the state of the fleet's time-to-live timer on the host (inactive: none)."""
    return f"echo '##ttltimer'; systemctl is-active {shlex.quote(f'jackin-ttl-{fleet}.timer')} 2>/dev/null; "


def ttl_line(status: FleetStatus) -> str | None:
    """The line fleet.status prints about the time left (None: status read without it)."""
    if status.ttl is None:
        return None
    timers = {h.host: h.ttl_timer or "unknown" for h in status.hosts if h.reachable} if status.ttl.ttl else None
    return ttl_text(status.fleet, status.ttl, timers)
