"""Fleet operations as facts-to-commands tables (pyinfra's operation-test style):
a ``HostState`` in, the exact ordered commands out, nothing when all is in place."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from jackin.operations.files import Refused as OperationError

from jackin.facts.fleet import Container, HostState, Network, PathInfo, User
from jackin.operations.agent_paths import as_agent, end_processes, home_commands, workspace_commands
from jackin.operations.fleet import agent_commands, agent_parts, concurrently, fleet_commands, teardown_commands
from jackin.operations.script import Upload, write_files
from jackin.plan.fleet import BRIDGE_GATEWAY, AgentPlan, FleetPlan, build
from jackin.spec import parse_inventory
from jackin.spec.models import AddressPool

INVENTORY = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
"""
PLAN = build(parse_inventory(INVENTORY, "f.yaml").fleet, {"coder-1": 60000, "coder-2": 60001})
CODER = PLAN.agents[0]
NOLOGIN = "/usr/sbin/nologin"


def user(agent: AgentPlan, **change: object) -> User:
    fields = {"name": agent.user, "uid": agent.uid, "gid": agent.uid, "comment": f"jackin/{agent.fleet}/{agent.instance}",
              "home": agent.home, "shell": NOLOGIN}  # fmt: skip
    return User(**{**fields, **change})


def container(agent: AgentPlan, *, running: bool = True, config: str | None = None,
              networks: list[str] | None = None) -> Container:  # fmt: skip
    labels = {**agent.labels, "jackin.config": config or agent.config_hash}
    return Container(name=agent.container, labels=labels, status="running" if running else "exited", running=running,
                     networks=networks)  # fmt: skip


def network(agent: AgentPlan, **change: object) -> Network:
    fields = {"name": agent.network, "labels": agent.labels, "bridge": agent.bridge, "subnets": ["172.20.0.0/16"]}
    return Network(**{**fields, **change})


def present(*agents: AgentPlan, **change: object) -> HostState:
    """A host where ``agents`` are exactly as planned (and the fleet's root and marker exist)."""
    fields: dict[str, object] = {
        "users": {a.user: user(a) for a in agents},
        "groups": {a.user: a.uid for a in agents},
        "paths": {
            "/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0),
            **{a.home: PathInfo(mode="0750", uid=0, gid=a.uid) for a in agents},
            **{a.workspace: PathInfo(mode="0700", uid=a.uid, gid=a.uid) for a in agents},
        },
        "docker": True,
        "containers": {a.container: container(a) for a in agents},
        "networks": {a.network: network(a) for a in agents},
        "images": ["jackin/agent:busybox"],
        "marker": True,
    }
    return HostState(**{**fields, **change})


GROUPADD = "groupadd --gid 60000 jk-demo--coder-1"
USERADD = ("useradd --uid 60000 --gid 60000 --no-create-home --home-dir /srv/jackin/demo/coder-1 "
           "--shell /usr/sbin/nologin --comment jackin/demo/coder-1 jk-demo--coder-1")  # fmt: skip
USERMOD = ("usermod --gid 60000 --home /srv/jackin/demo/coder-1 --shell /usr/sbin/nologin "
           "--comment jackin/demo/coder-1 jk-demo--coder-1")  # fmt: skip
HOME = [
    "{ [ -d /srv/jackin/demo/coder-1 ] && [ ! -L /srv/jackin/demo/coder-1 ]; } "
    "|| mkdir -m 0750 -- /srv/jackin/demo/coder-1",
    "chown -h 0:60000 -- /srv/jackin/demo/coder-1",
    "chmod 00750 -- /srv/jackin/demo/coder-1",
]
WS = "/srv/jackin/demo/coder-1/workspace"
WORKSPACE = [f"if [ -L {WS} ]; then rm -f -- {WS}; fi", f"[ -d {WS} ] || mkdir -m 0700 -- {WS}",
             f"chown -h 60000:60000 -- {WS}", f"chmod 00700 -- {WS}"]  # fmt: skip
NETWORK = (f"docker network create --driver bridge --opt com.docker.network.bridge.name={CODER.bridge} "
           "--opt com.docker.network.bridge.enable_icc=false --label jackin.fleet=demo --label jackin.agent=coder-1 "
           "jk-demo--coder-1")  # fmt: skip
