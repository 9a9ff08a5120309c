"""Test deploy: a fleet's egress policy alone (no users, no containers), through the real engine.

Used to apply a policy for more agents than the lab can run containers for.
"""

from pyinfra import host

from jackin.operations import firewall, fleet
from jackin.plan import FleetPlan

plan = FleetPlan.model_validate(host.data.jackin)
firewall.egress_policy(name=f"egress policy of fleet {plan.fleet}", plan=plan, state=fleet.fleet_state(plan))
