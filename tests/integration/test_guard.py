"""The egress policy cannot be lost unnoticed: the guard on a real lab host.

An administrator's ``nft -f /etc/nftables.conf``, ``nft flush ruleset`` and
``systemctl stop nftables`` each remove the fleet's table; the guard loads it
again within seconds and the agent's probe to the host's sshd is blocked again,
while the host itself still reaches that sshd (the control). A deleted rule is
repaired; if neither the policy nor the lockdown loads, the fleet's agents are
stopped. ``fleet.status`` exits 4 while the policy is not enforced. At boot,
Docker (and so every agent) starts only after the table is loaded.
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

from .conftest import inv, module_lab, sh

FLEET = "grd"
TABLE = f"jackin-{FLEET}"
GUARD = "/usr/local/lib/jackin/nft-guard"
BACK_WITHIN = 10.0  # seconds: the guard wakes on nft monitor events; the timer's backstop is 10 s


@pytest.fixture(scope="module")
def glab():
    yield from module_lab("g", 1)



@pytest.fixture(scope="module")
def grd(glab, tmp_path_factory):
    spec = tmp_path_factory.mktemp("grd") / "grd.yaml"
    spec.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": glab.name, "hosts": 1},
        "agents": [{"name": "probe", "network": {"mode": "open"}}, {"name": "other", "network": {"mode": "none"}}],
        "resources": {"memory": "128m", "cpus": 0.5, "pids": 64},
    }}))  # fmt: skip
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    host = glab.status().hosts[0]
    gateway = sh(glab, f"docker network inspect -f '{{{{(index .IPAM.Config 0).Gateway}}}}' jk-{FLEET}--probe-1")
    yield {"spec": str(spec), "inventory": fleet_api.load(str(spec)), "host": host.lab_ip,
           "gateway": gateway.stdout.strip()}  # fmt: skip


def reach(grd: dict, lab: Lab, target: str, port: int = 22) -> str:
    probes = agent_api.netcheck(grd["inventory"], [lab.status().hosts[0].target()], "probe-1", target, port, timeout=2)
    assert len(probes) == 1
    return probes[0].result


def host_reaches(lab: Lab, target: str, port: int = 22) -> bool:
    return sh(lab, f"echo | timeout 5 busybox nc -w 2 {target} {port} >/dev/null", warn=True).ok


def policy(lab: Lab) -> str:
    return sh(lab, f"{GUARD} verify {FLEET}", warn=True).stdout.strip()


def wait_policy(lab: Lab, want: str = "enforced", within: float = BACK_WITHIN) -> float:
    """Seconds until the guard reports ``want`` (bounded); fails with the last state seen."""
    start = time.monotonic()
    seen = policy(lab)
    while seen != want and time.monotonic() - start < within:
        time.sleep(0.2)
        seen = policy(lab)
    assert seen == want, f"policy is {seen!r}, not {want!r}, after {within}s"
    return time.monotonic() - start


def status(grd: dict):
    done = inv("fleet.status", "-i", grd["spec"], "--json")
    return done.returncode, json.loads(done.stdout)


def journal(lab: Lab, since: str = "") -> str:
    """The guard's log (since a host time from ``clock``, if given)."""
    after = f" --since @{since}" if since else ""
    return sh(lab, f"journalctl -t jackin-nft --no-pager -o cat{after}", warn=True).stdout


def clock(lab: Lab) -> str:
    return sh(lab, "date +%s").stdout.strip()


def test_guard_runs_and_the_policy_is_enforced(glab, grd):
    assert sh(glab, f"systemctl is-active jackin-nft-guard-{FLEET}.service jackin-nft-check-{FLEET}.timer").ok
    assert policy(glab) == "enforced"
    for target in (grd["host"], grd["gateway"]):
        assert host_reaches(glab, target), f"control failed: sshd on {target} does not answer"
        assert reach(grd, glab, target) == "blocked"
    code, found = status(grd)
    assert code == 0, found
    assert (found["hosts"][0]["policy"], found["hosts"][0]["guard"], found["hosts"][0]["not_enforced"]) == (
        "enforced", "active", None)


@pytest.mark.parametrize(
    "command",
    ["nft -f /etc/nftables.conf", "nft flush ruleset", "systemctl stop nftables"],
    ids=["nftables-conf", "flush-ruleset", "stop-nftables"],
)
def test_a_removed_table_is_back_within_seconds(glab, grd, command):
    since = clock(glab)
    sh(glab, command)
    took = wait_policy(glab)
    assert took < BACK_WITHIN
    assert TABLE in sh(glab, "nft list tables").stdout
    # The agent's probe to the host's sshd is blocked again; the host itself still reaches it.
    for target in (grd["host"], grd["gateway"]):
        assert host_reaches(glab, target), f"control failed: sshd on {target} does not answer"
        assert reach(grd, glab, target) == "blocked"
    # Docker was not stopped with nftables (it requires the load unit, which is not part of nftables).
    assert sh(glab, "systemctl is-active docker").stdout.strip() == "active"
    assert "is missing: loading it again" in journal(glab, since)


