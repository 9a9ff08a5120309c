"""Placement (jackin/plan/placement.py): by capacity, stable, refused with the numbers; the capacity read's parser;
the spec's agents[].hosts; the ledger's placements."""

from __future__ import annotations

from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.facts.capacity import Capacity, parse
from jackin.plan import placement
from jackin.plan.fleet import build
from jackin.plan.placement import PlacementError, place, recorded
from jackin.spec import parse_inventory
from jackin.store.ledger import Ledger

G, M = 1 << 30, 1 << 20
HOSTS = """
hosts:
  - {name: a, address: 192.0.2.1}
  - {name: b, address: 192.0.2.2}
  - {name: c, address: 192.0.2.3}
groups: {small: [b, c]}
fleet:
  name: f
"""
SIZES = {"a": Capacity(cpus=2, memory=4 * G, disk=50 * G), "b": Capacity(cpus=1, memory=2 * G, disk=50 * G),
         "c": Capacity(cpus=1, memory=1 * G, disk=50 * G)}  # fmt: skip


def fleet(agents: str, hosts: str = HOSTS):
    return parse_inventory(hosts + "  agents:\n" + agents, "f.yaml")


def coders(count: int, extra: str = "") -> str:
    return f"    - {{name: coder, count: {count}, resources: {{memory: 512m, cpus: 0.5}}{extra}}}\n"


def test_seven_over_three_hosts_land_as_their_capacity_says() -> None:
    """Memory 4, 2 and 1 GiB at 512 MiB each: 8, 4 and 2 slots; 7 instances fill them in proportion."""
    found = place(fleet(coders(7)), {}, SIZES, {})
    assert found.hosts == {"a": ["coder-1", "coder-2", "coder-4", "coder-5"], "b": ["coder-3", "coder-6"],
                           "c": ["coder-7"]}  # fmt: skip
    assert found.new == [f"coder-{n}" for n in range(1, 8)]


def test_a_fleet_that_does_not_fit_is_refused_with_the_numbers() -> None:
    with pytest.raises(PlacementError) as caught:
        place(fleet(coders(15)), {}, SIZES, {})
    assert caught.value.exit_code == 2 and "nothing was changed" in caught.value.message
    assert caught.value.problems[0].startswith("agent coder: 1 of its 15 instance(s) fit on none of its hosts (coder-15)")
    assert caught.value.problems[1] == "  memory: needed 512 MiB, free 0 B (a 0 B, b 0 B, c 0 B): short by 512 MiB"
    assert caught.value.problems[2].endswith(": enough")  # cpus: 4 x the CPUs is plenty


def test_placement_is_stable_and_a_new_host_takes_only_new_instances() -> None:
    first = place(fleet(coders(3)), {}, SIZES, {})
    record = {i: h for h, here in first.hosts.items() for i in here}
    again = place(fleet(coders(3)), record, SIZES, {})
    assert again.hosts == first.hosts and again.new == []  # a warm run moves nothing
    grown = place(fleet(coders(4)), record, {**SIZES, "a": Capacity(cpus=2, memory=4 * G, disk=50 * G)}, {})
    assert {i: h for h, here in grown.hosts.items() for i in here if i != "coder-4"} == record
    assert grown.new == ["coder-4"]


def test_a_host_that_left_strands_its_instance_and_nothing_is_placed_again() -> None:
    record = {"coder-1": "a", "coder-2": "gone"}
    found = place(fleet(coders(2)), record, SIZES, {})
    assert found.stranded == {"coder-2": "gone"} and "coder-2" not in sum(found.hosts.values(), [])
    assert recorded(fleet(coders(2)), record).stranded == {"coder-2": "gone"}


def test_an_instance_found_on_a_host_stays_there_before_any_record() -> None:
    found = place(fleet(coders(2)), {}, SIZES, {"c": {"coder-2"}})
    assert "coder-2" in found.hosts["c"] and found.new == ["coder-1"]


def test_each_puts_the_set_on_every_host_and_refuses_one_too_small() -> None:
    found = place(fleet(coders(1, ", placement: each")), {}, SIZES, {})
    assert found.hosts == {"a": ["coder-1"], "b": ["coder-1"], "c": ["coder-1"]}
    with pytest.raises(PlacementError) as caught:
        place(fleet(coders(3, ", placement: each")), {}, SIZES, {})
    assert caught.value.problems == ["host c: memory: its instances (agent(s) coder with placement each among them) "
                                     "need 1.5 GiB, it has 1 GiB: short by 512 MiB"]  # fmt: skip


def test_an_agent_keeps_to_its_hosts_and_unread_hosts_leave_it_unplaced() -> None:
    found = place(fleet(coders(3, ", hosts: [small]")), {}, SIZES, {})
    assert found.hosts["a"] == [] and sorted(found.hosts["b"] + found.hosts["c"]) == ["coder-1", "coder-2", "coder-3"]
    waiting = place(fleet(coders(2)), {}, {"a": None}, {})  # nothing weighed: nothing refused, nothing placed
    assert waiting.unplaced == ["coder-1", "coder-2"]


