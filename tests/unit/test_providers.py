"""Providers own the fleet's hosts: the static provider resolves pinned targets and
lists every host address; provider_for picks the provider the inventory names."""

from __future__ import annotations

from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.providers import LabProvider, StaticProvider, provider_for
from jackin.spec import parse_inventory

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
STATIC = f"""hosts:
  - {{name: web-1, address: 10.0.0.5, host_keys: ["{KEY}"]}}
  - {{name: web-2, address: 10.0.0.6, port: 2222, host_keys: ["{KEY}"]}}
  - {{name: named, address: build.example.org, host_keys: ["{KEY}"]}}
groups:
  web: [web-1, web-2]
fleet:
  name: demo
  hosts: [web]
  agents: [{{name: coder}}]
"""


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_provider_for_picks_the_inventorys_provider() -> None:
    assert isinstance(provider_for(parse_inventory(STATIC, "s.yaml")), StaticProvider)
    lab = parse_inventory("fleet: {name: demo, provider: lab, agents: [{name: coder}]}\n", "l.yaml")
    provider = provider_for(lab)
    assert isinstance(provider, LabProvider) and provider.lab.name == "jackin"


def test_static_targets_resolve_groups_and_pin_keys(state: Path) -> None:
    targets = provider_for(parse_inventory(STATIC, "s.yaml")).targets()
    assert [(t.name, t.address, t.port) for t in targets] == [("web-1", "10.0.0.5", 22), ("web-2", "10.0.0.6", 2222)]
    known_hosts = state / "fleets" / "demo" / "known_hosts"
    assert targets[0].known_hosts == known_hosts
    assert known_hosts.read_text().splitlines() == [
        f"10.0.0.5 {KEY}", f"[10.0.0.6]:2222 {KEY}", f"build.example.org {KEY}",
    ]  # fmt: skip
    assert known_hosts.stat().st_mode & 0o777 == 0o600


def test_static_addresses_are_every_inventory_hosts_ip_literal() -> None:
    assert provider_for(parse_inventory(STATIC, "s.yaml")).addresses() == ["10.0.0.5", "10.0.0.6"]


def test_static_host_without_a_pinned_key_is_refused() -> None:
    spec = parse_inventory("hosts: [{name: a, address: 10.0.0.5}]\nfleet: {name: demo, agents: [{name: c}]}\n", "s.yaml")
    with pytest.raises(SpecError, match="no pinned host key for: a"):
        provider_for(spec).targets()
