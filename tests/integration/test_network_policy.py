"""Egress policy on a real lab host, proven against listening services.

Every "blocked" below is paired with a control that reaches the same listener
from the host itself, so an outage is never mistaken for a block. The lab's
"public" network (198.18.0.0/15) stands in for the internet; nothing leaves
the machine.
"""

from __future__ import annotations

import json
import time

import pytest

from jackin.net import probes as agent_api
from jackin.lifecycle import down as down_api
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.plan.fleet import user_name

from .conftest import inv, module_lab, sh

FLEET = "net"


@pytest.fixture(scope="module")
def nlab():
    yield from module_lab("n", 1)



def addresses(lab: Lab) -> dict[str, str]:
    status = lab.status()
    assert status.service is not None
    return {"pub": status.service.public_address, "priv": status.service.address, "host": status.hosts[0].lab_ip}


def write_spec(tmp_path, lab: Lab, *, allow_extra: str = "", domains: bool = False) -> str:
    a = addresses(lab)
    allow = [f"{a['pub']}:8080", f"{a['priv']}:8080"]
    if domains:
        allow = ["svc.lab.test:8080", "nothing-here.invalid:443", f"{a['priv']}:8080"]
    if allow_extra:
        allow.append(allow_extra)
    path = tmp_path / "net.yaml"
    path.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": lab.name, "hosts": 1},
        "agents": [
            {"name": "closed", "network": {"mode": "none"}},
            {"name": "allow", "network": {"mode": "allowlist", "allow": allow}},
            {"name": "open", "network": {"mode": "open", "allow": [f"{a['priv']}:8080"]}},
            {"name": "peer", "network": {"mode": "none"}},
            {"name": "web", "network": {"mode": "none", "publish": [{"port": 8080, "host_port": 18080}]}},
        ],
        "resources": {"memory": "128m", "cpus": 0.5, "pids": 64},
    }}))  # fmt: skip
    return str(path)


