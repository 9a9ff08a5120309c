"""Fleet status: canned ``status_command`` output -> per-agent uptime, CPU, memory,
restarts and error; and the command itself is valid POSIX sh."""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from jackin.agents.read import STATUS_READ
from jackin.lifecycle.status import SAMPLE, SAMPLE_AWK, AgentStatus, parse_status, status_command

NOW = 1767369600.5  # 2026-01-02T16:00:00.5Z
ID = "0123456789abcdef" * 4


def row(name: str, state: str, started: str, restarts: int, instance: str, user: str, memory: int, pid: int,
        error: str = "") -> str:  # fmt: skip
    """One ``docker inspect --format`` line (INSPECT_FORMAT) as status_command prints it."""
    st = {"Status": state, "Pid": pid, "ExitCode": 0, "Error": error, "StartedAt": started}
    return "\t".join([ID, str(restarts), json.dumps(user), json.dumps(instance), json.dumps(st), str(pid),
                      json.dumps(f"/{name}"), json.dumps(name), str(memory)])  # fmt: skip


OUTPUT = "\n".join([
    "1767369600.500000000",
    "##drops",
    "##rows",
    row("jk-demo--reviewer-1", "exited", "2026-01-02T15:00:00.000000000Z", 4, "reviewer-1", "60002:60002",
        0, 0, "OCI runtime create failed: exec: \"sh\": not found | see logs"),
    row("jk-demo--coder-2", "running", "2026-01-02T15:59:00.250000000Z", 0, "coder-2", "60001:60001", 536870912, 4242),
    row("jk-demo--coder-1", "running", "2026-01-01T12:00:00.500000000Z", 3, "coder-1", "60000:60000", 1073741824, 4141),
    "##1",
    "@1767369600600000000",
    "4242 1000000000 10485760",
    "4141 5000000000 20971520",
    "##2",
    "@1767369600850000000",
    "4242 1050000000 10485761",
    "4141 5250000000 20971530",
])  # fmt: skip


def test_parse_status() -> None:
    now, agents = parse_status(OUTPUT)
    assert now == NOW
    assert agents == [
        AgentStatus(instance="coder-1", container="jk-demo--coder-1", state="running", uid=60000,
                    network="jk-demo--coder-1", uptime=100800.0, cpu_percent=100.0,
                    memory=20971530, memory_limit=1073741824, restarts=3),
        AgentStatus(instance="coder-2", container="jk-demo--coder-2", state="running", uid=60001,
                    network="jk-demo--coder-2", uptime=60.25, cpu_percent=20.0, memory=10485761,
                    memory_limit=536870912),
        AgentStatus(instance="reviewer-1", container="jk-demo--reviewer-1", state="exited", uid=60002,
                    network="jk-demo--reviewer-1", restarts=4,
                    error="OCI runtime create failed: exec: \"sh\": not found | see logs"),
    ]  # fmt: skip


def test_rows_right_after_the_date_are_read_too() -> None:
    """The shape without the firewall's drop counters: rows straight after the date."""
    plain = OUTPUT.replace("##drops\n##rows\n", "")
    assert "##rows" not in plain
    assert parse_status(plain) == parse_status(OUTPUT)


def test_cpu_percent_is_over_the_window_the_host_clocked() -> None:
    """Each sample carries the host's clock (@ns): CPU is over the window measured there, not SAMPLE."""
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:00:00Z", 0, "a-1", "60000:60000", 0, 7),
                        "##1", "@1000000000", "7 0 1", "##drops", "##policy", "enforced",
                        "##2", "@1160000000", "7 40000000 2"])  # fmt: skip
    [agent] = parse_status(output)[1]
    assert (agent.cpu_percent, agent.memory) == (25.0, 2)  # 40 ms of CPU over 160 ms


def test_the_cpu_window_sleeps_only_what_the_checks_inside_it_left() -> None:
    command = status_command("demo")
    first, second = command.index("echo '##1'"), command.index("echo '##2'")
    assert first < command.index("##policy") < second  # the policy checks run inside the window
    assert "r=$(( 100000000 - $(date +%s%N) + t1 ))" in command and "sleep 0.25" not in command


