"""Fleet lifecycle on real lab hosts: isolation, convergence, partial failure, teardown.

One 2-host lab for the module; each test uses its own fleet name and tears it
down; the lab is removed at the end whatever happens.
"""

from __future__ import annotations

import json
import secrets
import threading
import time

import pytest

from jackin.lifecycle import down as down_api
from jackin.lifecycle import fleet as fleet_api
from jackin.errors import BusyError
from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.store.ledger import Ledger
from jackin.spec import parse_inventory
from jackin.transport.ssh import connect

from .conftest import _engine_or_skip, inv, module_lab, new_lab_name, pause


@pytest.fixture(scope="module")
def flab():
    yield from module_lab("f", 2)


def write_inventory(tmp_path, lab: Lab, fleet: str, *, reviewer_memory: str = "128m") -> str:
    path = tmp_path / f"{fleet}.yaml"
    path.write_text(
        f"""fleet:
  name: {fleet}
  provider: lab
  lab: {{name: {lab.name}, hosts: 2}}
  agents:
    - {{name: coder, role: demo, count: 2, placement: each}}
    - name: reviewer
      role: demo
      placement: each
      resources: {{memory: {reviewer_memory}, cpus: 0.5, pids: 64}}
  resources: {{memory: 256m, cpus: 1, pids: 128}}
"""
    )
    return str(path)


