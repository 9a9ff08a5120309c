"""The fleet plan: deterministic names, paths, uids, resources, the exact hardened
``docker run`` argv and the configuration hash that decides recreation."""

from __future__ import annotations

import json
import re

import pytest

from jackin import hostpaths
from jackin.plan import fleet as plan
from jackin.spec import roles
from jackin.plan.fleet import BRIDGE_GATEWAY, AgentPlan, FleetPlan, bridge_name, build, instances, user_name
from jackin.spec import parse_inventory

FLEET = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
    - name: reviewer
      image: jackin/agent:v2
      resources: {memory: 256m, cpus: 0.5, pids: 64}
  resources: {memory: 2g, cpus: 2, pids: 512}
  uid_base: 70000
  address_pools:
    - base: 10.213.0.0/16
      size: 24
"""
UIDS = {"coder-1": 70000, "coder-2": 70001, "reviewer-1": 70002}
LINUX_USER = re.compile(r"^[a-z_][a-z0-9_-]*$")


def make_plan(text: str = FLEET, uids: dict[str, int] = UIDS) -> FleetPlan:
    return build(parse_inventory(text, "f.yaml").fleet, uids)


def agent(instance: str, text: str = FLEET) -> AgentPlan:
    return next(a for a in make_plan(text).agents if a.instance == instance)


# --- user_name -------------------------------------------------------------------


def test_user_name_short_is_plain() -> None:
    assert user_name("demo", "coder-1") == "jk-demo--coder-1"


def test_user_name_of_exactly_32_characters_is_kept() -> None:
    name = user_name("abcdefghijklmnop", "abcdefghi-1")
    assert name == "jk-abcdefghijklmnop--abcdefghi-1"
    assert len(name) == 32


def test_user_name_longer_than_32_is_shortened_with_a_hash() -> None:
    full = "jk-abcdefghijklmnop--abcdefghij-1"  # 33 characters
    name = user_name("abcdefghijklmnop", "abcdefghij-1")
    assert len(full) == 33
    assert len(name) == 32
    assert name.startswith(full[:25] + "-")
    assert re.fullmatch(r"[0-9a-f]{6}", name[26:])
    assert LINUX_USER.match(name)


def test_user_name_is_pinned() -> None:
    """Deployed users carry these names: a change would orphan them on every host."""
    assert user_name("abcdefghijklmnop", "abcdefghij-1") == "jk-abcdefghijklmnop--abcd-952324"


def test_user_name_is_deterministic_and_keeps_long_names_apart() -> None:
    first = user_name("nightly-builders", "reviewer-for-pull-reqs-1")
    assert first == user_name("nightly-builders", "reviewer-for-pull-reqs-1")
    # same first 25 characters, different instance: the hash keeps them apart
    assert first != user_name("nightly-builders", "reviewer-for-pull-reqs-2")


def test_user_name_of_the_longest_spec_fits_linux() -> None:
    fleet, agent_name = "f" * 16, "a" * 24  # the spec's maximum lengths, count up to 64
    name = user_name(fleet, f"{agent_name}-64")
    assert len(name) <= hostpaths.MAX_NAME == 32
    assert LINUX_USER.match(name)


def test_user_name_is_unique_across_fleets() -> None:
    """Fleet 'demo' agent 'x-coder' and fleet 'demo-x' agent 'coder' once both gave 'jk-demo-x-coder-1'."""
    assert user_name("demo", "x-coder-1") != user_name("demo-x", "coder-1")
    assert user_name("a", "b-c-1") != user_name("a-b", "c-1")


def test_user_name_shortened_names_stay_apart_across_fleets() -> None:
    long = "abcdefghijklmnopqrstuv"  # agent names of 24 characters: both user names are shortened
    assert user_name("demo", f"x-{long}-1") != user_name("demo-x", f"{long}-1")


# --- bridge_name -----------------------------------------------------------------


def test_bridge_name_fits_the_linux_interface_limit() -> None:
    for fleet, instance in [("demo", "coder-1"), ("f" * 16, "a" * 24 + "-64")]:
        name = bridge_name(fleet, instance)
        assert len(name) <= 15
        assert re.fullmatch(r"jk[0-9a-f]{8}", name)


def test_bridge_name_is_deterministic_and_pinned() -> None:
    assert bridge_name("demo", "coder-1") == bridge_name("demo", "coder-1") == "jk668ccdd6"


def test_bridge_name_differs_per_fleet_and_instance() -> None:
    names = {bridge_name("demo", "coder-1"), bridge_name("demo", "coder-2"), bridge_name("demo-2", "coder-1"),
             bridge_name("demo", "x-coder-1"), bridge_name("demo-x", "coder-1")}  # fmt: skip
    assert len(names) == 5


# --- instances -------------------------------------------------------------------


def test_instances_in_spec_order() -> None:
    fleet = parse_inventory(FLEET, "f.yaml").fleet
    assert instances(fleet) == [("coder", "coder-1"), ("coder", "coder-2"), ("reviewer", "reviewer-1")]


# --- build -----------------------------------------------------------------------


def test_build_fleet() -> None:
    result = make_plan()
    assert (result.fleet, result.root, result.uid_min, result.uid_max) == ("demo", "/srv/jackin", 70000, 70999)
    assert result.fleet_dir == "/srv/jackin/demo"
    assert result.marker == "/var/lib/jackin/fleet-demo.json"
    assert [(p.base, p.size) for p in result.address_pools] == [("10.213.0.0/16", 24)]
    assert [a.instance for a in result.agents] == ["coder-1", "coder-2", "reviewer-1"]


def test_build_agent() -> None:
    coder = agent("coder-2")
    assert coder.placement == "spread"  # the default: coder-1..N once across the fleet (jackin/plan/placement.py)
    assert coder.model_dump(exclude={"command", "policy", "credentials", "mounts", "work", "healthcheck", "env",
                                     "gateway", "placement"}) == {
        "fleet": "demo",
        "agent": "coder",
        "instance": "coder-2",
        "role": "demo",
        "uid": 70001,
        "user": "jk-demo--coder-2",
        "home": "/srv/jackin/demo/coder-2",
        "workspace": "/srv/jackin/demo/coder-2/workspace",
        "container": "jk-demo--coder-2",
        "network": "jk-demo--coder-2",
        "bridge": bridge_name("demo", "coder-2"),
        "image": roles.load("demo").tag,  # the role's image (jackin/role-demo:<hash>)
        "memory": 2 * 1024**3,
        "cpus": 2.0,
        "pids": 512,
        "disk": None,
    }
    assert coder.command == ["jackin-demo-agent"]  # the role's command, run by the image's entrypoint
    assert coder.healthcheck is not None and coder.healthcheck.test == ["/usr/local/bin/jackin-health"]
    assert coder.env == {}  # the demo role names no model provider
    assert coder.labels == {"jackin.fleet": "demo", "jackin.agent": "coder-2"}


def test_build_container_and_network_are_the_user() -> None:
    for a in make_plan().agents:
        assert a.container == a.network == a.user == user_name("demo", a.instance)


def test_build_takes_uids_from_the_mapping() -> None:
    result = make_plan(uids={"coder-1": 70500, "coder-2": 70007, "reviewer-1": 70003})
    assert [a.uid for a in result.agents] == [70500, 70007, 70003]


def test_build_agent_resources_and_image_override_the_fleet() -> None:
    reviewer = agent("reviewer-1")
    assert (reviewer.memory, reviewer.cpus, reviewer.pids) == (256 * 1024**2, 0.5, 64)
    assert reviewer.image == "jackin/agent:v2"


def test_build_defaults_without_any_resources() -> None:
    text = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n"
    only = make_plan(text, {"coder-1": 60000}).agents[0]
    assert (only.memory, only.cpus, only.pids, only.image) == (1024**3, 1.0, 256, roles.load("demo").tag)


def test_build_busybox_image_idles_without_a_healthcheck() -> None:
    """``image: jackin/agent:busybox`` stays usable: no entrypoint there, so the idle loop, no healthcheck."""
    text = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      image: jackin/agent:busybox\n"
    only = make_plan(text, {"coder-1": 60000}).agents[0]
    assert (only.image, only.command, only.healthcheck) == (plan.DEFAULT_IMAGE, plan.IDLE, None)
    assert not any(a.startswith("--health") for a in only.run_args())


def test_build_missing_uid_is_an_error() -> None:
    with pytest.raises(KeyError):
        make_plan(uids={"coder-1": 70000})


# --- run_args --------------------------------------------------------------------


def test_run_args_exact() -> None:
    reviewer = agent("reviewer-1")
    assert reviewer.run_args() == [
        "--name", "jk-demo--reviewer-1",
        "--hostname", "reviewer-1",
        "--user", "70002:70002",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--read-only",
        "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m",
        "--memory", "268435456",
        "--memory-swap", "268435456",
        "--cpus", "0.5",
        "--pids-limit", "64",
        "--network", "jk-demo--reviewer-1",
        "--mount", "type=bind,src=/srv/jackin/demo/reviewer-1/workspace,dst=/workspace",
        "--workdir", "/workspace",
        "--env", "HOME=/workspace",
        "--restart", "unless-stopped",
        "--log-opt", "max-size=10m",
        "--log-opt", "max-file=3",
        "--dns", "127.0.0.1",
        "--label", "jackin.agent=reviewer-1",
        "--label", "jackin.fleet=demo",
        "--health-cmd", "/usr/local/bin/jackin-health",
        "--health-interval", "10s",
        "--health-timeout", "5s",
        "--health-retries", "3",
        "--health-start-period", "10s",
        "--label", f"jackin.config={reviewer.config_hash}",
        "jackin/agent:v2",  # the spec's image overrides the role's; the role's command and healthcheck stay
        "jackin-demo-agent",
    ]  # fmt: skip


def test_run_args_whole_cpus_have_no_decimals() -> None:
    assert agent("coder-1").run_args()[agent("coder-1").run_args().index("--cpus") + 1] == "2"


def test_run_args_mount_only_the_workspace() -> None:
    args = agent("coder-1").run_args()
    assert [args[i + 1] for i, a in enumerate(args) if a == "--mount"] == [
        "type=bind,src=/srv/jackin/demo/coder-1/workspace,dst=/workspace"
    ]
    forbidden = {"-v", "--volume", "--volumes-from", "--privileged", "--cap-add", "--device", "--pid", "--ipc",
                 "--userns", "--net", "-p", "--publish", "--publish-all", "-P"}  # none by default  # fmt: skip
    assert not forbidden & set(args)
    assert not any(a.startswith(("--network=host", "--security-opt=seccomp", "--volume=")) for a in args)


# --- config_hash -----------------------------------------------------------------


def test_config_hash_is_stable_and_short() -> None:
    assert agent("coder-1").config_hash == make_plan().agents[0].config_hash
    assert re.fullmatch(r"[0-9a-f]{12}", agent("coder-1").config_hash)


@pytest.mark.parametrize(
    "change",
    [{"memory": 2 * 1024**3 + 1}, {"cpus": 1.5}, {"pids": 513}, {"image": "jackin/agent:v3"}, {"uid": 70010},
     {"command": ["sleep", "infinity"]}, {"instance": "coder-9"}],
    ids=lambda c: next(iter(c)),
)  # fmt: skip
def test_config_hash_changes_with_the_container_settings(change: dict) -> None:
    before = agent("coder-1")
    assert before.model_copy(update=change).config_hash != before.config_hash


@pytest.mark.parametrize(
    "change", [{"agent": "renamed"}, {"user": "someone"}, {"home": "/elsewhere"}, {"bridge": "jk00000000"}],
    ids=lambda c: next(iter(c)),
)  # fmt: skip
def test_config_hash_ignores_what_does_not_recreate_the_container(change: dict) -> None:
    before = agent("coder-1")
    assert before.model_copy(update=change).config_hash == before.config_hash


def test_config_hash_covers_the_whole_run_line() -> None:
    """A new release's hardening (any docker run option) recreates containers; the hash label itself does not count."""
    a = agent("coder-1")
    assert a.config_hash == agent("coder-1").config_hash
    assert f"jackin.config={a.config_hash}" in a.run_args()