def test_cpu_percent_is_over_the_sample_interval() -> None:
    assert SAMPLE == 0.1
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:00:00Z", 0, "a-1", "60000:60000", 0, 7),
                        "##1", "7 0 1", "##2", f"7 {int(SAMPLE * 1e9 * 1.5)} 2"])  # fmt: skip
    [agent] = parse_status(output)[1]
    assert (agent.cpu_percent, agent.memory, agent.uptime, agent.memory_limit) == (150.0, 2, 100.0, None)


def test_stopped_container_has_no_cpu_or_memory() -> None:
    output = "\n".join(["100", row("c", "exited", "1970-01-01T00:00:01Z", 0, "a-1", "60000:60000", 1024, 0),
                        "##1", "##2"])  # fmt: skip
    [agent] = parse_status(output)[1]
    assert (agent.cpu_percent, agent.memory, agent.uptime, agent.memory_limit) == (None, None, None, 1024)


def test_unreadable_cgroup_gives_no_cpu_or_memory() -> None:
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:00:01Z", 0, "a-1", "", 0, 7),
                        "##1", "7  ", "##2", "7  "])  # fmt: skip
    [agent] = parse_status(output)[1]
    assert (agent.cpu_percent, agent.memory, agent.uid) == (None, None, None)


def test_one_sample_missing_gives_no_cpu() -> None:
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:00:01Z", 0, "a-1", "1:1", 0, 7), "##1", "##2", "7 5 6"])
    assert parse_status(output)[1][0].cpu_percent is None


def test_created_container_has_no_uptime() -> None:
    output = "\n".join(["100", row("c", "created", "0001-01-01T00:00:00Z", 0, "a-1", "1:1", 0, 0)])
    assert parse_status(output)[1][0].uptime is None
    running_zero = "\n".join(["100", row("c", "running", "0001-01-01T00:00:00Z", 0, "a-1", "1:1", 0, 9)])
    assert parse_status(running_zero)[1][0].uptime is None


def test_unlabelled_container_is_named_by_its_container() -> None:
    output = "\n".join(["100", row("jk-demo--x", "running", "1970-01-01T00:00:01Z", 0, "", "1:1", 0, 9)])
    assert parse_status(output)[1][0].instance == "jk-demo--x"


def test_nanosecond_start_times() -> None:
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:00:01.999999999Z", 0, "a-1", "1:1", 0, 9)])
    assert parse_status(output)[1][0].uptime == pytest.approx(98.000001, abs=1e-9)


def test_start_in_the_future_is_zero_uptime() -> None:
    output = "\n".join(["100", row("c", "running", "1970-01-01T00:05:00Z", 0, "a-1", "1:1", 0, 9)])
    assert parse_status(output)[1][0].uptime == 0.0


@pytest.mark.parametrize("output", ["", "1767369600.5", "1767369600.5\n"], ids=["nothing", "date", "date-newline"])
def test_no_containers(output: str) -> None:
    assert parse_status(output)[1] == []


def test_date_only_keeps_the_hosts_time() -> None:
    assert parse_status("1767369600.123456789\n") == (1767369600.123456789, [])


def test_status_command_is_valid_posix_sh() -> None:
    result = subprocess.run(["sh", "-n", "-c", status_command("demo")], capture_output=True, text=True, timeout=10)
    assert (result.returncode, result.stderr) == (0, "")


def test_status_command_shape() -> None:
    command = status_command("my fleet")
    assert command.startswith("date +%s.%N; ")
    assert "--filter 'label=jackin.fleet=my fleet'" in command
    assert command.index("echo '##1'") < command.index("sleep ") < command.index("echo '##2'")


