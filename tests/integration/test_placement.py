"""Placement on real lab hosts of different sizes (issue 21, item 1): one 3-host lab whose hosts have 4, 2 and 1 GiB
of memory (``lab.sizes``). 7 instances of 512 MiB land as their capacity says (4, 2, 1); a fleet that does not fit
is refused with the numbers and changes nothing (hosts and ledger compared); a warm run moves nothing;
``agent.move`` carries a workspace byte for byte to another host and removes it from the old one; a host that
leaves the inventory strands its instance, which fleet.plan names.
"""

from __future__ import annotations

import json

import pytest

from jackin.lab import Lab
from jackin.store.ledger import Ledger

from .conftest import _engine_or_skip, forget, inv, new_lab_name, sh

FLEET = "plc"
SIZES = [{"memory": "4g"}, {"memory": "2g", "cpus": 1}, {"memory": "1g", "cpus": 1}]


@pytest.fixture(scope="module")
def plab():
    _engine_or_skip()
    lab = Lab(new_lab_name("pl"))
    try:
        from jackin.spec.models import LabSize

        lab.up(3, sizes=[LabSize.model_validate(s) for s in SIZES])
        yield lab
    finally:
        forget(lab)
        lab.down()


def spec(tmp_path_factory, lab: Lab, count: int = 7, hosts: int = 3) -> str:
    path = tmp_path_factory.mktemp("placement") / f"p{count}-{hosts}.yaml"
    path.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": lab.name, "hosts": hosts, "sizes": SIZES[:hosts]},
        "agents": [{"name": "coder", "count": count, "resources": {"memory": "512m", "cpus": 0.5, "pids": 64}}],
        "network": {"mode": "none"},
    }}))  # fmt: skip
    return str(path)


def on_hosts(lab: Lab) -> list[str]:
    """Per host: the fleet's containers, users and homes (what a change would touch)."""
    read = ("docker ps -a --filter label=jackin.fleet=plc --format '{{.Names}} {{.Label \"jackin.config\"}}' | sort; "
            "getent passwd | cut -d: -f1 | grep '^jk-plc' | sort; ls /srv/jackin/plc 2>/dev/null | sort")  # fmt: skip
    return [sh(lab, read, host=i).stdout for i in range(3)]


def ledger_rows() -> tuple[dict[str, str], int]:
    with Ledger() as ledger:
        return ledger.placements(FLEET), len(ledger.runs(FLEET))


def placement_of(path: str) -> dict:
    done = inv("fleet.plan", "-i", path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_seven_instances_land_as_the_hosts_capacity_says(plab, tmp_path_factory):
    done = inv("fleet.up", "-i", spec(tmp_path_factory, plab), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    n = plab.name
    want = {f"{n}-1": ["coder-1", "coder-2", "coder-4", "coder-5"], f"{n}-2": ["coder-3", "coder-6"], f"{n}-3": ["coder-7"]}
    assert json.loads(done.stdout)["plan"]["placement"] == want
    assert ledger_rows()[0] == {i: h for h, here in want.items() for i in here}
    for index, (host, instances) in enumerate(want.items()):
        running = sh(plab, "docker ps --filter label=jackin.fleet=plc --format '{{.Label \"jackin.agent\"}}'",
                     host=index).stdout.split()  # fmt: skip
        assert sorted(running) == sorted(instances), host


def test_a_fleet_that_does_not_fit_is_refused_with_the_numbers_and_nothing_changes(plab, tmp_path_factory):
    before, rows = on_hosts(plab), ledger_rows()
    done = inv("fleet.up", "-i", spec(tmp_path_factory, plab, count=15), "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "fleet 'plc' does not fit on its hosts: nothing was changed" in said
    assert "agent coder: 1 of its 15 instance(s) fit on none of its hosts (coder-15)" in said
    assert "memory: needed 512 MiB, free 0 B" in said and "short by 512 MiB" in said
    assert on_hosts(plab) == before and ledger_rows() == rows


def test_a_warm_run_moves_nothing(plab, tmp_path_factory):
    rows, before = ledger_rows()[0], on_hosts(plab)
    done = inv("fleet.up", "-i", spec(tmp_path_factory, plab), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [h["changed"] for h in json.loads(done.stdout)["run"]["hosts"]] == [0, 0, 0]
    assert ledger_rows()[0] == rows and on_hosts(plab) == before


# Every file, directory and link of the workspace: type, mode, owner, size, target, and each file's sha256; not the
# agent's own state (.jackin: its status file, rewritten by the agent once it runs again)
LISTING = ("cd /srv/jackin/plc/coder-1/workspace && find . -path ./.jackin -prune -o -printf '%y %m %U %G %s %p -> %l\\n' "
           "| sort && find . -path ./.jackin -prune -o -type f -exec sha256sum {} + | sort")  # fmt: skip


def test_agent_move_carries_the_workspace_byte_for_byte(plab, tmp_path_factory):
    path, n = spec(tmp_path_factory, plab), plab.name
    sh(plab, "cd /srv/jackin/plc/coder-1/workspace && u=$(stat -c %u .) && mkdir -p deep/er && "
             "head -c 300000 /dev/urandom > deep/er/blob.bin && printf 'a\\nb' > notes.txt && ln -s notes.txt link && "
             "chmod 0640 notes.txt && chown -R -h $u:$u deep notes.txt link", host=0)  # fmt: skip
    before = sh(plab, LISTING, host=0).stdout
    assert "blob.bin" in before and "link -> notes.txt" in before
    refused = inv("agent.move", "coder-1", "--to", f"{n}-1", "-i", path)
    assert refused.returncode == 2 and "coder-1 is on" in refused.stdout + refused.stderr
    done = inv("agent.move", "coder-1", "--to", f"{n}-3", "-i", path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    moved = json.loads(done.stdout)
    assert (moved["source"], moved["to"], moved["restored"], moved["removed"]) == (f"{n}-1", f"{n}-3", True, True)
    assert sh(plab, LISTING, host=2).stdout == before  # byte for byte, modes, owners and links
    gone = sh(plab, "docker ps -aq --filter name=jk-plc--coder-1; getent passwd jk-plc--coder-1; "
                    "ls -d /srv/jackin/plc/coder-1", host=0, warn=True)  # fmt: skip
    assert gone.stdout.strip() == "" and "No such file" in gone.stderr
    assert ledger_rows()[0]["coder-1"] == f"{n}-3"
    status = json.loads(inv("fleet.status", "-i", path, "--json").stdout)
    assert "coder-1" in status["placement"][f"{n}-3"] and "coder-1" not in status["placement"][f"{n}-1"]
    full = inv("agent.move", "coder-2", "--to", f"{n}-3", "-i", path)  # 1 GiB holds two of 512 MiB: no room left
    assert full.returncode == 2 and "coder-2 does not fit on" in full.stdout + full.stderr


def test_a_host_that_leaves_strands_its_instances_and_plan_names_them(plab, tmp_path_factory):
    document = placement_of(spec(tmp_path_factory, plab, hosts=2))
    assert document["stranded"] == {"coder-1": f"{plab.name}-3", "coder-7": f"{plab.name}-3"}
    shown = inv("fleet.plan", "-i", spec(tmp_path_factory, plab, hosts=2)).stdout
    assert f"coder-7: on {plab.name}-3, which left the inventory" in " ".join(shown.split())