def test_config_hash_follows_a_fleet_resources_change_in_the_spec() -> None:
    before = agent("coder-1")
    after = agent("coder-1", FLEET.replace("memory: 2g", "memory: 3g"))
    unchanged = agent("reviewer-1", FLEET.replace("memory: 2g", "memory: 3g"))
    assert after.config_hash != before.config_hash
    assert unchanged.config_hash == agent("reviewer-1").config_hash


@pytest.mark.parametrize(
    ("network", "dns", "filtered"),
    [
        ({"mode": "none"}, ["127.0.0.1"], False),
        ({"mode": "none", "dns": ["9.9.9.9"]}, ["127.0.0.1"], False),
        ({"mode": "allowlist", "allow": ["1.2.3.4:443"], "dns": ["9.9.9.9"]}, ["127.0.0.1"], False),  # nothing to resolve
        ({"mode": "allowlist", "allow": ["github.com:443"], "dns": ["9.9.9.9"]}, [BRIDGE_GATEWAY], True),
        ({"mode": "allowlist", "allow": ["[2001:db8::1]:443", "GitHub.com"]}, [BRIDGE_GATEWAY], True),
        ({"mode": "open"}, [], False),  # Docker's default, as before
        ({"mode": "open", "allow": ["pypi.org"], "dns": ["9.9.9.9"]}, ["9.9.9.9"], False),
    ],
)
def test_dns_is_the_filter_on_the_gateway_for_domain_entries_only(network: dict, dns: list[str], filtered: bool) -> None:
    """The spec's dns servers are never the container's resolvers in allowlist mode: only its filter's upstreams."""
    spec = parse_inventory(FLEET.replace("fleet:\n", f"fleet:\n  network: {json.dumps(network)}\n", 1), "f.yaml").fleet
    agent = build(spec, {i: 60000 + n for n, (_, i) in enumerate(instances(spec))}).agents[0]
    assert (agent.dns, agent.dns_filter) == (dns, filtered)
    args = agent.run_args()
    assert [args[i + 1] for i, a in enumerate(args) if a == "--dns"] == dns
