"""fleet.rollback --with-snapshots on a real lab host: the spec and the workspace bytes come back together,
and a rollback with no matching snapshot is refused before anything changes.

One 1-host lab for the module, one fleet of one agent; the tests run in file order on it. Spec A
(keep, no network), data planted as the agent; spec B (keep's network opened to one address), data
changed. Host state is read over SSH as root: the fleet's containers with their config hash, the
nftables chain of keep, and a NUL-safe listing of keep's workspace (type, mode, owner, mtime, size,
link target, sha256 of every file).
"""

from __future__ import annotations

import json
import secrets

import pytest

from jackin.lab import Lab
from jackin.store.ledger import Ledger
from jackin.operations import agent_paths

from .conftest import inv, module_lab, sh

RESOURCES = {"memory": "128m", "cpus": 0.5, "pids": 64}


@pytest.fixture(scope="module")
def wlab():
    yield from module_lab("w", 1, shared=True)



def spec(name: str, lab: Lab, network: dict) -> str:
    return json.dumps({"fleet": {"name": name, "provider": "lab", "lab": {"name": lab.name, "hosts": 1},
                                 "resources": RESOURCES, "agents": [{"name": "keep", "network": network}]}})  # fmt: skip


class Fleet:
    def __init__(self, lab: Lab, name: str, path) -> None:
        self.lab, self.name, self.path = lab, name, path
        self.ws = f"/srv/jackin/{name}/keep-1/workspace"

    @property
    def file(self) -> str:
        return str(self.path)

    def up(self, network: dict) -> int:
        self.path.write_text(spec(self.name, self.lab, network))
        done = inv("fleet.up", "-i", self.file, "--yes", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return self.runs()[-1]["id"]

    def as_agent(self, script: str) -> None:
        uid = int(sh(self.lab, f"id -u jk-{self.name}--keep-1").stdout)
        sh(self.lab, agent_paths.as_agent(uid, uid, "sh", "-c", f"cd {self.ws} && {script}"))

    def listing(self) -> list[str]:
        meta = sh(self.lab, f"cd {self.ws} && find . -path ./.jackin -prune -o -printf '%y %m %U %G %T@ %s %p\\0%l\\0'").stdout.split("\0")
        sums = sh(self.lab, f"cd {self.ws} && find . -path ./.jackin -prune -o -type f -print0 | xargs -0r sha256sum -z").stdout.split("\0")
        return sorted(f"{m} -> {link}" for m, link in zip(meta[0::2], meta[1::2])) + sorted(x for x in sums if x)

    def spec_state(self) -> list[str]:
        """keep's container (with its config hash) and its live egress chain (counters left out)."""
        fmt = '{{.Names}} {{.Label "jackin.config"}}'
        out = sh(self.lab, f"docker ps -a --filter label=jackin.fleet={self.name} --format '{fmt}'; "
                           f"nft list chain inet jackin-{self.name} egress_keep_1 | sed -E 's/packets [0-9]+ bytes [0-9]+//'")
        return out.stdout.splitlines()

    def runs(self) -> list[dict]:
        with Ledger() as ledger:
            return ledger.runs(self.name)


@pytest.fixture(scope="module")
def fleet(wlab, tmp_path_factory):
    name = f"rw{secrets.token_hex(3)}"
    f = Fleet(wlab, name, tmp_path_factory.mktemp("rw") / f"{name}.json")
    try:
        f.run_a = f.up({"mode": "none"})
        f.as_agent("mkdir -p src && echo alpha > a.txt && head -c 200000 /dev/urandom > src/blob && "
                   "ln -s a.txt link && chmod 0640 a.txt")
        f.spec_a, f.data_a = f.spec_state(), f.listing()
        yield f
    finally:
        done = inv("fleet.down", "-i", f.file, "--yes", "--keep-lab")
        assert done.returncode == 0, done.stdout + done.stderr


def test_with_snapshots_and_no_matching_snapshot_refuses_before_anything(fleet):
    runs = fleet.runs()
    done = inv("fleet.rollback", "-i", fleet.file, "--to", str(fleet.run_a), "--with-snapshots", "--yes")
    assert done.returncode == 2, done.stdout + done.stderr
    host = fleet.lab.status().hosts[0].name
    assert f"{host}: no snapshot of keep-1 was taken while run {fleet.run_a}'s spec was in place" in done.stderr
    assert fleet.runs() == runs and fleet.listing() == fleet.data_a and fleet.spec_state() == fleet.spec_a
    # control: without --with-snapshots the same rollback is accepted (a dry run: it changes nothing)
    dry = inv("fleet.rollback", "-i", fleet.file, "--to", str(fleet.run_a), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert fleet.runs() == runs


def test_rollback_with_snapshots_returns_the_spec_and_the_workspace_bytes(fleet):
    taken = inv("snapshot.create", "-i", fleet.file, "--json", "--label", "spec A")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    sid = json.loads(taken.stdout)["snapshot"]["id"]
    fleet.up({"mode": "allowlist", "allow": ["198.18.7.7:443"]})
    fleet.as_agent("echo beta > a.txt && rm -rf src && echo new > b.txt && rm link && ln -s /etc link")
    spec_b, data_b = fleet.spec_state(), fleet.listing()
    assert spec_b != fleet.spec_a and data_b != fleet.data_a  # control: B differs in both
    assert any("198.18.7.7" in line for line in spec_b)

    dry = inv("fleet.rollback", "-i", fleet.file, "--to", str(fleet.run_a), "--with-snapshots", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    host = fleet.lab.status().hosts[0].name
    # the match: the manual snapshot, or the newer `auto` one fleet.up B took before recreating keep (where
    # fleet.up takes automatic snapshots); either holds spec A's data
    listed = json.loads(inv("snapshot.list", "-i", fleet.file, "--json").stdout)
    expected = [x for x in listed if x["id"] == sid] + [x for x in listed if x["kind"] == "auto" and x["id"] > sid]
    chosen = expected[-1]
    assert f"snapshot {chosen['id']} ({chosen['kind']}, " in dry.stdout and f"-> keep-1 on {host}" in dry.stdout
    assert fleet.spec_state() == spec_b and fleet.listing() == data_b  # the dry run changed nothing

    done = inv("fleet.rollback", "-i", fleet.file, "--to", str(fleet.run_a), "--with-snapshots", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.spec_state() == fleet.spec_a
    assert fleet.listing() == fleet.data_a
    listed = json.loads(inv("snapshot.list", "-i", fleet.file, "--json").stdout)
    assert [s["kind"] for s in listed if s["id"] != sid][-1] == "pre-restore"  # the restore is undoable
