"""Bring a fleet up on one host: bootstrap, the egress policy, then one isolated environment per agent.

`inv fleet.up` runs this with the plan in host.data.jackin (see jackin/plan/fleet.py), for the hosts
its in-process plan found something to change on (a host with nothing to change is not run).
By hand: pyinfra --data jackin='<FleetPlan JSON>' INVENTORY deploys/fleet.py (each host of the INVENTORY named
as in the plan's placement: it gets the agents placed on it)

What to do is decided by ``jackin.lifecycle.hostplan.steps`` (pure, and the very function ``fleet.plan``
and ``fleet.up``'s fast path call): in order, the bootstrap (Docker engine, nftables, dnsmasq),
the Docker daemon's settings, the agent image, the fleet's root, the checkpoint filesystem, the
egress policy (before any agent container starts: fail closed), the credentials (before the
containers that mount them), then each agent's user, directories, network and container (a few
agents a round trip, their containers created side by side: ``hostplan.batched``).
"""

from pyinfra import host

from jackin.engine import report, secrets
from jackin.lifecycle import hostplan
from jackin.operations import ops
from jackin.plan.fleet import FleetPlan

# the agents placed on this host (jackin/plan/placement.py); a host the plan does not name fails, never "no agents"
plan = FleetPlan.model_validate(host.data.jackin).for_host(host.name)
state = ops.fleet_state(plan, bootstrap=True)  # what fleet.up planned from (handed over), else read once
report.facts(host, **{k: state.host.get(k) for k in ("hostname", "distro", "kernel", "arch")}, agents=len(plan.agents))

for step in hostplan.batched(hostplan.steps(plan, state, secrets.get())):
    ops.apply(step)
