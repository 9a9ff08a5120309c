"""jackin fleet CLI: `inv --list`. Tasks parse arguments and call `jackin`; no logic here."""

from invoke import Collection, Exit, task

from jackin import agent as agent_api
from jackin import fleet as fleet_api
from jackin import ui
from jackin.cli import confirm, count, exit_code, guard, not_yet, require_terminal_or
from jackin.lab import Lab
from jackin.lab.lab import DEFAULT_HOSTS

# --- lab ---------------------------------------------------------------------


@task(help={"hosts": f"number of hosts (default: as many as the lab has, else {DEFAULT_HOSTS})", "name": "lab name"})
def lab_up(c, hosts=None, name="jackin"):
    """Bring up (or resume) a lab of disposable Debian servers on the local Docker engine."""
    with guard():
        status = Lab(name).up(count("--hosts", hosts), log=ui.log)
        ui.out.print(ui.lab_table(status))


@task(help={"name": "lab name", "json": "print JSON for scripts"})
def lab_status(c, name="jackin", json=False):
    """Show the lab's hosts: container, state, SSH address, key and known_hosts files."""
    with guard():
        status = Lab(name).status()
        if json:
            ui.print_json(status.model_dump(mode="json"))
        elif not status.exists:
            ui.out.print(f"lab {name!r} does not exist (inv lab.up creates it)")
        else:
            ui.out.print(ui.lab_table(status))


@task(help={"name": "lab name"})
def lab_down(c, name="jackin"):
    """Remove every container, volume, network and key of the lab."""
    with guard():
        removed = Lab(name).down(log=ui.log)
        ui.out.print(f"lab {name!r} is gone" if any(removed.values()) else f"lab {name!r}: nothing to remove")


# --- fleet -------------------------------------------------------------------

INVENTORY = "inventory file (default inventory/lab.yaml)"


@task(help={"inventory": INVENTORY})
def fleet_validate(c, inventory=None):
    """Check an inventory file; every problem is reported at once, nothing is touched."""
    with guard():
        spec = fleet_api.load(inventory)
        agents = sum(a.count for a in spec.fleet.agents)
        ui.out.print(f"{inventory or fleet_api.DEFAULT_INVENTORY}: ok (fleet {spec.fleet.name!r}, "
                     f"provider {spec.fleet.provider}, {agents} agent(s))")  # fmt: skip


@task(help={"inventory": INVENTORY, "yes": "apply without showing the plan and asking",
            "json": "print one JSON document (needs --yes or --dry-run)",
            "dry_run": "show what would change, with the commands; change nothing"})  # fmt: skip
def fleet_up(c, inventory=None, yes=False, json=False, dry_run=False):
    """Bring the fleet up: per agent a Unix user, workspace, network and hardened container, on every host."""
    with guard():
        spec = fleet_api.load(inventory)
        if dry_run:  # touches nothing, not even the local lab
            raise Exit(code=exit_code(run_up(spec, inventory, dry_run=True, bring_up=False, json=json).run))
        if not yes:
            require_terminal_or("--yes")
            preview = run_up(spec, inventory, dry_run=True, bring_up=True, json=json)
            if not preview.changed:
                raise Exit(code=exit_code(preview.run))
            confirm("Apply these changes?")
        result = run_up(spec, inventory, dry_run=False, bring_up=True, json=json)
        raise Exit(code=exit_code(result.run))


def run_up(spec, inventory, *, dry_run, bring_up, json):
    with ui.progress() as view:
        result = fleet_api.up(spec, source=inventory, dry_run=dry_run, bring_up=bring_up, on_event=view.update,
                              log=ui.log)  # fmt: skip
    if json:
        ui.print_json(result.model_dump(mode="json"))
    else:
        if dry_run:
            ui.out.print(ui.plan_view(result.run))
        title = f"fleet {spec.fleet.name}: {'plan' if dry_run else 'up'}"
        ui.out.print(ui.up_table(result.run, title=title, agents=len(result.plan.agents)))
    return result


@task(help={"inventory": INVENTORY, "watch": "refresh in place until Ctrl-C", "json": "print JSON"})
def fleet_status(c, inventory=None, watch=False, json=False):
    """Show hosts × agents: container state, uptime, CPU, memory, restarts, last error."""
    with guard():
        spec = fleet_api.load(inventory)
        if watch:
            ui.watch(lambda: ui.status_table(fleet_api.status(spec)))
            return
        status = fleet_api.status(spec)
        if json:
            ui.print_json(status.model_dump(mode="json"))
        else:
            ui.out.print(ui.status_table(status))
        if any(not h.reachable for h in status.hosts):
            raise Exit(code=3)


