"""Inventory models and loader: exact messages, the example inventories, value
parsers, defaults, YAML 1.2 semantics and immutability."""

from __future__ import annotations

import os
from pathlib import Path

import pydantic
import pytest

from jackin.errors import EXIT_SPEC, JackinError, SpecError
from jackin.spec import roles
from jackin.spec import (
    AgentSpec,
    FleetSpec,
    HostSpec,
    Inventory,
    LabSpec,
    NetworkPolicy,
    load_inventory,
    parse_inventory,
)
from jackin.spec.models import Resources, parse_duration, parse_size

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "inventory" / "lab.yaml"
STATIC = REPO / "inventory" / "static.example.yaml"

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleExampleExampleExampleExample0"

# A small valid lab inventory; tests append to or edit it.
LAB_TEXT = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
"""


def problems(text: str, filename: str = "f.yaml") -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_inventory(text, filename)
    assert caught.value.exit_code == EXIT_SPEC
    return caught.value.problems


# --- exact messages ------------------------------------------------------------


def test_unknown_key_suggests_the_close_one():
    text = """\
hosts:
  - name: web-1
    adress: 192.0.2.10
fleet:
  name: demo
  agents:
    - name: coder
"""
    assert problems(text) == [
        "f.yaml:2: hosts[0].address: required field is missing",
        "f.yaml:3: hosts[0].adress: unknown key 'adress'; did you mean 'address'? "
        "(expected one of: address, host_keys, jump, key_file, name, port, user)",
    ]


def test_unknown_top_level_key_suggests_fleet():
    text = "hosts:\n  - name: web-1\n    address: 192.0.2.10\nflet:\n  name: demo\n"
    assert problems(text) == [
        "f.yaml:1: fleet: required field is missing",
        "f.yaml:4: flet: unknown key 'flet'; did you mean 'fleet'? (expected one of: fleet, groups, hosts)",
    ]


def test_duplicate_key_reports_both_lines():
    text = """\
fleet:
  name: first
  provider: lab
  agents:
    - name: coder
  name: second
"""
    assert problems(text) == [
        "f.yaml:6: fleet.name: duplicate key 'name' (first set on line 2); each key may appear once",
    ]


def test_port_out_of_range():
    text = """\
hosts:
  - name: web-1
    address: 192.0.2.10
    port: 65536
fleet:
  name: demo
  agents:
    - name: coder
"""
    assert problems(text) == ["f.yaml:4: hosts[0].port: expected a number <= 65535, got 65536"]


def test_port_zero():
    text = "hosts:\n  - name: web-1\n    address: 192.0.2.10\n    port: 0\n" + "fleet:\n  name: demo\n  agents:\n    - name: coder\n"
    assert problems(text) == ["f.yaml:4: hosts[0].port: expected a number >= 1, got 0"]


def test_secret_value_in_credential_is_refused_without_echoing_it():
    text = LAB_TEXT + """\
      credentials:
        - name: ANTHROPIC_API_KEY
          value: sk-ant-secret-0123456789
"""
    found = problems(text)
    assert found == [
        "f.yaml:8: fleet.agents[0].credentials[0].value: unknown key 'value': a spec never holds "
        "a secret's value; name where it lives with from_env or from_file",
    ]
    assert not any("sk-ant-secret" in line for line in found)


@pytest.mark.parametrize("key", ["secret", "password", "token", "key"])
def test_other_secret_keys_in_credential(key):
    text = LAB_TEXT + f"      credentials:\n        - name: TOKEN\n          from_env: TOKEN\n          {key}: abc\n"
    assert problems(text) == [
        f"f.yaml:9: fleet.agents[0].credentials[0].{key}: unknown key {key!r}: a spec never holds "
        "a secret's value; name where it lives with from_env or from_file",
    ]


def test_unknown_jump_host():
    text = """\
hosts:
  - name: bastion
    address: 192.0.2.10
  - name: builder-1
    address: 192.0.2.21
    jump: bastoin
fleet:
  name: demo
  agents:
    - name: coder
