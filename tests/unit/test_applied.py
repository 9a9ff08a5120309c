"""The applied spec kept per run: canonical, hashed, never holding a secret; and the diff of two specs."""

from __future__ import annotations

import json

from jackin.plan.applied import CREDENTIAL_FIELDS, Change, applied, diff, load_fleet, redact, redacted
from jackin.spec import Inventory
from jackin.spec.models import Credential


def inventory(**fleet) -> Inventory:
    base = {"name": "demo", "provider": "lab", "agents": [{"name": "coder", "count": 2}]}
    return Inventory.model_validate({"fleet": {**base, **fleet}})


def test_applied_is_canonical_json_of_the_dump_with_its_hashes() -> None:
    spec = applied(inventory())
    data = json.loads(spec.spec)
    assert spec.spec == json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert data["fleet"]["agents"][0]["count"] == 2
    assert len(spec.hash) == 64 and len(spec.fleet_hash) == 64
    assert applied(inventory()) == spec  # same spec, same text and hashes


def test_fleet_hash_ignores_how_hosts_are_reached_but_hash_does_not() -> None:
    a = Inventory.model_validate({"hosts": [{"name": "h1", "address": "10.0.0.1"}],
                                  "fleet": {"name": "demo", "agents": [{"name": "coder"}]}})  # fmt: skip
    b = Inventory.model_validate({"hosts": [{"name": "h1", "address": "10.0.0.2"}],
                                  "fleet": {"name": "demo", "agents": [{"name": "coder"}]}})  # fmt: skip
    assert applied(a).fleet_hash == applied(b).fleet_hash
    assert applied(a).hash != applied(b).hash
    assert applied(inventory(ttl="8h")).fleet_hash != applied(inventory()).fleet_hash


def test_credential_fields_are_references_only() -> None:
    """A field added to Credential fails here until it is classified: if it can hold a secret it must
    stay out of CREDENTIAL_FIELDS (and so out of the ledger)."""
    assert set(Credential.model_fields) == set(CREDENTIAL_FIELDS) == {"name", "from_env", "from_file", "mode", "kind",
                                                                         "token_url", "acknowledge_terms"}


def test_a_credential_is_stored_by_reference_and_an_unknown_field_is_dropped() -> None:
    inv = inventory(agents=[{"name": "coder", "credentials": [{"name": "API_KEY", "from_env": "MY_KEY"}]}])
    data = redacted(inv)
    assert data["fleet"]["agents"][0]["credentials"] == [{"name": "API_KEY", "from_env": "MY_KEY", "from_file": None, "mode": None,
                                                                 "kind": "key", "token_url": None, "acknowledge_terms": False}]
    # were a credential model ever to carry a value, the stored dump leaves it out
    dump = inv.model_dump(mode="json")
    dump["fleet"]["agents"][0]["credentials"][0]["value"] = "s3cret"
    assert "s3cret" not in json.dumps(redact(dump))
    assert redact(dump)["fleet"]["agents"][0]["credentials"] == data["fleet"]["agents"][0]["credentials"]


def test_load_fleet_validates_the_stored_spec_again() -> None:
    spec = applied(inventory(ttl="1h"))
    assert load_fleet(spec.spec) == inventory(ttl="1h").fleet


def test_diff_agents_added_removed_and_changed_network() -> None:
    before = inventory(agents=[{"name": "coder", "count": 2}, {"name": "web", "network": {"mode": "none"}}]).fleet
    after = inventory(agents=[{"name": "web", "network": {"mode": "allowlist", "allow": ["10.1.0.0/16:443"]}},
                              {"name": "docs"}]).fleet  # fmt: skip
    found = diff(before, after)
    assert found.agents_added == ["docs"]
    assert found.agents_removed == ["coder"]
    assert found.agents_changed == {"web": [
        Change(field="network.allow", before=[], after=["10.1.0.0/16:443"]),
        Change(field="network.mode", before="none", after="allowlist"),
    ]}  # fmt: skip
    assert found.fleet == []
    assert not found.empty


def test_diff_fleet_wide_policy_shows_on_the_fleet_and_on_agents_without_their_own() -> None:
    before = inventory(agents=[{"name": "a"}, {"name": "b", "network": {"mode": "none"}}]).fleet
    after = inventory(agents=[{"name": "a"}, {"name": "b", "network": {"mode": "none"}}],
                      network={"mode": "open"}).fleet  # fmt: skip
    found = diff(before, after)
    assert found.fleet == [Change(field="network.mode", before="none", after="open")]
    assert list(found.agents_changed) == ["a"]


def test_diff_of_a_spec_with_itself_is_empty() -> None:
    fleet = inventory().fleet
    assert diff(fleet, fleet).empty


def test_in_place_is_the_spec_last_successful_on_each_host(tmp_path, monkeypatch) -> None:
    from jackin.plan.applied import in_place
    from jackin.store.ledger import Ledger

    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    a, b = applied(inventory(ttl="1h")), applied(inventory(ttl="2h"))
    with Ledger() as ledger:
        for spec, results in ((a, {"h1": "ok", "h2": "ok"}), (b, {"h1": "ok", "h2": "failed"})):
            run = ledger.start_run("demo", "fleet.up")
            ledger.record_spec(run, "demo", list(results), spec.spec, spec.hash, spec.fleet_hash)
            for host, result in results.items():
                ledger.audit(run, "demo", "fleet.up", result, host=host)
    found = in_place("demo", ["h1", "h2", "h3"])
    assert (found["h1"].ttl, found["h2"].ttl, "h3" in found) == (7200, 3600, False)
