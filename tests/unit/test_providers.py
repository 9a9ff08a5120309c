"""Providers own the fleet's hosts: the static provider resolves pinned targets and
lists every host address; provider_for picks the provider the inventory names."""

from __future__ import annotations

import contextlib

from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.lab import LabHost, LabStatus
from jackin.store.ledger import Ledger
from jackin.lab.providers import LabProvider, StaticProvider, provider_for
from jackin.spec import Inventory, parse_inventory

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


def test_static_hosts_given_by_name_are_named_for_the_warning() -> None:
    """Their addresses cannot be denied (not resolved here): fleet.up warns about each, never silently."""
    provider = provider_for(parse_inventory(STATIC, "s.yaml"))
    assert provider.unresolved() == ["named (build.example.org)"]


def test_static_host_without_a_pinned_key_is_refused() -> None:
    spec = parse_inventory("hosts: [{name: a, address: 10.0.0.5}]\nfleet: {name: demo, agents: [{name: c}]}\n", "s.yaml")
    with pytest.raises(SpecError, match="no pinned host key for: a"):
        provider_for(spec).targets()


# --- lab ownership -------------------------------------------------------------------



class FakeLab:
    """A lab's surface as the provider uses it: hosts by count, and a record of calls."""

    def __init__(self, tmp: Path, hosts: int = 0) -> None:
        self.name, self.dir, self.calls = "shared", tmp, []
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text("")
        self.count = hosts

    def host_name(self, index: int) -> str:
        return f"shared-{index}"

    def status(self) -> LabStatus:
        hosts = [LabHost(name=self.host_name(i), container=f"c{i}", state="running", port=40000 + i,
                         key_file=self.dir / "k", known_hosts=self.known_hosts, pinned=True,
                         lab_ip=f"172.30.0.{i + 1}", public_ip=f"198.18.7.{i + 1}")
                 for i in range(1, self.count + 1)]  # fmt: skip
        return LabStatus(name=self.name, image="img", network="n", directory=self.dir, hosts=hosts)

    def up(self, hosts: int, **_: object) -> LabStatus:
        self.calls.append(("up", hosts))
        self.count = hosts
        return self.status()

    def down(self, *, unless=None, **_: object) -> dict[str, list[str]]:
        if unless is not None and unless():
            self.calls.append(("down", "kept"))
            return {"containers": []}
        self.calls.append(("down",))
        self.count = 0
        return {"containers": ["c1"]}

    def locked(self):
        return contextlib.nullcontext()


def lab_fleet(name: str, hosts: int) -> Inventory:
    return parse_inventory(f"fleet: {{name: {name}, provider: lab, lab: {{name: shared, hosts: {hosts}}}, "
                           "agents: [{name: coder}]}\n", f"{name}.yaml")  # fmt: skip


@pytest.fixture
def shared(tmp_path: Path) -> FakeLab:
    return FakeLab(tmp_path)


def provider(inventory: Inventory, ledger: Ledger, lab: FakeLab) -> LabProvider:
    p = provider_for(inventory, ledger)
    assert isinstance(p, LabProvider)
    p.lab = lab  # type: ignore[assignment]
    return p


def test_lab_fleets_share_a_lab_without_resizing_it(tmp_path: Path, shared: FakeLab) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        alpha = provider(lab_fleet("alpha", 2), ledger, shared)
        assert [t.name for t in alpha.targets()] == ["shared-1", "shared-2"]
        alpha.claim()
        assert shared.calls == [("up", 2)] and ledger.lab("shared")["created_by"] == "alpha"  # type: ignore[index]

        beta = provider(lab_fleet("beta", 1), ledger, shared)
        assert [t.name for t in beta.targets()] == ["shared-1"]  # the lab's first host; no resize
        beta.claim()
        assert shared.calls == [("up", 2)] and shared.count == 2

        gamma = provider(lab_fleet("gamma", 3), ledger, shared)
        assert [t.name for t in gamma.targets()] == ["shared-1", "shared-2", "shared-3"]  # grows, never shrinks
        assert shared.calls[-1] == ("up", 3) and ledger.lab("shared")["created_by"] == "alpha"  # type: ignore[index]

        assert alpha.release().note == "lab 'shared' kept: still used by fleet(s) beta"
        assert beta.release().destroyed and shared.calls[-1] == ("down",)  # gamma never claimed it
        assert ledger.lab("shared") is None