FOREIGN = ("if docker network inspect jk-demo--coder-1 >/dev/null 2>&1; then echo 'network jk-demo--coder-1 exists "
           "but is not labelled jackin.fleet=demo, jackin.agent=coder-1: it is not jackin'\"'\"'s to delete; remove or "
           "rename it (docker network rm jk-demo--coder-1), then run fleet.up again' >&2; exit 1; fi")  # fmt: skip
# On a host where neither the network nor the container is listed: the create itself finds a foreign network.
CREATE = (NETWORK + " || { ! docker network inspect jk-demo--coder-1 >/dev/null 2>&1 || echo 'network jk-demo--coder-1 "
          "exists but is not labelled jackin.fleet=demo, jackin.agent=coder-1: it is not jackin'\"'\"'s to delete; remove "
          "or rename it (docker network rm jk-demo--coder-1), then run fleet.up again' >&2; exit 1; }")  # fmt: skip
CHECK = [
    "set -- $(docker network inspect -f '{{index .Options \"com.docker.network.bridge.name\"}} "
    "{{range .IPAM.Config}}{{.Gateway}} {{end}}' jk-demo--coder-1)",
    f'[ "${{1:-}}" = {CODER.bridge} ] || {{ echo \'network jk-demo--coder-1 is not on bridge {CODER.bridge}: '
    'refusing to start agent coder-1 (found \'"${1:-none})" >&2; exit 1; }',
]  # fmt: skip
RUN = "docker run -d " + " ".join(shlex.quote(a) for a in CODER.run_args())
RM = "docker rm -f jk-demo--coder-1"
START = "docker start jk-demo--coder-1"
NETRM = "docker network rm jk-demo--coder-1"
ONE = present(CODER)


def without(state: HostState, field: str, key: str) -> HostState:
    return state.model_copy(update={field: {k: v for k, v in getattr(state, field).items() if k != key}})


def replaced(state: HostState, field: str, key: str, value: object) -> HostState:
    return state.model_copy(update={field: {**getattr(state, field), key: value}})


# --- agent_commands --------------------------------------------------------------