def test_status_command_writes_no_temp_file() -> None:
    """It runs as root: a predictable name in /tmp (it once used /tmp/.jackin-status.$$) could be a planted symlink."""
    command = status_command("demo")
    assert "/tmp/" not in command
    shell = command.replace(shlex.quote(SAMPLE_AWK), "AWK")  # the CPU sampler: it only reads (below)
    shell = shell.replace(shlex.quote(STATUS_READ), "PERL")  # the Docker read: it only talks to the socket (below)
    assert ">" not in shell.replace("2>/dev/null", "").replace(">/dev/null", "").replace("2>&1", "").replace("$6 > 0", "")
    assert "print" in SAMPLE_AWK and not re.search(r"print[^;}]*[>|]|system|\|", SAMPLE_AWK)
    assert not re.search(r"\bopen\b|\bsystem\b|\bexec\b|`|\bunlink\b|\bsysopen\b", STATUS_READ)


# --- the egress policy and its guard, per host -------------------------------------------

from jackin.cli.fleet import status_exit  # noqa: E402
from jackin.lifecycle.status import FleetStatus, HostStatus, not_enforced, parse_host_status  # noqa: E402


def host_output(*, table: bool = True, guard: str = "active\nactive", policy: str = "enforced") -> str:
    """What status_command prints before the rows: drops, table, guard (service, timer), policy."""
    return "\n".join(["100", "##drops", "##table", "loaded" if table else "", "##guard", guard, "##policy", policy,
                      "##rows", row("c", "running", "1970-01-01T00:00:01Z", 0, "a-1", "1:1", 0, 9)])  # fmt: skip


@pytest.mark.parametrize(
    ("output", "fields"),
    [
        (host_output(), (True, "enforced", "active", "active")),
        (host_output(guard="inactive\nactive"), (True, "enforced", "inactive", "active")),
        (host_output(table=False, policy="missing"), (False, "missing", "active", "active")),
        (host_output(policy="lockdown"), (True, "lockdown", "active", "active")),
        (host_output(policy="altered"), (True, "altered", "active", "active")),
        (host_output(guard="", policy=""), (True, "unknown", "unknown", "unknown")),  # no guard installed
        (host_output(policy="garbage"), (True, "unknown", "active", "active")),
    ],
    ids=["enforced", "guard-stopped", "missing", "lockdown", "altered", "no-guard", "unexpected"],
)
def test_parse_host_status_reads_the_policy_and_the_guard(output: str, fields: tuple) -> None:
    _, agents, found = parse_host_status(output)
    assert [a.instance for a in agents] == ["a-1"]
    assert (found["policy_loaded"], found["policy"], found["guard"], found["guard_timer"]) == fields


def policy_host(policy: str = "enforced", guard: str = "active", *, agents: bool = True,
                reachable: bool = True, timer: str = "active", wall: str = "held") -> HostStatus:  # fmt: skip
    listed = [AgentStatus(instance="a-1", container="c", state="running")] if agents else []
    return HostStatus(host="h", address="192.0.2.1", port=22, reachable=reachable, policy=policy, guard=guard,
                      guard_timer=timer, wall=wall, agents=listed)  # fmt: skip


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        (policy_host(), None),
        (policy_host(agents=False, policy="missing", guard="inactive"), None),  # no agent here: nothing to enforce
        (policy_host(reachable=False), None),  # unreachable: exit 3's business
        (policy_host("missing"), "table jackin-demo is not loaded (run fleet.up to restore it)"),
        (policy_host("lockdown"),
         "the lockdown table is loaded instead of the policy (it did not load) (run fleet.up to restore it)"),
        (policy_host("altered"),
         "table jackin-demo differs from the one loaded (a rule or chain changed) (run fleet.up to restore it)"),
        (policy_host(guard="inactive"), "the guard (jackin-nft-guard-demo) is inactive (run fleet.up to restore it)"),
        (policy_host("missing", "failed"), "table jackin-demo is not loaded; the guard (jackin-nft-guard-demo) "
                                           "is failed (run fleet.up to restore it)"),
        (policy_host("unknown", "unknown", timer="unknown"),
         "the guard is not installed; the guard (jackin-nft-guard-demo) is unknown; the guard's backstop timer "
         "(jackin-nft-check-demo.timer) is unknown (run fleet.up to restore it)"),
        (policy_host(timer="inactive"),
         "the guard's backstop timer (jackin-nft-check-demo.timer) is inactive (run fleet.up to restore it)"),
        (policy_host(wall="missing"),
         "the wall under the policy (table jackin--wall, jackin-wall.service) is not held: a flush of the host's "
         "ruleset would let the agents' traffic through until the guard reloads the table (run fleet.up to restore it)"),
    ],
    ids=["enforced", "no-agents", "unreachable", "missing", "lockdown", "altered", "guard-stopped", "both",
         "no-guard", "timer-gone", "no-wall"],
)  # fmt: skip
def test_not_enforced(host: HostStatus, reason: str | None) -> None:
    assert not_enforced("demo", host) == reason


