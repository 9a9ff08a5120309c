"""Automatic snapshots before fleet.up recreates or removes an agent, on a real lab host.

One 1-host lab and one fleet of two agents for the module; the tests run in file order
and each writes the spec it needs (memory changes recreate every container; count 1
removes coder-2). "Changes nothing" compares the host's containers, networks, users and
workspaces before and after; snapshots are compared through ``snapshot.list --json``.
"""

from __future__ import annotations

import json
import secrets

import pytest

from jackin.lab import Lab
from jackin.store.ledger import Ledger
from jackin.operations import agent_paths
from jackin.transport.ssh import connect

from .conftest import inv, module_lab

REPO = "/var/lib/jackin/snapshots/{fleet}"


@pytest.fixture(scope="module")
def alab():
    yield from module_lab("a", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, name: str, path) -> None:
        self.lab, self.name, self.path = lab, name, path

    def write(self, *, memory: str = "128m", count: int = 2, before: bool = True) -> str:
        self.path.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {self.lab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo, count: {count}}}
  resources: {{memory: {memory}, cpus: 0.5, pids: 64}}
  snapshots: {{before_changes: {str(before).lower()}}}
""")
        return str(self.path)

    def up(self, *args: str):
        return inv("fleet.up", "-i", str(self.path), *args)

    def sh(self, command: str, *, warn: bool = False):
        with connect(self.lab.status().hosts[0].target()) as conn:
            return conn.run(command, hide=True, warn=warn, timeout=300)

    def as_agent(self, instance: str, script: str) -> None:
        uid = int(self.sh(f"id -u jk-{self.name}--{instance}").stdout)
        self.sh(agent_paths.as_agent(uid, uid, "sh", "-c", script))

    def ws(self, instance: str) -> str:
        return f"/srv/jackin/{self.name}/{instance}/workspace"

    def snapshots(self) -> list[dict]:
        done = inv("snapshot.list", "-i", str(self.path), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def state(self) -> str:
        """The fleet's containers (id, start, config), networks, users and workspaces on the host (not the
        agents' .jackin: its heartbeat, rewritten every 5 s through a status.json.tmp, while they run)."""
        f = self.name
        return self.sh(
            f"for c in $(docker ps -aq --filter label=jackin.fleet={f}); do docker inspect -f "
            "'{{.Id}} {{.Name}} {{.State.StartedAt}} {{index .Config.Labels \"jackin.config\"}}' $c; done | sort; "
            f"docker network ls -q --filter label=jackin.fleet={f} | sort; getent passwd | grep 'jackin/{f}/' | sort; "
            f"cd /srv/jackin/{f} && find . -path ./.restore -prune -o -path './*/workspace/.jackin' -prune -o "
            "-printf '%y %m %U %p\\n' | sort"
        ).stdout  # fmt: skip

    def containers(self) -> dict[str, str]:
        out = self.sh(f"docker ps -aq --no-trunc --filter label=jackin.fleet={self.name} | xargs -r docker inspect "
                      "-f '{{.Name}} {{.Id}}'").stdout  # fmt: skip
        return dict(line.lstrip("/").split() for line in out.splitlines())

    def last_up_detail(self) -> dict:
        with Ledger() as ledger:
            run = [r for r in ledger.runs(self.name) if r["action"] == "fleet.up"][-1]
        return json.loads(run["detail"])


