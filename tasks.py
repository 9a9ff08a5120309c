"""jackin fleet CLI: `inv --list`. A table of thin tasks: each parses its arguments, calls one command of
jackin/cli/ (which calls jackin, renders the result and returns the exit code) inside `guard()`, which
turns our errors into one message and a documented exit code (jackin/cli/edge.py). No logic here.
A command with no exit code of its own (lab.*, fleet.validate: 0, or its error's) returns None and its
task ends normally, so a chain such as `inv lab.up fleet.up` goes on to the next task.
An option that takes a number is a string here, parsed by its command (``jackin.cli.edge.count``, exit 2
naming the option): Invoke casts an ``int`` option itself and shows a traceback for a value such as 80;id."""

from jackin.transport import interrupts

interrupts.exit_until_started()  # first: a Ctrl-C while the CLI loads exits 130, not Invoke's 1

import sys

from invoke import Collection, Context, Exit, task

from jackin import lazy
from jackin.cli.edge import guard
from jackin.lab.lab import DEFAULT_HOSTS

# One module per collection, each loaded by the first task that uses it (jackin.lazy): `inv --list` stays quick.
agent_cli = lazy.module("jackin.cli.agent")
fleet_cli = lazy.module("jackin.cli.fleet")
lab_cli = lazy.module("jackin.cli.lab")
role_cli = lazy.module("jackin.cli.role")
rollback_cli = lazy.module("jackin.cli.rollback")
run_cli = lazy.module("jackin.cli.run")
snapshot_cli = lazy.module("jackin.cli.snapshot")
work_cli = lazy.module("jackin.cli.work")

# --- lab ---------------------------------------------------------------------


@task(help={"hosts": f"number of hosts (default: as many as the lab has, else {DEFAULT_HOSTS})", "name": "lab name"})
def lab_up(c: Context, hosts: str | None = None, name: str = "jackin") -> None:
    """Bring up (or resume) a lab of disposable Debian servers on the local Docker engine."""
    with guard():
        lab_cli.lab_up(name, hosts=hosts)


@task(help={"name": "lab name", "json": "print JSON for scripts"})
def lab_status(c: Context, name: str = "jackin", json: bool = False) -> None:
    """Show the lab's hosts: container, state, SSH address, key and known_hosts files."""
    with guard():
        lab_cli.lab_status(name, json=json)


@task(help={"name": "lab name"})
def lab_down(c: Context, name: str = "jackin") -> None:
    """Remove every container, volume, network and key of the lab."""
    with guard():
        lab_cli.lab_down(name)


# --- fleet -------------------------------------------------------------------

INVENTORY = "inventory file (default inventory/lab.yaml)"


@task(help={"inventory": INVENTORY})
def fleet_validate(c: Context, inventory: str | None = None) -> None:
    """Check an inventory file; every problem is reported at once, nothing is touched."""
    with guard():
        fleet_cli.fleet_validate(inventory)


@task(help={"inventory": INVENTORY, "yes": "apply without showing the plan and asking",
            "json": "print one JSON document (needs --yes or --dry-run)",
            "dry_run": "show what would change, with the commands; change nothing"})  # fmt: skip
def fleet_up(
    c: Context, inventory: str | None = None, yes: bool = False, json: bool = False, dry_run: bool = False
) -> None:
    """Bring the fleet up: per agent a Unix user, workspace, network and hardened container, on every host."""
    with guard():
        raise Exit(code=fleet_cli.fleet_up(inventory, yes=yes, json=json, dry_run=dry_run))


@task(help={"inventory": INVENTORY, "watch": "refresh in place until Ctrl-C", "json": "print JSON"})
def fleet_status(c: Context, inventory: str | None = None, watch: bool = False, json: bool = False) -> None:
    """Show hosts × agents: container state, uptime, CPU, memory, restarts, last error, egress policy.
    Exit 3: a host is unreachable; exit 4: an agent's egress policy is not enforced (wins over 3)."""
    with guard():
        raise Exit(code=fleet_cli.fleet_status(inventory, watch=watch, json=json))


