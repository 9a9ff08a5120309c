"""Bring a fleet up on one host: bootstrap, the egress policy, then one isolated environment per agent.

`inv fleet.up` runs this with the plan in host.data.jackin (see jackin/plan.py).
By hand: pyinfra --data jackin='<FleetPlan JSON>' INVENTORY deploys/fleet.py
"""

from pyinfra import host
from pyinfra.facts.server import Which
from pyinfra.operations import apt, systemd

from jackin.engine import report, secrets
from jackin.operations import cow, credentials, firewall, fleet, host as host_ops
from jackin.plan import FleetPlan

plan = FleetPlan.model_validate(host.data.jackin)
state = fleet.fleet_state(plan)  # everything of the fleet on this host, in one round trip
report.facts(host, **{k: state.host.get(k) for k in ("hostname", "distro", "kernel", "arch")}, agents=len(plan.agents))

# Bootstrap: a Docker engine and nftables (any Docker engine will do: docker.io or docker-ce).
missing = [pkg for pkg, command in (("docker.io", "dockerd"), ("nftables", "nft")) if not state.host.get(command)]
if missing:
    apt.packages(name="install the Docker engine and nftables", packages=missing, update=True)
if any(a.dns_filter for a in plan.agents) and not host.get_fact(Which, command="dnsmasq"):
    # The agents' filtering resolvers (jackin/dns.py); dnsmasq-base has no system unit of its own.
    apt.packages(name="install dnsmasq (the agents' filtering resolvers)", packages=["dnsmasq-base"], update=True)
if missing or (state.host.get("docker_active"), state.host.get("docker_enabled")) != ("active", "enabled"):
    systemd.service(name="Docker engine running and enabled", service="docker", running=True, enabled=True)
# Hardening (CIS Docker section 2) and address pools; agents survive a needed restart (live-restore).
host_ops.daemon_settings(name="Docker daemon settings", pools=plan.address_pools)
for image in sorted({a.image for a in plan.agents}):
    host_ops.agent_image(name=f"agent image {image}", image=image, present_images=tuple(state.images))

fleet.fleet_root(name=f"fleet {plan.fleet}", plan=plan, state=state)
if plan.checkpoints is not None:  # the checkpoint tier: homes on a loop-mounted btrfs, each a subvolume
    if not host.get_fact(Which, command="mkfs.btrfs"):
        apt.packages(name="install btrfs-progs (the checkpoint tier)", packages=["btrfs-progs"], update=True)
    cow.home_filesystem(name=f"checkpoint filesystem of fleet {plan.fleet}", plan=plan, state=state)
# The egress policy is in place before any agent container starts (fail closed).
firewall.egress_policy(name=f"egress policy of fleet {plan.fleet}", plan=plan, state=state)
if any(a.credentials for a in plan.agents) or state.credentials:  # before the containers that mount them
    credentials.credentials(name=f"credentials of fleet {plan.fleet}", plan=plan, state=state, values=secrets.get())
for agent in plan.agents:
    fleet.agent(name=f"agent {agent.instance}", agent=agent, state=state, pools=plan.address_pools)
