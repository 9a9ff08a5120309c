"""fleet.down's final snapshot on a real lab host, through the CLI: a host whose final snapshot
fails keeps everything; with the fault fixed, fleet.down takes a ``final`` snapshot, pulls the
host's repository here (it checks and restores the same bytes here), removes the fleet's snapshot
dir and the uploaded restic from the host and leaves it clean; ``before_teardown: false`` takes none.
Then, each on its own fleet: the home of an agent the spec and the ledger no longer name is in the
final snapshot; ``--no-final-snapshot`` still pulls an earlier manual snapshot; ``--discard-snapshots``
pulls nothing and the ledger forgets what was lost.

One 1-host lab for the module (kept across fleet.down by ``--keep-lab``); the tests run in file
order and share the first fleet. The lab host has no restic: the final snapshot uploads ours.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from jackin.store.ledger import Ledger
from jackin.operations import agent_paths
from jackin.paths import state_dir
from jackin.snapshots import binary, transfer
from jackin.transport.ssh import connect
from jackin.facts.state import parse_state
from jackin.facts.state_read import state_command

from .conftest import inv, module_lab

pytestmark = pytest.mark.skipif(not shutil.which("restic"), reason="restic is not installed here")
shared: dict = {}  # what the first test saw, for the second


@pytest.fixture(scope="module")
def dlab():
    yield from module_lab("d", 1, shared=True)


CODER = "    - {name: coder, role: demo, count: 1}\n"


def write_spec(lab, directory: Path, name: str, extra: str = "", agents: str = CODER) -> str:
    spec = directory / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
{agents}  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
{extra}""")
    return str(spec)


