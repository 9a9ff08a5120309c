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
import re
import subprocess
import time

import pytest

from jackin.net import probes as agent_api
from jackin.lifecycle import down as down_api
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import Lab
from jackin.lab import docker as dk

from jackin.plan.fleet import user_name

from .conftest import inv, module_lab, sh

FLEET = "grd"
TABLE = f"jackin-{FLEET}"
GUARD = "/usr/local/lib/jackin/nft-guard"
WALL, WALL_UNIT = "jackin--wall", "jackin-wall.service"
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
        "enforced",
        "active",
        None,
    )


# --- the leak window (issue 18): probes counted where they would arrive ----------------------------------

PROBE_PORT, CONTROL_PORT = 4242, 4243
PROBES = 6  # loops at once in the closed agent: a blocked probe waits a second for its timeout


def kill_wall(lab: Lab) -> None:
    """Kill the wall's holder (nft), with the guard stopped (it would start the wall again at once): the
    wall goes with it. Its stop is not run for a crash: the agents run on, under their fleet's table."""
    sh(lab, f"kill -KILL $(systemctl show -p MainPID --value {WALL_UNIT}); "
            f"while nft list table inet {WALL} >/dev/null 2>&1; do sleep 0.1; done")  # fmt: skip
    assert running_agents(lab) == 2


def service_pid(lab: Lab) -> str:
    service = lab.status().service
    assert service is not None and service.public_address
    return dk.docker("inspect", "-f", "{{.State.Pid}}", service.container).strip()


def count_arrivals(lab: Lab) -> None:
    """Count, in the lab service's own network namespace (the stand-in for the internet, on an address
    outside every private range), every packet that arrives for the probes' ports: NATed or not, nothing
    that leaves the lab host for it goes unseen. Counted before anything else there (raw priority)."""
    rules = "\n".join(["table inet jkcount {", "counter probe { }", "counter dns { }", "counter control { }",
                       "chain pre {", "type filter hook prerouting priority raw; policy accept;",
                       f"tcp dport {PROBE_PORT} counter name probe", "udp dport 53 counter name dns",
                       f"tcp dport {CONTROL_PORT} counter name control", "}", "}"])  # fmt: skip
    subprocess.run(["nsenter", "-t", service_pid(lab), "-n", "nft", "-f", "-"], input=rules, text=True, check=True,
                   timeout=10)  # fmt: skip


def arrivals(lab: Lab) -> dict[str, int]:
    out = subprocess.run(["nsenter", "-t", service_pid(lab), "-n", "nft", "list", "counters", "table", "inet",
                          "jkcount"], capture_output=True, text=True, check=True, timeout=10).stdout  # fmt: skip
    return {m[0]: int(m[1]) for m in re.findall(r"counter (\w+) \{\s*packets (\d+)", out)}


def stop_counting(lab: Lab) -> None:
    subprocess.run(["nsenter", "-t", service_pid(lab), "-n", "nft", "delete", "table", "inet", "jkcount"],
                   capture_output=True, timeout=10)  # fmt: skip


def start_probes(lab: Lab, public: str) -> None:
    """The closed agent (mode none) sends TCP SYNs to the outside address and asks it DNS questions, in
    PROBES loops; the open agent sends the positive control's SYNs to another port of it."""
    closed, opened = user_name(FLEET, "other-1"), user_name(FLEET, "probe-1")
    loop = (f"while [ ! -e /workspace/stop ]; do echo | nc -w 1 {public} {PROBE_PORT}; "
            f"nslookup -timeout=1 leak.example {public}; sleep 0.05; done >/dev/null 2>&1")  # fmt: skip
    sh(lab, f"docker exec {closed} rm -f /workspace/stop; docker exec {opened} rm -f /workspace/stop; "
            + "".join(f"docker exec -d {closed} sh -c '{loop}'; " for _ in range(PROBES))
            + f"docker exec -d {opened} sh -c 'while [ ! -e /workspace/stop ]; do echo | nc -w 1 {public} "
            f"{CONTROL_PORT}; sleep 0.2; done >/dev/null 2>&1'")  # fmt: skip


def stop_probes(lab: Lab) -> None:
    for agent in ("other-1", "probe-1"):
        sh(lab, f"docker exec {user_name(FLEET, agent)} touch /workspace/stop", warn=True)


def wait_control(lab: Lab, above: int, within: float = 20) -> int:
    """The positive control: the open agent's probes arrive (more than ``above`` of them)."""
    deadline = time.monotonic() + within
    while (seen := arrivals(lab).get("control", 0)) <= above and time.monotonic() < deadline:
        time.sleep(0.2)
    assert seen > above, "control failed: the open agent's probes do not arrive"
    return seen


