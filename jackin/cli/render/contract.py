"""The launch contract (jackin/plan/contract.py), readable: per agent, the fleet's terms, the summary, the change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from jackin.cli.render.units import duration, size

if TYPE_CHECKING:  # annotations only
    from jackin.plan.terms import AgentContract, FleetContract, NetworkTerm


def contract_tables(contract: FleetContract) -> list[Table]:
    """The launch contract, readable: one table per agent, then the fleet's terms (same on every host)."""
    return [*(_agent_contract(contract, a) for a in contract.agents), _fleet_contract(contract)]


def _agent_contract(contract: FleetContract, agent: AgentContract) -> Table:
    table = Table(title=f"{agent.instance} ({agent.role}, {agent.image}) on fleet {contract.fleet}",
                  title_justify="left", show_header=False)  # fmt: skip
    table.add_column("term", style="bold")
    table.add_column("value")
    i = agent.identity
    where = ", ".join(agent.hosts) or "not placed yet (fleet.up places it by the hosts' capacity)"
    table.add_row("host" if agent.placement == "spread" else "hosts (placement each)", where)
    table.add_row("identity", f"user {i.user} (uid {i.uid}, gid {i.gid}); home {i.home}; workspace {i.workspace}")
    table.add_row("mounts", "\n".join(f"{m.source} -> {m.target} ({m.mode}"
                                      f"{', acknowledged credential-like' if m.acknowledged_credentials else ''})"
                                      for m in agent.mounts))  # fmt: skip
    table.add_row("credentials", "\n".join(f"{c.name}: file {c.container_path}, mode {c.mode}, owner {c.owner}"
                                           + (f"; read from {c.source_path}" if c.source_path else "")
                                           for c in agent.credentials) or "none")  # fmt: skip
    if agent.work is not None:
        w = agent.work
        task = f"the file {w.task_path}" if w.task_path else "text in the spec"
        table.add_row("work", f"{w.repo} at {w.ref}, on branch {w.branch}; task: {task}")
    table.add_row("network", Text(_network_line(agent.network)))
    table.add_row("docker", f"{agent.docker.access}: {agent.docker.detail}"
                            + "".join(f"\n{line}" for line in agent.docker.apparmor))  # fmt: skip
    r = agent.resources
    disk = f"{size(r.disk)} disk (btrfs quota)" if r.disk is not None else "no disk quota"
    table.add_row("resources", f"{r.cpus:g} CPU, {size(r.memory)} memory (no swap), {r.pids} pids, {disk}; "
                               + ", ".join(r.hardening))  # fmt: skip
    table.add_row("residual risks", Text("\n".join(f"- {risk}" for risk in agent.residual_risks), style="yellow"))
    return table


def _network_line(net: NetworkTerm) -> str:
    parts = [f"mode {net.mode}"]
    if net.allowlist:
        parts.append("allow " + ", ".join(net.allowlist))
    if net.publish:
        parts.append("published " + ", ".join(f"{p.bind}:{p.host_port}->{p.port}/{p.protocol}" for p in net.publish))
    enforced = net.enforcement + (f" ({'; '.join(net.enforcement_reasons)})" if net.enforcement_reasons else "")
    return "; ".join(parts) + f"; enforcement {enforced}"


def _fleet_contract(contract: FleetContract) -> Table:
    table = Table(title=f"fleet {contract.fleet}: on every host", title_justify="left", show_header=False)
    table.add_column("term", style="bold")
    table.add_column("value")
    e, rec, down = contract.host_effects, contract.recovery, contract.teardown
    table.add_row("packages", "\n".join(f"{p.name} (when {p.when})" for p in e.packages))
    table.add_row("services", ", ".join(e.services))
    table.add_row("firewall", ", ".join(e.firewall_tables) + "; daemon.json keys " + ", ".join(e.daemon_json_keys))
    table.add_row("files", "\n".join(e.files))
    table.add_row("directories", "\n".join(e.directories))
    table.add_row("recovery", f"{rec.engine}, keep {rec.keep}, before_changes {str(rec.before_changes).lower()}, "
                              f"before_teardown {str(rec.before_teardown).lower()}, checkpoints {rec.checkpoints}; "
                              f"last snapshot {rec.last_snapshot or 'none'}\npoint in time: {rec.point_in_time}"
                              + "".join(f"\n{n}" for n in rec.notes))  # fmt: skip
    ttl = "none" if down.ttl is None else (f"{duration(down.ttl)} from the first fleet.up (enforced on each "
                                            "host: a systemd timer stops the agents)")  # fmt: skip
    table.add_row("teardown", f"ttl {ttl}; fleet.down removes {', '.join(down.removes)}; keeps "
                              f"{', '.join(down.keeps)}; final snapshot: {down.final_snapshot}")  # fmt: skip
    if contract.hosts:
        table.add_row("hosts", "\n".join(f"{h.apparmor_line()} (kernel {h.kernel or '?'})" for h in contract.hosts))
    table.add_row("residual risks", Text("\n".join(f"- {r}" for r in contract.residual_risks), style="yellow"))
    return table


def contract_summary(contract: FleetContract) -> Table:
    """One line per agent: who it runs as, what it sees, where it may connect, what it holds."""
    table = Table(title=f"launch contract of fleet {contract.fleet} (schema {contract.schema_version})",
                  title_justify="left")  # fmt: skip
    for column in ("agent", "user (uid)", "mounts", "credentials", "egress", "docker", "limits", "risks"):
        table.add_column(column, overflow="fold")
    for a in contract.agents:
        egress = (
            a.network.mode
            + (f" {len(a.network.allowlist)} entries" if a.network.allowlist else "")
            + (f", {len(a.network.publish)} published" if a.network.publish else "")
        )
        mounts = ", ".join(f"{m.target} {m.mode}" for m in a.mounts)
        table.add_row(a.instance, f"{a.identity.user} ({a.identity.uid})", mounts,
                      ", ".join(c.name for c in a.credentials) or "-", f"{egress} ({a.network.enforcement})",
                      a.docker.access, f"{a.resources.cpus:g} CPU, {size(a.resources.memory)}, {a.resources.pids} pids"
                      + (f", {size(a.resources.disk)} disk" if a.resources.disk is not None else ""),
                      str(len(a.residual_risks)))  # fmt: skip
    return table


def contract_changes(changes: list[str], *, first: bool) -> Text:
    """The difference from the last applied contract, one line each."""
    if first:
        return Text("no launch contract was applied to this fleet before: all of the above is new", style="yellow")
    return Text("the launch contract changed since the last fleet.up:\n" + "\n".join(f"  {c}" for c in changes),
                style="yellow")  # fmt: skip
