"""The policy guard's script: valid POSIX sh, and its verify/check/load decisions run against a
real nft in a private network namespace (``unshare -n``: this machine's ruleset is never touched),
with logger, systemctl and docker stubbed. The event-driven ``watch`` is proven on lab hosts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jackin import hostpaths
from jackin.net import firewall, wall
from jackin.net.guard import GUARD_SCRIPT

from .test_firewall import PLANS

FLEET = "mixed"


def test_guard_script_is_valid_posix_sh() -> None:
    done = subprocess.run(["sh", "-n"], input=GUARD_SCRIPT, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr


def test_guard_refuses_a_bad_fleet_name() -> None:
    for args in (["verify", "../etc"], ["verify", ""], ["load", "a b"], ["nope", "demo"]):
        done = subprocess.run(["sh", "-c", GUARD_SCRIPT, "nft-guard", *args], capture_output=True, text=True,
                              timeout=10)  # fmt: skip
        assert done.returncode == 2 and "usage: nft-guard" in done.stderr, args


@pytest.fixture(scope="module")
def netns() -> None:
    if os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("unshare"):
        pytest.skip("needs root, nft and unshare")
    done = subprocess.run(["unshare", "-n", "nft", "list", "ruleset"], capture_output=True, text=True, timeout=10)
    if done.returncode:
        pytest.skip(f"no private network namespace here: {done.stderr.strip()}")


def stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def guard(tmp_path: Path, netns: None):
    """Run a shell script in a fresh network namespace with the guard at $G (paths under tmp_path)."""
    plan = PLANS[FLEET]
    nft_dir, bin_dir = tmp_path / "nft", tmp_path / "bin"
    nft_dir.mkdir(), bin_dir.mkdir()
    (nft_dir / f"{FLEET}.nft").write_text(firewall.render(plan))
    (nft_dir / f"{FLEET}.lockdown.nft").write_text(firewall.render_lockdown(plan))
    log = tmp_path / "log"
    log.touch()
    stub(bin_dir, "logger", f'shift 2; echo "log: $*" >> {log}')
    stub(bin_dir, "systemctl", f'echo "systemctl $*" >> {log}')
    stub(bin_dir, "docker", f'echo "docker $*" >> {log}; [ "$1" = ps ] && printf "c1\\nc2\\n"; exit 0')
    stub(bin_dir, "pkill", f'echo "pkill $*" >> {log}')
    script = tmp_path / "nft-guard"
    (tmp_path / "wall.nft").write_text(wall.render())
    script.write_text(GUARD_SCRIPT.replace("/etc/jackin/nft", str(nft_dir))
                      .replace("/run/jackin/nft", str(tmp_path / "run")).replace(hostpaths.WALL_NFT, str(tmp_path / "wall.nft"))
                      .replace(hostpaths.GUARD, f"sh {script}"))  # fmt: skip

    def run(body: str, *, walled: bool = True) -> tuple[list[str], list[str]]:
        """``walled``: the wall is held (as on a host, where Docker requires it) while ``body`` runs."""
        env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "G": f"sh {script}"}
        hold = "$G wall hold & $G wall ready\n" if walled else ""
        # A private PID namespace too: the wall's holder ends with the script, and the namespace with it.
        done = subprocess.run(["unshare", "-n", "-p", "-f", "sh", "-ec", hold + body], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split(), log.read_text().splitlines()

    run.nft_dir = nft_dir  # type: ignore[attr-defined]
    return run


DELETE_RULE = ("h=$(nft -a list chain inet jackin-mixed egress_quiet_1 | sed -n 's/.*@private_v4 .*handle //p'); "
               "nft delete rule inet jackin-mixed egress_quiet_1 handle $h")  # fmt: skip


def test_verify_tells_each_state_and_changes_nothing(guard) -> None:
    states, log = guard(f"""
        $G verify {FLEET}
        nft -f {guard.nft_dir}/{FLEET}.nft; $G verify {FLEET}
        $G record {FLEET} policy; $G verify {FLEET}
        {DELETE_RULE}; $G verify {FLEET}
        nft -f {guard.nft_dir}/{FLEET}.lockdown.nft; $G record {FLEET} lockdown; $G verify {FLEET}
    """)
    assert states == ["missing", "unverified", "enforced", "altered", "lockdown"]
    assert log == []  # verify never loads, logs or stops anything


def test_runtime_elements_and_counters_are_not_alterations_static_elements_are(guard) -> None:
    states, _ = guard(f"""
        nft -f {guard.nft_dir}/{FLEET}.nft; $G record {FLEET} policy
        nft add element inet jackin-mixed dom_picky_1_3 '{{ 192.0.2.1, 192.0.2.2 }}'
        nft add element inet jackin-mixed denied_quiet_1 '{{ 192.0.2.3 . 443 }}'
        nft reset counters table inet jackin-mixed >/dev/null
        $G verify {FLEET}
        nft delete element inet jackin-mixed private_v4 '{{ 10.0.0.0/8 }}'; $G verify {FLEET}
        $G check {FLEET}; $G verify {FLEET}
        nft delete element inet jackin-mixed always_v4 '{{ 168.63.129.16 }}'; $G verify {FLEET}
    """)
    assert states == ["enforced", "altered", "enforced", "altered"]


def test_check_reloads_a_missing_or_altered_table_and_logs_it(guard) -> None:
    states, log = guard(f"""
        $G check {FLEET}; $G verify {FLEET}
        {DELETE_RULE}; $G check {FLEET}; $G verify {FLEET}
        nft flush ruleset; $G check {FLEET}; $G verify {FLEET}
        $G check {FLEET}
    """)
    assert states == ["enforced", "enforced", "enforced"]
    assert log == [
        "log: fleet mixed: table jackin-mixed is missing: loading it again",
        "log: fleet mixed: egress policy loaded (table jackin-mixed)",
        "log: fleet mixed: table jackin-mixed is altered: loading it again",
        "log: fleet mixed: egress policy loaded (table jackin-mixed)",
        "log: fleet mixed: table jackin-mixed is missing: loading it again",
        "log: fleet mixed: egress policy loaded (table jackin-mixed)",
    ]  # the last check found it enforced: nothing to do, nothing logged


def test_a_policy_that_does_not_load_falls_back_to_lockdown(guard) -> None:
    (guard.nft_dir / f"{FLEET}.nft").write_text("table inet jackin-mixed { chain x { nonsense; } }\n")
    states, log = guard(f"$G check {FLEET}; $G verify {FLEET}; nft list tables | grep -v jackin--wall")
    assert states == ["lockdown", "table", "inet", "jackin-mixed"]
    assert log[0] == "log: fleet mixed: table jackin-mixed is missing: loading it again"
    assert log[1].startswith("log: fleet mixed: the egress policy does not load: ")
    assert log[2:] == [
        "log: fleet mixed: lockdown table loaded instead: the fleet's agents have no network until fleet.up"
    ]


def test_when_nothing_loads_the_agents_are_stopped_and_retries_stay_quiet(guard) -> None:
    (guard.nft_dir / f"{FLEET}.nft").write_text("junk\n")
    (guard.nft_dir / f"{FLEET}.lockdown.nft").write_text("junk\n")
    states, log = guard(f"$G check {FLEET} || true; $G verify {FLEET}; $G check {FLEET} || true")
    assert states == ["missing"]
    assert log[0] == "log: fleet mixed: table jackin-mixed is missing: loading it again"
    assert log[2:] == [
        "log: fleet mixed: neither the egress policy nor the lockdown table loads: stopping the fleet's agents",
        "systemctl is-active --quiet docker.service",
        "docker ps -q --filter label=jackin.fleet=mixed",
        "docker stop -t 2 c1 c2",
        "log: fleet mixed: stopped the fleet's agent containers: 2 (fleet.up starts them again)",
        # The second check: still failing, the agents are stopped again (a restarted one too), quietly.
        "systemctl is-active --quiet docker.service",
        "docker ps -q --filter label=jackin.fleet=mixed",
        "docker stop -t 2 c1 c2",
        "log: fleet mixed: stopped the fleet's agent containers: 2 (fleet.up starts them again)",
    ]


def test_stopped_forgets_the_applied_hash_only_when_stopped_by_hand(guard, tmp_path: Path) -> None:
    sha = guard.nft_dir / f"{FLEET}.sha"
    sha.write_text("abc\n")
    bin_dir = tmp_path / "bin"
    stub(bin_dir, "systemctl", "echo stopping")
    guard(f"$G stopped {FLEET}")
    assert sha.exists()  # a reboot: the table is loaded again at boot, the hash still holds
    stub(bin_dir, "systemctl", "echo running")
    guard(f"SERVICE_RESULT=exit-code $G stopped {FLEET}")
    assert sha.exists()  # the watcher died: Restart=always brings it back, the hash still holds
    guard(f"SERVICE_RESULT=success $G stopped {FLEET}")
    assert not sha.exists()  # stopped by hand: the next fleet.up starts the guard again


def test_guard_paths_agree_with_the_firewall() -> None:
    from jackin.net import guard as policy_guard

    assert policy_guard.NFT_DIR == hostpaths.NFT_DIR
    # The filtering resolvers refill the domain sets at the agents' next lookups: no host-side resolver.
    assert hostpaths.RESOLVER not in GUARD_SCRIPT


def test_a_check_stopped_mid_run_is_no_failure() -> None:
    """fleet.up stops the check while it replaces the table and fleet.down before it removes it; a check
    caught running dies by SIGTERM, which systemd counts as a failure for a oneshot (not for a simple
    service such as the guard). That failed unit outlived the fleet (not-found, failed) and left the lab
    host "degraded" (seen in test_a_host_stopped_mid_run_fails_alone_and_a_rerun_converges)."""
    from jackin.net.guard import guard_units

    units = guard_units(FLEET)
    check = units[f"/etc/systemd/system/jackin-nft-check-{FLEET}.service"].splitlines()
    assert "Type=oneshot" in check and "SuccessExitStatus=SIGTERM" in check
    assert check.index("SuccessExitStatus=SIGTERM") > check.index("[Service]")
    guard = units[f"/etc/systemd/system/jackin-nft-guard-{FLEET}.service"].splitlines()
    assert "Type=simple" in guard  # SIGTERM is a clean end for it already
    # A real failure still fails the unit: load's status is check's (a policy and a lockdown that do not load).
    assert "load quiet  # still failing" in GUARD_SCRIPT and "\n    load\n}" in GUARD_SCRIPT


# --- the wall (jackin/net/wall.py) ------------------------------------------------------------------------


def test_the_wall_outlives_every_flush_and_refuses_every_change_but_its_holders(guard) -> None:
    out, log = guard(f"""
        nft -f {guard.nft_dir}/{FLEET}.nft
        $G wall verify
        nft flush ruleset; $G wall verify
        printf 'flush ruleset\\ntable inet other {{ }}\\n' > /tmp/jk-conf.$$.nft; nft -f /tmp/jk-conf.$$.nft
        rm -f /tmp/jk-conf.$$.nft; $G wall verify
        nft delete table inet jackin--wall 2>/dev/null || echo refused-delete
        nft add rule inet jackin--wall forward accept 2>/dev/null || echo refused-rule
        nft list tables | tr ' ' '-'
    """)
    assert out == [
        "held",
        "held",
        "held",
        "refused-delete",
        "refused-rule",
        "table-inet-jackin--wall",
        "table-inet-other",
    ]  # the fleet's table went with the flush; the wall did not
    assert log == []


def test_the_wall_drops_only_unmarked_packets_from_agent_bridges() -> None:
    text = wall.render()
    assert "flags owner" in text and text.count(f"meta mark & {wall.MARK:#010x} == 0x00000000 counter drop") == 2
    assert 'iifname "jk*"' in text and f"priority {wall.PRIORITY};" in text
    assert wall.PRIORITY == "filter - 4" and firewall.PRIORITY == "filter - 5"  # the fleets' tables mark first
    table = firewall.render(PLANS[FLEET])
    for hook in ("forward", "input"):
        chain = table.split(f"\tchain {hook} {{\n", 1)[1].split("\t}", 1)[0].splitlines()
        assert chain[1].strip() == wall.mark_rule([a.bridge for a in PLANS[FLEET].agents]), chain
    assert "mark" not in firewall.render_lockdown(PLANS[FLEET])  # the lockdown drops them all anyway


def test_a_check_starts_the_wall_when_it_is_not_held(guard) -> None:
    states, log = guard(f"$G wall verify; $G check {FLEET}; $G verify {FLEET}", walled=False)
    assert states == ["missing", "enforced"]
    assert log[:2] == [
        f"log: fleet {FLEET}: the wall (table jackin--wall) is not held: starting jackin-wall.service",
        "systemctl start --no-block jackin-wall.service",
    ]


def test_the_walls_stop_stops_every_agent_first(guard) -> None:
    _, log = guard("MAINPID=4242 $G wall stop")  # systemd stops it: its holder still runs
    assert log[:2] == ["systemctl is-active --quiet docker.service", "docker ps -q --filter label=jackin.fleet"]
    assert log[2] == "docker stop -t 2 c1 c2" and log[-1] == "log: the wall goes: every agent was stopped first"


def test_a_holder_that_ended_by_itself_stops_no_agent(guard) -> None:
    """systemd runs ExecStop after a main process that exited on its own, cleanly or by SIGTERM, with
    MAINPID unset: the wall is gone already, and the agents run on under their fleets' tables."""
    _, log = guard("$G wall stop")
    assert log == ["log: the wall's holder ended: the agents run on under their fleets' tables"]