@task(help={"inventory": INVENTORY, "yes": "do not ask for confirmation",
            "keep_data": "keep agents' homes and workspaces on the hosts (and, for a lab, its hosts)",
            "keep_lab": "provider lab: keep the lab hosts running",
            "no_final_snapshot": "take no final snapshot first (default: snapshot every agent and pull it here); "
                                 "each host's earlier snapshots are still pulled here",
            "discard_snapshots": "no final snapshot and no pull: lose the workspaces and the snapshots kept only "
                                 "on the hosts (the ledger forgets them)"})  # fmt: skip
def fleet_down(
    c: Context,
    inventory: str | None = None,
    yes: bool = False,
    keep_data: bool = False,
    keep_lab: bool = False,
    no_final_snapshot: bool = False,
    discard_snapshots: bool = False,
) -> None:
    """Snapshot every agent and pull it here, tear the fleet down on every host, prove nothing is left,
    and (lab) destroy the lab. A host whose final snapshot or pull failed is not torn down (exit 1)."""
    with guard():
        raise Exit(code=fleet_cli.fleet_down(inventory, yes=yes, keep_data=keep_data, keep_lab=keep_lab,
                                             no_final_snapshot=no_final_snapshot,
                                             discard_snapshots=discard_snapshots))  # fmt: skip


@task(help={"inventory": INVENTORY, "yes": "remove without asking",
            "purge_kept": "also remove the data fleet.down --keep-data kept (listed, never removed without it)"})  # fmt: skip
def fleet_gc(c: Context, inventory: str | None = None, yes: bool = False, purge_kept: bool = False) -> None:
    """Find and remove leftovers of fleets the ledger no longer knows (after a crash); list kept data."""
    with guard():
        raise Exit(code=fleet_cli.fleet_gc(inventory, yes=yes, purge_kept=purge_kept))


@task(help={"inventory": INVENTORY + "; names the fleet (its file is never rewritten)",
            "to": "the run whose spec to return to (default: see README, fleet.rollback)",
            "host": "this host only: its last good state (or --to RUN's spec)",
            "yes": "apply without showing the plan and asking", "json": "print one JSON document (needs --yes or --dry-run)",
            "dry_run": "show the spec change and the plan; change nothing",
            "with_snapshots": "then restore, per host, each agent's newest snapshot taken while the target spec was in place (refused up front if one has none)"})  # fmt: skip
def fleet_rollback(
    c: Context,
    inventory: str | None = None,
    to: str | None = None,
    host: str | None = None,
    yes: bool = False,
    json: bool = False,
    dry_run: bool = False,
    with_snapshots: bool = False,
) -> None:
    """Return the fleet (or a host) to the spec of an earlier successful run, recorded in the ledger."""
    with guard():
        raise Exit(code=rollback_cli.fleet_rollback(inventory, to=to, host=host, yes=yes, json=json,
                                                    dry_run=dry_run, with_snapshots=with_snapshots))  # fmt: skip


@task(help={"inventory": INVENTORY, "json": "print JSON"})
def fleet_runs(c: Context, inventory: str | None = None, json: bool = False) -> None:
    """List the fleet's runs that recorded a spec (fleet.up, fleet.rollback): what fleet.rollback --to accepts."""
    with guard():
        raise Exit(code=rollback_cli.fleet_runs(inventory, json=json))


@task(help={"inventory": INVENTORY, "json": "print JSON for scripts"})
def fleet_plan(c: Context, inventory: str | None = None, json: bool = False) -> None:
    """Show per host what fleet.up would change (one parallel state read); change nothing, anywhere.
    Exit 2: spec or credential problem; 3: a host is unreachable; 1: a host's read failed or up would refuse."""
    with guard():
        raise Exit(code=fleet_cli.fleet_plan(inventory, json=json))


@task(help={"inventory": INVENTORY, "until": "done (default: every agent done, failed or idle), blocked (an agent "
            "is blocked) or any (an agent changes state)", "timeout": "give up after this long (90s, 10m, 2h; default: "
            "no limit)", "json": "print the result as JSON (the changes go to stderr)"})  # fmt: skip
def fleet_wait(
    c: Context, inventory: str | None = None, until: str = "done", timeout: str | None = None, json: bool = False
) -> None:
    """Wait until the fleet's agents reach a state, printing each change as it happens.
    Exit 0: it held; 1: done, but an agent failed; 3: a host stayed unreadable; 4: timed out."""
    with guard():
        raise Exit(code=fleet_cli.fleet_wait(inventory, until=until, timeout=timeout, json=json))