def test_a_fleet_joining_before_the_last_teardown_takes_the_lock_keeps_the_lab(tmp_path: Path, shared: FakeLab) -> None:
    """The last fleet's teardown asks again under the lab's lock: a fleet that claimed the lab after
    the first look (here: inside down, where the real lock would have made it wait) keeps it."""
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        alpha = provider(lab_fleet("alpha", 1), ledger, shared)
        alpha.targets()
        alpha.claim()
        beta = provider(lab_fleet("beta", 1), ledger, shared)
        real_down = shared.down

        def down(**kwargs: object) -> dict[str, list[str]]:
            beta.claim()  # beta joins between alpha's look at the users and the removal
            return real_down(**kwargs)

        shared.down = down  # type: ignore[method-assign]
        release = alpha.release()
        assert not release.destroyed and release.note == "lab 'shared' kept: another fleet joined it meanwhile"
        assert shared.calls[-1] == ("down", "kept") and shared.count == 1
        assert ledger.lab_users("shared") == ["beta"] and ledger.lab("shared") is not None


def test_lab_with_kept_data_or_keep_lab_is_not_destroyed(tmp_path: Path, shared: FakeLab) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        alpha = provider(lab_fleet("alpha", 1), ledger, shared)
        alpha.targets()
        alpha.claim()
        kept = alpha.release(keep_data=True)
        assert not kept.destroyed and kept.note == "lab 'shared' kept: fleet 'alpha''s kept data lives on its hosts"
        assert ledger.lab_users("shared") == ["alpha"]
        assert alpha.release(keep_hosts=True).note == "lab 'shared' kept (--keep-lab)"
        assert ledger.lab_users("shared") == [] and ("down",) not in shared.calls


def test_a_lab_no_fleet_created_is_never_destroyed_by_a_fleet(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, hosts=2)  # made by lab.up
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        alpha = provider(lab_fleet("alpha", 2), ledger, lab)
        alpha.targets()
        alpha.claim()
        release = alpha.release()
        assert not release.destroyed and lab.calls == []
        assert release.note == "lab 'shared' kept: no fleet created it (lab.up did); inv lab.down --name shared removes it"


def test_dry_targets_never_bring_a_lab_up(tmp_path: Path, shared: FakeLab) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert provider(lab_fleet("alpha", 2), ledger, shared).targets(bring_up=False) == []
        assert shared.calls == [] and ledger.lab("shared") is None


def test_lab_addresses_are_every_hosts_lab_and_public_ip(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        p = provider(lab_fleet("alpha", 1), ledger, FakeLab(tmp_path, hosts=2))
        assert p.addresses() == ["172.30.0.2", "172.30.0.3", "198.18.7.2", "198.18.7.3"]


def test_lab_addresses_after_targets_reuse_that_look_at_the_lab(tmp_path: Path) -> None:
    """fleet.up and fleet.plan ask for targets, then addresses: one lab status (docker calls), not two."""
    lab = FakeLab(tmp_path, hosts=2)
    looks = []
    real_status = lab.status
    lab.status = lambda: looks.append(1) or real_status()  # type: ignore[method-assign]
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        p = provider(lab_fleet("alpha", 2), ledger, lab)
        assert len(p.targets(bring_up=False)) == 2
        assert p.addresses() == ["172.30.0.2", "172.30.0.3", "198.18.7.2", "198.18.7.3"]
        assert len(looks) == 1