def up_json(spec: str) -> dict:
    done = inv("fleet.up", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def sh(lab: Lab, host_index: int, command: str, *, warn: bool = False):
    host = lab.status().hosts[host_index]
    with connect(host.target()) as conn:
        return conn.run(command, hide=True, warn=warn)


def failed_units(lab: Lab, host_index: int) -> str:
    return sh(lab, host_index, "systemctl --failed --no-legend --plain").stdout


@pytest.fixture
def fleet(flab, tmp_path, request):
    """A fleet brought up on the module's lab, torn down (data included) afterwards."""
    name = f"t{secrets.token_hex(3)}"
    spec = write_inventory(tmp_path, flab, name)
    try:
        yield name, spec
    finally:
        down_api.down(fleet_api.load(spec), keep_lab=True, final_snapshot=False)  # a cleanup: proves nothing here


def test_agents_are_isolated_from_each_other_and_the_host(flab, fleet):
    name, spec = fleet
    result = up_json(spec)
    assert [h["failed"] for h in result["run"]["hosts"]] == [0, 0]
    a, b = f"jk-{name}--coder-1", f"jk-{name}--coder-2"
    uid_a = sh(flab, 0, f"id -u {a}").stdout.strip()

    # Each agent runs as its own uid with no capabilities, on a read-only root.
    out = sh(flab, 0, f"docker exec {a} sh -c 'id -u; grep CapEff /proc/1/status; grep CapEff /proc/self/status'").stdout
    assert out.split("\n")[0] == uid_a
    assert out.count("0000000000000000") == 2
    assert sh(flab, 0, f"docker exec {a} touch /rootfs-write", warn=True).failed
    assert sh(flab, 0, f"docker exec {a} touch /workspace/ok").ok

    # Agent B's workspace is neither visible from A's container nor readable by A's user on the host.
    listing = sh(flab, 0, f"docker exec {a} ls -a / /workspace").stdout
    assert "coder-2" not in listing
    denied = sh(flab, 0, f"runuser -u {a} -- ls /srv/jackin/{name}/coder-2/workspace", warn=True)
    assert denied.failed and "Permission denied" in denied.stderr

    # No Docker socket inside, and nothing from the host but the workspace.
    assert sh(flab, 0, f"docker exec {a} ls /var/run/docker.sock /run/docker.sock", warn=True).failed
    info = json.loads(sh(flab, 0, f"docker inspect {a}").stdout)[0]
    assert [m["Destination"] for m in info["Mounts"]] == ["/workspace"]
    assert info["HostConfig"]["CapDrop"] == ["ALL"] and info["HostConfig"]["ReadonlyRootfs"]
    assert "no-new-privileges" in info["HostConfig"]["SecurityOpt"]
    assert info["HostConfig"]["Memory"] == 256 * 1024**2 and info["HostConfig"]["PidsLimit"] == 128
    assert info["Config"]["Labels"]["jackin.fleet"] == name and info["Config"]["Labels"]["jackin.agent"] == "coder-1"

    # The user: no password, no login shell, not in the docker group; home root's 0750, workspace the agent's 0700.
    user = sh(flab, 0, f"getent passwd {a}; getent shadow {a} | cut -d: -f2; id -nG {a}; "
                       f"stat -c '%a %U' /srv/jackin/{name}/coder-1 /srv/jackin/{name}/coder-1/workspace").stdout  # fmt: skip
    lines = user.splitlines()
    assert lines[0].endswith(":/usr/sbin/nologin")
    assert lines[1] in ("!", "!*", "*")
    assert "docker" not in lines[2].split() and "sudo" not in lines[2].split()
    assert lines[3:] == ["750 root", f"700 {a}"]
    assert b in sh(flab, 0, "getent passwd").stdout


def test_second_up_changes_nothing_and_a_limit_change_touches_one_agent(flab, fleet, tmp_path):
    name, spec = fleet
    up_json(spec)
    again = up_json(spec)
    assert [h["changed"] for h in again["run"]["hosts"]] == [0, 0]

    ids = lambda: {  # noqa: E731
        line.split()[1]: line.split()[0]
        for line in sh(flab, 1, f"docker ps -q --no-trunc --filter label=jackin.fleet={name} --format '{{{{.ID}}}} {{{{.Names}}}}'").stdout.splitlines()
    }
    before = ids()
    changed_spec = write_inventory(tmp_path, flab, name, reviewer_memory="192m")
    third = up_json(changed_spec)
    assert [h["changed"] for h in third["run"]["hosts"]] == [1, 1]
    after = ids()
    assert after[f"jk-{name}--coder-1"] == before[f"jk-{name}--coder-1"]
    assert after[f"jk-{name}--coder-2"] == before[f"jk-{name}--coder-2"]
    assert after[f"jk-{name}--reviewer-1"] != before[f"jk-{name}--reviewer-1"]


def test_uids_are_recorded_and_stable(flab, fleet):
    name, spec = fleet
    up_json(spec)
    ledger = Ledger()
    try:
        first = ledger.uids(name)
        assert len(first) == 3 and len(set(first.values())) == 3
        agents = ledger.agents(name)
        assert {(a["host"], a["instance"]) for a in agents} == {
            (h, i) for h in (f"{flab.name}-1", f"{flab.name}-2") for i in ("coder-1", "coder-2", "reviewer-1")
        }
        up_json(spec)
        assert ledger.uids(name) == first
        trail = ledger.audit_trail(name)
        assert {(e["action"], e["host"], e["result"]) for e in trail} >= {("fleet.up", f"{flab.name}-1", "ok")}
    finally:
        ledger.close()


def test_a_second_run_on_the_same_fleet_is_refused(flab, fleet):
    name, spec = fleet
    ledger = Ledger()
    try:
        with ledger.lock(name, "fleet.up"):
            done = inv("fleet.up", "-i", spec, "--yes")
            assert done.returncode == 1
            assert f"fleet '{name}' is busy" in done.stderr and "Traceback" not in done.stderr
            with pytest.raises(BusyError):
                with Ledger().lock(name, "fleet.down"):
                    pass
    finally:
        ledger.close()


def test_a_host_stopped_mid_run_fails_alone_and_a_rerun_converges(flab, fleet):
    name, spec = fleet
    inventory = fleet_api.load(spec)
    victim = flab.status().hosts[0]
    stopped = threading.Event()

    def on_event(event):
        if event.host == victim.name and event.event == "op_start" and not stopped.is_set():
            if event.op and event.op.startswith(("agent ", "agents ")):  # one agent, or a batch (hostplan.batched)
                stopped.set()
                dk.docker("stop", "-t", "0", victim.container)

    result = fleet_api.up(inventory, on_event=on_event)
    assert stopped.is_set()
    by_host = {h.host: h for h in result.run.hosts}
    assert not by_host[victim.name].ok and by_host[victim.name].error
    other = by_host[flab.status().hosts[1].name]
    assert other.ok and other.changed >= 3

    flab.up()  # the host comes back (resumed with the same keys)
    rerun = up_json(spec)
    assert all(h["failed"] == 0 and h["error"] is None for h in rerun["run"]["hosts"])
    assert up_json(spec)["run"]["hosts"][0]["changed"] == 0
    for index in (0, 1):  # no unit of jackin's failed, on the host that came back or on the other one
        assert "jackin" not in failed_units(flab, index)


def test_status_shows_every_agent_and_an_unreachable_host_without_hanging(flab, fleet):
    name, spec = fleet
    up_json(spec)
    done = inv("fleet.status", "-i", spec, "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    for host in status["hosts"]:
        assert host["reachable"] and host["address"] == "127.0.0.1" and host["port"]
        assert [a["instance"] for a in host["agents"]] == ["coder-1", "coder-2", "reviewer-1"]
        for agent in host["agents"]:
            assert agent["state"] == "running" and agent["uid"] >= 60000
            assert agent["container"] == f"jk-{name}--{agent['instance']}" and agent["network"] == agent["container"]
            assert agent["memory"] and agent["memory_limit"]

    victim = flab.status().hosts[1]
    pause(victim.container)  # answers nothing at all, like a hung server
    try:
        started = time.monotonic()
        done = inv("fleet.status", "-i", spec, "--json")
        assert time.monotonic() - started < 30
        assert done.returncode == 3
        hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
        assert not hosts[victim.name]["reachable"] and hosts[victim.name]["error"]
        assert hosts[flab.status().hosts[0].name]["reachable"]
    finally:
        dk.docker("unpause", victim.container)


def test_down_passes_the_clean_check_and_a_second_down_is_a_no_op(flab, tmp_path):
    spec = write_inventory(tmp_path, flab, "tdown")
    up_json(spec)
    inventory = fleet_api.load(spec)
    # The down catches the policy's check running (held for 60 s by a runtime drop-in): stopped mid-run,
    # it is no failure, and no unit of the fleet is left failed (the host would stay "degraded").
    check = "jackin-nft-check-tdown.service"
    held = f"/run/systemd/system/{check}.d"
    sh(flab, 0, f"mkdir -p {held} && printf '[Service]\\nExecStart=\\nExecStart=/bin/sh -c "
                f"\"sleep 60; exec /usr/local/lib/jackin/nft-guard check tdown\"\\n' > {held}/held.conf && "
                f"systemctl daemon-reload && systemctl start --no-block {check} && sleep 0.5 && "
                f"test \"$(systemctl is-active {check})\" = activating")  # fmt: skip
    try:
        result = down_api.down(inventory, keep_data=True)
    finally:
        sh(flab, 0, f"rm -rf {held} && systemctl daemon-reload")
    assert result.clean and not result.lab_removed
    assert "tdown" not in failed_units(flab, 0)
    assert sh(flab, 0, "stat -c %a /srv/jackin/tdown/coder-1/workspace").stdout.strip() == "700"  # data kept
    wiped = down_api.down(inventory, keep_lab=True)  # now the kept homes and workspaces go too
    assert wiped.clean and not wiped.lab_removed
    assert [h.changed for h in wiped.run.hosts] == [1, 1]
    again = down_api.down(inventory, keep_lab=True)
    assert again.clean and [h.changed for h in again.run.hosts] == [0, 0]
    checks = down_api.clean_check(fleet_api.make_plan(inventory, Ledger()), fleet_api.targets(inventory))
    assert all(c.clean for c in checks)
    out = sh(flab, 0, "getent passwd | grep -c jk-tdown- || true; ls /srv/jackin 2>&1; "
                      "docker ps -aq --filter label=jackin.fleet=tdown | wc -l").stdout.split()  # fmt: skip
    assert out[0] == "0" and "tdown" not in out


def test_gc_removes_leftovers_of_a_fleet_the_ledger_forgot(flab, tmp_path):
    spec = write_inventory(tmp_path, flab, "tghost")
    up_json(spec)
    ledger = Ledger()
    try:
        ledger.forget_fleet("tghost")  # as if the operator's state was lost in a crash
    finally:
        ledger.close()
    inventory = fleet_api.load(spec)
    assert "tghost" in fleet_api.orphans(inventory).leftovers
    done = inv("fleet.gc", "-i", spec, "--yes")
    assert done.returncode == 0, done.stderr
    assert "tghost" not in fleet_api.orphans(inventory).leftovers
    leftovers = sh(flab, 1, "docker ps -aq --filter label=jackin.fleet=tghost; getent passwd | grep jk-tghost- || true").stdout
    assert leftovers.strip() == ""


def test_lab_fleet_down_destroys_the_lab(tmp_path):
    _engine_or_skip()
    lab = Lab(new_lab_name("d"))
    try:
        spec = tmp_path / "one.yaml"
        spec.write_text(f"fleet:\n  name: tlab\n  provider: lab\n  lab: {{name: {lab.name}, hosts: 1}}\n"
                        "  agents:\n    - {name: coder, count: 2}\n")  # fmt: skip
        up_json(str(spec))
        done = inv("fleet.down", "-i", str(spec), "--yes")
        assert done.returncode == 0, done.stderr
        assert "clean" in done.stdout and "destroyed" in done.stdout
        assert lab.leftovers() == {"containers": [], "volumes": [], "networks": [], "files": []}
        again = inv("fleet.down", "-i", str(spec), "--yes")
        assert again.returncode == 0, again.stderr
    finally:
        lab.down()


def test_down_and_up_refuse_to_act_without_a_terminal_or_yes(flab, tmp_path):
    spec = write_inventory(tmp_path, flab, "tconfirm")
    for args in (("fleet.up", "-i", spec), ("fleet.down", "-i", spec)):
        done = inv(*args)
        assert done.returncode == 2 and "pass --yes" in done.stderr
    assert parse_inventory(open(spec).read(), spec).fleet.name == "tconfirm"
