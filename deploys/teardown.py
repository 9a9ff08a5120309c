"""Tear a fleet down on one host: containers, networks, users, directories, marker, nft table.

`inv fleet.down` runs this, then checks from a fresh connection that nothing is left.
host.data.jackin holds the FleetPlan and keep_data; host.data.jackin_host["state"] (fleet.down) the host's
state it read just now.
"""

from pyinfra import host

from jackin.operations import ops
from jackin.plan.fleet import FleetPlan

plan = FleetPlan.model_validate(host.data.jackin["plan"])
ops.teardown(
    name=f"remove fleet {plan.fleet}",
    plan=plan,
    # the state fleet.down read just now (jackin.lifecycle.teardown); else (fleet.gc, by hand) read
    state=ops.fleet_state(plan),
    keep_data=host.data.jackin.get("keep_data", False),
)
