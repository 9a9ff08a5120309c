"""The spec a run applied, as the ledger keeps it for ``fleet.rollback``, and the diff of two.

``applied(inventory)`` is the inventory's pydantic dump as canonical JSON (sorted keys, no
spaces) with its sha256 (``hash``) and the sha256 of its ``fleet`` part alone (``fleet_hash``:
what provisioning applies; a host's address or pinned key changing is not a spec change).

No secret can land in the ledger: a spec names credentials and never holds their values, and
on top of that every credential is stored as an allowlist of its reference fields
(``CREDENTIAL_FIELDS``), so a field added to ``Credential`` later (a value, a token) is left
out until someone decides it is not secret (tests/unit/test_applied.py pins the list).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin.spec import Inventory
from jackin.spec.models import AgentSpec, FleetSpec
from jackin.store.ledger import Ledger

CREDENTIAL_FIELDS = (
    "name",
    "from_env",
    "from_file",
    "mode",
    "kind",
    "token_url",
    "acknowledge_terms",
)  # references only: where the operator keeps it, how delivered


class AppliedSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str  # canonical JSON of the inventory, credentials by reference only
    hash: str  # sha256 of ``spec``
    fleet_hash: str  # sha256 of the canonical JSON of its ``fleet`` part


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def redacted(inventory: Inventory) -> dict[str, Any]:
    """The inventory as plain JSON data, every credential reduced to its reference fields."""
    return redact(inventory.model_dump(mode="json"))


def redact(data: dict[str, Any]) -> dict[str, Any]:
    """An inventory's dump with every credential reduced to ``CREDENTIAL_FIELDS`` (in place)."""
    for agent in data["fleet"]["agents"]:
        agent["credentials"] = [{k: c.get(k) for k in CREDENTIAL_FIELDS} for c in agent.get("credentials", [])]
    return data


def applied(inventory: Inventory) -> AppliedSpec:
    data = redacted(inventory)
    spec = canonical(data)
    return AppliedSpec(spec=spec, hash=sha256(spec), fleet_hash=sha256(canonical(data["fleet"])))


def load_fleet(spec: str) -> FleetSpec:
    """The fleet part of a stored spec, validated again (a stored spec is data, not trusted code)."""
    return FleetSpec.model_validate(json.loads(spec)["fleet"])


def in_place(fleet: str, hosts: list[str]) -> dict[str, FleetSpec]:
    """Per host, the fleet spec of the last run that succeeded there: what its agents run under, which
    after a ``fleet.rollback`` is not the inventory file's (hosts with no such run are left out)."""
    found: dict[str, FleetSpec] = {}
    with Ledger() as ledger:
        runs = ledger.spec_runs(fleet)
        for host in hosts:
            run = next((r for r in reversed(runs) if r["results"].get(host) == "ok"), None)
            row = ledger.run(run["id"]) if run else None
            if row and row.get("spec"):
                found[host] = load_fleet(row["spec"])
    return found


# --- the diff of two fleet specs ---------------------------------------------------


class Change(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str  # dotted path, e.g. network.allow or resources.memory
    before: Any = None
    after: Any = None


class SpecDiff(BaseModel):
    """From the spec in place (``before``) to the one a rollback applies (``after``). Per agent the
    effective settings are compared (its own network/resources, else the fleet's), so a fleet-wide
    policy change shows on every agent it reaches."""

    model_config = ConfigDict(extra="forbid")

    agents_added: list[str] = Field(default_factory=list)
    agents_removed: list[str] = Field(default_factory=list)
    agents_changed: dict[str, list[Change]] = Field(default_factory=dict)
    fleet: list[Change] = Field(default_factory=list)  # fleet-wide settings other than agents

    @property
    def empty(self) -> bool:
        return not (self.agents_added or self.agents_removed or self.agents_changed or self.fleet)


def _effective(fleet: FleetSpec, agent: AgentSpec) -> dict[str, Any]:
    return {
        "role": agent.role, "count": agent.count, "image": agent.image,
        "network": fleet.agent_network(agent).model_dump(mode="json"),
        "resources": fleet.agent_resources(agent).model_dump(mode="json"),
        "credentials": sorted(c.name for c in agent.credentials),
    }  # fmt: skip


def _changes(before: Any, after: Any, path: str = "") -> list[Change]:
    """Leaf-level changes between two JSON values; lists are compared whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        found: list[Change] = []
        for key in sorted(set(before) | set(after)):
            found += _changes(before.get(key), after.get(key), f"{path}.{key}" if path else key)
        return found
    return [] if before == after else [Change(field=path, before=before, after=after)]


def diff(before: FleetSpec, after: FleetSpec) -> SpecDiff:
    old = {a.name: _effective(before, a) for a in before.agents}
    new = {a.name: _effective(after, a) for a in after.agents}
    changed = {name: _changes(old[name], new[name]) for name in old if name in new}
    rest_before = before.model_dump(mode="json", exclude={"agents"})
    rest_after = after.model_dump(mode="json", exclude={"agents"})
    return SpecDiff(
        agents_added=[n for n in new if n not in old],
        agents_removed=[n for n in old if n not in new],
        agents_changed={name: found for name, found in changed.items() if found},
        fleet=_changes(rest_before, rest_after),
    )