@task(help={"inventory": INVENTORY, "yes": "do not ask (the whole loop, and fleet.up's changes and contract)",
            "timeout": "stop waiting after this long (600, 90s, 10m, 2h; the time-to-live also ends the wait)",
            "json": "print one JSON document of the phases (needs --yes)",
            "keep_lab": "provider lab: keep the lab hosts running after fleet.down"})  # fmt: skip
def fleet_run(
    c: Context,
    inventory: str | None = None,
    yes: bool = False,
    timeout: str | None = None,
    json: bool = False,
    keep_lab: bool = False,
) -> None:
    """The whole loop: fleet.up, wait until every agent is done or failed, collect their work, fleet.down.
    Exit 0 all done; 1 a phase failed (it says which and what is left); 2 usage; 3 a host unreachable;
    4 the timeout or time-to-live ended the wait (collected, torn down); 5 some agent failed."""
    with guard():
        raise Exit(code=run_cli.fleet_run(inventory, yes=yes, timeout=timeout, json=json, keep_lab=keep_lab))


# --- agent -------------------------------------------------------------------


@task(help={"agent": "instance (coder-1) or agent (coder: every instance)", "target": "IP address or host name",
            "port": "TCP port, 1 to 65535 (default 443)", "inventory": INVENTORY, "json": "print JSON"})  # fmt: skip
def agent_netcheck(
    c: Context, agent: str, target: str, port: str | None = None, inventory: str | None = None, json: bool = False
) -> None:
    """Probe TARGET:PORT from inside the agent's container on every host: reachable or blocked."""
    with guard():
        raise Exit(code=agent_cli.agent_netcheck(inventory, agent, target, port, json=json))


@task(help={"agent": "instance (coder-1) or agent (coder)", "inventory": INVENTORY, "json": "print JSON"})
def agent_denials(c: Context, agent: str, inventory: str | None = None, json: bool = False) -> None:
    """List destinations the agent's egress policy denied in the last hour."""
    with guard():
        raise Exit(code=agent_cli.agent_denials(inventory, agent, json=json))


@task(help={"agent": "instance (coder-1)", "text": "the answer (- reads it from stdin)", "inventory": INVENTORY,
            "host": "the host whose instance to answer (default: the one where it is blocked)"})  # fmt: skip
def agent_answer(c: Context, agent: str, text: str, inventory: str | None = None, host: str | None = None) -> None:
    """Answer a blocked agent's question: the text is written into its workspace as the agent.
    Refused (exit 1, nothing written) when the agent is not blocked."""
    with guard():
        raise Exit(code=agent_cli.agent_answer(inventory, agent, text, host=host))


@task(help={"agent": "instance (coder-1) of an agent with placement spread", "to": "the host to move it to",
            "inventory": INVENTORY, "json": "print JSON"})  # fmt: skip
def agent_move(c: Context, agent: str, to: str, inventory: str | None = None, json: bool = False) -> None:
    """Move an agent instance with its workspace to another of its hosts (snapshot, pull, push, restore there),
    then remove it from its old host. Refused (exit 2, nothing changed) when it cannot go there."""
    with guard():
        raise Exit(code=agent_cli.agent_move(inventory, agent, to, json=json))


@task(help={"agent": "instance (coder-1)", "inventory": INVENTORY,
            "host": "the host to run it on (needed when the fleet has more than one)"})  # fmt: skip
def agent_exec(c: Context, agent: str, inventory: str | None = None, host: str | None = None) -> None:
    """Run the command after -- in the agent's container as the agent (inv agent.exec coder-1 -- ls -la);
    its output streams here and its exit status is passed through. Exit 2: unknown agent or no command."""
    with guard():
        raise Exit(code=agent_cli.agent_exec(inventory, agent, sys.argv, host=host))


@task(help={"agent": "instance (coder-1)", "follow": "keep printing new output until Ctrl-C",
            "tail": "only the last N lines", "inventory": INVENTORY,
            "host": "the host to read from (needed when the fleet has more than one)"})  # fmt: skip
def agent_logs(
    c: Context,
    agent: str,
    follow: bool = False,
    tail: str | None = None,
    inventory: str | None = None,
    host: str | None = None,
) -> None:
    """Print the agent container's output (docker logs); --follow until Ctrl-C (a clean exit)."""
    with guard():
        raise Exit(code=agent_cli.agent_logs(inventory, agent, follow=follow, tail=tail, host=host))