def test_the_plan_places_agents_per_host() -> None:
    inventory = fleet(coders(3))
    plan = build(inventory.fleet, {f"coder-{n}": 60000 + n for n in range(1, 4)})
    assert plan.at("a") == plan.agents  # not placed: every agent everywhere
    placed = plan.model_copy(update={"placement": {"a": ["coder-1"], "b": ["coder-2", "coder-3"], "c": []}})
    assert [a.instance for a in placed.at("b")] == ["coder-2", "coder-3"]
    assert [a.instance for a in placed.for_host("b").agents] == ["coder-2", "coder-3"]
    assert placed.hosts_of("coder-1") == ["a"] and placed.spread_placement()["coder-3"] == "b"
    with pytest.raises(ValueError, match="host zz is not one of the plan's hosts"):
        placed.for_host("zz")


@pytest.mark.parametrize("lines, want", [
    (["nproc=8", "memtotal=16000000", "memory.limit_in_bytes=1073741824", "memory.limit_in_bytes=9223372036854771712",
      "cpu.cfs_quota_us=150000", "cpu.cfs_period_us=100000", "cpu.cfs_quota_us=-1", "cpu.cfs_period_us=100000",
      "free=5000"], Capacity(cpus=1.5, memory=1 * G, disk=5000)),  # cgroup v1: a container's limits
    (["nproc=4", "memtotal=2000", "memory.max=max", "cpu.max=max 100000", "free=7"],
     Capacity(cpus=4, memory=2000 * 1024, disk=7)),  # cgroup v2, no limit
    (["nproc=4", "memtotal=2000", "cpu.max=200000 100000", "memory.max=1024"], None),  # no free disk read
])  # fmt: skip
def test_capacity_is_the_lowest_limit_found(lines: list[str], want: Capacity | None) -> None:
    assert parse(lines) == want


def test_agent_hosts_must_be_the_fleets(tmp_path: Path) -> None:
    from jackin.spec.loader import load

    path = tmp_path / "i.yaml"
    path.write_text(HOSTS + "  hosts: [a, b]\n  agents:\n    - {name: coder, hosts: [small, zz]}\n")
    with pytest.raises(SpecError) as caught:
        load(path)
    assert [p.split(": ", 1)[1] for p in caught.value.problems] == [
        "fleet.agents[0].hosts[0]: group 'small' holds 'c', not among the fleet's hosts; expected some of: a, b",
        "fleet.agents[0].hosts[1]: 'zz' is not among the fleet's hosts; expected some of: a, b"]  # fmt: skip


def test_the_ledger_records_placements_and_forgets_the_gone(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_placements("f", {"coder-1": "a", "coder-2": "b"})
        ledger.record_placements("f", {"coder-2": "c"})
        assert ledger.placements("f") == {"coder-1": "a", "coder-2": "c"}
        assert ledger.forget_placements("f", keep={"coder-2"}) == ["coder-1"]
        ledger.forget_fleet("f")
        assert ledger.placements("f") == {}
    assert placement.size(1.5 * G) == "1.5 GiB"


def test_an_earlier_releases_fleet_whose_instances_live_on_several_hosts_is_refused_not_shrunk(tmp_path) -> None:
    from jackin.plan.make import _refuse_split_sets
    from jackin.plan.placement import PlacementError
    from jackin.spec import parse_inventory
    from jackin.store.ledger import Ledger

    spec = "fleet:\n  name: up\n  provider: lab\n  lab: {hosts: 2}\n  agents:\n    - {name: coder, count: 2%s}\n"
    found = {"jackin-1": {"coder-1", "coder-2"}, "jackin-2": {"coder-1", "coder-2"}}  # homes on both hosts
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        with pytest.raises(PlacementError) as caught:
            _refuse_split_sets(parse_inventory(spec % ""), ledger, found)
        assert "coder-1, coder-2 live on several hosts" in caught.value.message
        assert "placement: each" in (caught.value.hint or "")
        _refuse_split_sets(parse_inventory(spec % ", placement: each"), ledger, found)  # kept as they are: fine
        _refuse_split_sets(parse_inventory(spec % ""), ledger, {"jackin-1": {"coder-1", "coder-2"}})  # on one: fine


def test_a_capacity_figure_that_is_not_plain_digits_is_no_figure() -> None:
    from jackin.facts.capacity import parse

    assert parse(["nproc=²", "memtotal=1000", "free=5"]) is None  # str.isdigit takes "²"; int() would not
    assert parse(["nproc=2", "memtotal=1000", "free=5"]) is not None
