"""fleet.up at its simplest, end to end over real SSH."""

from __future__ import annotations

import json

from jackin.engine import EngineRequest, run
from jackin.lifecycle.fleet import deploys_dir
from jackin.store.ledger import Ledger
from jackin.plan.fleet import build
from jackin.spec import parse_inventory
from jackin.transport.ssh import connect

from .conftest import inv


def _inventory(tmp_path, lab_name: str, hosts: int = 2) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"fleet:\n  name: itest\n  provider: lab\n  lab: {{name: {lab_name}, hosts: {hosts}}}\n"
        "  agents:\n    - {name: coder, role: demo, placement: each}\n"
    )
    return str(path)


def test_fleet_up_deploys_to_every_host_and_converges(lab, tmp_path):
    spec = _inventory(tmp_path, lab.name)
    first = inv("fleet.up", "-i", spec, "--yes", "--json", check=True)
    result = json.loads(first.stdout)["run"]
    assert [h["host"] for h in result["hosts"]] == [f"{lab.name}-1", f"{lab.name}-2"]
    for host in result["hosts"]:
        assert host["connected"] and host["failed"] == 0 and host["error"] is None
        assert host["facts"]["distro"] == "Debian 12"
    for host in lab.status().hosts:
        with connect(host.target()) as conn:
            marker = conn.run("cat /var/lib/jackin/fleet-itest.json", hide=True).stdout
        assert json.loads(marker) == {"fleet": "itest", "managed_by": "jackin", "root": "/srv/jackin/itest"}

    second = json.loads(inv("fleet.up", "-i", spec, "--yes", "--json", check=True).stdout)
    assert [h["changed"] for h in second["run"]["hosts"]] == [0, 0]


def _host_and_ledger(lab, fleet: str) -> tuple[list[str], list, dict]:
    """What a run could change: each host's users, containers, networks, jackin files (not the agents'
    .jackin, whose heartbeat their entrypoint rewrites every 5 s); the fleet's ledger rows."""
    read = ("getent passwd | sort; docker ps -a --format '{{.Names}} {{.State}}' | sort; "
            "docker network ls --format '{{.Name}}' | sort; ls -laR -I .jackin /var/lib/jackin /srv/jackin 2>&1; "
            "nft list tables")
    hosts = []
    for host in lab.status().hosts:
        with connect(host.target()) as conn:
            hosts.append(conn.run(read, hide=True, warn=True).stdout)
    with Ledger() as ledger:
        return hosts, [dict(r) for r in ledger.runs(fleet)], ledger.uids(fleet)


def test_dry_run_shows_the_in_process_plan_and_changes_nothing(lab, tmp_path):
    spec = _inventory(tmp_path, lab.name)
    text = open(spec).read().replace("name: itest", "name: idry")
    open(spec, "w").write(text)
    before = _host_and_ledger(lab, "idry")
    done = inv("fleet.up", "-i", spec, "--dry-run", check=True)
    # fleet.plan's per-host view (jackin.lifecycle.hostplan), the commands shown without a "$"
    assert f"{lab.name}-1: would change" in done.stdout and "    useradd " in done.stdout
    assert " would change, " in done.stdout  # the summary's caption
    document = json.loads(inv("fleet.up", "-i", spec, "--dry-run", "--json", check=True).stdout)
    assert [h["host"] for h in document["changes"]] == [f"{lab.name}-1", f"{lab.name}-2"]
    assert all(h["changes"]["changes"] for h in document["changes"]) and document["run"]["dry_run"] is True
    assert _host_and_ledger(lab, "idry") == before  # the hosts, the runs and the uids: all as they were
    with connect(lab.status().hosts[0].target()) as conn:
        assert conn.run("getent passwd jk-idry--coder-1", hide=True, warn=True).failed


def test_fleet_up_prints_a_per_host_summary(lab, tmp_path):
    done = inv("fleet.up", "-i", _inventory(tmp_path, lab.name), "--yes", check=True)
    for n in (1, 2):
        assert f"{lab.name}-{n}" in done.stdout
    assert "2 ok, 0 failed" in done.stdout


def test_engine_refuses_a_changed_host_key_and_keeps_the_other_host(lab, tmp_path):
    hosts = lab.status().hosts
    good = hosts[1].target()
    # Host 1 now presents a key that is not the pinned one.
    lines = lab.known_hosts.read_text().splitlines()
    other = (lab.dir / "hosts" / hosts[1].name / "ssh_host_ed25519_key.pub").read_text().split()
    tampered = tmp_path / "known_hosts"
    tampered.write_text(
        "\n".join(
            f"[127.0.0.1]:{hosts[0].port} {other[0]} {other[1]}" if line.startswith(f"[127.0.0.1]:{hosts[0].port} ") else line
            for line in lines
        )
        + "\n"
    )
    bad = hosts[0].target().model_copy(update={"known_hosts": tampered})
    text = open(_inventory(tmp_path, lab.name)).read().replace("name: itest", "name: ikey")
    plan = build(parse_inventory(text).fleet, {"coder-1": 60100})
    result = run(EngineRequest(deploy=str(deploys_dir() / "fleet.py"), targets=[bad, good],
                               data=plan.model_dump(mode="json"), dry_run=True))  # fmt: skip
    by_host = {h.host: h for h in result.hosts}
    assert not by_host[bad.name].connected and "host key" in by_host[bad.name].error.lower()
    assert by_host[good.name].ok
    assert tampered.read_text().count(f"[127.0.0.1]:{hosts[0].port} ") == 1  # never re-learned


def test_fleet_up_with_bad_inventory_touches_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("fleet:\n  name: x\n  provider: lab\n  lab: {name: nolab}\n  agents: []\n")
    done = inv("fleet.up", "-i", str(bad))
    assert done.returncode == 2
    assert f"{bad}:5: fleet.agents" in done.stderr
    assert "Traceback" not in done.stderr
