"""An agent is only ever attached to its own bridge, on a real lab host.

The egress rules match the agent's bridge by name, so an agent on any other
bridge would not be filtered at all. A foreign network with the agent's name
fails the host's run (it is not ours to delete) and no container starts on it;
a network of ours on another bridge is replaced, and the agent ends up on its
own bridge with its policy enforced. Every "blocked" has a control from the host.
"""

from __future__ import annotations

import json

import pytest

from jackin.net import probes as agent_api
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import Lab
from jackin.plan.fleet import bridge_name, user_name

from .conftest import inv, module_lab, sh

FLEET = "own"
AGENT = user_name(FLEET, "web-1")  # also its network's name
BRIDGE = bridge_name(FLEET, "web-1")



@pytest.fixture(scope="module")
def olab():
    yield from module_lab("o", 1)


@pytest.fixture(scope="module")
def own(olab, tmp_path_factory):
    pub = olab.status().service.public_address
    spec = tmp_path_factory.mktemp("own") / "own.yaml"
    spec.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": olab.name, "hosts": 1},
        "agents": [{"name": "web", "network": {"mode": "allowlist", "allow": [f"{pub}:8080"]}}],
        "resources": {"memory": "128m", "cpus": 0.5, "pids": 64},
    }}))  # fmt: skip
    up(str(spec))
    yield {"spec": str(spec), "inventory": fleet_api.load(str(spec)), "pub": pub}


def up(spec: str) -> dict:
    done = inv("fleet.up", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    again = json.loads(inv("fleet.up", "-i", spec, "--yes", "--json", check=True).stdout)
    assert again["run"]["hosts"][0]["changed"] == 0  # the second run changes nothing
    return json.loads(done.stdout)


def reach(own: dict, lab: Lab, target: str, port: int) -> str:
    probes = agent_api.netcheck(own["inventory"], [lab.status().hosts[0].target()], "web-1", target, port, timeout=2)
    return probes[0].result


def container_probe(lab: Lab, target: str, port: int) -> bool:
    """The same probe from whatever container has the agent's name (before fleet.up fixes it)."""
    return sh(lab, f"docker exec {AGENT} sh -c 'echo | timeout 5 nc -w 2 {target} {port}'", warn=True).ok


def host_reaches(lab: Lab, target: str, port: int) -> bool:
    return sh(lab, f"echo | timeout 5 busybox nc -w 2 {target} {port} >/dev/null", warn=True).ok


def network_bridge(lab: Lab) -> str:
    fmt = '{{index .Options "com.docker.network.bridge.name"}}'
    return sh(lab, f"docker network inspect -f '{fmt}' {AGENT}").stdout.strip()


def attached(lab: Lab) -> tuple[str, int]:
    """The bridge option of the network the container is attached to (by id), and how many
    interfaces the kernel has enslaved to the agent's own bridge."""
    net_id = sh(lab, f"docker inspect -f '{{{{range .NetworkSettings.Networks}}}}{{{{.NetworkID}}}}{{{{end}}}}' {AGENT}")
    fmt = '{{index .Options "com.docker.network.bridge.name"}}'
    bridge = sh(lab, f"docker network inspect -f '{fmt}' {net_id.stdout.strip()}").stdout.strip()
    ports = sh(lab, f"ip -o link show master {BRIDGE}", warn=True).stdout.strip().splitlines()
    return bridge, len(ports)


def test_a_foreign_network_with_the_agents_name_fails_the_run_and_nothing_starts(olab, own):
    sh(olab, f"docker rm -f {AGENT} && docker network rm {AGENT} && docker network create {AGENT}")
    foreign = sh(olab, f"docker network inspect -f '{{{{.Id}}}} {{{{.Labels}}}}' {AGENT}").stdout
    try:
        for _ in range(2):  # and again: the same refusal, nothing changed
            done = inv("fleet.up", "-i", own["spec"], "--yes")
            assert done.returncode == 1, done.stdout + done.stderr
            out = " ".join((done.stdout + done.stderr).split())
            assert f"network {AGENT} exists but is not labelled jackin.fleet={FLEET}, jackin.agent=web-1" in out
            assert f"docker network rm {AGENT}" in out
            assert sh(olab, f"docker ps -aq --filter name=^{AGENT}$").stdout.strip() == ""  # no container on it
            assert sh(olab, f"docker network inspect -f '{{{{.Id}}}} {{{{.Labels}}}}' {AGENT}").stdout == foreign
    finally:
        sh(olab, f"docker network rm {AGENT}")  # what the message says to do
    up(own["spec"])
    assert network_bridge(olab) == BRIDGE
    assert reach(own, olab, own["pub"], 8081) == "blocked"


def test_our_network_on_another_bridge_is_replaced_and_the_policy_holds(olab, own):
    pub = own["pub"]
    assert host_reaches(olab, pub, 8080) and host_reaches(olab, pub, 8081)  # controls
    config = sh(olab, f"docker inspect -f '{{{{index .Config.Labels \"jackin.config\"}}}}' {AGENT}").stdout.strip()
    # Ours by its labels, but on a bridge Docker named: the rules (on BRIDGE) do not see it.
    sh(olab, f"docker rm -f {AGENT} && docker network rm {AGENT} && "
             f"docker network create --label jackin.fleet={FLEET} --label jackin.agent=web-1 {AGENT} && "
             f"docker run -d --name {AGENT} --network {AGENT} --label jackin.fleet={FLEET} --label jackin.agent=web-1 "
             f"--label jackin.config={config} jackin/agent:busybox sleep 3600")  # fmt: skip
    assert network_bridge(olab) == ""
    assert container_probe(olab, pub, 8081)  # the hole: unfiltered
    result = up(own["spec"])
    assert result["run"]["hosts"][0]["changed"] >= 1
    assert network_bridge(olab) == BRIDGE
    assert attached(olab) == (BRIDGE, 1)  # the container's veth is on the agent's own bridge
    assert reach(own, olab, pub, 8081) == "blocked"
    assert reach(own, olab, pub, 8080) == "reachable"  # its allowlist, on the same run


def test_a_container_attached_to_another_network_too_is_recreated(olab, own):
    gw = "{{(index .IPAM.Config 0).Gateway}}"
    sh(olab, "docker network create jk-test-extra >/dev/null 2>&1 || true; "
             f"docker network connect jk-test-extra {AGENT}")  # fmt: skip
    try:
        extra = sh(olab, f"docker network inspect -f '{gw}' jk-test-extra").stdout.strip()
        assert container_probe(olab, extra, 22)  # the hole: the host's sshd, through the unfiltered interface
        up(own["spec"])
        fmt = "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}"
        assert sh(olab, f"docker inspect -f '{fmt}' {AGENT}").stdout.split() == [AGENT]
        own_gateway = sh(olab, f"docker network inspect -f '{gw}' {AGENT}").stdout.strip()
        for target in (own_gateway, extra):
            assert host_reaches(olab, target, 22)  # control: sshd answers there
            assert reach(own, olab, target, 22) == "blocked"
    finally:
        sh(olab, "docker network rm jk-test-extra", warn=True)