@pytest.fixture(scope="module")
def fleet(alab, tmp_path_factory):
    name = f"a{secrets.token_hex(3)}"
    fl = Fleet(alab, name, tmp_path_factory.mktemp("auto") / f"{name}.yaml")
    fl.write()
    done = fl.up("--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield fl
    finally:  # a cleanup: the final snapshot and pull are proven in test_final_pull, not here
        inv("fleet.down", "-i", str(fl.path), "--yes", "--keep-lab", "--discard-snapshots")


def test_a_no_change_up_takes_no_snapshot(fleet):
    before, state = fleet.snapshots(), fleet.state()
    done = fleet.up("--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.snapshots() == before and fleet.state() == state
    assert fleet.last_up_detail()["auto_snapshots"] == []


def test_a_dry_run_names_the_agents_it_would_snapshot_and_changes_nothing(fleet):
    before, state = fleet.snapshots(), fleet.state()
    fleet.write(memory="144m")
    done = fleet.up("--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    for instance in ("coder-1", "coder-2"):
        assert f"would snapshot {instance} before recreating it: its configuration changed" in done.stderr
    assert fleet.snapshots() == before and fleet.state() == state


def test_a_failed_snapshot_refuses_the_up_and_changes_nothing(fleet):
    fleet.as_agent("coder-1", f"echo precious > {fleet.ws('coder-1')}/data")
    repo = REPO.format(fleet=fleet.name) + "/repo"
    fleet.write(memory="144m")
    before, state = fleet.snapshots(), fleet.state()
    # an existing repository whose keys are gone: restic cannot open it, so the snapshot fails
    fleet.sh(f"mkdir -p {repo} && touch {repo}/config && mv {repo}/keys {repo}/keys.aside 2>/dev/null || "
             f"install -d -m 0700 {repo}/keys.aside")  # fmt: skip
    try:
        done = fleet.up("--yes")
        assert done.returncode == 1, done.stdout + done.stderr
        host = fleet.lab.status().hosts[0].name
        assert "the automatic snapshot before fleet.up failed, so nothing was changed" in done.stderr
        assert f"{host}: " in done.stderr and "snapshots.before_changes: false" in done.stderr
        assert fleet.state() == state and fleet.snapshots() == before
    finally:
        fleet.sh(f"rm -rf {repo}/keys && mv {repo}/keys.aside {repo}/keys; "
                 f"[ -n \"$(ls -A {repo}/keys)\" ] || rm -rf {repo}")  # fmt: skip


def test_a_recreating_up_snapshots_first_and_the_snapshot_restores(fleet):
    fleet.write(memory="144m")  # the same change the failed up refused: now it goes through
    ws = fleet.ws("coder-1")
    assert fleet.sh(f"cat {ws}/data").stdout == "precious\n"
    before, containers = fleet.snapshots(), fleet.containers()
    done = fleet.up("--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    [auto] = [s for s in fleet.snapshots() if s not in before]
    assert auto["kind"] == "auto" and sorted(auto["agents"]) == ["coder-1", "coder-2"]
    assert auto["label"].startswith("before fleet.up: recreate coder-1")
    assert f"snapshot {auto['id']} of coder-1 before recreating it: its configuration changed" in done.stderr
    assert fleet.last_up_detail()["auto_snapshots"] == [auto["id"]]
    after = fleet.containers()
    assert set(after) == set(containers) and all(after[c] != containers[c] for c in after)  # recreated, all of them
    fleet.as_agent("coder-1", f"rm {ws}/data && echo lost > {ws}/other")
    done = inv("snapshot.restore", "-i", str(fleet.path), auto["id"], "--agent", "coder-1", "--stop", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.sh(f"cat {ws}/data; ls {ws}").stdout == "precious\ndata\n"


def test_before_changes_false_takes_no_snapshot(fleet):
    fleet.write(memory="160m", before=False)
    before, containers = fleet.snapshots(), fleet.containers()
    done = fleet.up("--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.snapshots() == before
    after = fleet.containers()
    assert all(after[c] != containers[c] for c in after)  # the run did recreate them
    assert fleet.last_up_detail()["auto_snapshots"] == []


def test_removing_an_agent_from_the_spec_snapshots_it_first(fleet):
    ws = fleet.ws("coder-2")
    fleet.as_agent("coder-2", f"echo last-words > {ws}/note")
    fleet.write(memory="160m", count=1)
    before = fleet.snapshots()
    done = fleet.up("--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    [auto] = [s for s in fleet.snapshots() if s not in before]
    assert auto["kind"] == "auto" and auto["agents"] == ["coder-2"]
    assert f"snapshot {auto['id']} of coder-2 before removing it: the spec no longer names it" in done.stderr
    assert list(fleet.containers()) == [f"jk-{fleet.name}--coder-1"]
    done = inv("snapshot.show", "-i", str(fleet.path), auto["id"], "--json")
    [agent] = json.loads(done.stdout)["agents"]
    # its manifest comes from the spec in place (which still names coder-2), not the one removing it
    assert agent["manifest"]["spec"]["name"] == "coder" and agent["manifest"]["image"] and agent["manifest"]["network"]
    base = REPO.format(fleet=fleet.name)
    listed = fleet.sh(f"/usr/local/lib/jackin/restic -r {base}/repo --password-file {base}/password ls "
                      f"{agent['restic_id']}").stdout  # fmt: skip
    assert f"/srv/jackin/{fleet.name}/coder-2/workspace/note" in listed.splitlines()
    assert fleet.sh(f"/usr/local/lib/jackin/restic -r {base}/repo --password-file {base}/password dump "
                    f"{agent['restic_id']} /srv/jackin/{fleet.name}/coder-2/workspace/note").stdout == "last-words\n"