AGENT_CASES = {
    "empty host": (HostState(), [GROUPADD, USERADD, *HOME, *WORKSPACE, CREATE, *CHECK, RUN]),
    "everything in place": (ONE, []),
    "other agents do not matter": (present(CODER, PLAN.agents[1]), []),
    "container has another config": (replaced(ONE, "containers", CODER.container, container(CODER, config="0" * 12)),
                                     [RM, *CHECK, RUN]),
    "container without a config label": (
        replaced(ONE, "containers", CODER.container,
                 Container(name=CODER.container, labels=CODER.labels, status="running", running=True)),
        [RM, *CHECK, RUN]),
    "stopped container with the right config": (
        replaced(ONE, "containers", CODER.container, container(CODER, running=False)), [*CHECK, START]),
    "stopped container with another config": (
        replaced(ONE, "containers", CODER.container, container(CODER, running=False, config="0" * 12)),
        [RM, *CHECK, RUN]),
    "container gone": (without(ONE, "containers", CODER.container), [*CHECK, RUN]),
    # The container was attached to the network that is gone: both are made anew.
    "network gone": (without(ONE, "networks", CODER.network), [FOREIGN, RM, NETWORK, *CHECK, RUN]),
    "network gone, container too": (without(without(ONE, "networks", CODER.network), "containers", CODER.container),
                                    [CREATE, *CHECK, RUN]),
    "container on its own network": (replaced(ONE, "containers", CODER.container,
                                              container(CODER, networks=[CODER.network])), []),
    "container also on another network": (
        replaced(ONE, "containers", CODER.container, container(CODER, networks=["bridge", CODER.network])),
        [RM, *CHECK, RUN]),
    "container on another network only": (
        replaced(ONE, "containers", CODER.container, container(CODER, networks=["bridge"])), [RM, *CHECK, RUN]),
    "our network on another bridge": (
        replaced(ONE, "networks", CODER.network, network(CODER, bridge="br-0123456789ab")),
        [RM, "echo 'replacing network jk-demo--coder-1: its bridge is br-0123456789ab, not jk668ccdd6' >&2", NETRM,
         NETWORK, *CHECK, RUN]),
    "our network with no bridge name, no container": (
        without(replaced(ONE, "networks", CODER.network, network(CODER, bridge=None)), "containers", CODER.container),
        ["echo 'replacing network jk-demo--coder-1: its bridge is a name Docker chose, not jk668ccdd6' >&2", NETRM,
         NETWORK, *CHECK, RUN]),
    "group gone": (without(ONE, "groups", CODER.user), [GROUPADD]),
    "user gone": (without(ONE, "users", CODER.user), [USERADD]),
    "user with a login shell": (replaced(ONE, "users", CODER.user, user(CODER, shell="/bin/bash")), [USERMOD]),
    "user with another comment": (replaced(ONE, "users", CODER.user, user(CODER, comment="x")), [USERMOD]),
    "user with another home": (replaced(ONE, "users", CODER.user, user(CODER, home="/home/x")), [USERMOD]),
    "user with another primary group": (replaced(ONE, "users", CODER.user, user(CODER, gid=100)), [USERMOD]),
    "home with a loose mode": (replaced(ONE, "paths", CODER.home, PathInfo(mode="0755", uid=0, gid=60000)),
                               [*HOME, *WORKSPACE, RM, *CHECK, RUN]),
    "home of an older release (the agent's, 0700)": (
        replaced(ONE, "paths", CODER.home, PathInfo(mode="0700", uid=60000, gid=60000)),
        [*HOME, *WORKSPACE, RM, *CHECK, RUN]),
    "workspace owned by root": (replaced(ONE, "paths", CODER.workspace, PathInfo(mode="0700", uid=0, gid=0)),
                                WORKSPACE),
    "workspace with another group": (
        replaced(ONE, "paths", CODER.workspace, PathInfo(mode="0700", uid=60000, gid=0)), WORKSPACE),
    "workspace the agent made 0755 keeps its container": (
        replaced(ONE, "paths", CODER.workspace, PathInfo(mode="0755", uid=60000, gid=60000)), WORKSPACE),
    "workspace with the setgid bit": (
        replaced(ONE, "paths", CODER.workspace, PathInfo(mode="2700", uid=60000, gid=60000)), WORKSPACE),
    "workspace gone": (without(ONE, "paths", CODER.workspace), [*WORKSPACE, RM, *CHECK, RUN]),
    "workspace is a symlink": (
        replaced(ONE, "paths", CODER.workspace, PathInfo(kind="l", mode="0777", uid=60000, gid=60000)),
        [*WORKSPACE, RM, *CHECK, RUN]),
    "home and workspace gone": (without(without(ONE, "paths", CODER.home), "paths", CODER.workspace),
                                [*HOME, *WORKSPACE, RM, *CHECK, RUN]),
    "home and workspace gone, no container": (
        without(without(without(ONE, "paths", CODER.home), "paths", CODER.workspace), "containers", CODER.container),
        [*HOME, *WORKSPACE, *CHECK, RUN]),
}  # fmt: skip


@pytest.mark.parametrize(("state", "expected"), AGENT_CASES.values(), ids=AGENT_CASES.keys())
def test_agent_commands(state: HostState, expected: list[str]) -> None:
    assert agent_commands(CODER, state) == expected


def test_agent_commands_run_is_the_plans_hardened_argv() -> None:
    run = agent_commands(CODER, HostState())[-1]
    assert shlex.split(run) == ["docker", "run", "-d", *CODER.run_args()]


def test_agent_commands_uid_owned_by_another_user() -> None:
    stranger = User(name="postgres", uid=60000, gid=60000, comment="", home="/var/lib/postgresql", shell="/bin/sh")
    with pytest.raises(OperationError) as caught:
        agent_commands(CODER, HostState(users={"postgres": stranger}))
    assert str(caught.value) == (
        "uid 60000 belongs to user 'postgres', not 'jk-demo--coder-1'; set a different fleet.uid_base"
    )


def test_agent_commands_user_exists_with_another_uid() -> None:
    with pytest.raises(OperationError) as caught:
        agent_commands(CODER, HostState(users={CODER.user: user(CODER, uid=60007)}))
    assert str(caught.value) == "user 'jk-demo--coder-1' exists with uid 60007, expected 60000"