def test_the_holder_never_ends_by_itself(guard) -> None:
    """nft reads a FIFO it also holds open for writing: no end of file, however long it waits."""
    out, _ = guard("sleep 1; $G wall verify; nft list tables | tr ' ' '-'", walled=True)
    assert out == ["held", "table-inet-jackin--wall"]


def test_the_wall_is_not_started_under_a_fleet_whose_table_does_not_mark(guard, tmp_path: Path) -> None:
    """Another fleet's table from an earlier jackin (no mark rule) would lose every packet to the wall: the
    check that runs before the wall's first start names it. Marked tables, lockdown tables, tables with no
    agent and the fleet's own old table pass."""
    from jackin.operations.firewall import unmarked_check

    plan = PLANS[FLEET]
    marked = firewall.render(plan).replace("jackin-mixed", "jackin-new")
    unmarked = "\n".join(line for line in marked.splitlines() if "meta mark set" not in line).replace(
        "jackin-new", "jackin-old")  # fmt: skip
    own_old = unmarked.replace("jackin-old", "jackin-mixed")
    lockdown = firewall.render_lockdown(plan).replace("jackin-mixed", "jackin-locked")
    for name, text in (("new", marked), ("old", unmarked), ("own", own_old), ("locked", lockdown)):
        (tmp_path / f"{name}.nft").write_text(text + "\n")
    check = unmarked_check(FLEET)
    out, _ = guard(f"""
        for t in new own locked; do nft -f {tmp_path}/$t.nft; done
        if ( {check} ); then echo passes; fi
        nft -f {tmp_path}/old.nft
        ( {check} ) 2>&1 || echo refused
    """, walled=False)  # fmt: skip
    text = " ".join(out)
    assert text.startswith("passes fleet old on this host was applied by an earlier jackin"), text
    assert text.endswith("run fleet.up for that fleet with this jackin first refused"), text
