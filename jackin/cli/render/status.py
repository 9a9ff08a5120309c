"""``fleet.status``: hosts × agents, then the agents' states (blocked first) and the roll-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from jackin.agents.state import order
from jackin.cli.render.agent import agent_state_text, said
from jackin.cli.render.units import duration, size
from jackin.lifecycle.status import ttl_line  # the time-to-live's time left (jackin/plan/ttl.py)

if TYPE_CHECKING:
    from jackin.lifecycle.status import FleetStatus


def status_table(status: FleetStatus) -> Table:
    table = Table(title=f"fleet {status.fleet}", title_justify="left")
    for column, justify in (("host", "left"), ("agent", "left"), ("state", "left"), ("uptime", "right"),
                            ("cpu", "right"), ("memory", "right"), ("disk", "right"), ("restarts", "right"), ("egress", "left"),
                            ("dropped", "right"), ("last error", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for host in status.hosts:
        if not host.reachable:
            table.add_row(host.host, "-", Text("unreachable", style="bold red"), "-", "-", "-", "-", "-", "-", "-",
                          Text(host.error or "", style="red"))  # fmt: skip
            continue
        if host.error:  # it answered, but its read failed (e.g. Docker is down): its agents are unknown
            table.add_row(host.host, "-", Text("unknown", style="bold red"), "-", "-", "-", "-", "-", "-", "-",
                          Text(host.error, style="red"))  # fmt: skip
            continue
        missing = status.missing(host.host)
        if not host.agents and not missing:
            table.add_row(host.host, "-", Text("no agents", style="yellow"), "-", "-", "-", "-", "-", "-", "-", "")
        for instance in missing:  # placed here, and no container: fleet.up makes it
            table.add_row(host.host, instance, Text("missing", style="bold red"), "-", "-", "-", "-", "-", "-", "-",
                          Text("placed here, no container (run fleet.up)", style="red"))  # fmt: skip
        for agent in host.agents:
            style = "green" if agent.state == "running" else "red"
            memory = size(agent.memory) + (f" / {size(agent.memory_limit)}" if agent.memory_limit else "")
            cpu = "-" if agent.cpu_percent is None else f"{agent.cpu_percent:.1f}%"
            disk = "-" if agent.disk is None else size(agent.disk) + (
                f" / {size(agent.disk_limit)}" if agent.disk_limit else "")  # fmt: skip
            egress = "-" if agent.egress is None else f"{agent.egress} ({(agent.enforcement or '').split(':')[0]})"
            dropped = "-" if agent.drops is None else f"{agent.drops} (+{agent.drops_new or 0})"
            table.add_row(host.host, agent.instance, Text(agent.state, style=style), duration(agent.uptime), cpu,
                          memory, disk, str(agent.restarts), egress, dropped, Text(agent.error or "", style="red"))  # fmt: skip
    reachable = sum(h.reachable for h in status.hosts)
    running = sum(a.state == "running" for h in status.hosts for a in h.agents)
    total = sum(len(h.agents) for h in status.hosts)
    table.caption = f"{reachable}/{len(status.hosts)} hosts reachable, {running}/{total} agents running"
    guards = [f"{h.host} {h.guard}" for h in status.hosts if h.guard]  # the egress policy's guard, per host
    if guards:
        table.caption += "\npolicy guard: " + ", ".join(guards)
    for host in (h for h in status.hosts if h.not_enforced):
        table.caption += f"\n{host.host}: egress policy NOT ENFORCED: {host.not_enforced}"
    for host in (h for h in status.hosts if h.gateway_down):
        table.caption += f"\n{host.host}: credential gateway DOWN: {host.gateway_down}"
    for host in (h for h in status.hosts if h.egress_broken):
        table.caption += f"\n{host.host}: egress BROKEN: {host.egress_broken}"
    for instance, where in status.stranded.items():
        table.caption += (f"\n{instance}: on {where}, which left the inventory (fleet.up leaves it alone): "
                          f"inv agent.move {instance} --to HOST")  # fmt: skip
    if status.login_error:
        table.caption += f"\nshared login NOT REFRESHED: {status.login_error}"
    if ttl_line(status):
        table.caption += f"\n{ttl_line(status)}"
    return table


def agents_table(status: FleetStatus) -> Table:
    """Every agent read, blocked first (then stuck, failed, unknown, working, idle, done), with its
    message or question; the caption is the fleet's roll-up."""
    table = Table(title=f"fleet {status.fleet}: agents", title_justify="left")
    rows = [(h.host, a.instance, a.agent_state) for h in status.hosts for a in h.agents if a.agent_state]
    usage = any(state.usage for _, _, state in rows)  # a column only when some runtime reported its usage
    gateway = any(state.gateway for _, _, state in rows)  # and when some agent goes through the credential gateway
    columns = ("state", "host", "agent", "heartbeat", *(("usage",) if usage else ()), *(("gateway",) if gateway else ()),
               "message / question")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right" if column == "heartbeat" else "left")
    for host, instance, state in sorted(rows, key=lambda r: (order(r[2].state), r[0], r[1])):
        age = "-" if state.heartbeat_age is None else f"{duration(state.heartbeat_age)} ago"
        used = (state.usage.label if state.usage else "-",) if usage else ()
        counted = (state.gateway.summary if state.gateway else "-",) if gateway else ()
        table.add_row(agent_state_text(state.state), host, instance, age, *used, *counted,
                      said(state.message, state.question))  # fmt: skip
    table.caption = status.rollup or "0 agents"
    return table


def status_view(status: FleetStatus) -> Group:
    """fleet.status: the hosts × agents table, then the agents' states (blocked first) and roll-up."""
    return Group(status_table(status), agents_table(status))