def test_agent_commands_network_labelled_for_another_agent() -> None:
    other = replaced(ONE, "networks", CODER.network, network(CODER, labels={"jackin.fleet": "demo", "jackin.agent": "x-1"}))
    with pytest.raises(OperationError) as caught:
        agent_commands(CODER, other)
    assert str(caught.value) == (
        "network 'jk-demo--coder-1' is labelled jackin.agent='x-1', not 'coder-1': it is not this agent's to replace; "
        "remove it (docker network rm jk-demo--coder-1) and run fleet.up again"
    )


@pytest.mark.parametrize(
    ("subnets", "replace"),
    [(["10.200.3.0/24"], False), (["172.20.0.0/16"], True), (["10.200.0.0/15"], True), ([], False)],
)
def test_agent_commands_network_outside_the_address_pools_is_replaced(subnets: list[str], replace: bool) -> None:
    pools = [AddressPool(base="10.200.0.0/16", size=24)]
    state = replaced(ONE, "networks", CODER.network, network(CODER, subnets=subnets))
    expected = [RM, f"echo 'replacing network jk-demo--coder-1: its subnet {subnets[0]} is outside the fleet'\"'\"'s "
                "address pools' >&2", NETRM, NETWORK, *CHECK, RUN] if replace else []  # fmt: skip
    assert agent_commands(CODER, state, pools) == expected
    assert agent_commands(CODER, state) == []  # without pools, any subnet Docker chose


def test_filtered_agent_runs_with_its_bridge_gateway_as_resolver() -> None:
    spec = INVENTORY.replace("      count: 2\n", "      network: {mode: allowlist, allow: [github.com:443], dns: [9.9.9.9]}\n")
    agent = build(parse_inventory(spec, "f.yaml").fleet, {"coder-1": 60000}).agents[0]
    commands = agent_commands(agent, present(agent))
    assert commands == []
    run = agent_commands(agent, without(present(agent), "containers", agent.container))[-1]
    args = ["docker", "run", "-d", *agent.run_args()]
    at = args.index("--dns") + 1
    assert args[at] == BRIDGE_GATEWAY and "9.9.9.9" not in args
    # The gateway the bridge check read ($2), quoted, and failing the script when there is none.
    assert run == " ".join([*map(shlex.quote, args[:at]), '"${2:?no gateway on the agent network}"',
                            *map(shlex.quote, args[at + 1 :])])  # fmt: skip