@task(help={"inventory": INVENTORY, "yes": "do not ask for confirmation",
            "keep_data": "keep agents' homes and workspaces on the hosts (and, for a lab, its hosts)",
            "keep_lab": "provider lab: keep the lab hosts running"})  # fmt: skip
def fleet_down(c, inventory=None, yes=False, keep_data=False, keep_lab=False):
    """Tear the fleet down on every host, prove nothing is left, and (lab) destroy the lab."""
    with guard():
        spec = fleet_api.load(inventory)
        if not yes:
            require_terminal_or("--yes")
            data = "keeping homes and workspaces" if keep_data else "including every agent's workspace"
            confirm(f"Remove fleet {spec.fleet.name!r} from its hosts, {data}?")
        with ui.progress() as view:
            result = fleet_api.down(spec, keep_data=keep_data, keep_lab=keep_lab, on_event=view.update, log=ui.log)
        if result.run.hosts:
            ui.out.print(ui.up_table(result.run, title=f"fleet {spec.fleet.name}: down"))
            ui.out.print(ui.clean_table(result.checks))
        if result.lab_removed:
            ui.out.print(f"lab of fleet {spec.fleet.name!r} destroyed")
        if not result.clean:
            raise Exit(code=exit_code(result.run) or 1)


@task(help={"inventory": INVENTORY, "yes": "remove without asking"})
def fleet_gc(c, inventory=None, yes=False):
    """Find and remove leftovers of fleets the ledger no longer knows (after a crash)."""
    with guard():
        spec = fleet_api.load(inventory)
        found = fleet_api.orphans(spec)
        if not found:
            ui.out.print("no leftovers of unknown fleets")
            return
        for name, hosts in sorted(found.items()):
            ui.out.print(f"fleet {name!r}: leftovers on {', '.join(hosts)}")
        if not yes:
            require_terminal_or("--yes")
            confirm("Remove them?")
        results = fleet_api.gc(spec, found)
        for result in results:
            ui.out.print(ui.up_table(result, title="fleet.gc"))
        if any(r.failed for r in results):
            raise Exit(code=1)


# --- agent -------------------------------------------------------------------


@task(help={"agent": "instance (coder-1) or agent (coder: every instance)", "target": "IP address or host name",
            "port": "TCP port (default 443)", "inventory": INVENTORY, "json": "print JSON"})  # fmt: skip
def agent_netcheck(c, agent, target, port=443, inventory=None, json=False):
    """Probe TARGET:PORT from inside the agent's container on every host: reachable or blocked."""
    with guard():
        spec = fleet_api.load(inventory)
        probes = agent_api.netcheck(spec, fleet_api.targets(spec, bring_up=False), agent, target,
                                    count("--port", port, high=65535) or 443)  # fmt: skip
        if json:
            ui.print_json([p.model_dump() for p in probes])
        else:
            ui.out.print(ui.probe_table(probes))
        if any(p.result == "error" for p in probes):
            raise Exit(code=1)


@task(help={"agent": "instance (coder-1) or agent (coder)", "inventory": INVENTORY, "json": "print JSON"})
def agent_denials(c, agent, inventory=None, json=False):
    """List destinations the agent's egress policy denied in the last hour."""
    with guard():
        spec = fleet_api.load(inventory)
        found = agent_api.denials(spec, fleet_api.targets(spec, bring_up=False), agent)
        if json:
            ui.print_json([d.model_dump() for d in found])
        else:
            ui.out.print(ui.denials_table(found, agent))


# --- snapshot ----------------------------------------------------------------


@task
def snapshot_create(c, inventory=None):
    """Snapshot the fleet's agents (snapshots issue)."""
    with guard():
        not_yet("snapshot.create", "snapshots and rollback")


@task
def snapshot_restore(c, inventory=None):
    """Restore a snapshot (snapshots issue)."""
    with guard():
        not_yet("snapshot.restore", "snapshots and rollback")


lab = Collection("lab")
lab.add_task(lab_up, "up")
lab.add_task(lab_status, "status")
lab.add_task(lab_down, "down")

fleet = Collection("fleet")
fleet.add_task(fleet_validate, "validate")
fleet.add_task(fleet_up, "up")
fleet.add_task(fleet_status, "status")
fleet.add_task(fleet_down, "down")
fleet.add_task(fleet_gc, "gc")

agent_ns = Collection("agent")
agent_ns.add_task(agent_netcheck, "netcheck")
agent_ns.add_task(agent_denials, "denials")

snapshot = Collection("snapshot")
snapshot.add_task(snapshot_create, "create")
snapshot.add_task(snapshot_restore, "restore")

ns = Collection(lab, fleet, agent_ns, snapshot)
