"""Which existing agents fleet.up recreates or removes (and so snapshots first), from one host's state.

``affected`` must say exactly what the operations do: the drift test runs both on the same
states and compares the containers the operations remove with the agents ``affected`` names.
"""

from __future__ import annotations

import pytest

from jackin.facts.fleet import HostState, PathInfo
from jackin.operations.fleet import agent_commands, fleet_commands
from jackin.plan import build
from jackin.snapshots.auto import AutoSnapshot, Change, _groups, affected, changes_of
from jackin.spec import parse_inventory

from .test_operations_fleet import CODER, INVENTORY, ONE, PLAN, container, network, present, replaced, without

CODER2 = PLAN.agents[1]
BOTH = present(CODER, CODER2)
ONE_LEFT = build(parse_inventory(INVENTORY.replace("count: 2", "count: 1"), "f.yaml").fleet, {"coder-1": 60000})


def test_nothing_changed_affects_nothing() -> None:
    assert affected(PLAN, BOTH) == []


def test_a_fresh_host_affects_nothing() -> None:
    assert affected(PLAN, HostState()) == []


def test_a_config_hash_change_recreates_that_agent_only() -> None:
    state = replaced(BOTH, "containers", CODER.container, container(CODER, config="0" * 12))
    assert changes_of(PLAN, state) == [Change(instance="coder-1", action="recreate", why="its configuration changed")]


def test_a_replaced_network_recreates_its_agent() -> None:
    state = replaced(BOTH, "networks", CODER2.network, network(CODER2, bridge="br-other"))
    assert changes_of(PLAN, state) == [Change(
        instance="coder-2", action="recreate",
        why=f"its network is replaced (its bridge is br-other, not {CODER2.bridge})")]  # fmt: skip


def test_a_missing_network_recreates_the_container_on_a_new_one() -> None:
    assert affected(PLAN, without(BOTH, "networks", CODER.network)) == ["coder-1"]


def test_a_workspace_that_is_a_link_recreates_its_agent() -> None:
    state = replaced(BOTH, "paths", CODER.workspace, PathInfo(kind="l", mode="0777", uid=CODER.uid, gid=CODER.uid))
    assert changes_of(PLAN, state)[0].why == "its home or workspace was not as planned"


def test_an_agent_removed_from_the_spec_is_removed() -> None:
    assert changes_of(ONE_LEFT, BOTH) == [Change(instance="coder-2", action="remove", why="the spec no longer names it")]


def test_a_removed_agent_without_a_workspace_has_nothing_to_snapshot() -> None:
    assert affected(ONE_LEFT, without(BOTH, "paths", CODER2.workspace)) == []


def test_an_agent_without_a_container_is_created_not_recreated() -> None:
    state = replaced(without(BOTH, "containers", CODER.container), "containers", CODER2.container,
                     container(CODER2, running=False))  # fmt: skip
    assert affected(PLAN, state) == []  # coder-1 is started fresh, coder-2 only started again


def test_an_agent_whose_network_belongs_to_another_is_refused_not_affected() -> None:
    other = network(CODER, labels={"jackin.fleet": "demo", "jackin.agent": "x-1"})
    assert affected(PLAN, replaced(replaced(BOTH, "networks", CODER.network, other), "containers", CODER.container,
                                   container(CODER, config="0" * 12))) == []  # fmt: skip


# --- drift: affected names exactly what the operations remove -------------------------------------

STATES = {
    "as planned": BOTH,
    "fresh": HostState(),
    "config": replaced(BOTH, "containers", CODER.container, container(CODER, config="0" * 12)),
    "no config label": replaced(BOTH, "containers", CODER.container, container(CODER).model_copy(
        update={"labels": CODER.labels})),
    "other networks": replaced(BOTH, "containers", CODER2.container, container(CODER2, networks=["bridge"])),
    "own network only": replaced(BOTH, "containers", CODER2.container, container(CODER2, networks=[CODER2.network])),
    "bridge": replaced(BOTH, "networks", CODER.network, network(CODER, bridge="br-x")),
    "no network": without(BOTH, "networks", CODER2.network),
    "home not root's": replaced(BOTH, "paths", CODER.home, PathInfo(mode="0750", uid=CODER.uid, gid=CODER.uid)),
    "workspace mode only": replaced(BOTH, "paths", CODER.workspace, PathInfo(mode="0755", uid=CODER.uid, gid=CODER.uid)),
    "stopped": replaced(BOTH, "containers", CODER.container, container(CODER, running=False)),
    "one agent": ONE,
}


@pytest.mark.parametrize("plan", [PLAN, ONE_LEFT], ids=["both planned", "coder-2 left"])
@pytest.mark.parametrize("name", sorted(STATES))
def test_affected_is_what_the_operations_remove(plan, name: str) -> None:
    state = STATES[name]
    removed = {c for a in plan.agents for c in [a.container] if f"docker rm -f {c}" in agent_commands(a, state)}
    removed |= {c.split()[-1] for c in fleet_commands(plan, state) if isinstance(c, str) and c.startswith("docker rm -f")}
    expected = {f"jk-demo--{i}" for i in affected(plan, state)}
    assert expected == removed  # every state here has each agent's workspace, so none is left out


def test_hosts_with_the_same_agents_share_one_snapshot() -> None:
    change = Change(instance="coder-1", action="recreate", why="x")
    other = Change(instance="coder-2", action="remove", why="y")
    found = [AutoSnapshot(host="a", changes=[change]), AutoSnapshot(host="b", changes=[change]),
             AutoSnapshot(host="c", changes=[change, other]), AutoSnapshot(host="d", changes=[other], skipped=["coder-2"])]  # fmt: skip
    assert [[i.host for i in g] for g in _groups(found)] == [["a", "b"], ["c"]]