def test_an_altered_table_is_repaired(glab, grd):
    since = clock(glab)
    rule = sh(glab, f"nft -a list chain inet {TABLE} egress_probe_1 | grep '@always_v4'").stdout
    handle = rule.rsplit("# handle", 1)[1].strip()
    sh(glab, f"nft delete rule inet {TABLE} egress_probe_1 handle {handle}")
    wait_policy(glab)
    assert "@always_v4" in sh(glab, f"nft list chain inet {TABLE} egress_probe_1").stdout
    assert "is altered: loading it again" in journal(glab, since)


def test_runtime_set_elements_and_counters_are_not_alterations(glab, grd):
    before = journal(glab).count("loading it again")
    reach(grd, glab, grd["gateway"])  # fills the denied set and the drop counter
    sh(glab, f"nft add element inet {TABLE} denied_probe_1 '{{ 192.0.2.1 . 443 }}'")
    time.sleep(1.5)  # long enough for the guard to have reacted, were it to
    assert policy(glab) == "enforced"
    assert journal(glab).count("loading it again") == before


def test_status_exits_4_while_the_policy_is_not_enforced(glab, grd):
    sh(glab, f"systemctl stop jackin-nft-guard-{FLEET}.service jackin-nft-check-{FLEET}.timer")
    sh(glab, f"nft delete table inet {TABLE}")
    try:
        assert host_reaches(glab, grd["gateway"])
        assert reach(grd, glab, grd["gateway"]) != "blocked"  # the hole the guard closes is real
        code, found = status(grd)
        assert code == 4, found
        host = found["hosts"][0]
        assert (host["policy"], host["guard"], host["policy_loaded"]) == ("missing", "inactive", False)
        assert f"table {TABLE} is not loaded" in host["not_enforced"] and "guard" in host["not_enforced"]
        assert {a["instance"] for a in host["agents"]} == {"probe-1", "other-1"}
        assert all(a["enforcement"].startswith("NOT ENFORCED") for a in host["agents"])
        plain = inv("fleet.status", "-i", grd["spec"])
        assert plain.returncode == 4 and "NOT ENFORCED" in plain.stdout
    finally:
        again = inv("fleet.up", "-i", grd["spec"], "--yes")  # stopping the guard made the policy stale
    assert again.returncode == 0, again.stdout + again.stderr
    code, found = status(grd)
    assert code == 0, found
    assert (found["hosts"][0]["policy"], found["hosts"][0]["guard"]) == ("enforced", "active")
    assert reach(grd, glab, grd["gateway"]) == "blocked"


def running_agents(lab: Lab) -> int:
    out = sh(lab, f"docker ps -q --filter label=jackin.fleet={FLEET} --filter status=running | wc -l")
    return int(out.stdout.strip())


def test_when_nothing_loads_the_agents_are_stopped(glab, grd):
    base = f"/etc/jackin/nft/{FLEET}"
    assert running_agents(glab) == 2
    sh(glab, f"cp {base}.nft /root/keep.nft && cp {base}.lockdown.nft /root/keep.lockdown.nft")
    since = clock(glab)
    try:
        sh(glab, f"echo 'not nft' > {base}.nft; echo 'not nft either' > {base}.lockdown.nft; nft flush ruleset")
        deadline = time.monotonic() + BACK_WITHIN + 10
        while running_agents(glab) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert running_agents(glab) == 0
        assert "neither the egress policy nor the lockdown table loads" in journal(glab, since)
        assert "stopped the fleet's agent containers: 2" in journal(glab, since)
        assert policy(glab) == "missing"
        assert inv("fleet.status", "-i", grd["spec"]).returncode == 4
    finally:
        sh(glab, f"cp /root/keep.nft {base}.nft && cp /root/keep.lockdown.nft {base}.lockdown.nft")
    wait_policy(glab, within=15)  # the timer's backstop loads the repaired policy
    again = inv("fleet.up", "-i", grd["spec"], "--yes")  # starts the stopped agents
    assert again.returncode == 0, again.stdout + again.stderr
    assert running_agents(glab) == 2
    sh(glab, "systemctl restart docker")  # the flush took Docker's own rules too
    _wait_agents(glab)


