"""pyinfra operations for a fleet: each agent's user, directories, network and container.

Every operation reads the one ``FleetState`` fact and yields only the commands
for what differs, so a second run with no spec change yields nothing. The
command builders are plain functions of (plan, state), tested without a host.
"""

from __future__ import annotations

import json
import shlex

from pyinfra import host
from pyinfra.api import OperationError, operation

from jackin.facts.fleet import FleetState, HostState
from jackin.operations.firewall import remove_commands
from jackin.operations.script import Command, script, write_files
from jackin.plan import ROOT, STATE_DIR, AgentPlan, FleetPlan

NOLOGIN = "/usr/sbin/nologin"


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def fleet_state(plan: FleetPlan) -> HostState:
    images = tuple(sorted({a.image for a in plan.agents}))
    return host.get_fact(FleetState, fleet=plan.fleet, uid_min=plan.uid_min, uid_max=plan.uid_max, images=images)


# --- command builders (pure) ---------------------------------------------------


def _dir(path: str, mode: str, uid: int, state: HostState) -> list[str]:
    have = state.paths.get(path)
    if have and have.mode == mode and have.uid == uid and have.gid == uid:
        return []
    return [q("install", "-d", "-m", mode, "-o", str(uid), "-g", str(uid), path)]


def agent_commands(agent: AgentPlan, state: HostState) -> list[str]:
    """Commands that bring one agent's user, home, workspace, network and container to the plan."""
    commands: list[str] = []
    owner = state.user_by_uid(agent.uid)
    if owner is not None and owner.name != agent.user:
        raise OperationError(f"uid {agent.uid} belongs to user {owner.name!r}, not {agent.user!r}; "
                             "set a different fleet.uid_base")  # fmt: skip
    user = state.users.get(agent.user)
    if user is not None and user.uid != agent.uid:
        raise OperationError(f"user {agent.user!r} exists with uid {user.uid}, expected {agent.uid}")
    if agent.user not in state.groups:
        commands.append(q("groupadd", "--gid", str(agent.uid), agent.user))
    comment = f"jackin/{agent.fleet}/{agent.instance}"
    if user is None:
        commands.append(q("useradd", "--uid", str(agent.uid), "--gid", str(agent.uid), "--no-create-home",
                          "--home-dir", agent.home, "--shell", NOLOGIN, "--comment", comment, agent.user))  # fmt: skip
    elif (user.home, user.shell, user.comment, user.gid) != (agent.home, NOLOGIN, comment, agent.uid):
        commands.append(q("usermod", "--gid", str(agent.uid), "--home", agent.home, "--shell", NOLOGIN,
                          "--comment", comment, agent.user))  # fmt: skip
    commands += _dir(agent.home, "0700", agent.uid, state)
    commands += _dir(agent.workspace, "0700", agent.uid, state)

    network = state.networks.get(agent.network)
    if network is None:
        commands.append(q("docker", "network", "create", "--driver", "bridge",
                          "--opt", f"com.docker.network.bridge.name={agent.bridge}",
                          "--opt", "com.docker.network.bridge.enable_icc=false",
                          "--label", f"jackin.fleet={agent.fleet}", "--label", f"jackin.agent={agent.instance}",
                          agent.network))  # fmt: skip

    container = state.containers.get(agent.container)
    if container is not None and container.labels.get("jackin.config") != agent.config_hash:
        commands.append(q("docker", "rm", "-f", agent.container))
        container = None
    if container is None:
        commands.append(q("docker", "run", "-d", *agent.run_args()))
    elif not container.running:
        commands.append(q("docker", "start", agent.container))
    return commands


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
    containers, networks = {a.container for a in plan.agents}, {a.network for a in plan.agents}
    for name in sorted(set(state.containers) - containers):
        commands.append(q("docker", "rm", "-f", name))
    for name in sorted(set(state.networks) - networks):
        commands.append(q("docker", "network", "rm", name))
    if not state.marker:
        marker = json.dumps({"fleet": plan.fleet, "managed_by": "jackin", "root": plan.fleet_dir}, sort_keys=True)
        commands.append(f"install -d -m 0700 {STATE_DIR}")
        commands += write_files({plan.marker: marker + "\n"})  # by SFTP, never in a command line
    return commands


def teardown_commands(plan: FleetPlan, state: HostState, *, keep_data: bool) -> list[str]:
    """Remove everything of the fleet that is on the host (containers first, then what they used)."""
    commands = [q("docker", "rm", "-f", *sorted(state.containers))] if state.containers else []
    if state.networks:
        commands.append(q("docker", "network", "rm", *sorted(state.networks)))
    for user in sorted(state.fleet_users(plan.fleet), key=lambda u: u.name):
        commands.append(q("userdel", user.name))
    # userdel removes a same-named primary group on most systems; make sure of it, and remove
    # a group whose useradd failed (it has no user).
    for group in state.fleet_groups(plan.fleet):  # a group whose useradd failed has no user
        commands.append(f"! getent group {shlex.quote(group)} >/dev/null || groupdel {shlex.quote(group)}")
    if not keep_data and plan.fleet_dir in state.paths:
        commands.append(q("rm", "-rf", "--one-file-system", plan.fleet_dir))
        commands.append(f"rmdir {ROOT} 2>/dev/null || true")
    if state.marker:
        commands.append(q("rm", "-f", plan.marker))
        commands.append(f"rmdir {STATE_DIR} 2>/dev/null || true")
    return commands + remove_commands(plan, state)


# --- pyinfra operations --------------------------------------------------------


# Operations take the FleetState read once per host by the deploy: pyinfra runs each
# operation's generator twice (to predict changes, then to execute), and every fact
# lookup inside it would be another round trip.


@operation()
def fleet_root(plan: FleetPlan, state: HostState):
    """The fleet's directory and marker; agents that left the plan lose their container and network."""
    yield from script(fleet_commands(plan, state), noop=f"fleet {plan.fleet} root is up to date")


@operation()
def agent(agent: AgentPlan, state: HostState):
    """One agent: its Unix user and group, home and workspace (0700), network and hardened container."""
    yield from script(agent_commands(agent, state), noop=f"agent {agent.instance} is up to date")


@operation()
def teardown(plan: FleetPlan, state: HostState, keep_data: bool = False):
    """Remove the fleet's containers, networks, users, directories, marker and firewall table."""
    yield from script(teardown_commands(plan, state, keep_data=keep_data), noop=f"nothing of fleet {plan.fleet} is left")