def test_bridge_check_and_gateway_in_a_shell(tmp_path) -> None:
    """The check and the run line under ``set -e`` with a stub docker: the run only on the agent's bridge."""
    spec = INVENTORY.replace("      count: 2\n", "      network: {mode: allowlist, allow: [github.com:443]}\n")
    agent = build(parse_inventory(spec, "f.yaml").fleet, {"coder-1": 60000}).agents[0]
    script = "\n".join(agent_commands(agent, without(present(agent), "containers", agent.container)))
    stub = tmp_path / "docker"
    for inspect, ran in ((f"{agent.bridge} 172.30.0.1 ", True), ("br-x 172.30.0.1 ", False), ("", False),
                         (f"{agent.bridge} ", False)):  # fmt: skip
        stub.write_text(f'#!/bin/sh\n[ "$1" = run ] && echo "RUN $*" && exit 0\necho "{inspect}"\n')
        stub.chmod(0o755)
        done = subprocess.run(["sh", "-c", "set -e\n" + script], capture_output=True, text=True, timeout=10,
                              env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # fmt: skip
        assert (done.returncode == 0) == ran, done.stderr
        assert ("--dns 172.30.0.1 " in done.stdout) == ran
        if not ran:
            assert done.stdout == "" and done.stderr.strip()


# --- fleet_commands --------------------------------------------------------------

MARKER_TEXT = json.dumps({"fleet": "demo", "managed_by": "jackin", "root": "/srv/jackin/demo"}, sort_keys=True) + "\n"
MARKER = ["install -d -m 0700 /var/lib/jackin", *write_files({"/var/lib/jackin/fleet-demo.json": MARKER_TEXT})]
ROOT_DIR = "install -d -m 0755 -o root -g root /srv/jackin"
FLEET_DIR = "install -d -m 0711 -o root -g root /srv/jackin/demo"
BOTH = present(*PLAN.agents)
GONE = PLAN.model_copy(update={"agents": [CODER]})  # coder-2 left the plan
CODER_2 = PLAN.agents[1]

FLEET_CASES = {
    "empty host": (PLAN, HostState(), [ROOT_DIR, FLEET_DIR, *MARKER]),
    "everything in place": (PLAN, BOTH, []),
    "marker missing": (PLAN, BOTH.model_copy(update={"marker": False}), MARKER),
    "fleet dir with a loose mode": (PLAN, replaced(BOTH, "paths", "/srv/jackin/demo",
                                                   PathInfo(mode="0755", uid=0, gid=0)), [FLEET_DIR]),
    "fleet dir owned by an agent": (PLAN, replaced(BOTH, "paths", "/srv/jackin/demo",
                                                   PathInfo(mode="0711", uid=60000, gid=0)), [FLEET_DIR]),
    "fleet dir gone, agent dirs left": (PLAN, without(BOTH, "paths", "/srv/jackin/demo"), [ROOT_DIR, FLEET_DIR]),
    "an agent left the plan": (GONE, BOTH, ["docker rm -f jk-demo--coder-2", "docker network rm jk-demo--coder-2"]),
    "every agent left the plan": (
        PLAN.model_copy(update={"agents": []}), BOTH,
        ["docker rm -f jk-demo--coder-1", "docker rm -f jk-demo--coder-2",
         "docker network rm jk-demo--coder-1", "docker network rm jk-demo--coder-2"]),
    "unlabelled leftovers of the fleet": (
        PLAN,
        BOTH.model_copy(update={
            "containers": {**BOTH.containers, "jk-demo--x": Container(name="jk-demo--x", labels={"jackin.fleet": "demo"},
                                                                      status="created", running=False)},
            "networks": {**BOTH.networks, "jk-demo--x": Network(name="jk-demo--x", labels={"jackin.fleet": "demo"})}}),
        ["docker rm -f jk-demo--x", "docker network rm jk-demo--x"]),
}  # fmt: skip


@pytest.mark.parametrize(("plan", "state", "expected"), FLEET_CASES.values(), ids=FLEET_CASES.keys())
def test_fleet_commands(plan: FleetPlan, state: HostState, expected: list[str]) -> None:
    assert fleet_commands(plan, state) == expected


def test_fleet_commands_keep_the_removed_agents_user_and_data() -> None:
    commands = fleet_commands(GONE, BOTH)
    assert not any(c.startswith(("userdel", "groupdel", "rm -rf")) for c in commands)


def test_the_marker_goes_by_sftp() -> None:
    commands = fleet_commands(PLAN, BOTH.model_copy(update={"marker": False}))
    [upload] = [c for c in commands if isinstance(c, Upload)]
    assert (upload.target, upload.data, upload.mode) == ("/var/lib/jackin/fleet-demo.json", MARKER_TEXT.encode(), "0644")
    assert not any("managed_by" in c for c in commands if isinstance(c, str))


# --- teardown_commands -----------------------------------------------------------

FULL = present(*PLAN.agents, nft_table=False)


def userdel(*users: tuple[str, int]) -> list[str]:
    """The users' removal: every process of their uids ended first (``end_processes``), then ``userdel``."""
    return [end_processes([uid for _, uid in users]), *(f"userdel {name}" for name, _ in users)]


USERS_GROUPS = [
    *userdel(("jk-demo--coder-1", 60000), ("jk-demo--coder-2", 60001)),
    "! getent group jk-demo--coder-1 >/dev/null || groupdel jk-demo--coder-1",
    "! getent group jk-demo--coder-2 >/dev/null || groupdel jk-demo--coder-2",
]  # fmt: skip
CONTAINERS_RM = "docker rm -f jk-demo--coder-1 jk-demo--coder-2"
NETWORKS_RM = "docker network rm jk-demo--coder-1 jk-demo--coder-2"
DATA_RM = ["rm -rf --one-file-system /srv/jackin/demo", "rmdir /srv/jackin 2>/dev/null || true"]
MARKER_RM = ["rm -f /var/lib/jackin/fleet-demo.json", "rmdir /var/lib/jackin 2>/dev/null || true"]


def test_teardown_clean_host() -> None:
    assert teardown_commands(PLAN, HostState(), keep_data=False) == []
    assert teardown_commands(PLAN, HostState(docker=True, images=["jackin/agent:busybox"]), keep_data=True) == []


def test_teardown_everything_in_order() -> None:
    assert teardown_commands(PLAN, FULL, keep_data=False) == [
        CONTAINERS_RM, NETWORKS_RM, *USERS_GROUPS, *DATA_RM, *MARKER_RM,
    ]  # fmt: skip


def test_teardown_keep_data_leaves_the_fleet_dir() -> None:
    assert teardown_commands(PLAN, FULL, keep_data=True) == [CONTAINERS_RM, NETWORKS_RM, *USERS_GROUPS, *MARKER_RM]


def test_teardown_only_what_is_there() -> None:
    state = HostState(users={CODER.user: user(CODER)}, marker=False)
    assert teardown_commands(PLAN, state, keep_data=False) == userdel(("jk-demo--coder-1", 60000))


def test_teardown_removes_only_users_of_the_fleet_by_range_comment_and_name() -> None:
    """A user is deleted only when its uid is in the fleet's range, its comment is jackin/<fleet>/<instance>
    and its name is the one jackin gives that instance: any one of them alone names a stranger."""
    users = {
        "jk-demo--coder-1": user(CODER),
        "jk-demo--old-1": user(CODER, name="jk-demo--old-1", uid=60100, gid=60100, comment="jackin/demo/old-1"),
        "jk-demo--out-1": user(CODER, name="jk-demo--out-1", uid=59000, gid=59000, comment="jackin/demo/out-1"),
        "jk-demo-2--coder-1": user(CODER, name="jk-demo-2--coder-1", uid=60005, gid=60005,
                                   comment="jackin/demo-2/coder-1"),
        "backup": user(CODER, name="backup", uid=60010, gid=60010, comment="backup"),
        "decoy": user(CODER, name="decoy", uid=60999, gid=60999, comment="jackin/demo/x"),
        "jk-demo--x": user(CODER, name="jk-demo--x", uid=60998, gid=60998, comment="jackin/demo/y"),
        "jk-demo--z": user(CODER, name="jk-demo--z", uid=60997, gid=60997, comment="jackin/demo/z/.."),
    }  # fmt: skip
    commands = teardown_commands(PLAN, HostState(users=users), keep_data=False)
    assert commands == userdel(("jk-demo--coder-1", 60000), ("jk-demo--old-1", 60100))


def test_teardown_of_a_gc_plan_takes_any_non_system_uid_of_the_fleet() -> None:
    users = {"jk-demo--out-1": user(CODER, name="jk-demo--out-1", uid=59000, gid=59000, comment="jackin/demo/out-1"),
             "jk-demo--sys-1": user(CODER, name="jk-demo--sys-1", uid=999, gid=999, comment="jackin/demo/sys-1")}
    gc = FleetPlan(fleet="demo", uid_min=0, uid_max=-1, agents=[])
    assert teardown_commands(gc, HostState(users=users), keep_data=False) == userdel(("jk-demo--out-1", 59000))


def test_teardown_removes_every_group_named_for_the_fleet() -> None:
    groups = {"jk-demo--coder-1": 60000, "jk-demo--coder-2": 60009, "staff": 60010}
    state = HostState(users={a.user: user(a) for a in PLAN.agents}, groups=groups)
    assert teardown_commands(PLAN, state, keep_data=False) == USERS_GROUPS


def test_teardown_leaves_another_fleets_groups() -> None:
    """Fleet 'demo' once ran groupdel on every in-range group named 'jk-demo-*', 'demo-2''s too."""
    state = HostState(groups={"jk-demo--coder-1": 60000, "jk-demo-2--coder-1": 60005},
                      users={CODER.user: user(CODER)})  # fmt: skip
    commands = teardown_commands(PLAN, state, keep_data=False)
    assert commands == [*userdel(("jk-demo--coder-1", 60000)), USERS_GROUPS[3]]


def test_teardown_removes_a_fleet_group_without_its_user() -> None:
    state = HostState(groups={"jk-demo--coder-1": 60000})
    assert teardown_commands(PLAN, state, keep_data=False) == [
        "! getent group jk-demo--coder-1 >/dev/null || groupdel jk-demo--coder-1"
    ]


def test_teardown_nft_table_only_when_present() -> None:
    assert "nft delete table inet jackin-demo" in teardown_commands(PLAN, HostState(nft_table=True), keep_data=False)
    assert not any("nft" in c for c in teardown_commands(PLAN, FULL, keep_data=False))


def test_teardown_marker_only_when_present() -> None:
    commands = teardown_commands(PLAN, FULL.model_copy(update={"marker": False}), keep_data=False)
    assert not set(MARKER_RM) & set(commands)


def test_teardown_of_a_gc_plan_removes_by_state_alone() -> None:
    """fleet.gc tears down with an agentless plan and an empty uid range: the state says what to remove."""
    gc = FleetPlan(fleet="demo", uid_min=0, uid_max=-1, agents=[])
    commands = teardown_commands(gc, FULL.model_copy(update={"groups": {}}), keep_data=False)
    assert commands == [CONTAINERS_RM, NETWORKS_RM, *userdel(("jk-demo--coder-1", 60000), ("jk-demo--coder-2", 60001)),
                        *DATA_RM, *MARKER_RM]  # fmt: skip


# --- agent_paths -----------------------------------------------------------------


def run_sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-ec", script], capture_output=True, text=True, timeout=10)


def test_workspace_commands_replace_a_symlink_without_following_it(tmp_path: Path) -> None:
    """Run for real (as this test's user, with its uid): the link goes, its target keeps its mode."""
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    workspace = tmp_path / "workspace"
    workspace.symlink_to(target)
    uid = os.getuid()
    result = run_sh("\n".join(c.replace(f"{uid}:{uid}", f"{uid}:{os.getgid()}")
                               for c in workspace_commands(str(workspace), uid)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not workspace.is_symlink() and workspace.is_dir()
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_workspace_commands_refuse_a_file(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.write_text("the agent's")
    result = run_sh("\n".join(workspace_commands(str(workspace), os.getuid())))
    assert result.returncode != 0 and "File exists" in result.stderr
    assert workspace.read_text() == "the agent's"


def test_home_commands_refuse_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    home = tmp_path / "home"
    home.symlink_to(target)
    result = run_sh("\n".join(home_commands(str(home), os.getgid())))
    assert result.returncode != 0 and "File exists" in result.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_path_commands_quote_the_path() -> None:
    commands = home_commands("/srv/jackin/a b/x;y", 60000) + workspace_commands("/srv/jackin/a b/x;y/workspace", 60000)
    assert all(run_sh(f"exit 0; {c}").returncode == 0 for c in commands)  # valid sh
    assert all("'/srv/jackin/a b/x;y" in c for c in commands)


def test_as_agent_drops_to_the_agents_ids() -> None:
    assert as_agent(60000, 60000, "mkdir", "-p", "a b") == (
        "setpriv --reuid=60000 --regid=60000 --clear-groups -- mkdir -p 'a b'"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="runs processes as other uids: needs root")
def test_end_processes_ends_every_process_of_the_uid_and_no_other() -> None:
    """Run for real: three processes of uid 61911 (one blocked opening a FIFO, as a status read of old
    left them; one that ignores what it can) and one of 61912. The 61911 ones are killed, and the
    command returns once they are gone (this test reaps them: it is their parent; a process tree is
    the lab's test, where systemd reaps orphans: this machine's init leaves them zombies a while);
    the other uid's process lives on."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="jackin-end-"))
    top.chmod(0o755)  # pytest's tmp dirs are root's 0700: the FIFO must be reachable by the uid
    fifo = top / "fifo"
    os.mkfifo(fifo)
    fifo.chmod(0o666)

    def spawn(uid: int, *argv: str) -> subprocess.Popen:
        return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    agents = [spawn(61911, "sleep", "300"), spawn(61911, "perl", "-e", "$SIG{$_} = 'IGNORE' for keys %SIG; sleep 300"),
              spawn(61911, "head", "-c1", str(fifo))]  # fmt: skip
    other = spawn(61912, "sleep", "300")
    try:
        deadline = time.monotonic() + 10  # each switched to its uid (one not yet switched would be missed)
        while any(os.stat(f"/proc/{p.pid}").st_uid != 61911 for p in agents) and time.monotonic() < deadline:
            time.sleep(0.01)
        ending = subprocess.Popen(["sh", "-c", end_processes([61911, 61913])], stderr=subprocess.PIPE, text=True)
        assert [p.wait(timeout=10) for p in agents] == [-9, -9, -9]  # reaped here: gone for good
        assert ending.wait(timeout=10) == 0, ending.stderr.read() if ending.stderr else ""
        assert other.poll() is None  # another uid's process is not touched
        again = subprocess.run(["sh", "-c", end_processes([61911])], capture_output=True, timeout=5)
        assert again.returncode == 0 and not again.stderr  # none left: nothing to do
    finally:
        for process in (*agents, other):
            process.kill()
            process.wait()
        shutil.rmtree(top)


@pytest.mark.parametrize(("create_ok", "exists", "code", "says_foreign"),
                         [(True, False, 0, False), (False, True, 1, True), (False, False, 1, False)])  # fmt: skip
def test_the_create_finds_a_foreign_network_and_stops_the_script(tmp_path, create_ok, exists, code, says_foreign) -> None:
    """The create line against a stub docker: a failed create stops the script, and says the network is
    not ours when one of that name exists; a create that works costs no other docker call."""
    log = tmp_path / "calls"
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\ncase "$2" in create) exit {0 if create_ok else 1};; '
                      f"inspect) exit {0 if exists else 1};; esac\n")  # fmt: skip
    docker.chmod(0o755)
    done = subprocess.run(["sh", "-c", f"set -e\n{CREATE}\necho after"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=10)  # fmt: skip
    assert done.returncode == code and ("after" in done.stdout) == create_ok
    assert ("is not labelled jackin.fleet=demo" in done.stderr) == says_foreign
    assert log.read_text().splitlines() == (["network create"] if create_ok else ["network create", "network inspect"])


def test_concurrently_runs_every_job_and_names_each_that_failed(tmp_path) -> None:
    """Each job is a ``set -e`` script of its own, all running at once: a failed job stops itself
    alone, the others finish, and the whole command fails naming the failed jobs."""
    out = tmp_path / "out"
    jobs = [("a-1", [f"echo a1 >> {out}", "false", f"echo never >> {out}"]),
            ("a-2", ["sleep 0.3", f"echo a2 >> {out}"]), ("a-3", ["exit 3"]), ("a-4", [f"echo a4 >> {out}"])]  # fmt: skip
    done = run_sh(concurrently(jobs) + "\necho after")
    assert done.returncode == 1 and "after" not in done.stdout
    assert done.stderr.strip() == "failed: a-1: exit 1; a-3: exit 3"
    assert sorted(out.read_text().split()) == ["a1", "a2", "a4"]
    # Each job's stderr is passed on under its name, and a failed job's last line is its reason, last.
    said = run_sh(concurrently([("c-1", ["echo note >&2"]), ("c-2", ["echo 'network n is not on bridge b' >&2", "exit 1"])]))
    assert said.returncode == 1
    assert said.stderr.splitlines() == ["c-1: note", "c-2: network n is not on bridge b",
                                        "failed: c-2: network n is not on bridge b"]  # fmt: skip
    ok = run_sh(concurrently([(n, [f"echo {n} >> {out}.ok"]) for n in ("b-1", "b-2")]) + "\necho after")
    assert ok.returncode == 0 and ok.stdout == "after\n" and sorted(Path(f"{out}.ok").read_text().split()) == ["b-1", "b-2"]


def test_agent_parts_split_the_commands_at_the_network() -> None:
    host, docker = agent_parts(CODER, HostState())
    assert host + docker == agent_commands(CODER, HostState())
    assert host[0].startswith("groupadd") and docker[0].startswith("docker network create")
    assert not any(c.startswith("docker") for c in host)