def _wait_agents(lab: Lab, count: int = 2, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if running_agents(lab) == count:
                return
        except Exception:  # noqa: BLE001 - sshd is still coming up after a reboot
            pass
        time.sleep(0.5)
    raise AssertionError("agent containers did not come back")


def _wait_booted(lab: Lab, timeout: float = 120) -> str:
    """Wait until sshd answers and systemd has finished booting; returns its state (running, degraded...)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return sh(lab, "systemctl is-system-running --wait", warn=True).stdout.strip()
        except Exception:  # noqa: BLE001 - sshd is not up yet
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def monotonic(lab: Lab, unit: str, prop: str) -> int:
    return int(sh(lab, f"systemctl show {unit} -p {prop} --value").stdout.strip())


def test_after_a_reboot_the_table_is_loaded_before_docker_starts_agents(glab, grd):
    assert f"jackin-nft-{FLEET}.service" in sh(glab, "systemctl show docker -p Requires --value").stdout.split()
    host = glab.status().hosts[0]
    dk.docker("restart", "-t", "5", host.container)  # a reboot of the lab host
    glab.up()
    _wait_agents(glab)
    loaded = monotonic(glab, f"jackin-nft-{FLEET}.service", "ActiveEnterTimestampMonotonic")
    docker = monotonic(glab, "docker.service", "ExecMainStartTimestampMonotonic")
    assert 0 < loaded < docker, (loaded, docker)
    assert policy(glab) == "enforced"
    assert reach(grd, glab, grd["gateway"]) == "blocked" and host_reaches(glab, grd["gateway"])
    again = json.loads(inv("fleet.up", "-i", grd["spec"], "--yes", "--json").stdout)
    assert again["run"]["hosts"][0]["changed"] == 0  # a reboot does not make the policy stale


def test_a_boot_where_nothing_loads_starts_no_docker_and_no_agent(glab, grd):
    """Fail closed at boot: with neither the policy nor the lockdown loadable, Docker (which requires
    the load unit) does not start, so no agent runs; once the files are good, Docker starts."""
    base = f"/etc/jackin/nft/{FLEET}"
    sh(glab, f"cp {base}.nft /root/keep.nft && cp {base}.lockdown.nft /root/keep.lockdown.nft")
    sh(glab, f"echo 'not nft' > {base}.nft; echo 'not nft either' > {base}.lockdown.nft")
    since = clock(glab)
    dk.docker("restart", "-t", "5", glab.status().hosts[0].container)
    try:
        _wait_booted(glab)  # not lab.up(): it waits for a healthy boot, and this one is degraded on purpose
        assert sh(glab, f"systemctl is-failed jackin-nft-{FLEET}.service", warn=True).stdout.strip() == "failed"
        assert sh(glab, "systemctl is-active docker.service", warn=True).stdout.strip() != "active"
        assert sh(glab, "pgrep -x dockerd", warn=True).failed  # no engine, so no agent container
        assert "neither the egress policy nor the lockdown table loads" in journal(glab, since)
    finally:
        sh(glab, f"cp /root/keep.nft {base}.nft && cp /root/keep.lockdown.nft {base}.lockdown.nft")
    sh(glab, "systemctl start docker.service")  # pulls the load unit in again: now it loads
    _wait_agents(glab)
    assert policy(glab) == "enforced"
    assert reach(grd, glab, grd["gateway"]) == "blocked" and host_reaches(glab, grd["gateway"])


def test_down_removes_the_guard_and_leaves_docker_running(glab, grd):
    result = down_api.down(grd["inventory"], keep_lab=True)
    assert result.clean, result.checks
    assert TABLE not in sh(glab, "nft list tables").stdout
    assert sh(glab, "systemctl is-active docker").stdout.strip() == "active"
    assert f"jackin-nft-{FLEET}" not in sh(glab, "systemctl show docker -p Requires --value").stdout
    left = sh(glab, "ls -d /etc/jackin /usr/local/lib/jackin /run/jackin /etc/systemd/system/jackin-nft-* "
                    "/etc/systemd/system/docker.service.d/jackin-* 2>/dev/null", warn=True)  # fmt: skip
    assert left.stdout.strip() == ""
    loaded = sh(glab, f"systemctl list-units --all --plain --no-legend 'jackin-nft-*{FLEET}*'", warn=True)
    assert loaded.stdout.strip() == "", loaded.stdout  # the load unit was stopped too, not only disabled
    time.sleep(1.5)  # nothing brings the table back
    assert TABLE not in sh(glab, "nft list tables").stdout