@pytest.fixture(scope="module")
def net(nlab, tmp_path_factory):
    spec = write_spec(tmp_path_factory.mktemp("net"), nlab)
    done = inv("fleet.up", "-i", spec, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    # A listener inside another agent's container, and one on the metadata address of the host.
    peer = user_name(FLEET, "peer-1")
    sh(nlab, f"docker exec -d {peer} nc -ll -p 9000 -e /bin/cat")
    sh(nlab, "ip addr add 169.254.169.254/32 dev lo 2>/dev/null || true; "
             "(setsid python3 -m http.server 80 --bind 169.254.169.254 >/dev/null 2>&1 &)")  # fmt: skip
    peer_ip = sh(nlab, f"docker inspect -f '{{{{range .NetworkSettings.Networks}}}}{{{{.IPAddress}}}}{{{{end}}}}' {peer}").stdout.strip()
    gateway = sh(nlab, f"docker network inspect -f '{{{{(index .IPAM.Config 0).Gateway}}}}' {peer}").stdout.strip()
    yield {"spec": spec, "inventory": fleet_api.load(spec), "peer": peer_ip, "gateway": gateway, **addresses(nlab)}


def reach(net: dict, lab: Lab, agent: str, target: str, port: int) -> str:
    probes = agent_api.netcheck(net["inventory"], [lab.status().hosts[0].target()], agent, target, port, timeout=2)
    assert len(probes) == 1
    return probes[0].result


def host_reaches(lab: Lab, target: str, port: int) -> bool:
    """The control: the same listener, from the lab host itself."""
    return sh(lab, f"echo | timeout 5 busybox nc -w 2 {target} {port} >/dev/null", warn=True).ok


def test_each_mode_reaches_what_it_allows_and_nothing_else(nlab, net):
    pub, priv = net["pub"], net["priv"]
    for target, port in ((pub, 8080), (pub, 8081), (priv, 8080), (priv, 8081)):
        assert host_reaches(nlab, target, port), f"control failed: {target}:{port} does not answer"
    expected = {
        ("closed-1", pub, 8080): "blocked", ("closed-1", priv, 8080): "blocked",
        ("allow-1", pub, 8080): "reachable", ("allow-1", pub, 8081): "blocked",
        ("allow-1", priv, 8080): "reachable", ("allow-1", priv, 8081): "blocked",
        ("open-1", pub, 8080): "reachable", ("open-1", pub, 8081): "reachable",
        ("open-1", pub, 9999): "refused",  # answered by the destination: not blocked
        ("open-1", priv, 8080): "reachable", ("open-1", priv, 8081): "blocked",
    }  # fmt: skip
    actual = {key: reach(net, nlab, *key) for key in expected}
    assert actual == expected


@pytest.mark.parametrize("agent", ["closed-1", "allow-1", "open-1"])
def test_always_denied_in_every_mode(nlab, net, agent):
    targets = {
        "metadata service": ("169.254.169.254", 80),
        "host sshd (lab address)": (net["host"], 22),
        "host sshd (agent gateway)": (net["gateway"], 22),
        "another agent's container": (net["peer"], 9000),
        "private-range service": (net["priv"], 8081),
    }
    for what, (target, port) in targets.items():
        assert host_reaches(nlab, target, port), f"control failed: {what} {target}:{port} does not answer"
        assert reach(net, nlab, agent, target, port) == "blocked", f"{agent} reached {what}"


def test_a_published_port_answers_while_egress_stays_closed(nlab, net):
    web = user_name(FLEET, "web-1")
    sh(nlab, f"docker exec -d {web} nc -ll -p 8080 -e /bin/echo published")
    deadline = time.monotonic() + 10
    while not host_reaches(nlab, "127.0.0.1", 18080) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert host_reaches(nlab, "127.0.0.1", 18080)  # inbound, on the bind address the spec names
    assert "0.0.0.0:18080" not in sh(nlab, "ss -Hltn").stdout
    assert reach(net, nlab, "web-1", net["pub"], 8080) == "blocked"  # its egress is still none
    status = json.loads(inv("fleet.status", "-i", net["spec"], "--json").stdout)
    web_status = next(a for a in status["hosts"][0]["agents"] if a["instance"] == "web-1")
    assert web_status["enforcement"].startswith("partial: published ports")


def test_the_agents_unix_user_on_the_host_is_bound_too(nlab, net):
    user = user_name(FLEET, "closed-1")
    for target, port in ((net["pub"], 8080), ("127.0.0.1", 22)):
        assert host_reaches(nlab, target, port)
        done = sh(nlab, f"runuser -u {user} -- sh -c 'echo | timeout 5 busybox nc -w 2 {target} {port}'", warn=True)
        assert done.failed, f"{user} reached {target}:{port} from the host"


def test_status_counts_drops_and_labels_enforcement(nlab, net):
    reach(net, nlab, "closed-1", net["pub"], 8080)
    status = json.loads(inv("fleet.status", "-i", net["spec"], "--json").stdout)
    agents = {a["instance"]: a for a in status["hosts"][0]["agents"]}
    assert agents["closed-1"]["egress"] == "none" and agents["closed-1"]["enforcement"] == "full"
    assert agents["closed-1"]["drops"] >= 1
    denials = agent_api.denials(net["inventory"], [nlab.status().hosts[0].target()], "closed-1").denials
    assert (net["pub"], 8080) in {(d.destination, d.port) for d in denials}


def test_policy_survives_a_docker_restart_and_a_host_reboot(nlab, net):
    def holds() -> None:
        assert reach(net, nlab, "allow-1", net["pub"], 8080) == "reachable"
        assert reach(net, nlab, "allow-1", net["pub"], 8081) == "blocked"
        assert reach(net, nlab, "closed-1", net["pub"], 8080) == "blocked"

    sh(nlab, "systemctl restart docker")
    _wait_running(nlab)
    holds()

    host = nlab.status().hosts[0]
    dk.docker("restart", "-t", "5", host.container)  # a reboot of the lab host
    nlab.up()
    _wait_running(nlab)
    assert "jackin-net" in sh(nlab, "nft list tables").stdout
    sh(nlab, f"docker exec -d {user_name(FLEET, 'peer-1')} nc -ll -p 9000 -e /bin/cat")
    holds()
    again = json.loads(inv("fleet.up", "-i", net["spec"], "--yes", "--json").stdout)
    assert again["run"]["hosts"][0]["changed"] == 0


def _wait_running(lab: Lab, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sh(lab, f"docker ps --filter label=jackin.fleet={FLEET} --filter status=running -q | wc -l", warn=True)
        if out.ok and out.stdout.strip() == "5":
            return
        time.sleep(0.5)
    raise AssertionError("agent containers did not come back")


def test_a_policy_change_opens_no_window(nlab, net, tmp_path):
    probe = user_name(FLEET, "allow-1")
    sh(nlab, f"docker exec {probe} sh -c 'rm -f /workspace/stop /workspace/probe.*'")
    for n in range(6):  # several probes at once: a blocked probe waits a second for its timeout
        loop = (f"while [ ! -e /workspace/stop ]; do if echo | nc -w 1 {net['pub']} 8081 >/dev/null 2>&1; "
                f"then echo LEAK; fi; echo tick; sleep 0.05; done > /workspace/probe.{n}")  # fmt: skip
        sh(nlab, f"docker exec -d {probe} sh -c '{loop}'")
    try:
        changed = write_spec(tmp_path, nlab, allow_extra=f"{net['priv']}:8443")
        for _ in range(2):
            first = inv("fleet.up", "-i", changed, "--yes", "--json")
            assert first.returncode == 0, first.stderr
            assert json.loads(first.stdout)["run"]["hosts"][0]["changed"] == 1  # the policy alone
            back = inv("fleet.up", "-i", net["spec"], "--yes")
            assert back.returncode == 0, back.stderr
    finally:
        sh(nlab, f"docker exec {probe} touch /workspace/stop")
        time.sleep(1.5)
    log = sh(nlab, f"cat /srv/jackin/{FLEET}/allow-1/workspace/probe.*").stdout
    assert log.count("tick") > 10
    assert "LEAK" not in log


def test_a_domain_that_does_not_resolve_breaks_nothing_else(nlab, net, tmp_path):
    # No dns in the spec: the agent's filter forwards its names to the host's resolvers, and the
    # lab host's resolver answers nothing. Resolving is covered in test_dns_filter.py.
    spec = write_spec(tmp_path, nlab, domains=True)
    done = inv("fleet.up", "-i", spec, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    agent = user_name(FLEET, "allow-1")
    assert sh(nlab, f"docker exec {agent} nslookup -type=a svc.lab.test", warn=True).failed
    assert reach(net, nlab, "allow-1", net["pub"], 8080) == "blocked"  # nothing resolved: nothing allowed
    assert reach(net, nlab, "allow-1", net["priv"], 8080) == "reachable"  # the rest of the policy holds
    assert reach(net, nlab, "allow-1", net["priv"], 8081) == "blocked"
    assert host_reaches(nlab, net["pub"], 8080) and host_reaches(nlab, net["priv"], 8081)
    status = json.loads(inv("fleet.status", "-i", spec, "--json").stdout)
    allow = next(a for a in status["hosts"][0]["agents"] if a["instance"] == "allow-1")
    assert allow["enforcement"].startswith("partial: domain entries")
    assert inv("fleet.up", "-i", net["spec"], "--yes").returncode == 0


def test_a_lost_table_is_reloaded_or_reported_and_restored(nlab, net):
    # Debian's nftables.conf flushes the whole ruleset when nftables.service restarts: the guard loads ours again.
    sh(nlab, "systemctl restart nftables")
    deadline = time.monotonic() + 10
    while "jackin-net" not in sh(nlab, "nft list tables").stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "jackin-net" in sh(nlab, "nft list tables").stdout
    # Deleted by hand with the guard stopped (else it loads it again): fleet.status says so, fleet.up puts it back.
    sh(nlab, "systemctl stop jackin-nft-guard-net.service jackin-nft-check-net.timer")
    sh(nlab, "nft delete table inet jackin-net")
    status = json.loads(inv("fleet.status", "-i", net["spec"], "--json").stdout)
    assert status["hosts"][0]["policy_loaded"] is False
    assert all(a["enforcement"].startswith("NOT ENFORCED") for a in status["hosts"][0]["agents"])
    again = json.loads(inv("fleet.up", "-i", net["spec"], "--yes", "--json").stdout)
    assert again["run"]["hosts"][0]["changed"] == 1 and again["run"]["hosts"][0]["failed"] == 0
    assert "jackin-net" in sh(nlab, "nft list tables").stdout
    sh(nlab, "systemctl restart docker")  # the flush above took Docker's own rules too


def test_down_leaves_no_table_unit_or_file(nlab, net):
    result = down_api.down(net["inventory"], keep_lab=True)
    assert result.clean, result.checks
    assert "jackin-net" not in sh(nlab, "nft list tables").stdout
    left = sh(nlab, "ls -d /etc/jackin /usr/local/lib/jackin /etc/systemd/system/jackin-nft-* "
                    "/etc/systemd/system/jackin-dns-* 2>/dev/null", warn=True)  # fmt: skip
    assert left.stdout.strip() == ""