"""
    assert problems(text) == ["f.yaml:6: hosts[1].jump: unknown jump host 'bastoin'; expected one of the hosts"]


def test_unknown_role():
    text = LAB_TEXT + "      role: gpt\n"
    assert problems(text) == [
        f"f.yaml:6: fleet.agents[0].role: unknown role 'gpt'; known roles: {', '.join(roles.names())} "
        f"(in {roles.roles_dir()})",
    ]
    assert {"claude-code", "codex", "opencode", "gemini", "amp", "demo"} <= set(roles.names())


def test_bad_agent_name():
    text = LAB_TEXT.replace("name: coder", "name: Coder")
    assert problems(text) == [
        "f.yaml:5: fleet.agents[0].name: 'Coder' is not valid here: expected a lower-case name of "
        "letters, digits and single '-' (at most 24 characters)",
    ]


def test_duplicate_agent_names():
    text = LAB_TEXT + "    - name: coder\n"
    assert problems(text) == ["f.yaml:6: fleet.agents[1].name: duplicate agent name 'coder' (also agents[0])"]


def test_cidr_over_32_in_allowlist():
    text = LAB_TEXT + "  network:\n    mode: allowlist\n    allow: [10.0.0.0/33]\n"
    assert problems(text) == [
        "f.yaml:8: fleet.network.allow[0]: '10.0.0.0/33' is not a valid address or CIDR "
        "('10.0.0.0/33' does not appear to be an IPv4 or IPv6 network)",
    ]


def test_credential_needs_exactly_one_source():
    text = LAB_TEXT + "      credentials:\n        - name: TOKEN\n          from_env: TOKEN\n          from_file: /t\n"
    assert problems(text) == [
        "f.yaml:7: fleet.agents[0].credentials[0]: a credential needs exactly one of from_env or from_file",
    ]


def test_yaml_syntax_error_has_line_and_column():
    assert problems("fleet:\n  name: a: b\n") == ["f.yaml:2:10: YAML syntax error: mapping values are not allowed here"]


def test_empty_text():
    assert problems("") == ["f.yaml:1: expected a mapping with 'fleet' (and 'hosts', 'groups'), got an empty file"]


def test_error_summary_counts_problems():
    with pytest.raises(SpecError) as caught:
        parse_inventory(LAB_TEXT + "      role: gpt\n      count: 0\n", "f.yaml")
    assert str(caught.value) == "f.yaml: invalid inventory (2 problems)"
    assert len(caught.value.problems) == 2


def test_spec_error_is_a_value_error_with_exit_code_2():
    assert issubclass(SpecError, ValueError)
    assert issubclass(SpecError, JackinError)
    assert SpecError("x").exit_code == 2
    assert SpecError("x").problems == []


def test_missing_file_is_a_spec_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load_inventory(missing)
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"{missing}: no such inventory file"
    assert caught.value.hint


def test_an_inventory_that_is_not_utf8_names_the_byte_and_its_offset(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("fleet:\n  name: caf".encode() + b"\xe9\n")
    with pytest.raises(SpecError) as caught:
        load_inventory(path)
    assert caught.value.message == (f"{path}: the inventory is not UTF-8 text: byte 0xe9 at byte offset 18 "
                                    "(invalid continuation byte)")  # fmt: skip


def test_the_inventory_knows_its_directory_and_the_fleets_hosts(tmp_path):
    path = tmp_path / "conf" / "f.yaml"
    path.parent.mkdir()
    path.write_text(STATIC.read_text())
    inv = load_inventory(path)
    assert inv.source_dir == str(tmp_path / "conf")
    assert inv.fleet_host_names() == ["builder-1", "builder-2"]  # the group builders; not the bastion
    assert Inventory.model_validate(inv.model_dump()).source_dir == os.getcwd()  # not read from a file
    renamed = inv.model_copy(update={"fleet": inv.fleet.model_copy(update={"name": "other"})})
    assert renamed.source_dir == str(tmp_path / "conf")  # a rollback's stored fleet keeps the file's directory


# --- the example inventories -------------------------------------------------


def test_lab_example_loads():
    inv = load_inventory(LAB)
    assert isinstance(inv, Inventory)
    fleet = inv.fleet
    assert inv.hosts == [] and inv.groups == {}
    assert fleet.name == "demo" and fleet.provider == "lab"
    assert fleet.lab == LabSpec(name="jackin", hosts=2)
    assert [(a.name, a.role, a.count) for a in fleet.agents] == [("coder", "demo", 2), ("reviewer", "demo", 1)]
    assert fleet.network.mode == "none" and fleet.network.allow == []
    assert fleet.resources.memory == 512 * 1024**2
    assert fleet.resources.cpus == 1.0 and fleet.resources.pids == 256
    assert fleet.snapshots.keep == 5
    assert fleet.ttl == 8 * 3600


def test_static_example_loads():
    inv = load_inventory(str(STATIC))
    assert [h.name for h in inv.hosts] == ["bastion", "builder-1", "builder-2"]
    bastion, builder = inv.hosts[0], inv.hosts[1]
    assert bastion.user == "ops" and bastion.port == 22 and bastion.jump is None
    assert builder.user == "root" and builder.jump == "bastion"
    assert builder.key_file == Path("~/.ssh/id_ed25519")
    assert all(len(h.host_keys) == 1 and h.host_keys[0].startswith("ssh-ed25519 AAAA") for h in inv.hosts)
    assert inv.groups == {"builders": ["builder-1", "builder-2"]}
    fleet = inv.fleet
    assert fleet.provider == "static" and fleet.hosts == ["builders"]
    claude, codex = fleet.agents
    assert claude.credentials[0].from_env == "ANTHROPIC_API_KEY" and claude.credentials[0].from_file is None
    assert codex.credentials[0].from_file == Path("~/.config/jackin/openai.key")
    assert fleet.agent_network(claude) is fleet.network
    assert fleet.agent_network(codex).allow == ["api.openai.com:443", "github.com:443"]
    assert fleet.resources.memory == 4 * 1024**3
    assert fleet.snapshots.every == 3600 and fleet.ttl == 12 * 3600
    assert fleet.address_pools[0].base == "10.213.0.0/16" and fleet.address_pools[0].size == 24


def test_examples_load_the_same_from_text():
    for path in (LAB, STATIC):
        assert parse_inventory(path.read_text(encoding="utf-8"), str(path)) == load_inventory(path)


def test_host_key_comment_is_dropped():
    text = f"hosts:\n  - name: web-1\n    address: web-1.example.com\n    host_keys: ['{KEY} root@web-1']\n"
    text += "fleet:\n  name: demo\n  agents:\n    - name: coder\n"
    assert parse_inventory(text).hosts[0].host_keys == [KEY]


def test_allowlist_forms_accepted():
    entries = [
        "10.0.0.0/8",
        "10.0.0.0/8:22",
        "192.0.2.1",
        "192.0.2.1:443",
        "github.com",
        "github.com:443",
        "2001:db8::/32",
        "[2001:db8::1]:443",
    ]
    text = LAB_TEXT + "  network:\n    mode: allowlist\n    allow:\n" + "".join(f"      - '{e}'\n" for e in entries)
    assert parse_inventory(text).fleet.network.allow == entries


# --- value parsers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        (4096, 4096),
        ("4096", 4096),
        ("512m", 512 * 1024**2),
        ("512M", 512 * 1024**2),
        ("512 MB", 512 * 1024**2),
        ("2g", 2 * 1024**3),
        (" 2g ", 2 * 1024**3),
        ("1.5GiB", int(1.5 * 1024**3)),
        ("1k", 1024),
        ("1kb", 1024),
        ("1KiB", 1024),
        ("0.5k", 512),
        ("1t", 1024**4),
        ("100b", 100),
    ],
)
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expected a positive size"),
        (-1, "expected a positive size"),
        ("0", "expected a positive size"),
        ("0.1", "expected a positive size"),
        (True, "expected a size such as 512m or 2g"),
        ("", "expected a size such as 512m or 2g"),
        ("lots", "expected a size such as 512m or 2g"),
        ("-1m", "expected a size such as 512m or 2g"),
        ("1x", "expected a size such as 512m or 2g"),
        ("1.5.5m", "expected a size such as 512m or 2g"),
        ("m", "expected a size such as 512m or 2g"),
        ("2 gigabytes", "expected a size such as 512m or 2g"),
    ],
)
def test_parse_size_rejects(value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        parse_size(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        (3600, 3600),
        ("30s", 30),
        ("90m", 90 * 60),
        ("8h", 8 * 3600),
        (" 8h ", 8 * 3600),
        ("2d", 2 * 86400),
        ("1d12h", 36 * 3600),
        ("1h30m15s", 5415),
        ("0d1s", 1),
    ],
)
def test_parse_duration(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expected a positive duration"),
        (-5, "expected a positive duration"),
        ("0s", "expected a positive duration"),
        ("0d0h", "expected a positive duration"),
        (False, "expected a duration such as 30m, 8h or 2d"),
        ("", "expected a duration such as 30m, 8h or 2d"),
        ("8 hours", "expected a duration such as 30m, 8h or 2d"),
        ("1.5h", "expected a duration such as 30m, 8h or 2d"),
        ("h", "expected a duration such as 30m, 8h or 2d"),
        ("1m1h", "expected a duration such as 30m, 8h or 2d"),
        ("1w", "expected a duration such as 30m, 8h or 2d"),
    ],
)
def test_parse_duration_rejects(value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        parse_duration(value)


# --- defaults ------------------------------------------------------------------


def test_fleet_defaults():
    inv = parse_inventory(
        "hosts:\n  - name: web-1\n    address: 192.0.2.10\nfleet:\n  name: demo\n  agents:\n    - name: coder\n"
    )
    fleet = inv.fleet
    assert fleet.provider == "static"
    assert fleet.lab is None and fleet.hosts == [] and fleet.ttl is None
    assert fleet.network == NetworkPolicy(mode="none", allow=[], dns=[], publish=[])
    assert fleet.resources == Resources(memory=1024**3, cpus=1.0, pids=256, disk=None)
    assert fleet.snapshots.engine == "restic" and fleet.snapshots.keep == 5 and fleet.snapshots.every is None
    assert fleet.snapshots.before_changes is True and fleet.snapshots.before_teardown is True
    assert fleet.uid_base == 60000 and fleet.address_pools == []
    host = inv.hosts[0]
    assert (host.port, host.user, host.key_file, host.host_keys, host.jump) == (22, "root", None, [], None)
    agent = fleet.agents[0]
    assert (agent.role, agent.count, agent.network, agent.resources, agent.credentials, agent.image) == (
        "demo",
        1,
        None,
        None,
        [],
        None,
    )


def test_lab_defaults():
    assert LabSpec() == LabSpec(name="jackin", hosts=2)


def test_agent_inherits_fleet_network_and_resources():
    text = LAB_TEXT + """\
    - name: reviewer
      network:
        mode: open
      resources:
        memory: 256m
  network:
    mode: allowlist
    allow: [github.com:443]
  resources:
    memory: 2g
    cpus: 2