@pytest.fixture(scope="module")
def fleet(dlab, tmp_path_factory):
    name = f"d{secrets.token_hex(3)}"
    spec = write_spec(dlab, tmp_path_factory.mktemp("down"), name)
    done = inv("fleet.up", "-i", spec, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield name, spec
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--no-final-snapshot")
        shutil.rmtree(state_dir() / "snapshots" / name, ignore_errors=True)  # the pulled copy and password


def sh(lab, command: str, *, warn: bool = False):
    with connect(lab.status().hosts[0].target()) as conn:
        return conn.run(command, hide=True, warn=warn, timeout=300)


def host_name(lab) -> str:
    return lab.status().hosts[0].name


def as_agent(lab, fleet: str, script: str, instance: str = "coder-1") -> None:
    uid = int(sh(lab, f"id -u jk-{fleet}--{instance}").stdout)
    sh(lab, agent_paths.as_agent(uid, uid, "sh", "-c", script))


def _not_status(entry: str) -> bool:
    """Not the entrypoint's status directory (./.jackin): its heartbeat is rewritten every 5 s while the
    agent's container runs, so its bytes differ between any two reads."""
    path = entry.split(" ", 2)[-1].lstrip()
    return bool(entry) and path != "./.jackin" and not path.startswith("./.jackin/")


def files(lab, path: str) -> list[str]:
    """Every path under ``path`` with type and mode, then every file's sha256 (NUL-safe); not ./.jackin,
    left out by find itself: a status.json.tmp listed and then renamed away would fail sha256sum."""
    meta = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -printf '%y %m %p\\0'").stdout.split("\0")
    sums = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -type f -print0 | xargs -0r sha256sum -z").stdout.split("\0")
    return sorted(m for m in meta if _not_status(m)) + sorted(s for s in sums if _not_status(s))


def local_files(path: Path) -> list[str]:
    meta, sums = [], []
    for top, dirs, names in os.walk(path):
        for entry in dirs + names:
            full = Path(top) / entry
            rel = "./" + str(full.relative_to(path))
            kind = "l" if full.is_symlink() else "d" if full.is_dir() else "f"
            meta.append(f"{kind} {oct(full.lstat().st_mode & 0o7777)[2:]} {rel}")
            if kind == "f":
                sums.append(f"{hashlib.sha256(full.read_bytes()).hexdigest()}  {rel}")
    meta.append(f"d {oct(path.stat().st_mode & 0o7777)[2:]} .")
    return sorted(m for m in meta if _not_status(m)) + sorted(s for s in sums if _not_status(s))


def host_state(lab, fleet: str) -> dict:
    """What fleet.down would remove: the workspace's files, the user, the container, the nft table."""
    ws = f"/srv/jackin/{fleet}/coder-1/workspace"
    return {"files": files(lab, ws),
            "user": sh(lab, f"getent passwd jk-{fleet}--coder-1").stdout,
            "container": sh(lab, f"docker inspect -f '{{{{.Id}}}} {{{{.State.Running}}}}' jk-{fleet}--coder-1").stdout,
            "nft": sh(lab, f"nft list table inet jackin-{fleet} >/dev/null && echo yes", warn=True).stdout}  # fmt: skip


def leftovers(lab, fleet: str) -> dict:
    state = parse_state(sh(lab, state_command(fleet, 0, -1)).stdout.split("\n"))
    return {k: v for k, v in state.model_copy(update={"fleet": fleet}).leftovers.items() if v}


def snapshots(spec: str) -> list[dict]:
    done = inv("snapshot.list", "-i", spec, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_host_whose_final_snapshot_fails_is_not_torn_down(dlab, fleet):
    name, spec = fleet
    ws = f"/srv/jackin/{name}/coder-1/workspace"
    as_agent(dlab, name, f"cd {ws} && mkdir -p src/deep && echo one > a && printf 'two\\n' > src/deep/b && "
                         "head -c 200000 /dev/urandom > blob && chmod 0600 blob && echo x > run.sh && chmod 0755 run.sh")
    # the fault: the repository's path is a file, so restic init (and the snapshot) fails there
    base = f"/var/lib/jackin/snapshots/{name}"
    sh(dlab, f"install -d -m 0700 /var/lib/jackin/snapshots {base} && printf x > {base}/repo")
    before = host_state(dlab, name)
    done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{host_name(dlab)}: not torn down" in done.stderr and "final snapshot failed" in done.stderr
    assert "--no-final-snapshot" in done.stderr
    assert host_state(dlab, name) == before  # nothing of the fleet was removed there
    assert before["nft"].strip() == "yes" and "true" in before["container"]
    assert not [s for s in snapshots(spec) if s["kind"] == "final"]
    # what the next test checks is gone exists now: the fleet's snapshot dir and the uploaded restic
    assert sh(dlab, f"test -d {base} && test -x {binary.UPLOADED_RESTIC} && echo both").stdout.strip() == "both"
    shared["files"] = files(dlab, ws)


def test_down_pulls_a_final_snapshot_that_restores_here_and_leaves_the_host_clean(dlab, fleet, tmp_path):
    name, spec = fleet
    host = host_name(dlab)
    sh(dlab, f"rm -f /var/lib/jackin/snapshots/{name}/repo")  # the fault fixed
    done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab")
    assert done.returncode == 0, done.stdout + done.stderr
    [final] = [s for s in snapshots(spec) if s["kind"] == "final"]  # the ledger keeps it after down
    assert (final["label"], final["agents"], final["hosts"]) == ("final, before fleet.down", ["coder-1"], [host])
    # the pulled copy checks here, is recorded with the snapshot it holds, and restores the same bytes
    repo, password = transfer.pulled_repo(name, host), transfer.fleet_password_file(name)
    binary.verify_local(repo, password)
    with Ledger() as ledger:
        [copy] = ledger.copies(name, origin=host, place="operator")
    assert copy["path"] == str(repo) and final["id"] in copy["snapshots"]
    shown = json.loads(inv("snapshot.show", "-i", spec, final["id"], "--json", check=True).stdout)
    [agent] = shown["agents"]
    subprocess.run([binary.local_restic(), "--repo", str(repo), "--password-file", str(password), "--no-cache",
                    "--quiet", "restore", agent["restic_id"], "--target", str(tmp_path)], check=True)  # fmt: skip
    assert local_files(tmp_path / f"srv/jackin/{name}/coder-1/workspace") == shared["files"]
    # the host: no snapshot dir of the fleet, no uploaded restic (no other fleet), nothing left at all
    gone = sh(dlab, f"ls -d /var/lib/jackin/snapshots/{name} {binary.UPLOADED_RESTIC} 2>&1", warn=True)
    assert gone.failed and gone.stdout.count("No such file or directory") == 2
    assert leftovers(dlab, name) == {}


def test_before_teardown_false_takes_no_final_snapshot(dlab, tmp_path):
    name = f"n{secrets.token_hex(3)}"
    spec = write_spec(dlab, tmp_path, name, "  snapshots: {before_teardown: false}\n")
    assert inv("fleet.up", "-i", spec, "--yes").returncode == 0
    as_agent(dlab, name, f"echo lost > /srv/jackin/{name}/coder-1/workspace/f")
    done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab")
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshots(spec) == []
    assert not transfer.pulled_repo(name, host_name(dlab)).exists()
    assert sh(dlab, f"test -e /var/lib/jackin/snapshots/{name} || echo none").stdout.strip() == "none"
    assert leftovers(dlab, name) == {}


def restore_here(spec: str, fleet: str, host: str, snapshot: str, instance: str, target: Path) -> dict:
    """Restore ``instance`` of ``snapshot`` from the pulled copy of ``host``'s repository into ``target``;
    the agent's entry in snapshot.show (its manifest)."""
    shown = json.loads(inv("snapshot.show", "-i", spec, snapshot, "--json", check=True).stdout)
    [agent] = [a for a in shown["agents"] if a["instance"] == instance]
    repo, password = transfer.pulled_repo(fleet, host), transfer.fleet_password_file(fleet)
    subprocess.run([binary.local_restic(), "--repo", str(repo), "--password-file", str(password), "--no-cache",
                    "--quiet", "restore", agent["restic_id"], "--target", str(target)], check=True)  # fmt: skip
    return agent


def test_a_home_the_spec_and_the_ledger_no_longer_name_is_in_the_final_snapshot(dlab, tmp_path):
    name = f"o{secrets.token_hex(3)}"
    no_auto = "  snapshots: {before_changes: false}\n"
    spec = write_spec(dlab, tmp_path, name, no_auto, agents=CODER + "    - {name: old, role: demo, count: 1}\n")
    try:
        assert inv("fleet.up", "-i", spec, "--yes").returncode == 0
        ws = f"/srv/jackin/{name}/old-1/workspace"
        as_agent(dlab, name, f"cd {ws} && mkdir -p d && echo kept > d/f && head -c 50000 /dev/urandom > blob",
                 instance="old-1")  # fmt: skip
        want, uid = files(dlab, ws), int(sh(dlab, f"id -u jk-{name}--old-1").stdout)
        write_spec(dlab, tmp_path, name, no_auto)  # old dropped; before_changes false: no automatic snapshot
        assert inv("fleet.up", "-i", spec, "--yes").returncode == 0
        with Ledger() as ledger:
            assert [r["instance"] for r in ledger.agents(name)] == ["coder-1"]  # the ledger forgot old-1
        assert files(dlab, ws) == want and snapshots(spec) == []  # its home stayed, no snapshot holds it
        done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab")
        assert done.returncode == 0, done.stdout + done.stderr
        [final] = [s for s in snapshots(spec) if s["kind"] == "final"]
        assert sorted(final["agents"]) == ["coder-1", "old-1"]
        agent = restore_here(spec, name, host_name(dlab), final["id"], "old-1", tmp_path / "r")
        assert (agent["manifest"]["uid"], agent["manifest"]["user"]) == (uid, f"jk-{name}--old-1")
        assert local_files(tmp_path / f"r/srv/jackin/{name}/old-1/workspace") == want
        assert leftovers(dlab, name) == {}
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")
        shutil.rmtree(state_dir() / "snapshots" / name, ignore_errors=True)


def test_no_final_snapshot_still_pulls_the_hosts_earlier_snapshots(dlab, tmp_path):
    name = f"m{secrets.token_hex(3)}"
    spec = write_spec(dlab, tmp_path, name)
    try:
        assert inv("fleet.up", "-i", spec, "--yes").returncode == 0
        ws = f"/srv/jackin/{name}/coder-1/workspace"
        as_agent(dlab, name, f"cd {ws} && echo manual > m && head -c 30000 /dev/urandom > blob")
        want = files(dlab, ws)
        created = json.loads(inv("snapshot.create", "-i", spec, "--json", check=True).stdout)["snapshot"]
        as_agent(dlab, name, f"echo later > {ws}/later")  # not snapshotted: lost with --no-final-snapshot
        host = host_name(dlab)
        assert not transfer.pulled_repo(name, host).exists()  # control: nothing pulled yet
        done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--no-final-snapshot")
        assert done.returncode == 0, done.stdout + done.stderr
        assert [(s["id"], s["kind"]) for s in snapshots(spec)] == [(created["id"], "manual")]  # no final one
        with Ledger() as ledger:
            [copy] = ledger.copies(name, origin=host, place="operator")
        assert created["id"] in copy["snapshots"]
        binary.verify_local(transfer.pulled_repo(name, host), transfer.fleet_password_file(name))
        restore_here(spec, name, host, created["id"], "coder-1", tmp_path / "r")
        assert local_files(tmp_path / f"r/srv/jackin/{name}/coder-1/workspace") == want
        assert leftovers(dlab, name) == {}
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")
        shutil.rmtree(state_dir() / "snapshots" / name, ignore_errors=True)


def test_discard_snapshots_pulls_nothing_and_the_ledger_forgets_what_was_lost(dlab, tmp_path):
    name = f"x{secrets.token_hex(3)}"
    spec = write_spec(dlab, tmp_path, name)
    try:
        assert inv("fleet.up", "-i", spec, "--yes").returncode == 0
        created = json.loads(inv("snapshot.create", "-i", spec, "--json", check=True).stdout)["snapshot"]
        assert [s["id"] for s in snapshots(spec)] == [created["id"]]  # control: listed while it exists
        host = host_name(dlab)
        done = inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{host}: snapshots discarded with the host" in done.stdout and created["id"] in done.stdout
        assert snapshots(spec) == [] and not transfer.pulled_repo(name, host).exists()
        assert leftovers(dlab, name) == {}
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")
        shutil.rmtree(state_dir() / "snapshots" / name, ignore_errors=True)
