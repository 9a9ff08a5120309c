"""Which existing agents fleet.up recreates or removes (and so snapshots first), from one host's state.

``affected`` must say exactly what the operations do: the drift test runs both on the same
states and compares the containers the operations remove with the agents ``affected`` names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jackin.errors import ConnectError, JackinError
from jackin.facts.fleet import HostState, PathInfo
from jackin.lifecycle.fleet import _not_run
from jackin.operations.fleet import agent_commands, fleet_commands
from jackin.plan.fleet import build
from jackin.transport.remote import HostError
from jackin.snapshots import api, auto
from jackin.snapshots.auto import AutoSnapshot, Change, _groups, affected, changes_of
from jackin.snapshots.models import AgentSnapshot, CreateResult, SnapshotRecord
from jackin.spec import parse_inventory
from jackin.transport.ssh import SshTarget

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


# --- snapshot_before_up, with the state read and api.take replaced (no host) -----------------------


CHANGED = replaced(BOTH, "containers", CODER.container, container(CODER, config="0" * 12))


class FakeLedger:
    def __init__(self, agents: list[tuple[str, str]]) -> None:
        self.rows = [{"host": h, "instance": i} for h, i in agents]

    def agents(self, fleet: str) -> list[dict]:
        return self.rows

    def spec_runs(self, fleet: str) -> list[dict]:  # no run in place: the spec being applied describes the agents
        return []


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="192.0.2.1", known_hosts=Path("/nonexistent")) for n in names]


@pytest.fixture
def calls(monkeypatch):
    """The state each host reads and the api.take calls made (each takes every asked agent)."""
    made: dict = {"states": {}, "take": [], "fail": None}

    def read(plan, hosts):
        made["reads"] = made.get("reads", 0) + 1
        return {h.name: made["states"][h.name] for h in hosts}

    def take(ledger, inventory, hosts, instances, *, label, kind):
        made["take"].append(([h.name for h in hosts], list(instances), label, kind))
        record = SnapshotRecord(id="20261203-080000-abcd", fleet="demo", created="now", kind=kind, label=label,
                                agents=[AgentSnapshot(host=h.name, instance=i, agent="coder") for h in hosts
                                        for i in instances])  # fmt: skip
        errors = [HostError(host=hosts[0].name, error=made["fail"], unreachable=False)] if made["fail"] else []
        return CreateResult(snapshot=record, errors=errors)

    monkeypatch.setattr(auto, "read_states", read)
    monkeypatch.setattr(api, "take", take)
    return made


def inventory(before: bool = True):
    text = INVENTORY + f"  snapshots: {{before_changes: {str(before).lower()}}}\n"
    return parse_inventory(text, "f.yaml")


def run(calls, *, dry_run=False, before=True, ledger=None, hosts=("h1",), plan=PLAN):
    lines: list[str] = []
    found = auto.snapshot_before_up(ledger or FakeLedger([]), inventory(before), plan, targets(*hosts),
                                    action="fleet.up", dry_run=dry_run, log=lines.append)  # fmt: skip
    return found, lines


def test_before_changes_off_reads_nothing_and_takes_nothing(calls) -> None:
    calls["states"] = {"h1": CHANGED}
    assert run(calls, before=False) == (([], {}), [])
    assert "reads" not in calls and calls["take"] == []


def test_no_change_reads_once_and_takes_nothing(calls) -> None:
    calls["states"] = {"h1": BOTH, "h2": HostState()}
    (found, failed), lines = run(calls, hosts=("h1", "h2"))
    assert (found, failed, lines, calls["take"], calls["reads"]) == ([], {}, [], [], 1)


def test_a_dry_run_names_the_agents_and_takes_nothing(calls) -> None:
    calls["states"] = {"h1": CHANGED}
    (found, _), lines = run(calls, dry_run=True)
    assert lines == ["h1: would snapshot coder-1 before recreating it: its configuration changed"]
    assert calls["take"] == [] and found[0].snapshot is None


def test_hosts_are_snapshotted_exactly_and_logged(calls) -> None:
    calls["states"] = {"h1": CHANGED, "h2": BOTH, "h3": CHANGED}
    (found, _), lines = run(calls, hosts=("h1", "h2", "h3"))
    assert calls["take"] == [(["h1", "h3"], ["coder-1"], "before fleet.up: recreate coder-1", "auto")]
    assert [(f.host, f.snapshot) for f in found] == [("h1", "20261203-080000-abcd"), ("h3", "20261203-080000-abcd")]
    assert lines == [f"{h}: snapshot 20261203-080000-abcd of coder-1 before recreating it: its configuration changed"
                     for h in ("h1", "h3")]  # fmt: skip


def test_a_removed_agent_the_ledger_does_not_know_is_skipped_and_said(calls) -> None:
    calls["states"] = {"h1": BOTH}
    (found, _), lines = run(calls, plan=ONE_LEFT)
    assert calls["take"] == [] and found[0].skipped == ["coder-2"]
    assert lines == ["h1: no snapshot of coder-2 before removing it (the spec no longer names it): "
                     "the ledger has no record of it"]  # fmt: skip
    calls["states"] = {"h1": BOTH}
    run(calls, plan=ONE_LEFT, ledger=FakeLedger([("h1", "coder-2")]))
    assert calls["take"] == [(["h1"], ["coder-2"], "before fleet.up: remove coder-2", "auto")]


def test_a_failed_snapshot_refuses_with_the_host_and_the_way_out(calls) -> None:
    calls["states"], calls["fail"] = {"h1": CHANGED}, "coder-1: restic backup failed (exit 1): no key found"
    with pytest.raises(JackinError) as caught:
        run(calls)
    assert caught.value.message == ("the automatic snapshot before fleet.up failed, so nothing was changed: "
                                    "h1: coder-1: restic backup failed (exit 1): no key found")  # fmt: skip
    assert "snapshots.before_changes: false" in caught.value.hint


def test_a_host_whose_state_read_failed_is_returned_and_not_run(calls) -> None:
    down = ConnectError("connection refused", host="h2")
    calls["states"] = {"h1": BOTH, "h2": down}
    (found, failed), _ = run(calls, hosts=("h1", "h2"))
    assert failed == {"h2": down}
    unreachable, broken = _not_run("h2", down), _not_run("h3", JackinError("state read does not parse"))
    assert (unreachable.connected, unreachable.failed, unreachable.ok) == (False, 0, False)  # exit 3, as before
    assert (broken.connected, broken.failed) == (True, 1)  # exit 1
    assert unreachable.error == "not changed: its state read before any change failed: connection refused"