@task(help={"agent": "instance (coder-1)", "inventory": INVENTORY,
            "host": "the host to open it on (needed when the fleet has more than one)"})  # fmt: skip
def agent_shell(c: Context, agent: str, inventory: str | None = None, host: str | None = None) -> None:
    """An interactive shell (bash, else sh) in the agent's container as the agent; needs a terminal."""
    with guard():
        raise Exit(code=agent_cli.agent_shell(inventory, agent, host=host))


@task(help={"agent": "instance (coder-1)", "inventory": INVENTORY,
            "host": "the host to open it on (needed when the fleet has more than one)"})  # fmt: skip
def agent_attach(c: Context, agent: str, inventory: str | None = None, host: str | None = None) -> None:
    """Take the agent's runtime over: stop its headless run and resume its own session on this terminal, as
    the agent (its role's attach command: claude --resume, codex resume...); needs a terminal. When you leave,
    the agent's state is what the session left (idle, unless it set one)."""
    with guard():
        raise Exit(code=agent_cli.agent_attach(inventory, agent, host=host))


# --- snapshot ----------------------------------------------------------------


AGENT = "instance (coder-1) or agent (coder: every instance); default: every agent"


@task(help={"inventory": INVENTORY, "agent": AGENT, "label": "a note kept with the snapshot", "json": "print JSON"})
def snapshot_create(
    c: Context, inventory: str | None = None, agent: str | None = None, label: str | None = None, json: bool = False
) -> None:
    """Snapshot the fleet's agents (homes, workspaces, manifests) under one id, with restic on each host."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_create(inventory, agent=agent, label=label, json=json))


@task(help={"inventory": INVENTORY, "json": "print JSON"})
def snapshot_list(c: Context, inventory: str | None = None, json: bool = False) -> None:
    """List the fleet's snapshots: id, created, label, agents, hosts, size, added bytes, tiers."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_list(inventory, json=json))


@task(help={"snapshot": "snapshot id", "inventory": INVENTORY, "json": "print JSON"})
def snapshot_show(c: Context, snapshot: str, inventory: str | None = None, json: bool = False) -> None:
    """Show one snapshot: per agent its host, restic id, uid, image, size and added bytes."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_show(inventory, snapshot, json=json))


@task(help={"snapshot": "snapshot id", "other": "another snapshot id (default: the live workspace)", "agent": AGENT,
            "inventory": INVENTORY, "json": "print JSON"})  # fmt: skip
def snapshot_diff(
    c: Context,
    snapshot: str,
    other: str | None = None,
    agent: str | None = None,
    inventory: str | None = None,
    json: bool = False,
) -> None:
    """Files added, removed and changed from SNAPSHOT to --other (another snapshot) or to the live workspace."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_diff(inventory, snapshot, other, agent=agent, json=json))


@task(help={"snapshot": "snapshot id", "agent": AGENT, "stop": "stop running agents, restore, start them again",
            "yes": "restore without showing the changes and asking", "inventory": INVENTORY,
            "from_host": "restore only the agents the snapshot took on this host (needed when two would restore "
                         "onto the same host: see snapshot.push)",
            "json": "print the result as JSON (the preview is not printed: use with --yes)"})  # fmt: skip
def snapshot_restore(
    c: Context,
    snapshot: str,
    agent: str | None = None,
    stop: bool = False,
    yes: bool = False,
    inventory: str | None = None,
    from_host: str | None = None,
    json: bool = False,
) -> None:
    """Restore agents' workspaces from a snapshot: verified, swapped in atomically, undoable (pre-restore snapshot)."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_restore(inventory, snapshot, agent=agent, stop=stop, yes=yes,
                                                      from_host=from_host, json=json))  # fmt: skip


@task(help={"inventory": INVENTORY, "yes": "forget without asking", "json": "print JSON"})
def snapshot_prune(c: Context, inventory: str | None = None, yes: bool = False, json: bool = False) -> None:
    """Forget snapshots beyond the spec's retention (snapshots.keep) and free their data on every host."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_prune(inventory, yes=yes, json=json))


