"""Fleet operations as facts-to-commands tables (pyinfra's operation-test style):
a ``HostState`` in, the exact ordered commands out, nothing when all is in place."""

from __future__ import annotations

import json
import shlex

import pytest
from pyinfra.api import OperationError

from jackin.facts.fleet import Container, HostState, Network, PathInfo, User
from jackin.operations.fleet import agent_commands, fleet_commands, teardown_commands
from jackin.operations.script import Upload, write_files
from jackin.plan import AgentPlan, FleetPlan, build
from jackin.spec import parse_inventory

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


def container(agent: AgentPlan, *, running: bool = True, config: str | None = None) -> Container:
    labels = {**agent.labels, "jackin.config": config or agent.config_hash}
    return Container(name=agent.container, labels=labels, status="running" if running else "exited", running=running)


def network(agent: AgentPlan) -> Network:
    return Network(name=agent.network, labels=agent.labels, bridge=agent.bridge, subnets=["172.20.0.0/16"])


def present(*agents: AgentPlan, **change: object) -> HostState:
    """A host where ``agents`` are exactly as planned (and the fleet's root and marker exist)."""
    fields: dict[str, object] = {
        "users": {a.user: user(a) for a in agents},
        "groups": {a.user: a.uid for a in agents},
        "paths": {
            "/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0),
            **{a.home: PathInfo(mode="0700", uid=a.uid, gid=a.uid) for a in agents},
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
HOME = "install -d -m 0700 -o 60000 -g 60000 /srv/jackin/demo/coder-1"
WORKSPACE = "install -d -m 0700 -o 60000 -g 60000 /srv/jackin/demo/coder-1/workspace"
NETWORK = (f"docker network create --driver bridge --opt com.docker.network.bridge.name={CODER.bridge} "
           "--opt com.docker.network.bridge.enable_icc=false --label jackin.fleet=demo --label jackin.agent=coder-1 "
           "jk-demo--coder-1")  # fmt: skip
RUN = "docker run -d " + " ".join(shlex.quote(a) for a in CODER.run_args())
RM = "docker rm -f jk-demo--coder-1"
START = "docker start jk-demo--coder-1"
ONE = present(CODER)


def without(state: HostState, field: str, key: str) -> HostState:
    return state.model_copy(update={field: {k: v for k, v in getattr(state, field).items() if k != key}})


def replaced(state: HostState, field: str, key: str, value: object) -> HostState:
    return state.model_copy(update={field: {**getattr(state, field), key: value}})


# --- agent_commands --------------------------------------------------------------

AGENT_CASES = {
    "empty host": (HostState(), [GROUPADD, USERADD, HOME, WORKSPACE, NETWORK, RUN]),
    "everything in place": (ONE, []),
    "other agents do not matter": (present(CODER, PLAN.agents[1]), []),
    "container has another config": (replaced(ONE, "containers", CODER.container, container(CODER, config="0" * 12)),
                                     [RM, RUN]),
    "container without a config label": (
        replaced(ONE, "containers", CODER.container,
                 Container(name=CODER.container, labels=CODER.labels, status="running", running=True)),
        [RM, RUN]),
    "stopped container with the right config": (
        replaced(ONE, "containers", CODER.container, container(CODER, running=False)), [START]),
    "stopped container with another config": (
        replaced(ONE, "containers", CODER.container, container(CODER, running=False, config="0" * 12)), [RM, RUN]),
    "container gone": (without(ONE, "containers", CODER.container), [RUN]),
    "network gone": (without(ONE, "networks", CODER.network), [NETWORK]),
    "group gone": (without(ONE, "groups", CODER.user), [GROUPADD]),
    "user gone": (without(ONE, "users", CODER.user), [USERADD]),
    "user with a login shell": (replaced(ONE, "users", CODER.user, user(CODER, shell="/bin/bash")), [USERMOD]),
    "user with another comment": (replaced(ONE, "users", CODER.user, user(CODER, comment="x")), [USERMOD]),
    "user with another home": (replaced(ONE, "users", CODER.user, user(CODER, home="/home/x")), [USERMOD]),
    "user with another primary group": (replaced(ONE, "users", CODER.user, user(CODER, gid=100)), [USERMOD]),
    "home with a loose mode": (replaced(ONE, "paths", CODER.home, PathInfo(mode="0755", uid=60000, gid=60000)),
                               [HOME]),
    "workspace owned by root": (replaced(ONE, "paths", CODER.workspace, PathInfo(mode="0700", uid=0, gid=0)),
                                [WORKSPACE]),
    "workspace with another group": (
        replaced(ONE, "paths", CODER.workspace, PathInfo(mode="0700", uid=60000, gid=0)), [WORKSPACE]),
    "home and workspace gone": (without(without(ONE, "paths", CODER.home), "paths", CODER.workspace),
                                [HOME, WORKSPACE]),
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
USERS_GROUPS = [
    "userdel jk-demo--coder-1", "userdel jk-demo--coder-2",
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
    assert teardown_commands(PLAN, state, keep_data=False) == ["userdel jk-demo--coder-1"]


def test_teardown_removes_users_by_comment_not_by_uid_range() -> None:
    users = {
        "jk-demo--coder-1": user(CODER),
        "jk-demo--old-1": user(CODER, name="jk-demo--old-1", uid=59000, gid=59000, comment="jackin/demo/old-1"),
        "jk-demo-2--coder-1": user(CODER, name="jk-demo-2--coder-1", uid=60005, gid=60005,
                                   comment="jackin/demo-2/coder-1"),
        "backup": user(CODER, name="backup", uid=60010, gid=60010, comment="backup"),
    }  # fmt: skip
    commands = teardown_commands(PLAN, HostState(users=users), keep_data=False)
    assert commands == ["userdel jk-demo--coder-1", "userdel jk-demo--old-1"]


def test_teardown_removes_every_group_named_for_the_fleet() -> None:
    groups = {"jk-demo--coder-1": 60000, "jk-demo--coder-2": 60009, "staff": 60010}
    state = HostState(users={a.user: user(a) for a in PLAN.agents}, groups=groups)
    assert teardown_commands(PLAN, state, keep_data=False) == USERS_GROUPS


def test_teardown_leaves_another_fleets_groups() -> None:
    """Fleet 'demo' once ran groupdel on every in-range group named 'jk-demo-*', 'demo-2''s too."""
    state = HostState(groups={"jk-demo--coder-1": 60000, "jk-demo-2--coder-1": 60005},
                      users={CODER.user: user(CODER)})  # fmt: skip
    commands = teardown_commands(PLAN, state, keep_data=False)
    assert commands == [USERS_GROUPS[0], USERS_GROUPS[2]]


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
    assert commands == [CONTAINERS_RM, NETWORKS_RM, "userdel jk-demo--coder-1", "userdel jk-demo--coder-2",
                        *DATA_RM, *MARKER_RM]  # fmt: skip
