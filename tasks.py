"""jackin fleet CLI: `inv --list`. Tasks parse arguments and call `jackin`; no logic here."""

from invoke import Collection, Exit, task

from jackin import fleet as fleet_api
from jackin import ui
from jackin.cli import count, exit_code, guard, not_yet
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


@task(help={"inventory": "inventory file (default inventory/lab.yaml)"})
def fleet_validate(c, inventory=None):
    """Check an inventory file; every problem is reported at once, nothing is touched."""
    with guard():
        spec = fleet_api.load(inventory)
        agents = sum(a.count for a in spec.fleet.agents)
        ui.out.print(f"{inventory or fleet_api.DEFAULT_INVENTORY}: ok (fleet {spec.fleet.name!r}, "
                     f"provider {spec.fleet.provider}, {agents} agent(s))")  # fmt: skip


@task(help={"inventory": "inventory file (default inventory/lab.yaml)", "json": "print one JSON document",
            "dry_run": "show what would change; change nothing"})  # fmt: skip
def fleet_up(c, inventory=None, json=False, dry_run=False):
    """Bring the fleet up on every host of the inventory, in parallel."""
    with guard():
        spec = fleet_api.load(inventory)
        with ui.progress() as view:
            result = fleet_api.up(spec, dry_run=dry_run, on_event=view.update, log=ui.log)
        if json:
            ui.print_json(result.model_dump(mode="json"))
        else:
            ui.out.print(ui.run_table(result, title=f"fleet {spec.fleet.name}: up"))
        if exit_code(result):
            raise Exit(code=exit_code(result))


@task
def fleet_status(c, inventory=None):
    """Show hosts × agents of the fleet (fleet lifecycle issue)."""
    with guard():
        not_yet("fleet.status", "fleet lifecycle")


@task
def fleet_down(c, inventory=None):
    """Tear the fleet down and prove nothing is left (fleet lifecycle issue)."""
    with guard():
        not_yet("fleet.down", "fleet lifecycle")


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

snapshot = Collection("snapshot")
snapshot.add_task(snapshot_create, "create")
snapshot.add_task(snapshot_restore, "restore")

ns = Collection(lab, fleet, snapshot)