def fleet(*hosts: HostStatus) -> FleetStatus:
    for host in hosts:
        host.not_enforced = not_enforced("demo", host)
    return FleetStatus(fleet="demo", at=0, hosts=list(hosts))


def test_status_exit_codes() -> None:
    """0 all enforced; 3 a host unreachable; 4 a policy not enforced on a reachable host (wins over 3)."""
    assert status_exit(fleet(policy_host(), policy_host(agents=False))) == 0
    assert status_exit(fleet(policy_host(), policy_host(reachable=False))) == 3
    assert status_exit(fleet(policy_host(), policy_host("missing"))) == 4
    assert status_exit(fleet(policy_host(guard="inactive"), policy_host(reachable=False))) == 4
    assert status_exit(fleet()) == 0
    broken = policy_host().model_copy(update={"egress_broken": "Docker's NAT ... is gone"})
    assert status_exit(fleet(broken, policy_host(reachable=False))) == 4  # allowed egress cannot work: as bad


def test_egress_is_broken_when_dockers_nat_for_an_agent_with_egress_is_gone() -> None:
    from jackin.lifecycle.status import egress_broken
    from jackin.plan.fleet import bridge_name
    from jackin.spec.models import NetworkPolicy

    agents = [AgentStatus(instance=i, container=i, state=s) for i, s in
              (("open-1", "running"), ("none-1", "running"), ("open-2", "exited"))]  # fmt: skip
    policies = {"open-1": NetworkPolicy(mode="open"), "none-1": NetworkPolicy(mode="none"),
                "open-2": NetworkPolicy(mode="open")}  # fmt: skip
    host = policy_host().model_copy(update={"agents": agents, "nat_bridges": []})
    reason = egress_broken("demo", host, policies)
    assert reason is not None and reason.startswith("Docker's NAT for the bridges of open-1 is gone")
    assert "systemctl restart docker" in reason  # a mode-none agent needs none; a stopped one is not counted
    host.nat_bridges = [bridge_name("demo", "open-1")]
    assert egress_broken("demo", host, policies) is None
    host.nat_bridges = None  # not read (no iptables on the host): nothing said
    assert egress_broken("demo", host, policies) is None


def test_the_wall_and_dockers_nat_are_read_from_their_sections() -> None:
    output = "\n".join(["100", "##drops", "##table", "loaded", "##guard", "active", "active", "##policy", "enforced",
                        "##wall", "held", "##nat", "-A POSTROUTING -s 172.18.0.0/16 ! -o jk0123abcd -j MASQUERADE",
                        "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE", "##rows"])  # fmt: skip
    _, _, found = parse_host_status(output)
    assert (found["wall"], found["nat_bridges"]) == ("held", ["docker0", "jk0123abcd"])
    _, _, found = parse_host_status(output.replace("held", "missing").replace("##nat", "##other"))
    assert found["wall"] == "missing" and "nat_bridges" not in found  # no iptables: not read


def test_status_table_shows_the_guard_per_host_and_what_is_not_enforced() -> None:
    import io

    from rich.console import Console

    from jackin.cli.render import status as ui
    ok, bad = policy_host(), policy_host("missing", "inactive").model_copy(update={"host": "h2"})
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(ui.status_table(fleet(ok, bad)))
    caption = " ".join(console.file.getvalue().split("└")[-1].split()[1:])  # type: ignore[attr-defined]
    assert caption == (
        "2/2 hosts reachable, 2/2 agents running policy guard: h active, h2 inactive "
        "h2: egress policy NOT ENFORCED: table jackin-demo is not loaded; the guard (jackin-nft-guard-demo) is "
        "inactive (run fleet.up to restore it)"
    )


