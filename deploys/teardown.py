"""Tear a fleet down on one host: containers, networks, users, directories, marker, nft table.

`inv fleet.down` runs this, then checks from a fresh connection that nothing is left.
host.data.jackin holds the FleetPlan, keep_data and (fleet.down) each host's state read, by host name.
"""

from pyinfra import host

from jackin.operations import ops
from jackin.plan import FleetPlan
from jackin.state import HostState

plan = FleetPlan.model_validate(host.data.jackin["plan"])
# fleet.down hands over the state it read just now (jackin.teardown.fresh_states); else (fleet.gc, by hand) read it.
known = host.data.jackin.get("states", {}).get(host.name)
ops.teardown(
    name=f"remove fleet {plan.fleet}",
    plan=plan,
    state=HostState.model_validate(known) if known is not None else ops.fleet_state(plan),
    keep_data=host.data.jackin.get("keep_data", False),
)
