"""Garbage collection: leftovers on the inventory's hosts of fleets the ledger does not know.

After a crash or a lost state directory, a fleet's containers, networks, users
and files may stay on hosts with nothing on this machine that remembers them.
``orphans`` finds them by their labels and names; ``gc`` removes them with the
teardown deploy, one recorded run per fleet.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from jackin import plan as planning
from jackin.engine import Event, RunResult
from jackin.errors import ConnectError
from jackin.ledger import Ledger
from jackin.providers import provider_for
from jackin.remote import gather
from jackin.runs import recorded_run
from jackin.spec import Inventory
from jackin.spec.models import SLUG

OnEvent = Callable[[Event], None]

GC_COMMAND = (
    "{ docker ps -a --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "docker network ls --format '{{.Label \"jackin.fleet\"}}' 2>/dev/null; "
    "getent passwd | awk -F: '$5 ~ /^jackin\\// {split($5, a, \"/\"); print a[2]}'; "
    "ls /srv/jackin 2>/dev/null; "
    "ls /var/lib/jackin 2>/dev/null | sed -n 's/^fleet-\\(.*\\)\\.json$/\\1/p'; } | sort -u"
)


def orphans(inventory: Inventory) -> dict[str, list[str]]:
    """Fleets found on the inventory's hosts that the ledger does not know (or knows as down)."""
    with Ledger() as ledger:
        live = {name for name in ledger.fleets() if (ledger.fleet(name) or {}).get("status") == "up"}
    hosts = provider_for(inventory).targets(bring_up=False)
    found = gather(hosts, GC_COMMAND, lambda out: sorted({line.strip() for line in out.splitlines() if line.strip()}))
    result: dict[str, list[str]] = {}
    for host, names in found.items():
        if isinstance(names, ConnectError):
            raise names
        for name in names:
            if name not in live and re.fullmatch(SLUG, name):  # anything else is not a fleet name of ours
                result.setdefault(name, []).append(host)
    return result


def gc(inventory: Inventory, fleets: dict[str, list[str]], *, on_event: OnEvent = lambda _: None) -> list[RunResult]:
    """Remove the leftovers of ``fleets`` ({fleet: [hosts]}) found by ``orphans``."""
    hosts = {t.name: t for t in provider_for(inventory).targets(bring_up=False)}
    results = []
    with Ledger() as ledger:
        for name, host_names in sorted(fleets.items()):
            with ledger.lock(name, "fleet.gc"):
                if (ledger.fleet(name) or {}).get("status") == "up":
                    continue  # brought up since it was found: no longer a leftover
                plan = planning.FleetPlan(fleet=name, uid_min=0, uid_max=-1, agents=[])
                _, result = recorded_run(ledger, fleet=name, action="fleet.gc", deploy="teardown.py",
                                         hosts=[hosts[h] for h in host_names], on_event=on_event,
                                         data={"plan": plan.model_dump(mode="json"), "keep_data": False})  # fmt: skip
                results.append(result)
    return results
