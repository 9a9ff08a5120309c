"""Commands for a fleet: each agent's user, directories, network and container; and teardown.

The builders are plain functions of (plan, state) (no pyinfra: the CLI process plans with
them, ``jackin.lifecycle.hostplan``): from the one state read of the host they return only the commands
for what differs, so a second run with no spec change returns nothing.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from jackin.facts.state import HostState, PathInfo, User
from jackin.hostpaths import ROOT, STATE_DIR
from jackin.operations import changes, cow, credentials, gateway, restic, work
from jackin.operations.agent_paths import end_processes, home_commands, workspace_commands
from jackin.operations.files import Command, Refused, write_files
from jackin.operations.firewall import remove_commands
from jackin.plan.fleet import BRIDGE_GATEWAY, AgentPlan, FleetPlan
from jackin.spec.models import AddressPool

NOLOGIN = "/usr/sbin/nologin"


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


# --- command builders (pure) ---------------------------------------------------


def _dirs(agent: AgentPlan, state: HostState) -> tuple[list[str], bool]:
    """Commands for the home (root:agent 0750) and workspace (the agent's, 0700), never following a
    link (see agent_paths); and whether the container must be recreated because its mount may have
    gone through a link (the workspace was not a real directory, or the home was not root's).

    A home to fix (an older release's, the agent's own) means the workspace is redone too: the
    agent could have swapped it after the state read. A workspace whose mode the agent changed
    (it owns it) is only chmodded: its container keeps running."""
    commands = [] if changes.home_ok(agent, state) else home_commands(agent.home, agent.uid)
    if commands or state.paths.get(agent.workspace) != PathInfo(kind="d", mode="0700", uid=agent.uid, gid=agent.uid):
        commands += workspace_commands(agent.workspace, agent.uid)
    return commands, changes.remounts(agent, state)


def agent_commands(agent: AgentPlan, state: HostState, pools: Sequence[AddressPool] = ()) -> list[str]:
    """Commands that bring one agent's user, home, workspace, network and container to the plan
    (``agent_parts`` as one list: what the deploy runs for an agent not batched with others)."""
    host, docker = agent_parts(agent, state, pools)
    return host + docker


def agent_parts(agent: AgentPlan, state: HostState, pools: Sequence[AddressPool] = ()) -> tuple[list[str], list[str]]:
    """``agent_commands`` in its two parts: the user, home and workspace (the host's files: one agent after
    another, since useradd locks /etc/passwd), then the network and container (Docker's: they may run
    beside other agents', ``concurrently``)."""
    commands: list[str] = []
    owner = state.user_by_uid(agent.uid)
    if owner is not None and owner.name != agent.user:
        raise Refused(f"uid {agent.uid} belongs to user {owner.name!r}, not {agent.user!r}; "
                             "set a different fleet.uid_base")  # fmt: skip
    user = state.users.get(agent.user)
    if user is not None and user.uid != agent.uid:
        raise Refused(f"user {agent.user!r} exists with uid {user.uid}, expected {agent.uid}")
    if agent.user not in state.groups:
        commands.append(q("groupadd", "--gid", str(agent.uid), agent.user))
    comment = f"jackin/{agent.fleet}/{agent.instance}"
    if user is None:
        commands.append(q("useradd", "--uid", str(agent.uid), "--gid", str(agent.uid), "--no-create-home",
                          "--home-dir", agent.home, "--shell", NOLOGIN, "--comment", comment, agent.user))  # fmt: skip
    elif (user.home, user.shell, user.comment, user.gid) != (agent.home, NOLOGIN, comment, agent.uid):
        commands.append(q("usermod", "--gid", str(agent.uid), "--home", agent.home, "--shell", NOLOGIN,
                          "--comment", comment, agent.user))  # fmt: skip
    dirs, remount = _dirs(agent, state)
    commands += dirs
    return commands, _network_and_container(agent, state, pools, remount=remount)


def concurrently(jobs: Sequence[tuple[str, Sequence[str]]]) -> str:
    """One shell command that runs each job's commands (a ``set -e`` subshell each, as a script of its
    own) at the same time and waits for all of them. Each job's stderr goes to a file of a root-only
    temporary directory and is passed on afterwards, each line under the job's name; when any job
    failed, the last line names each failed job with its own last line, else its exit status (the
    host's error).
    Docker creates and starts containers side by side about twice as fast as one after another."""
    lines = ["d=$(mktemp -d)"]
    lines += ["( set -e\n" + "\n".join(commands) + f'\n) 2>"$d/{n}" & p{n}=$!' for n, (_, commands) in enumerate(jobs)]
    lines.append("failed=")
    for n, (name, _) in enumerate(jobs):
        q = shlex.quote(name)
        lines.append(f'wait "$p{n}" || {{ s=$?; m=$(tail -n 1 "$d/{n}"); failed="$failed; "{q}": ${{m:-exit $s}}"; }}')
        lines.append(f'while IFS= read -r line; do printf \'%s: %s\\n\' {q} "$line"; done < "$d/{n}" >&2')
    lines.append('rm -rf -- "$d"')
    lines.append('[ -z "$failed" ] || { printf \'failed: %s\\n\' "${failed#; }" >&2; exit 1; }')
    return "\n".join(lines)


def _network_and_container(
    agent: AgentPlan, state: HostState, pools: Sequence[AddressPool], *, remount: bool = False
) -> list[str]:
    """The agent's network (created, or replaced when it is ours but not as planned: never reused)
    and its container, started only after the same script checked the network's bridge. ``remount``:
    the home or workspace was not as planned, so the container may have mounted the workspace
    through a link and is recreated."""
    network = state.networks.get(agent.network)
    container = state.containers.get(agent.container)
    if network is not None and network.labels.get("jackin.agent") != agent.instance:
        raise Refused(f"network {agent.network!r} is labelled jackin.agent="
                             f"{network.labels.get('jackin.agent')!r}, not {agent.instance!r}: it is not this "
                             f"agent's to replace; remove it (docker network rm {agent.network}) "
                             "and run fleet.up again")  # fmt: skip
    create, problem = changes.creates_network(agent, state, pools)
    commands: list[str] = []
    # A network of this name that the state read did not list is not ours: never reuse it. Found by
    # ``docker network create`` failing (no extra docker call when there is none); checked first only
    # when the container would be removed before that create (then the run stops with nothing changed).
    foreign = (f"network {agent.network} exists but is not labelled jackin.fleet={agent.fleet}, "
               f"jackin.agent={agent.instance}: it is not jackin's to delete; remove or rename it "
               f"(docker network rm {agent.network}), then run fleet.up again")  # fmt: skip
    is_foreign = f"docker network inspect {shlex.quote(agent.network)} >/dev/null 2>&1"
    precheck = network is None and container is not None
    if precheck:
        commands.append(f"if {is_foreign}; then echo {shlex.quote(foreign)} >&2; exit 1; fi")
    if changes.recreate_reason(agent, state, pools, create=create, remount=remount) is not None:
        commands.append(q("docker", "rm", "-f", agent.container))  # a container on a network that goes goes too
        container = None
    if problem is not None:
        commands.append(f"echo {shlex.quote(f'replacing network {agent.network}: {problem}')} >&2")
        commands.append(q("docker", "network", "rm", agent.network))
    if create:
        commands.append(q("docker", "network", "create", "--driver", "bridge",
                          "--opt", f"com.docker.network.bridge.name={agent.bridge}",
                          "--opt", "com.docker.network.bridge.enable_icc=false",
                          "--label", f"jackin.fleet={agent.fleet}", "--label", f"jackin.agent={agent.instance}",
                          agent.network))  # fmt: skip
        if network is None and not precheck:
            commands[-1] += f" || {{ ! {is_foreign} || echo {shlex.quote(foreign)} >&2; exit 1; }}"
    if container is None:
        commands += [*_own_bridge_check(agent), _run(agent)]
    elif not container.running:
        commands += [*_own_bridge_check(agent), q("docker", "start", agent.container)]
    return commands


def _own_bridge_check(agent: AgentPlan) -> list[str]:
    """Shell lines that stop the script unless the agent's network is on the agent's own bridge
    (the egress rules match that bridge: on any other, the agent would not be filtered)."""
    wrong = f"network {agent.network} is not on bridge {agent.bridge}: refusing to start agent {agent.instance}"
    fmt = '{{index .Options "com.docker.network.bridge.name"}} {{range .IPAM.Config}}{{.Gateway}} {{end}}'
    return [
        f"set -- $(docker network inspect -f {shlex.quote(fmt)} {shlex.quote(agent.network)})",
        f'[ "${{1:-}}" = {agent.bridge} ] || {{ echo {shlex.quote(wrong + " (found ")}"${{1:-none}})" >&2; exit 1; }}',
    ]


def _run(agent: AgentPlan) -> str:
    """``docker run`` of the agent; its filtering resolver's address is the network's gateway ($2 of
    the bridge check), filled in here so the plan and its hash do not depend on it."""
    gateway = '"${2:?no gateway on the agent network}"'
    args = [gateway.join(shlex.quote(p) if p else "" for p in a.split(BRIDGE_GATEWAY)) if BRIDGE_GATEWAY in a
            else shlex.quote(a) for a in agent.run_args()]  # fmt: skip
    return " ".join(["docker", "run", "-d", *args])


def fleet_commands(plan: FleetPlan, state: HostState) -> list[Command]:
    """The fleet's root directory and marker, and removal of agents no longer in the plan.

    A removed agent's container and network go; its user, home and workspace stay
    (nothing lost) until ``fleet.down``.
    """
    commands: list[Command] = []
    if ROOT not in state.paths and plan.fleet_dir not in state.paths:
        commands.append(q("install", "-d", "-m", "0755", "-o", "root", "-g", "root", ROOT))
    have = state.paths.get(plan.fleet_dir)
    if have is None or have.mode != "0711" or have.uid != 0:
        commands.append(q("install", "-d", "-m", "0711", "-o", "root", "-g", "root", plan.fleet_dir))
    # Anything labelled for this fleet that the plan does not name (an agent that left, an old name).
    for name in changes.leaving_containers(plan, state):
        commands.append(q("docker", "rm", "-f", name))
    for name in changes.leaving_networks(plan, state):
        commands.append(q("docker", "network", "rm", name))
    if not state.marker:
        marker = json.dumps({"fleet": plan.fleet, "managed_by": "jackin", "root": plan.fleet_dir}, sort_keys=True)
        commands.append(f"install -d -m 0700 {STATE_DIR}")
        commands += write_files({plan.marker: marker + "\n"})  # by SFTP, never in a command line
    return commands


def _own_users(plan: FleetPlan, state: HostState) -> list[User]:
    """The users teardown may delete: named and commented as this fleet's (``fleet_users``) and in its
    uid range. fleet.gc does not know the range (its plan's is empty): then any non-system uid."""
    low, high = (plan.uid_min, plan.uid_max) if plan.uid_min <= plan.uid_max else (1000, 2**32 - 2)
    return sorted((u for u in state.fleet_users(plan.fleet) if low <= u.uid <= high), key=lambda u: u.name)


def teardown_commands(plan: FleetPlan, state: HostState, *, keep_data: bool) -> list[str]:
    """Remove everything of the fleet that is on the host (containers first, then what they used)."""
    commands = [q("docker", "rm", "-f", *sorted(state.containers))] if state.containers else []
    if state.networks:
        commands.append(q("docker", "network", "rm", *sorted(state.networks)))
    users = _own_users(plan, state)
    if users:  # their processes first: userdel refuses a user with one left
        commands.append(end_processes([u.uid for u in users]))
    commands += [q("userdel", user.name) for user in users]
    # userdel removes a same-named primary group on most systems; make sure of it, and remove
    # a group whose useradd failed (it has no user).
    for group in state.fleet_groups(plan.fleet):  # a group whose useradd failed has no user
        commands.append(f"! getent group {shlex.quote(group)} >/dev/null || groupdel {shlex.quote(group)}")
    if not keep_data:  # the checkpoint tier's btrfs (homes and checkpoints) goes before the fleet dir
        commands += cow.teardown_commands(plan.fleet, plan.fleet_dir, state.cow)
    if not keep_data and plan.fleet_dir in state.paths:
        commands.append(q("rm", "-rf", "--one-file-system", plan.fleet_dir))
        commands.append(f"rmdir {ROOT} 2>/dev/null || true")
    commands += snapshot_teardown(plan.fleet, state, keep_data=keep_data)
    commands += credentials.teardown_commands(plan.fleet, state)  # never kept, not even with --keep-data
    commands += gateway.teardown_commands(plan.fleet, state)  # its values too, with its usage records
    commands += work.teardown_commands(plan.fleet, state)  # the operator has the repository: never kept
    if state.marker:
        commands.append(q("rm", "-f", plan.marker))
        commands.append(f"rmdir {STATE_DIR} 2>/dev/null || true")
    return commands + remove_commands(plan, state)


def snapshot_teardown(fleet: str, state: HostState, *, keep_data: bool) -> list[str]:
    """The fleet's snapshot dir (repository, password, cache, manifests) unless ``keep_data``, and the
    uploaded restic when no fleet's snapshot dir is left to need it. fleet.down pulls the repository
    to the operator's machine before it gets here (or was told not to)."""
    dirs = state.snapshots
    if dirs.fleet and not keep_data:
        return restic.teardown_commands(fleet)
    if dirs.restic and not dirs.fleet and not dirs.others:
        return restic.binary_teardown_commands()
    return []
