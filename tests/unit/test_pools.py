"""Address pools against agents (jackin/plan/pools.py): what a host's Docker pools hold, and the spec refused
(exit 2, before any host) when the agents placed on a host need more networks. No host."""

from __future__ import annotations

import pytest

from jackin.errors import SpecError
from jackin.lab.lab import Lab
from jackin.lifecycle import fleet as fleet_api
from jackin.plan import pools
from jackin.spec import parse_inventory
from jackin.spec.models import AddressPool, lab_host_name

STATIC = """
hosts:
  - {name: h1, address: 192.0.2.1}
  - {name: h2, address: 192.0.2.2}
  - {name: h3, address: 192.0.2.3}
groups: {pair: [h1, h2]}
fleet:
  name: f
  hosts: [pair]
"""


def spec(agents: int, *, lab: bool = False, pools_yaml: str = ""):
    head = "fleet:\n  name: f\n  provider: lab\n  lab: {name: big, hosts: 2}\n" if lab else STATIC
    counts, rest = divmod(agents, 64)
    listed = "".join(f"    - {{name: a{i}, count: 64, placement: each}}\n" for i in range(counts))
    listed += f"    - {{name: r, count: {rest}, placement: each}}\n" if rest else ""
    return parse_inventory(head + pools_yaml + "  agents:\n" + listed, "f.yaml")


def test_the_default_pools_are_dockers_31_networks() -> None:
    assert pools.networks(pools.DEFAULT_POOLS) == 31  # 15 /16s in 172.16.0.0/12, 16 /20s in 192.168.0.0/16
    assert pools.held(spec(1)) == 30  # docker0 takes one
    assert pools.held(spec(1, lab=True)) == 29  # and on a lab host, the lab's own network another (measured)


def test_explicit_pools_count_their_ipv4_networks_less_docker0() -> None:
    assert pools.networks([AddressPool(base="10.213.0.0/16", size=24), AddressPool(base="10.214.0.0/22", size=24),
                           AddressPool(base="fd00::/16", size=24)]) == 256 + 4  # fmt: skip
    assert pools.held(spec(1, pools_yaml="  address_pools: [{base: 10.213.0.0/22, size: 24}]\n")) == 3
    assert pools.held(spec(1, lab=True, pools_yaml="  address_pools: [{base: 10.213.0.0/22, size: 24}]\n")) == 3


def test_every_host_of_the_fleet_runs_every_agent_of_placement_each() -> None:
    assert pools.placement(spec(5)) == {"h1": 5, "h2": 5}  # fleet.hosts: the group pair, not h3
    assert pools.placement(spec(5, lab=True)) == {"big-1": 5, "big-2": 5}
    assert lab_host_name("big", 2) == Lab("big").host_name(2)
    spread = parse_inventory(STATIC + "  agents:\n    - {name: r, count: 5}\n", "f.yaml")  # at least an even share
    assert pools.placement(spread) == {"h1": 3, "h2": 3}


@pytest.mark.parametrize("agents, lab", [(30, False), (29, True)])
def test_as_many_agents_as_the_pools_hold_pass(agents: int, lab: bool) -> None:
    pools.check(spec(agents, lab=lab))  # the positive control of the refusals below


def test_more_agents_than_the_default_pools_hold_are_refused_per_host_with_an_example() -> None:
    with pytest.raises(SpecError) as caught:
        pools.check(spec(150))
    error = caught.value
    assert error.exit_code == 2
    assert error.message == ("fleet 'f': the hosts' Docker address pools cannot hold the agents' networks: 150 needed "
                             "on a host, at most 30 fit (each agent instance has its own bridge network on every host "
                             "it runs on)")  # fmt: skip
    assert error.problems == ["host h1: 150 agent instances need 150 networks",
                              "host h2: 150 agent instances need 150 networks"]  # fmt: skip
    assert error.hint == (
        "Docker's default address pools (no fleet.address_pools) hold 31 networks, 172.17.0.0/16 to 172.31.0.0/16 "
        "and 192.168.0.0/16 in /20s; Docker's own bridge (docker0) takes one. Set fleet.address_pools to pools that "
        "hold them, in a range no network or route of the hosts uses, for example:\n"
        "  fleet:\n    address_pools:\n"
        "      - {base: 10.213.0.0/16, size: 24}   # 256 networks of 254 addresses: 255 agents a host")  # fmt: skip
    with pytest.raises(SpecError, match="at most 29 fit") as caught:
        pools.check(spec(30, lab=True))
    assert "the lab's own network another" in str(caught.value.hint)


def test_explicit_pools_too_small_are_refused_and_the_example_grows() -> None:
    with pytest.raises(SpecError) as caught:
        pools.check(spec(300, pools_yaml="  address_pools: [{base: 10.213.0.0/16, size: 24}]\n"))
    assert "300 needed on a host, at most 255 fit" in caught.value.message
    assert caught.value.hint.startswith("fleet.address_pools hold 256 networks; Docker's own bridge (docker0) takes one.")
    assert "- {base: 10.212.0.0/15, size: 24}   # 512 networks of 254 addresses: 511 agents a host" in caught.value.hint
    pools.check(spec(300, pools_yaml="  address_pools: [{base: 10.212.0.0/15, size: 24}]\n"))  # the example holds


def test_a_pool_size_shorter_than_its_base_is_an_invalid_inventory() -> None:
    with pytest.raises(SpecError) as caught:
        spec(1, pools_yaml="  address_pools: [{base: 10.213.0.0/24, size: 20}]\n")
    assert caught.value.problems == [
        "f.yaml:10: fleet.address_pools[0]: size 20 is shorter than the base's prefix /24: the base is split into "
        "networks of /size, so size must be at least 24"]  # fmt: skip


def test_fleet_validate_plan_and_up_run_the_check_before_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    from jackin.cli import fleet as fleet_cli

    big = spec(150)
    monkeypatch.setattr(fleet_api, "load", lambda _: big)
    monkeypatch.setattr(fleet_api.credentials, "read", lambda *a, **k: pytest.fail("credentials were read"))
    for command in (lambda: fleet_cli.fleet_validate("f.yaml"), lambda: fleet_api.plan(big),
                    lambda: fleet_api.up(big, dry_run=True)):  # fmt: skip
        with pytest.raises(SpecError, match="cannot hold the agents' networks"):
            command()
