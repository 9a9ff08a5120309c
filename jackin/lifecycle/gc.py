"""Garbage collection: leftovers on the inventory's hosts of fleets the ledger does not know.

After a crash or a lost state directory, a fleet's containers, networks, users
and files may stay on hosts with nothing on this machine that remembers them.
``orphans`` finds them by their labels and names; ``gc`` removes them with the
teardown deploy, one recorded run per fleet.

Data that ``fleet.down --keep-data`` kept is recorded as kept in the ledger: it is
listed apart and removed only when asked explicitly (``purge_kept``). A host that
cannot be read is reported, and the other hosts are still collected.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from jackin.engine import Event, RunResult
from jackin.errors import JackinError
from jackin.hostpaths import COW_DIR, CREDENTIALS_DIR, ROOT, STATE_DIR, WORK_DIR
from jackin.lab.providers import LabProvider, provider_for
from jackin.lifecycle.runs import recorded_run
from jackin.plan import fleet as planning
from jackin.spec import Inventory
from jackin.spec.values import SLUG
from jackin.store.ledger import Ledger
from jackin.transport.remote import HostError, gather

OnEvent = Callable[[Event], None]

GC_COMMAND = (
    "{ docker ps -a --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "docker network ls --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "getent passwd | awk -F: '$5 ~ /^jackin\\// {split($5, a, \"/\"); print a[2]}'; "
    f"ls {ROOT} 2>/dev/null; "
    f"ls {COW_DIR} 2>/dev/null | sed -n 's/\\.img$//p'; "
    f"ls {CREDENTIALS_DIR} 2>/dev/null; "  # delivered credentials (jackin/spec/credentials.py)
    f"ls {WORK_DIR} 2>/dev/null; "  # delivered work (jackin/work/bundles.py)
    f"ls {STATE_DIR} 2>/dev/null | sed -n 's/^fleet-\\(.*\\)\\.json$/\\1/p'; }} | sort -u"
)


class Orphans(BaseModel):
    """What ``orphans`` found: per fleet the hosts holding something of it."""

    model_config = ConfigDict(extra="forbid")

    leftovers: dict[str, list[str]] = Field(default_factory=dict, description="fleets the ledger does not know as up")
    kept: dict[str, list[str]] = Field(default_factory=dict, description="data fleet.down --keep-data kept")
    errors: list[HostError] = Field(default_factory=list, description="hosts that could not be read")


def orphans(inventory: Inventory) -> Orphans:
    """Fleets found on the inventory's hosts that the ledger does not know as up; kept data apart."""
    with Ledger() as ledger:
        live = set(ledger.fleets_with_status("up"))
        kept = set(ledger.fleets_with_status("kept"))
    hosts = provider_for(inventory).targets(bring_up=False)
    found = gather(hosts, GC_COMMAND, lambda out: sorted({line.strip() for line in out.splitlines() if line.strip()}))
    result = Orphans()
    for host, names in found.items():
        if isinstance(names, JackinError):
            result.errors.append(HostError.of(host, names))
            continue
        for name in names:
            if name not in live and re.fullmatch(SLUG, name):  # anything else is not a fleet name of ours
                (result.kept if name in kept else result.leftovers).setdefault(name, []).append(host)
    return result


def gc(inventory: Inventory, fleets: dict[str, list[str]], *, purge_kept: bool = False,
       on_event: OnEvent = lambda _: None) -> list[RunResult]:  # fmt: skip
    """Remove the leftovers of ``fleets`` ({fleet: [hosts]}) found by ``orphans``.

    A fleet the ledger knows as up is never touched; one recorded as kept only with
    ``purge_kept``, after which the ledger forgets it (its uids are free again).
    """
    results = []
    with Ledger() as ledger:
        provider = provider_for(inventory, ledger)
        hosts = {t.name: t for t in provider.targets(bring_up=False)}
        for name, host_names in sorted(fleets.items()):
            with ledger.lock(name, "fleet.gc"):
                status = (ledger.fleet(name) or {}).get("status")
                if status == "up" or (status == "kept" and not purge_kept):
                    continue  # brought up since it was found, or kept and not asked to purge
                plan = planning.FleetPlan(fleet=name, uid_min=0, uid_max=-1, agents=[])
                _, result = recorded_run(ledger, fleet=name, action="fleet.gc", deploy="teardown.py",
                                         hosts=[hosts[h] for h in host_names], on_event=on_event,
                                         detail={"purge_kept": status == "kept"},
                                         data={"plan": plan.model_dump(mode="json"), "keep_data": False})  # fmt: skip
                if status == "kept" and not result.failed and not result.error:
                    ledger.forget_fleet(name)
                    if isinstance(provider, LabProvider):
                        ledger.leave_lab(provider.spec.name, name)
                results.append(result)
    return results