def test_a_host_whose_docker_does_not_answer_is_an_error_not_an_empty_host() -> None:
    output = "\n".join(["100", "##drops", "##table", "loaded", "##guard", "active", "active", "##policy", "enforced",
                        "##rows", "##docker", "down"])  # fmt: skip
    _, agents, found = parse_host_status(output)
    assert agents == [] and "Docker engine does not answer" in str(found["error"])
    assert "error" not in parse_host_status(host_output())[2]  # control: an engine that answers


def test_status_command_reports_a_docker_that_fails() -> None:
    script = status_command("demo")
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/nonexistent"})  # no docker at all: the read says so
    assert "##docker\ndown" in done.stdout


# --- the CPU sampler (one awk for every pid), on a fake /proc and cgroup tree ---------------------


def _sample(tmp_path, files: dict[str, str], pids: list[str]) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    program = SAMPLE_AWK.replace('"/proc/"', f'"{tmp_path}/proc/"').replace('"/sys/fs/cgroup', f'"{tmp_path}/cg')
    assert program.count(str(tmp_path)) == 5 and "\"/sys" not in program  # every path it reads is under tmp_path
    return subprocess.run(["awk", program, *pids], capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_sampler_reads_cgroup_v2(tmp_path) -> None:
    scope = "cg/system.slice/docker-abc.scope"
    lines = _sample(tmp_path, {"proc/7/cgroup": "0::/system.slice/docker-abc.scope\n",
                               f"{scope}/cpu.stat": "usage_usec 123456789012\nuser_usec 5\nsystem_usec 6\n",
                               f"{scope}/memory.current": "4096\n"}, ["7"])  # fmt: skip
    assert lines == ["7 123456789012000 4096"]


def test_the_sampler_reads_cgroup_v1_and_leaves_what_it_cannot_read_empty(tmp_path) -> None:
    lines = _sample(tmp_path, {"proc/7/cgroup": "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/docker/abc\n",
                               "cg/cpuacct/docker/abc/cpuacct.usage": "987654321\n",
                               "cg/memory/docker/abc/memory.usage_in_bytes": "8192\n",
                               "proc/8/cgroup": "2:cpuacct:/docker/def\n"}, ["7", "8", "9"])  # fmt: skip
    assert lines == ["7 987654321 8192", "8  ", "9  "]  # 8: no memory cgroup, no usage; 9: no such pid
    assert parse_status("\n".join(["100", row("c", "running", "1970-01-01T00:00:00Z", 0, "a-1", "1:1", 0, 8),
                                   "##1", *lines, "##2", *lines]))[1][0].cpu_percent is None  # fmt: skip


@pytest.mark.parametrize(
    ("daemon", "read"),
    [('{"log-driver": "json-file"}', True), ('{"iptables": false}', False), ('{"ip-masq" : false}', False),
     ('{"firewall-backend": "nftables"}', False), ('{"iptables": true}', True), (None, True)],
    ids=["default", "iptables-off", "ip-masq-off", "nftables-backend", "iptables-on", "no-daemon-json"],
)  # fmt: skip
def test_dockers_nat_is_read_only_where_docker_keeps_iptables_rules(tmp_path, daemon: str | None, read: bool) -> None:
    """A Docker that keeps no NAT in iptables would otherwise look like one whose NAT a flush removed."""
    import subprocess

    from jackin.lifecycle.status import status_command

    command = status_command("demo")
    start = command.index("! command -v iptables")
    snippet = command[start : command.index("; if [ -n", start)]
    (tmp_path / "iptables").write_text("#!/bin/sh\necho '-A POSTROUTING -s 172.18.0.0/16 ! -o jk0 -j MASQUERADE'\n")
    (tmp_path / "iptables").chmod(0o755)
    config = tmp_path / "daemon.json"
    if daemon is not None:
        config.write_text(daemon)
    done = subprocess.run(["sh", "-c", snippet.replace("/etc/docker/daemon.json", str(config))], capture_output=True,
                          text=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=10)  # fmt: skip
    assert ("##nat" in done.stdout) == read, done.stdout + done.stderr
