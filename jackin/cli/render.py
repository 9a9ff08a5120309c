"""Rendering for the CLI: the library returns data, only this module prints (rich)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jackin.errors import JackinError, SpecError
from jackin.lab import LabStatus

if TYPE_CHECKING:  # annotations only: the engine's protocol is not loaded by commands that run no engine
    from rich.console import Group, RenderableType

    from jackin.agents.answer import Answered
    from jackin.agents.wait import Change, WaitResult
    from jackin.engine import Event, RunResult
    from jackin.lifecycle.fleet import CleanCheck, PlanResult
    from jackin.lifecycle.rollback import PlannedStep, SpecRun
    from jackin.lifecycle.status import FleetStatus
    from jackin.net.probes import Denial, Probe
    from jackin.plan.contract import AgentContract, FleetContract, NetworkTerm
    from jackin.snapshots.models import AgentSnapshot, DiffResult, RestoreResult, SnapshotRecord
    from jackin.snapshots.moves import PullResult, PushResult
    from jackin.work.collect import CollectReport, Review


def _console(*, stderr: bool = False) -> Console:
    """A terminal gets its own width; a pipe or file gets wide lines, never truncated cells."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=200)
    return console


out = _console()
err = _console(stderr=True)


def log(message: str) -> None:
    err.print(Text("· ", style="dim") + Text(message), soft_wrap=True)


def error(exc: JackinError) -> None:
    """One clear message: what failed, where, and what to do next."""
    err.print(Text(f"error: {exc}", style="bold red"), soft_wrap=True)
    if isinstance(exc, SpecError):
        for line in exc.problems:  # one line per problem, never wrapped: scripts grep these
            err.print(Text(f"  {line}"), soft_wrap=True)
    if exc.hint:
        err.print(Text(f"hint: {exc.hint}", style="yellow"), soft_wrap=True)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def lab_table(status: LabStatus) -> Table:
    table = Table(title=f"lab {status.name}  ({status.image})", title_justify="left")
    for column in ("host", "container", "state", "ssh", "lab address"):
        table.add_column(column)
    for host in status.hosts:
        state = Text(host.state, style="green" if host.state == "running" else "red")
        table.add_row(host.name, host.container, state, f"{host.user}@{host.address}:{host.port}", host.lab_ip or "-")
    if status.service:
        service = status.service
        ports = ",".join(map(str, service.ports))
        where = f"{service.address}:{ports}" if service.address else "-"
        if service.public_address:
            where += f" and {service.public_address}:{ports}"
        table.add_row("(test service)", service.container, service.state, "-", where)
    table.caption = f"key {status.directory}/id_ed25519 · known_hosts {status.directory}/known_hosts"
    return table


class Progress:
    """A live per-host line while the engine runs."""

    def __init__(self, hosts: list[str]) -> None:
        self.lines: dict[str, Text | str] = {h: "waiting" for h in hosts}

    def __rich__(self) -> Table:
        table = Table.grid(padding=(0, 2))
        for host, line in self.lines.items():
            table.add_row(Text(host, style="bold"), line)
        return table

    def update(self, event: Event) -> None:
        if event.event == "start":
            for host in event.data.get("hosts", []):
                self.lines.setdefault(host, "connecting")
        if event.host is None:
            return
        op, error = event.op or "", event.error or ""  # plain text: errors often hold [brackets]
        text = {
            "connected": Text("connected"),
            "connect_error": Text(f"cannot connect: {error}", style="red"),
            "facts": Text("facts gathered"),
            "op_start": Text(f"{op} …"),
            "op_ok": Text(f"{op} ok"),
            "op_error": Text(f"{op} failed{': ' + error if error else ''}", style="red"),
            "host_done": Text("done", style="green")
            if event.result and event.result.ok
            else Text("failed", style="red"),
        }.get(event.event)
        if text:
            self.lines[event.host] = text


@contextmanager
def progress(hosts: list[str] | None = None) -> Iterator[Progress]:
    view = Progress(hosts or [])
    with Live(view, console=err, refresh_per_second=8, transient=True, redirect_stdout=False) as live:
        yield view
        live.refresh()


# --- fleet -------------------------------------------------------------------