@task(help={"snapshot": "snapshot id", "inventory": INVENTORY, "json": "print JSON"})
def snapshot_pull(c: Context, snapshot: str, inventory: str | None = None, json: bool = False) -> None:
    """Copy the restic repositories holding SNAPSHOT to this machine (incremental, checked), so it outlives its hosts."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_pull(inventory, snapshot, json=json))


@task(help={"snapshot": "snapshot id", "host": "the host of the fleet to push onto", "inventory": INVENTORY,
            "json": "print JSON"})  # fmt: skip
def snapshot_push(
    c: Context, snapshot: str, host: str | None = None, inventory: str | None = None, json: bool = False
) -> None:
    """Copy this machine's copy of SNAPSHOT's repositories onto --host, where snapshot.restore --from-host uses it."""
    with guard():
        raise Exit(code=snapshot_cli.snapshot_push(inventory, snapshot, host=host, json=json))


# --- work and handoffs ---------------------------------------------------------


@task(help={"inventory": INVENTORY, "agent": "collect this instance (coder-1) or agent (coder) in any state "
            "(repeatable; default: every agent whose status is done)", "into": "fetch into this git repository "
            "(default: the agent's source repository when it is a local path, else one under the state dir)",
            "json": "print JSON"}, iterable=["agent"])  # fmt: skip
def fleet_collect(
    c: Context, inventory: str | None = None, agent: str | None = None, into: str | None = None, json: bool = False
) -> None:
    """Bring each finished agent's branch (under refs/jackin/<fleet>/<host>/<instance>) and handoff back here.
    Exit 1: an agent's collection failed; 3: a host is unreachable."""
    with guard():
        raise Exit(code=work_cli.fleet_collect(inventory, agents=agent, into=into, json=json))


@task(help={"inventory": INVENTORY, "json": "print JSON"})
def fleet_review(c: Context, inventory: str | None = None, json: bool = False) -> None:
    """Per agent: state, collected commit, diff stat against its source commit, handoff evidence and path;
    per queued task: its attempts side by side, its reviews and their verdicts."""
    with guard():
        raise Exit(code=work_cli.fleet_review(inventory, json=json))


@task(help={"inventory": INVENTORY, "until": "empty (default: until no task is queued, running or in review), a "
            "duration (90m, 2h) or a time of day (18:30)", "json": "print the result as JSON (progress to stderr)"})  # fmt: skip
def fleet_work(c: Context, inventory: str | None = None, until: str = "empty", json: bool = False) -> None:
    """Serve the task queue: collect each finished agent, reset its workspace, hand it the next task; review gate,
    retries by failure class. Exit 0 queue empty; 3 hosts unreachable; 4 --until passed (nothing lost); 130 Ctrl-C."""
    with guard():
        raise Exit(code=work_cli.fleet_work(inventory, until=until, json=json))


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
fleet.add_task(fleet_rollback, "rollback")
fleet.add_task(fleet_runs, "runs")
fleet.add_task(fleet_plan, "plan")
fleet.add_task(fleet_wait, "wait")
fleet.add_task(fleet_run, "run")
fleet.add_task(fleet_collect, "collect")
fleet.add_task(fleet_review, "review")
fleet.add_task(fleet_work, "work")

agent_ns = Collection("agent")
agent_ns.add_task(agent_netcheck, "netcheck")
agent_ns.add_task(agent_denials, "denials")
agent_ns.add_task(agent_attach, "attach")
agent_ns.add_task(agent_answer, "answer")
agent_ns.add_task(agent_move, "move")
agent_ns.add_task(agent_exec, "exec")
agent_ns.add_task(agent_logs, "logs")
agent_ns.add_task(agent_shell, "shell")

snapshot = Collection("snapshot")
snapshot.add_task(snapshot_create, "create")
snapshot.add_task(snapshot_restore, "restore")
snapshot.add_task(snapshot_list, "list")
snapshot.add_task(snapshot_show, "show")
snapshot.add_task(snapshot_diff, "diff")
snapshot.add_task(snapshot_prune, "prune")
snapshot.add_task(snapshot_pull, "pull")
snapshot.add_task(snapshot_push, "push")

ns = Collection(lab, fleet, agent_ns, snapshot)


# --- role (jackin/spec/roles.py) -----------------------------------------------------


@task(help={"json": "print JSON for scripts"})
def role_list(c: Context, json: bool = False) -> None:
    """List the roles: name, how the image is built, credentials the agents must be given, default egress."""
    with guard():
        raise Exit(code=role_cli.role_list(json=json))