def test_no_probe_leaves_while_the_table_is_flushed_reloaded_or_deleted(glab, grd):
    """Each way an administrator removes the table, one after another while a closed agent probes the
    outside: the guard restores the table within seconds each time (Docker runs on: it requires the load
    unit, which is not part of nftables), and not one packet of the closed agent arrives meanwhile."""
    public = glab.status().service.public_address
    count_arrivals(glab)
    start_probes(glab, public)
    try:
        seen = wait_control(glab, 0)
        for command in ("nft flush ruleset", "nft -f /etc/nftables.conf", "systemctl stop nftables",
                        "systemctl restart nftables", "systemctl reload nftables", f"nft delete table inet {TABLE}"):  # fmt: skip
            since = clock(glab)
            sh(glab, command)
            assert wait_policy(glab) < BACK_WITHIN, command
            assert "is missing: loading it again" in journal(glab, since), command
            assert sh(glab, "systemctl is-active docker").stdout.strip() == "active", command
            time.sleep(0.5)  # probes keep running past the restore
        # The agent's probe to the host's sshd is blocked again; the host itself still reaches it.
        for target in (grd["host"], grd["gateway"]):
            assert host_reaches(glab, target), f"control failed: sshd on {target} does not answer"
            assert reach(grd, glab, target) == "blocked"
        # Docker's NAT went with the first flush and nothing restores it: status says so (exit 4).
        code, found = status(grd)
        assert code == 4, found
        assert found["hosts"][0]["not_enforced"] is None  # the policy itself holds
        assert "Docker's NAT for the bridges of probe-1 is gone" in found["hosts"][0]["egress_broken"]
        assert "egress BROKEN" in inv("fleet.status", "-i", grd["spec"]).stdout
        sh(glab, "systemctl restart docker")  # live-restore: the agents and their probes run on
        _wait_agents(glab)
        code, found = status(grd)
        assert code == 0 and found["hosts"][0]["egress_broken"] is None, found
        wait_control(glab, seen)  # the open agent's egress works again, NATed
        got = arrivals(glab)
        assert (got["probe"], got["dns"]) == (0, 0), got
        # The positive control of the window itself: without the wall (its holder killed, the guard
        # stopped), the same probes of the closed agent arrive once its table is gone.
        sh(glab, f"systemctl stop jackin-nft-guard-{FLEET}.service jackin-nft-check-{FLEET}.timer")
        kill_wall(glab)
        sh(glab, f"nft delete table inet {TABLE}")
        deadline = time.monotonic() + 10
        while (got := arrivals(glab))["probe"] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert got["probe"] > 0 and got["dns"] > 0, got
    finally:
        stop_probes(glab)
        stop_counting(glab)
        again = inv("fleet.up", "-i", grd["spec"], "--yes")
        # Docker's NAT back for the tests that follow, had this one stopped before its restart above.
        sh(glab, "iptables -w 2 -t nat -S POSTROUTING | grep -q MASQUERADE || systemctl restart docker")
        _wait_agents(glab)
    assert again.returncode == 0, again.stdout + again.stderr
    assert status(grd)[0] == 0


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
        assert reach(grd, glab, grd["gateway"]) == "blocked"  # the wall holds with the table gone
        code, found = status(grd)
        assert code == 4, found
        host = found["hosts"][0]
        assert (host["policy"], host["guard"], host["policy_loaded"], host["wall"]) == (
            "missing", "inactive", False, "held")  # fmt: skip
        assert f"table {TABLE} is not loaded" in host["not_enforced"] and "guard" in host["not_enforced"]
        assert {a["instance"] for a in host["agents"]} == {"probe-1", "other-1"}
        assert all(a["enforcement"].startswith("NOT ENFORCED") for a in host["agents"])
        plain = inv("fleet.status", "-i", grd["spec"])
        assert plain.returncode == 4 and "NOT ENFORCED" in plain.stdout
        kill_wall(glab)
        assert sh(glab, "systemctl is-active docker").stdout.strip() == "active"  # a dead wall stops no Docker
        # The positive control: with neither layer there, the same probe gets through.
        assert reach(grd, glab, grd["gateway"]) != "blocked"  # the hole both layers close is real
        code, found = status(grd)
        assert code == 4 and found["hosts"][0]["wall"] == "missing", found
        assert f"the wall under the policy (table {WALL}, {WALL_UNIT}) is not held" in found["hosts"][0]["not_enforced"]
    finally:
        again = inv("fleet.up", "-i", grd["spec"], "--yes")  # stopping the guard made the policy stale
    assert again.returncode == 0, again.stdout + again.stderr
    code, found = status(grd)
    assert code == 0, json.dumps(found["hosts"][0])[:3000]
    assert (found["hosts"][0]["policy"], found["hosts"][0]["guard"], found["hosts"][0]["wall"]) == (
        "enforced", "active", "held")  # fmt: skip
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
    # At shutdown nftables.service flushes the ruleset while live-restore keeps the agents running: the
    # closed agent probes the outside all through the reboot, and nothing of it arrives.
    count_arrivals(glab)
    start_probes(glab, glab.status().service.public_address)
    try:
        wait_control(glab, 0)
        dk.docker("restart", "-t", "5", host.container)  # a reboot of the lab host
        glab.up()
        _wait_agents(glab)
        got = arrivals(glab)
    finally:
        stop_counting(glab)
    assert (got["probe"], got["dns"]) == (0, 0), got
    loaded = monotonic(glab, f"jackin-nft-{FLEET}.service", "ActiveEnterTimestampMonotonic")
    walled = monotonic(glab, WALL_UNIT, "ActiveEnterTimestampMonotonic")
    docker = monotonic(glab, "docker.service", "ExecMainStartTimestampMonotonic")
    assert 0 < loaded < docker and 0 < walled < docker, (loaded, walled, docker)
    assert "the wall goes: every agent was stopped first" in journal(glab)
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