def up_table(result: RunResult, *, title: str, agents: int | None = None) -> Table:
    """host, status, agents, changed, failed, time: the summary of a fleet run."""
    table = Table(title=title, title_justify="left")
    for column, justify in (("host", "left"), ("status", "left"), ("agents", "right"), ("changed", "right"),
                            ("failed", "right"), ("time", "right"), ("detail", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for host in result.hosts:
        status = Text("ok", style="green") if host.ok else Text("FAILED", style="bold red")
        count = host.facts.get("agents", agents)
        detail = host.error or " ".join(str(host.facts[k]) for k in ("distro", "kernel") if k in host.facts)
        table.add_row(host.host, status, "-" if count is None else str(count), str(host.changed), str(host.failed),
                      f"{host.elapsed:.1f}s", Text(detail, style="red" if host.error else ""))  # fmt: skip
    verb = "would change" if result.dry_run else "changed"
    changed = sum(h.changed for h in result.hosts)
    table.caption = f"{len(result.succeeded)} ok, {len(result.failed)} failed, {changed} {verb}, {result.elapsed:.1f}s"
    return table


def _duration(seconds: float | None) -> str:
    """3d4h, 2h5m, 7m30s, 42s."""
    if seconds is None:
        return "-"
    s = int(seconds)
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{s % 60}s"
    return f"{s}s"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return str(value)


def status_table(status: FleetStatus) -> Table:
    table = Table(title=f"fleet {status.fleet}", title_justify="left")
    for column, justify in (("host", "left"), ("agent", "left"), ("state", "left"), ("uptime", "right"),
                            ("cpu", "right"), ("memory", "right"), ("restarts", "right"), ("egress", "left"),
                            ("dropped", "right"), ("last error", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for host in status.hosts:
        if not host.reachable:
            table.add_row(host.host, "-", Text("unreachable", style="bold red"), "-", "-", "-", "-", "-", "-",
                          Text(host.error or "", style="red"))  # fmt: skip
            continue
        if host.error:  # it answered, but its read failed (e.g. Docker is down): its agents are unknown
            table.add_row(host.host, "-", Text("unknown", style="bold red"), "-", "-", "-", "-", "-", "-",
                          Text(host.error, style="red"))  # fmt: skip
            continue
        if not host.agents:
            table.add_row(host.host, "-", Text("no agents", style="yellow"), "-", "-", "-", "-", "-", "-", "")
        for agent in host.agents:
            style = "green" if agent.state == "running" else "red"
            memory = _bytes(agent.memory) + (f" / {_bytes(agent.memory_limit)}" if agent.memory_limit else "")
            cpu = "-" if agent.cpu_percent is None else f"{agent.cpu_percent:.1f}%"
            egress = "-" if agent.egress is None else f"{agent.egress} ({(agent.enforcement or '').split(':')[0]})"
            dropped = "-" if agent.drops is None else f"{agent.drops} (+{agent.drops_new or 0})"
            table.add_row(host.host, agent.instance, Text(agent.state, style=style), _duration(agent.uptime), cpu,
                          memory, str(agent.restarts), egress, dropped, Text(agent.error or "", style="red"))  # fmt: skip
    reachable = sum(h.reachable for h in status.hosts)
    running = sum(a.state == "running" for h in status.hosts for a in h.agents)
    total = sum(len(h.agents) for h in status.hosts)
    table.caption = f"{reachable}/{len(status.hosts)} hosts reachable, {running}/{total} agents running"
    guards = [f"{h.host} {h.guard}" for h in status.hosts if h.guard]  # the egress policy's guard, per host
    if guards:
        table.caption += "\npolicy guard: " + ", ".join(guards)
    for host in (h for h in status.hosts if h.not_enforced):
        table.caption += f"\n{host.host}: egress policy NOT ENFORCED: {host.not_enforced}"
    from jackin.lifecycle.status import ttl_line  # the time-to-live's time left (jackin/plan/ttl.py)

    if ttl_line(status):
        table.caption += f"\n{ttl_line(status)}"
    return table


def clean_table(checks: list[CleanCheck]) -> Table:
    table = Table(title="clean check", title_justify="left")
    table.add_column("host")
    table.add_column("result")
    table.add_column("left behind")
    for check in checks:
        if check.error:
            table.add_row(check.host, Text("UNKNOWN", style="bold red"), Text(check.error, style="red"))
        elif check.clean:
            table.add_row(check.host, Text("clean", style="green"), "nothing")
        else:
            left = "; ".join(f"{kind}: {', '.join(items)}" for kind, items in check.leftovers.items())
            table.add_row(check.host, Text("LEFTOVERS", style="bold red"), left)
    return table


def watch(render: Callable[[], RenderableType], *, every: float = 2.0) -> None:
    """Refresh ``render()`` in place until Ctrl-C, which ends it cleanly at any moment, the first
    render included (its SSH reads are interrupted at once: ``jackin.transport.remote.gather``)."""
    import time

    try:
        with Live(render(), console=out, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(every)
                live.update(render())
    except KeyboardInterrupt:
        pass


def probe_table(probes: list[Probe]) -> Table:
    table = Table(title="netcheck", title_justify="left")
    for column in ("host", "agent", "destination", "result", "detail"):
        table.add_column(column)
    styles = {"reachable": "green", "refused": "yellow", "blocked": "bold red", "error": "red"}
    for p in probes:
        table.add_row(p.host, p.instance, f"{p.target}:{p.port}", Text(p.result, style=styles.get(p.result, "")),
                      Text(p.detail))  # fmt: skip
    return table


def denials_table(denials: list[Denial], agent: str) -> Table:
    table = Table(title=f"denied destinations of {agent} (last hour)", title_justify="left")
    for column in ("host", "agent", "destination", "expires in"):
        table.add_column(column)
    for d in denials:
        table.add_row(d.host, d.instance, f"{d.destination}:{d.port}", d.expires)
    if not denials:
        table.caption = "none"
    return table


# --- snapshots -------------------------------------------------------------------


def snapshots_table(records: list[SnapshotRecord], *, fleet: str) -> Table:
    """``snapshot.list``: one row per fleet snapshot, oldest first."""
    table = Table(title=f"snapshots of fleet {fleet}", title_justify="left")
    for column, justify in (("id", "left"), ("created", "left"), ("kind", "left"), ("label", "left"),
                            ("agents", "left"), ("hosts", "left"), ("size", "right"), ("added", "right"),
                            ("tiers", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for r in records:
        table.add_row(r.id, r.created, r.kind, r.label or "", ", ".join(r.instances), ", ".join(r.hosts),
                      _bytes(r.size), _bytes(r.added), "+".join(r.tiers))  # fmt: skip
    if not records:
        table.caption = "none yet (inv snapshot.create takes one)"
    return table


def snapshot_view(record: SnapshotRecord) -> Table:
    """``snapshot.show``: the snapshot's agents, each with its restic id and manifest summary, and how
    its home was held still for restic (``held``: a checkpoint, or frozen and for how long)."""
    label = f"  {record.label}" if record.label else ""
    table = Table(title=f"snapshot {record.id} ({record.kind}, {record.created}){label}", title_justify="left")
    held = any(a.instant for a in record.agents)
    for column, justify in (("host", "left"), ("agent", "left"), ("restic id", "left"), ("uid", "right"),
                            ("image", "left"), ("size", "right"), ("added", "right"), ("new files", "right"),
                            ("changed", "right"), ("tiers", "left"), *([("held", "left")] if held else [])):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for a in record.agents:
        m = a.manifest
        table.add_row(a.host, a.instance, (a.restic_id or "-")[:8], str(m.uid) if m else "-", m.image if m else "-",
                      _bytes(a.size), _bytes(a.added), str(a.files_new), str(a.files_changed), "+".join(a.tiers),
                      *([held_text(a)] if held else []))  # fmt: skip
    return table


def held_text(agent: AgentSnapshot) -> str:
    """``frozen 0.42s``, ``checkpoint, frozen 0.05s``, ``stopped``...: how one agent's home was held
    still for its snapshot, and for how long the agent was frozen for it."""
    frozen = f"frozen {agent.frozen_ms / 1000:.2f}s" if agent.frozen_ms is not None else None
    if agent.instant == "frozen" and frozen:
        return frozen
    return ", ".join(t for t in (agent.instant or "-", frozen) if t)


def diff_table(result: DiffResult, *, limit: int = 50) -> Table:
    """``snapshot.diff`` and the restore preview: per agent, the paths added, removed and changed."""
    table = Table(title=f"diff {result.snapshot} -> {result.against}", title_justify="left")
    for column in ("host", "agent", "change", "path"):
        table.add_column(column)
    styles = {"+": "green", "-": "red", "M": "yellow"}
    shown = 0
    for a in result.agents:
        for mark, paths in (("+", a.added), ("-", a.removed), ("M", a.changed)):
            for path in paths:
                if shown < limit:
                    table.add_row(a.host, a.instance, Text(mark, style=styles[mark]), Text(path))
                shown += 1
    total = ", ".join(
        f"{a.instance}@{a.host}: +{len(a.added)} -{len(a.removed)} M{len(a.changed)}" for a in result.agents
    )
    table.caption = (total or "no agents compared") + (f" ({shown - limit} more not shown)" if shown > limit else "")
    return table


def restore_table(result: RestoreResult) -> Table:
    table = Table(title=f"restore of {result.snapshot} (undo: restore {result.pre_restore})", title_justify="left")
    for column in ("host", "agent", "result", "tier", "detail"):
        table.add_column(column)
    for a in result.agents:
        state = Text("restored", style="green") if a.restored else Text("NOT restored", style="bold red")
        detail = a.error or "; ".join(d for d in (a.note, "container started again" if a.restarted else "") if d)
        table.add_row(a.host, a.instance, state, a.tier or "-", Text(detail))
    return table


# --- fleet.rollback ----------------------------------------------------------------

INVENTORY_KEPT = "the inventory file is not rewritten: the next fleet.up -i FILE applies the file's spec again"


def _value(value: object) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value


def rollback_view(step: PlannedStep, *, fleet: str) -> Table:
    """What one rollback step changes: from the spec in place to the stored one, on which hosts."""
    table = Table.grid(padding=(0, 1))
    source = f"run {step.from_run}'s spec" if step.from_run is not None else "the spec in place"
    table.add_row(Text(f"fleet {fleet}: from {source} back to run {step.to}'s, on {', '.join(step.hosts)}",
                       style="bold"))  # fmt: skip
    diff = step.diff
    for name in diff.agents_added:
        table.add_row(Text(f"  + agent {name}", style="green"))
    for name in diff.agents_removed:
        table.add_row(Text(f"  - agent {name} (its container and network go; its user, home and workspace stay)",
                           style="red"))  # fmt: skip
    for name, changes in diff.agents_changed.items():
        for change in changes:
            table.add_row(Text(f"  ~ agent {name}: {change.field}: {_value(change.before)} -> {_value(change.after)}",
                               style="yellow"))  # fmt: skip
    for change in diff.fleet:
        table.add_row(Text(f"  ~ fleet {change.field}: {_value(change.before)} -> {_value(change.after)}",
                           style="yellow"))  # fmt: skip
    if diff.empty:
        table.add_row(Text("  the specs do not differ: the run re-applies it (repairs what drifted)", style="green"))
    return table


def runs_table(runs: list[SpecRun], *, fleet: str) -> Table:
    """The fleet's runs that recorded a spec: the targets fleet.rollback --to accepts."""
    import time

    table = Table(title=f"fleet {fleet}: applied specs", title_justify="left")
    for column in ("run", "action", "started", "status", "spec", "hosts"):
        table.add_column(column)
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started)) if run.started else "-"
        action = run.action + (f" --to {run.to}" if run.to is not None else "")
        hosts = ", ".join(f"{h} {run.results.get(h, 'no result')}" for h in run.hosts)
        style = "green" if run.succeeded else "red"
        table.add_row(str(run.run), action, started, Text(run.status, style=style), run.fleet_hash[:12], hosts)
    if not runs:
        table.caption = "none recorded"
    return table


# --- snapshot.pull, snapshot.push ----------------------------------------------------


def pull_table(result: PullResult) -> Table:
    """``snapshot.pull``: per origin host, pulled (files and bytes copied, skipped), already pulled, or failed."""
    table = Table(title=f"pull of snapshot {result.snapshot}", title_justify="left")
    for column, justify in (("host", "left"), ("result", "left"), ("copied", "right"), ("skipped", "right"),
                            ("copy on this machine / error", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    styles = {"pulled": "green", "already pulled": "green", "failed": "bold red"}
    for h in result.hosts:
        moved = h.status == "pulled"
        table.add_row(h.host, Text(h.status, style=styles[h.status]),
                      f"{h.copied} ({_bytes(h.copied_bytes)})" if moved else "-",
                      f"{h.skipped} ({_bytes(h.skipped_bytes)})" if moved else "-", Text(h.error or h.path or ""))  # fmt: skip
    return table


def push_table(result: PushResult) -> Table:
    """``snapshot.push``: per origin, where its repository now is on the host and what was copied."""
    table = Table(title=f"push of snapshot {result.snapshot} onto {result.host}", title_justify="left")
    for column, justify in (("origin", "left"), ("repository on the host", "left"), ("copied", "right"),
                            ("skipped", "right"), ("note", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]  # each one of rich's JustifyMethod names
    for o in result.origins:
        table.add_row(o.origin, o.path, f"{o.copied} ({_bytes(o.copied_bytes)})",
                      f"{o.skipped} ({_bytes(o.skipped_bytes)})", "pulled first" if o.pulled_first else "")  # fmt: skip
    if result.origins:
        table.caption = f"restore with: inv snapshot.restore {result.snapshot} --from-host ORIGIN"
    return table


# --- the launch contract (jackin/plan/contract.py) ---------------------------------------------------


def contract_tables(contract: FleetContract) -> list[Table]:
    """The launch contract, readable: one table per agent, then the fleet's terms (same on every host)."""
    return [*(_agent_contract(contract, a) for a in contract.agents), _fleet_contract(contract)]


def _agent_contract(contract: FleetContract, agent: AgentContract) -> Table:
    table = Table(title=f"{agent.instance} ({agent.role}, {agent.image}) on fleet {contract.fleet}",
                  title_justify="left", show_header=False)  # fmt: skip
    table.add_column("term", style="bold")
    table.add_column("value")
    i = agent.identity
    table.add_row("identity", f"user {i.user} (uid {i.uid}, gid {i.gid}); home {i.home}; workspace {i.workspace}")
    table.add_row("mounts", "\n".join(f"{m.source} -> {m.target} ({m.mode}"
                                      f"{', acknowledged credential-like' if m.acknowledged_credentials else ''})"
                                      for m in agent.mounts))  # fmt: skip
    table.add_row("credentials", "\n".join(f"{c.name}: file {c.container_path}, mode {c.mode}, owner {c.owner}"
                                           for c in agent.credentials) or "none")  # fmt: skip
    table.add_row("network", Text(_network_line(agent.network)))
    table.add_row("docker", f"{agent.docker.access}: {agent.docker.detail}"
                            + "".join(f"\n{line}" for line in agent.docker.apparmor))  # fmt: skip
    r = agent.resources
    table.add_row("resources", f"{r.cpus:g} CPU, {_bytes(r.memory)} memory (no swap), {r.pids} pids; "
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
    ttl = "none" if down.ttl is None else (f"{_duration(down.ttl)} from the first fleet.up (enforced on each "
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
                      a.docker.access, f"{a.resources.cpus:g} CPU, {_bytes(a.resources.memory)}, {a.resources.pids} pids",
                      str(len(a.residual_risks)))  # fmt: skip
    return table


def contract_changes(changes: list[str], *, first: bool) -> Text:
    """The difference from the last applied contract, one line each."""
    if first:
        return Text("no launch contract was applied to this fleet before: all of the above is new", style="yellow")
    return Text("the launch contract changed since the last fleet.up:\n" + "\n".join(f"  {c}" for c in changes),
                style="yellow")  # fmt: skip


def host_plan_view(result: PlanResult) -> Table:
    """fleet.plan: per host what fleet.up would change, by category; an unchanged host in one line.
    Credentials show by name and agent only (``jackin.plan.host``), never a value."""
    table = Table.grid(padding=(0, 1))
    if result.note:
        table.add_row(Text(f"fleet {result.fleet}: {result.note}", style="yellow"))
    for host in result.hosts:
        if host.error is not None:
            why = "unreachable" if host.unreachable else "state read failed"
            table.add_row(Text(f"{host.host}: cannot plan ({why}): {host.error}", style="red"))
            continue
        changes = host.changes
        if changes is None or changes.empty:
            table.add_row(Text(f"{host.host}: unchanged (fleet.up would not touch it)", style="green"))
            continue
        for refusal in changes.refused:
            table.add_row(Text(f"{host.host}: fleet.up would refuse: {refusal}", style="red"))
        if changes.changes:
            table.add_row(Text(f"{host.host}: would change {', '.join(changes.categories())}", style="bold"))
        for change in changes.changes:
            table.add_row(Text(f"  {change.category}: {change.step}", style="yellow"))
            for line in change.lines:
                for part in line.splitlines():
                    if part != "set -e":
                        table.add_row(Text(f"    {part}", style="dim"))
    return table


# --- agent state (issue 10): fleet.status's agents, fleet.wait's changes, agent.answer ---------------

STATE_STYLE = {"blocked": "bold yellow", "stuck": "bold red", "failed": "red", "unknown": "magenta",
               "working": "cyan", "idle": "dim", "done": "green"}  # fmt: skip


def agent_state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def _said(message: str, question: str | None) -> Text:
    """The agent's message, and its question when blocked (plain text: it is the agent's)."""
    text = Text(message or "")
    if question:
        text += Text(("  " if message else "") + "asks: ", style="bold yellow") + Text(question)
    return text


def agents_table(status: FleetStatus) -> Table:
    """Every agent read, blocked first (then stuck, failed, unknown, working, idle, done), with its
    message or question; the caption is the fleet's roll-up."""
    from jackin.agents.state import order

    table = Table(title=f"fleet {status.fleet}: agents", title_justify="left")
    for column in ("state", "host", "agent", "heartbeat", "message / question"):
        table.add_column(column, justify="right" if column == "heartbeat" else "left")
    rows = [(h.host, a, a.agent_state) for h in status.hosts for a in h.agents if a.agent_state]
    for host, agent, state in sorted(rows, key=lambda r: (order(r[2].state), r[0], r[1].instance)):
        age = "-" if state.heartbeat_age is None else f"{_duration(state.heartbeat_age)} ago"
        table.add_row(agent_state_text(state.state), host, agent.instance, age, _said(state.message, state.question))
    table.caption = status.rollup or "0 agents"
    return table


def status_view(status: FleetStatus) -> Group:
    """fleet.status: the hosts × agents table, then the agents' states (blocked first) and roll-up."""
    from rich.console import Group

    return Group(status_table(status), agents_table(status))


def change_line(change: Change) -> Text:
    """``12:03:04  lab-0/coder-1  working -> blocked  asks: Which database?`` (a fleet.wait change)."""
    import time

    when = time.strftime("%H:%M:%S", time.localtime(change.at))
    line = Text(f"{when}  ", style="dim") + Text(f"{change.host}/{change.instance}  ", style="bold")
    if change.old is not None:
        line += agent_state_text(change.old) + Text(" -> ")
    line += agent_state_text(change.new)
    said = _said(change.message, change.question)
    return line + (Text("  ") + said if said.plain else Text(""))


def wait_summary(result: WaitResult) -> Text:
    """How fleet.wait ended, and the agents' last states in roll-up form."""
    from jackin.agents.state import rollup

    why = {"done": "every agent finished", "blocked": "an agent is blocked", "any": "an agent changed state",
           "timeout": "timed out", "unreachable": "a host could not be read"}.get(result.reason, result.reason)  # fmt: skip
    style = "green" if result.exit_code == 0 else "bold red"
    text = Text(f"fleet {result.fleet}: {why} after {_duration(result.elapsed)} ", style=style)
    text += Text(f"({rollup([a.state for a in result.agents])}; exit {result.exit_code})")
    for host, error in result.errors.items():
        text += Text(f"\n{host}: not read: {error}", style="red")
    return text


def answered_line(result: Answered) -> Text:
    asked = f" (it asked: {result.question})" if result.question else ""
    return Text(f"answer delivered to {result.instance} on {result.host}: {result.size} bytes{asked}")


# --- work and handoffs (jackin.work.collect) ------------------------------------------------------


def collect_table(report: CollectReport) -> Table:
    """fleet.collect: per host and agent what was collected, under which ref, and the handoff's evidence."""
    table = Table(title=f"fleet {report.fleet}: collect", title_justify="left")
    for column in ("host", "agent", "state", "result", "commit", "ref", "handoff"):
        table.add_column(column)
    for a in report.agents:
        style = {"collected": "green", "failed": "bold red"}.get(a.result, "dim")
        handoff = "" if a.evidence is None else a.evidence.label
        table.add_row(a.host, a.instance, a.state, Text(a.result if not a.reason else f"{a.result}: {a.reason}",
                                                        style=style),
                      (a.commit or "")[:12], a.ref or "", Text(handoff, style="green" if handoff == "ok" else "yellow"))  # fmt: skip
    for host, why in report.unreachable.items():
        table.add_row(host, "", "", Text(f"unreachable: {why}", style="bold red"), "", "", "")
    return table


def review_table(review: Review) -> Table:
    """fleet.review: per host and agent its state, collected commit, diff stat, evidence and handoff."""
    table = Table(title=f"fleet {review.fleet}: review", title_justify="left")
    for column in ("host", "agent", "state", "commit", "diff", "evidence", "handoff"):
        table.add_column(column)
    for r in review.rows:
        evidence = Text(r.evidence or "not collected", style="green" if r.evidence == "ok" else "yellow")
        table.add_row(r.host, r.instance, r.state, (r.commit or "")[:12], r.diff or "", evidence, r.handoff or "")
    for host, why in review.unreachable.items():
        table.add_row(host, "", Text(f"unreachable: {why}", style="bold red"), "", "", "", "")
    return table