"""
    fleet = parse_inventory(text).fleet
    coder, reviewer = fleet.agents
    assert fleet.agent_network(coder) == fleet.network
    assert fleet.agent_network(coder).allow == ["github.com:443"]
    assert fleet.agent_resources(coder) == fleet.resources
    assert fleet.agent_resources(coder).memory == 2 * 1024**3
    # An agent's own policy replaces the fleet's as a whole (no merging).
    assert fleet.agent_network(reviewer) == NetworkPolicy(mode="open")
    assert fleet.agent_network(reviewer).allow == []
    # Resources merge field by field: the agent's memory, the fleet's cpus.
    assert fleet.agent_resources(reviewer) == Resources(memory=256 * 1024**2, cpus=2)


def test_agent_inherits_defaults_when_fleet_sets_nothing():
    fleet = FleetSpec(name="demo", provider="lab", agents=[AgentSpec(name="coder")])
    agent = fleet.agents[0]
    assert fleet.agent_network(agent) == NetworkPolicy()
    assert fleet.agent_resources(agent) == Resources()


def test_allow_needs_allowlist_even_when_mode_is_defaulted():
    text = LAB_TEXT + "  network:\n    allow: [github.com:443]\n"
    assert problems(text) == [
        "f.yaml:7: fleet.network.allow: entries are not allowed with mode 'none' (use mode 'allowlist')",
    ]


# --- YAML 1.2 semantics --------------------------------------------------------


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n"])
def test_yaml_1_1_booleans_are_plain_names(word):
    text = LAB_TEXT.replace("name: coder", f"name: {word}").replace("name: demo", f"name: {word}")
    fleet = parse_inventory(text).fleet
    assert fleet.name == word and fleet.agents[0].name == word


def test_yes_is_not_a_count():
    assert problems(LAB_TEXT + "      count: yes\n") == [
        "f.yaml:6: fleet.agents[0].count: expected a whole number, got 'yes'",
    ]


def test_yes_is_not_a_keep():
    text = LAB_TEXT + "  snapshots:\n    keep: on\n"
    assert problems(text) == ["f.yaml:7: fleet.snapshots.keep: expected a whole number, got 'on'"]


def test_no_sexagesimal_numbers():
    # YAML 1.1 reads 1:30 as 90; YAML 1.2 keeps it a string.
    assert problems(LAB_TEXT + "  ttl: 1:30\n") == [
        "f.yaml:6: fleet.ttl: expected a duration such as 30m, 8h or 2d, got '1:30'",
    ]


def test_leading_zero_is_decimal_and_0o_is_octal():
    assert parse_inventory(LAB_TEXT + "      count: 010\n").fleet.agents[0].count == 10
    assert parse_inventory(LAB_TEXT + "      count: 0o10\n").fleet.agents[0].count == 8


def test_null_is_null():
    assert problems(LAB_TEXT.replace("name: coder", "name: null")) == [
        "f.yaml:5: fleet.agents[0].name: expected a string, got None",
    ]


# --- immutability and strictness ------------------------------------------------


def test_models_are_frozen():
    inv = load_inventory(STATIC)
    targets = [
        (inv, "fleet", inv.fleet),
        (inv.fleet, "name", "other"),
        (inv.fleet.network, "mode", "open"),
        (inv.fleet.resources, "memory", 1),
        (inv.fleet.agents[0], "count", 3),
        (inv.fleet.agents[0].credentials[0], "from_env", "OTHER"),
        (inv.hosts[0], "port", 2222),
        (inv.fleet.snapshots, "keep", 1),
    ]
    for model, attribute, value in targets:
        before = getattr(model, attribute)
        with pytest.raises(pydantic.ValidationError, match="frozen"):
            setattr(model, attribute, value)
        assert getattr(model, attribute) == before


def test_every_model_is_frozen_and_forbids_extra_keys():
    from jackin.spec import models

    classes = [
        obj
        for obj in vars(models).values()
        if isinstance(obj, type) and issubclass(obj, pydantic.BaseModel) and obj.__module__ == models.__name__
    ]
    assert {HostSpec, FleetSpec, AgentSpec, Inventory, LabSpec, NetworkPolicy} <= set(classes)
    for cls in classes:
        assert cls.model_config.get("frozen") is True, cls
        assert cls.model_config.get("extra") == "forbid", cls


def test_model_copy_leaves_original_alone():
    inv = load_inventory(LAB)
    renamed = inv.fleet.model_copy(update={"name": "other"})
    assert renamed.name == "other" and inv.fleet.name == "demo"


def test_models_refuse_extra_keys_directly():
    with pytest.raises(pydantic.ValidationError, match="extra"):
        HostSpec(name="web-1", address="192.0.2.10", adress="x")


# --- regressions: bugs found by these tests, now fixed -------------------------------


def test_static_with_empty_hosts_list_is_refused():
    text = "hosts: []\nfleet:\n  name: demo\n  agents:\n    - name: coder\n"
    found = problems(text)
    assert any("provider 'static' needs at least one entry under 'hosts'" in p for p in found)


def test_credential_name_list_is_a_spec_error():
    text = LAB_TEXT + "      credentials:\n        - name: [A, B]\n          from_env: X\n"
    assert problems(text) == ["f.yaml:7: fleet.agents[0].credentials[0].name: expected a string, got a list"]


@pytest.mark.parametrize(
    "line",
    ["      count: !!int abc\n", "      resources:\n        cpus: !!float abc\n", "      image: !!bool maybe\n"],
    ids=["int", "float", "bool"],
)
def test_bad_explicit_tag_is_a_spec_error(line):
    with pytest.raises(SpecError):
        parse_inventory(LAB_TEXT + line, "f.yaml")


def test_recursive_alias_is_a_spec_error():
    with pytest.raises(SpecError):
        parse_inventory("fleet: &loop [*loop]\n", "f.yaml")


@pytest.mark.parametrize("value", ["!duration 8h", "!!timestamp soon"], ids=["unknown-tag", "bad-timestamp"])
def test_tag_problem_is_one_line(value):
    found = problems(LAB_TEXT + f"  ttl: {value}\n")
    assert found and all("\n" not in p for p in found), found


def test_bad_user_gets_the_user_hint():
    text = "hosts:\n  - name: web-1\n    address: 192.0.2.10\n    user: Admin\n"
    text += "fleet:\n  name: demo\n  agents:\n    - name: coder\n"
    assert problems(text) == ["f.yaml:4: hosts[0].user: 'Admin' is not valid here: expected a Unix user name (lower-case letters, digits, '_' and '-')"]


def test_bad_credential_name_hint_is_not_lower_case():
    text = LAB_TEXT + "      credentials:\n        - name: api_key\n          from_env: API_KEY\n"
    found = problems(text)
    assert len(found) == 1 and found[0].startswith("f.yaml:7: fleet.agents[0].credentials[0].name: ")
    assert "lower-case" not in found[0], found[0]


@pytest.mark.parametrize("address", ["192.0.2.300", "10.0.0", "web..example.com"])
def test_invalid_address_is_refused(address):
    text = f"hosts:\n  - name: web-1\n    address: '{address}'\n"
    text += "fleet:\n  name: demo\n  agents:\n    - name: coder\n"
    found = problems(text)
    assert found == [f"f.yaml:3: hosts[0].address: expected an IP address or a DNS name, got {address!r}"]


@pytest.mark.parametrize(
    ("line", "field"),
    [("      count: true\n", "fleet.agents[0].count"), ("      resources:\n        cpus: true\n", "fleet.agents[0].resources.cpus")],
    ids=["count", "cpus"],
)
def test_boolean_is_not_a_number(line, field):
    found = problems(LAB_TEXT + line)
    assert len(found) == 1 and f": {field}: " in found[0], found


def test_missing_fleet_reports_no_provider_noise():
    assert problems("flet:\n  name: demo\n") == [
        "f.yaml:1: fleet: required field is missing",
        "f.yaml:1: flet: unknown key 'flet'; did you mean 'fleet'? (expected one of: fleet, groups, hosts)",
    ]


def test_wildcard_domains_and_scoped_addresses_are_refused():
    text = LAB_TEXT + "      network:\n        mode: allowlist\n        allow: ['*.example.com:443']\n        dns: ['fe80::1%eth0']\n"
    found = problems(text)
    assert any("wildcard domains cannot be enforced" in p for p in found)
    assert any("scoped IPv6 addresses are not supported" in p for p in found)


def test_link_local_resolver_is_refused_because_link_local_is_always_denied():
    text = LAB_TEXT + "      network:\n        mode: allowlist\n        dns: [169.254.169.253]\n"
    assert any("link-local addresses are always denied" in p for p in problems(text))


def test_the_shipped_run_inventory_gives_each_demo_agent_this_repository_and_a_task() -> None:
    from jackin.work import bundles as work
    inv = load_inventory(REPO / "inventory" / "run.yaml")
    assert {a.role for a in inv.fleet.agents} == {"demo"}
    assert all(a.work is not None and a.work.repo == str(REPO) for a in inv.fleet.agents)
    work.check(inv.fleet)  # the repository and its ref resolve here, as fleet.up checks before any host
