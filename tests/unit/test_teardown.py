"""fleet.down's state reads (``jackin.lifecycle.teardown``): which read each host is torn down from, and that
the state handed to the teardown deploy survives its JSON trip (no SSH: gather is faked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jackin.lifecycle import teardown
from jackin.plan.fleet import build
from jackin.snapshots.final import FinalHost
from jackin.spec import parse_inventory
from jackin.transport.ssh import SshTarget
from jackin.facts.state import Container, HostState

INVENTORY = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
"""
PLAN = build(parse_inventory(INVENTORY, "f.yaml").fleet, {"coder-1": 60000, "coder-2": 60001})
UP = HostState(containers={"jk-demo--coder-1": Container(name="jk-demo--coder-1", status="running", running=True)},
               marker=True)  # fmt: skip


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="192.0.2.1", known_hosts=Path("/nonexistent")) for n in names]


def test_a_host_nothing_was_done_to_is_torn_down_from_the_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only hosts the final snapshot touched (stopped, snapshotted, pulled) or did not read are read again."""
    asked: list[list[str]] = []

    def fake(hosts, command, parse, *, timeout):
        asked.append([h.name for h in hosts])
        return {h.name: HostState(marker=True) for h in hosts}

    monkeypatch.setattr(teardown, "gather", fake)
    read = {"a": UP, "b": UP, "c": UP}
    final = [FinalHost(host="a", stage="nothing"), FinalHost(host="b", stage="done", copy_path="/x"),
             FinalHost(host="c", stage="nothing", stopped=["jk-demo--coder-1"])]  # fmt: skip
    states = teardown.fresh_states(PLAN, targets("a", "b", "c", "d"), read, final)
    assert asked == [["b", "c", "d"]]
    assert states == {"a": UP, "b": HostState(marker=True), "c": HostState(marker=True), "d": HostState(marker=True)}


def test_a_read_state_reaches_the_deploy_as_it_was_read() -> None:
    """fleet.down hands each host's state to deploys/teardown.py as JSON (host.data): it must come back equal."""
    assert HostState.model_validate(UP.model_dump(mode="json")) == UP