@task(help={"name": "one role (default: every role)", "json": "print JSON for scripts"})
def role_validate(c: Context, name: str | None = None, json: bool = False) -> None:
    """Validate every role file (or NAME's) and its image recipe, offline; exit 2 on an invalid role."""
    with guard():
        raise Exit(code=role_cli.role_validate(name, json=json))


role_ns = Collection("role")
role_ns.add_task(role_list, "list")
role_ns.add_task(role_validate, "validate")
ns.add_collection(role_ns)


# --- task (the fleet's task queue: jackin/work/queue.py) -------------------------------------

task_cli = lazy.module("jackin.cli.task")


@task(help={"inventory": INVENTORY, "task": "the task's text", "task_file": "a file holding the task",
            "repo": "the repository it is for (default: the fleet's agents' work's)", "ref": "its ref (default HEAD)",
            "attempts": "independent attempts on different agents (best-of-N, 1-10; default 1)",
            "retries": "transient failures retried (0-10; default 2)", "label": "a label",
            "reviewer": "the agent that reviews it (default: the spec's review:)",
            "rounds": "review rounds at most (1-10; default 2)", "json": "print JSON"})  # fmt: skip
def task_add(c: Context, inventory: str | None = None, task: str | None = None, task_file: str | None = None,
             repo: str | None = None, ref: str | None = None, attempts: str | None = None, retries: str | None = None,
             label: str | None = None, reviewer: str | None = None, rounds: str | None = None,
             json: bool = False) -> None:  # fmt: skip
    """Queue a task for the fleet's agents (--task or --task-file); with neither, the spec's tasks:, each once."""
    with guard():
        raise Exit(code=task_cli.task_add(inventory, task=task, task_file=task_file, repo=repo, ref=ref,
                                          attempts=attempts, retries=retries, label=label, reviewer=reviewer,
                                          rounds=rounds, json=json))  # fmt: skip


@task(help={"inventory": INVENTORY, "state": "only tasks in this state", "json": "print JSON"})
def task_list(c: Context, inventory: str | None = None, state: str | None = None, json: bool = False) -> None:
    """List the fleet's tasks: state, attempts, failures and their class."""
    with guard():
        raise Exit(code=task_cli.task_list(inventory, state=state, json=json))


@task(help={"task_id": "the task's id (task.list shows them)", "inventory": INVENTORY, "json": "print JSON"})
def task_show(c: Context, task_id: str, inventory: str | None = None, json: bool = False) -> None:
    """One task with every attempt: agent, host, times, failure class and evidence."""
    with guard():
        raise Exit(code=task_cli.task_show(inventory, task_id, json=json))


@task(help={"task_id": "the task's id (task.list shows them)", "inventory": INVENTORY, "json": "print JSON"})
def task_cancel(c: Context, task_id: str, inventory: str | None = None, json: bool = False) -> None:
    """Cancel a task that is not final: never claimed again; its running attempts end as cancelled."""
    with guard():
        raise Exit(code=task_cli.task_cancel(inventory, task_id, json=json))


@task(help={"task_id": "the task's id (task.list shows them)", "attempt": "which attempt (best-of-N: 1-10; "
            "default: the only finished one)", "inventory": INVENTORY, "json": "print JSON"})  # fmt: skip
def task_accept(c: Context, task_id: str, attempt: str | None = None, inventory: str | None = None,
                json: bool = False) -> None:  # fmt: skip
    """Accept a task's attempt as its result: refs/jackin/<fleet>/accepted/<task> points to its commit."""
    with guard():
        raise Exit(code=task_cli.task_accept(inventory, task_id, attempt=attempt, json=json))


@task(help={"task_id": "the task's id (task.list shows them)", "inventory": INVENTORY, "json": "print JSON"})
def task_retry(c: Context, task_id: str, inventory: str | None = None, json: bool = False) -> None:
    """Queue a failed or cancelled task again, with its retries anew."""
    with guard():
        raise Exit(code=task_cli.task_retry(inventory, task_id, json=json))


task_ns = Collection("task")
task_ns.add_task(task_add, "add")
task_ns.add_task(task_list, "list")
task_ns.add_task(task_show, "show")
task_ns.add_task(task_cancel, "cancel")
task_ns.add_task(task_retry, "retry")
task_ns.add_task(task_accept, "accept")
ns.add_collection(task_ns)
