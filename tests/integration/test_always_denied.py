"""The always-denied set on real lab hosts: other fleet hosts, the clouds' metadata addresses,
and private ranges that an allow entry covers only by being wider than them.

Every "blocked" is paired with a control that reaches the same listener from the
agent's own host (root, not the agent). The outside-looking metadata addresses are
placed on the second lab host and routed to it from the first, so no probe can
leave the machine: the route is checked before any probe is sent.
"""

from __future__ import annotations

import json
import time

import pytest

from jackin.net import probes as agent_api
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import Lab

from .conftest import inv, module_lab, sh

FLEET = "deny"
METADATA = ("168.63.129.16", "100.100.100.200")  # Azure, Alibaba


@pytest.fixture(scope="module")
def dlab():
    yield from module_lab("d", 2)



@pytest.fixture(scope="module")
def deny(dlab, tmp_path_factory):
    status = dlab.status()
    assert status.service is not None
    other = status.hosts[1]
    assert other.lab_ip and other.public_ip
    spec = tmp_path_factory.mktemp("deny") / "deny.yaml"
    spec.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": dlab.name, "hosts": 2},
        "agents": [
            {"name": "wide", "placement": "each", "network": {"mode": "allowlist", "allow": ["0.0.0.0/0:8080"]}},
            # Inside a private range: opens the private service, and also the lab network the hosts are on.
            # Every private range: Docker may give the lab's networks any of them on a busy engine.
            {"name": "priv", "placement": "each", "network": {"mode": "allowlist",
                                         "allow": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]}},
            {"name": "open", "placement": "each", "network": {"mode": "open"}},
        ],
        "resources": {"memory": "128m", "cpus": 0.5, "pids": 64},
    }}))  # fmt: skip
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    yield {"spec": str(spec), "inventory": fleet_api.load(str(spec)), "pub": status.service.public_address,
           "priv": status.service.address, "other_lab": other.lab_ip, "other_pub": other.public_ip}  # fmt: skip


def reach(deny: dict, lab: Lab, agent: str, target: str, port: int) -> str:
    probes = agent_api.netcheck(deny["inventory"], [lab.status().hosts[0].target()], agent, target, port, timeout=2)
    assert len(probes) == 1
    return probes[0].result


def host_reaches(lab: Lab, target: str, port: int) -> bool:
    """The control: the same listener, from the agent's host itself (root, not the agent)."""
    return sh(lab, f"echo | timeout 5 busybox nc -w 2 {target} {port} >/dev/null", warn=True).ok


def test_a_wide_entry_opens_the_public_service_but_not_the_private_one(dlab, deny):
    for target in (deny["pub"], deny["priv"]):
        assert host_reaches(dlab, target, 8080), f"control failed: {target}:8080 does not answer"
    assert reach(deny, dlab, "wide-1", deny["pub"], 8080) == "reachable"  # 0.0.0.0/0:8080 opens the public part
    assert reach(deny, dlab, "wide-1", deny["priv"], 8080) == "blocked"  # ... and nothing private
    assert reach(deny, dlab, "priv-1", deny["priv"], 8080) == "reachable"  # an entry inside the range opens it


def test_other_fleet_hosts_are_denied_even_where_an_entry_covers_them(dlab, deny):
    """sshd of the second fleet host, on its lab and its public address: the first host reaches it,
    its agents do not, whether their policy is open or allows the whole lab range."""
    for target in (deny["other_lab"], deny["other_pub"]):
        assert host_reaches(dlab, target, 22), f"control failed: {target}:22 does not answer"
        for agent in ("open-1", "priv-1", "wide-1"):
            assert reach(deny, dlab, agent, target, 22) == "blocked", f"{agent} reached {target}:22"
    # The same entries still open what they name that is not a fleet host.
    assert reach(deny, dlab, "open-1", deny["pub"], 8081) == "reachable"
    assert reach(deny, dlab, "priv-1", deny["priv"], 8081) == "reachable"


@pytest.fixture
def metadata(dlab, deny):
    """The metadata addresses on the second host's loopback with a listener, routed to from the first."""
    other = deny["other_lab"]
    addrs = " ".join(METADATA)
    sh(dlab, f"for a in {addrs}; do ip addr add $a/32 dev lo 2>/dev/null || true; done; "
             f"for a in {addrs}; do (setsid python3 -m http.server 80 --bind $a >/dev/null 2>&1 &); done",
       host=1)  # fmt: skip
    sh(dlab, f"for a in {addrs}; do ip route replace $a/32 via {other}; done")
    try:
        for address in METADATA:  # never probe before the route is known to stay in the lab
            route = sh(dlab, f"ip -o route get {address}").stdout
            assert f"via {other} " in route, route
        deadline = time.monotonic() + 15
        while not all(host_reaches(dlab, a, 80) for a in METADATA) and time.monotonic() < deadline:
            time.sleep(0.3)  # the listeners are starting
        yield
    finally:
        sh(dlab, f"for a in {addrs}; do ip route del $a/32 via {other} 2>/dev/null; done; true", warn=True)
        sh(dlab, f"pkill -f 'http.server 80 --bind' ; for a in {addrs}; do ip addr del $a/32 dev lo; done; true",
           host=1, warn=True)  # fmt: skip


def test_cloud_metadata_addresses_are_denied_even_in_open_mode(dlab, deny, metadata):
    for address in METADATA:
        assert host_reaches(dlab, address, 80), f"control failed: {address}:80 does not answer"
        # open accepts any public address; 100.64.0.0/10 (an entry inside a private range) covers 100.100.100.200.
        for agent in ("open-1", "priv-1"):
            assert reach(deny, dlab, agent, address, 80) == "blocked", f"{agent} reached {address}"
