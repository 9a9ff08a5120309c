"""Nothing kept is destroyed by another command, on real lab hosts.

- data ``fleet.down --keep-data`` kept survives ``fleet.gc`` (listed as kept) until
  ``fleet.gc --purge-kept``;
- two fleets share one lab: neither's ``up`` resizes it, the first ``down`` leaves
  it, the last one's ``down`` removes it;
- ``fleet.up --dry-run`` leaves the ledger byte-identical and the hosts unchanged;
- a lab whose hosts were remade from another state dir is repaired by ``lab.up``.

Everything runs in a state dir of its own, so other runs' ledgers never interfere.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.store.ledger import Ledger
from jackin.transport.ssh import connect

from .conftest import _engine_or_skip, inv, new_lab_name

# Not the agents' .jackin (ls -I): their entrypoint rewrites its heartbeat every 5 s while they run.
HOST_STATE = ("getent passwd | grep jackin/ || true; ls -laR -I .jackin /srv/jackin 2>/dev/null | grep -v '^total'; "
              "ls -l /var/lib/jackin 2>/dev/null; docker ps -a --format '{{.ID}} {{.Names}} {{.State}}'; "
              "docker network ls -q; nft list tables")  # fmt: skip


@pytest.fixture(scope="module")
def state():
    """A private JACKIN_STATE_DIR for the module (the inv subprocesses inherit it)."""
    _engine_or_skip()
    saved = os.environ.get("JACKIN_STATE_DIR")
    with tempfile.TemporaryDirectory(prefix="jackin-own-") as path:
        os.environ["JACKIN_STATE_DIR"] = path
        try:
            yield Path(path)
        finally:
            if saved is None:
                os.environ.pop("JACKIN_STATE_DIR", None)
            else:
                os.environ["JACKIN_STATE_DIR"] = saved


@pytest.fixture(scope="module")
def olab(state):
    lab = Lab(new_lab_name("o"))
    try:
        lab.up(1)
        yield lab
    finally:
        lab.down()


def write(tmp_path, fleet: str, lab: str, hosts: int = 1) -> str:
    path = tmp_path / f"{fleet}.yaml"
    path.write_text(f"fleet:\n  name: {fleet}\n  provider: lab\n  lab: {{name: {lab}, hosts: {hosts}}}\n"
                    "  agents:\n    - {name: coder, role: demo, placement: each}\n  network: {mode: none}\n")  # fmt: skip
    return str(path)


def sh(lab: Lab, command: str, index: int = 0) -> str:
    with connect(lab.status().hosts[index].target()) as conn:
        return conn.run(command, hide=True).stdout


def container_id(name: str) -> str:
    return dk.docker("inspect", "-f", "{{.Id}}", name).strip()


def status_of(fleet: str) -> str | None:
    with Ledger() as ledger:
        return (ledger.fleet(fleet) or {}).get("status")


def test_gc_lists_kept_data_and_removes_it_only_when_asked(olab, tmp_path):
    kept, ghost = f"k{secrets.token_hex(3)}", f"g{secrets.token_hex(3)}"
    for fleet in (kept, ghost):
        inv("fleet.up", "-i", write(tmp_path, fleet, olab.name), "--yes", check=True)
    workspace = f"/srv/jackin/{kept}/coder-1/workspace"
    sh(olab, f"docker exec jk-{kept}--coder-1 sh -c 'echo precious > /workspace/notes.txt'")
    inv("fleet.down", "-i", write(tmp_path, kept, olab.name), "--yes", "--keep-data", check=True)
    with Ledger() as ledger:
        ledger.forget_fleet(ghost)  # a fleet whose operator state was lost: a real leftover
        assert ledger.fleet(kept)["status"] == "kept"  # type: ignore[index]
        assert [(k["host"], k["what"]) for k in ledger.kept(kept)] == [(f"{olab.name}-1", ["homes", "workspaces", "uids"])]
    before = sh(olab, f"ls -ln {workspace}; cat {workspace}/notes.txt")

    done = inv("fleet.gc", "-i", write(tmp_path, ghost, olab.name), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"fleet '{kept}': data kept by fleet.down --keep-data on {olab.name}-1: left alone" in done.stdout
    assert f"fleet '{ghost}': leftovers on {olab.name}-1" in done.stdout
    assert sh(olab, f"ls -ln {workspace}; cat {workspace}/notes.txt") == before  # kept, byte for byte
    assert sh(olab, f"ls /srv/jackin; getent passwd | grep -c 'jackin/{ghost}/' || true").split() == [kept, "0"]  # control
    assert status_of(kept) == "kept"

    done = inv("fleet.gc", "-i", write(tmp_path, ghost, olab.name), "--yes", "--purge-kept")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"fleet '{kept}': data kept by fleet.down --keep-data on {olab.name}-1: removing it (--purge-kept)" in done.stdout
    assert sh(olab, "ls /srv/jackin 2>/dev/null || true").strip() == ""
    with Ledger() as ledger:
        assert (ledger.fleet(kept)["status"], ledger.kept(kept), ledger.uids(kept)) == ("down", [], {})  # type: ignore[index]


def test_dry_run_changes_nothing_not_even_the_ledger(olab, state, tmp_path):
    real, dry = f"r{secrets.token_hex(3)}", f"d{secrets.token_hex(3)}"
    inv("fleet.up", "-i", write(tmp_path, real, olab.name), "--yes", check=True)  # a ledger with content
    ledger_file = state / "ledger.sqlite3"
    digest = lambda: hashlib.sha256(ledger_file.read_bytes()).hexdigest()  # noqa: E731
    before, host_before = digest(), sh(olab, HOST_STATE)
    try:
        done = inv("fleet.up", "-i", write(tmp_path, dry, olab.name), "--dry-run", "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["run"]["hosts"][0]["changed"] > 0  # control: the dry run did plan changes
        assert result["plan"]["agents"][0]["uid"] >= 60000  # ... with a previewed uid
        assert digest() == before
        assert sh(olab, HOST_STATE) == host_before
        with Ledger() as ledger:
            assert (ledger.fleet(dry), ledger.uids(dry), ledger.runs(dry)) == (None, {}, [])
        assert digest() == before  # reading it changes nothing either
    finally:
        inv("fleet.down", "-i", write(tmp_path, real, olab.name), "--yes", "--keep-lab", "--no-final-snapshot")


def test_two_fleets_share_a_lab_and_the_last_one_out_removes_it(state, tmp_path):
    lab = Lab(new_lab_name("s"))
    alpha, beta = f"a{secrets.token_hex(3)}", f"b{secrets.token_hex(3)}"
    try:
        inv("fleet.up", "-i", write(tmp_path, alpha, lab.name, hosts=2), "--yes", check=True)  # creates the lab
        ids = lambda: {h.name: (h.state, container_id(h.container)) for h in lab.status().hosts}  # noqa: E731
        before = ids()
        inv("fleet.up", "-i", write(tmp_path, beta, lab.name, hosts=1), "--yes", check=True)
        assert ids() == before and len(before) == 2  # neither shrunk nor a host replaced
        with Ledger() as ledger:
            record = ledger.lab(lab.name)
            assert record is not None and (record["created_by"], record["users"]) == (alpha, sorted([alpha, beta]))

        done = inv("fleet.down", "-i", write(tmp_path, alpha, lab.name, hosts=2), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"lab '{lab.name}' kept: still used by fleet(s) {beta}" in done.stdout
        assert [h.state for h in lab.status().hosts] == ["running", "running"]
        assert f"jk-{beta}--coder-1" in sh(lab, "docker ps --format '{{.Names}}'")  # beta's agent untouched

        done = inv("fleet.down", "-i", write(tmp_path, beta, lab.name, hosts=1), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "destroyed" in done.stdout
        assert lab.leftovers() == {"containers": [], "volumes": [], "networks": [], "files": []}
        with Ledger() as ledger:
            assert ledger.lab(lab.name) is None
    finally:
        lab.down()


def test_a_lab_remade_from_another_state_dir_is_repaired_by_lab_up(state, tmp_path):
    name = new_lab_name("r")
    mine, other = Lab(name, root=state), Lab(name, root=tmp_path / "other-state")
    try:
        mine.up(1)
        logged: list[str] = []
        other.up(1, log=logged.append)  # same lab name, another state dir: its hosts are replaced with its keys
        assert any("replacing (its host key is missing on this machine)" in line for line in logged)
        with connect(other.status().hosts[0].target()) as conn:
            assert conn.run("hostname", hide=True).stdout.strip() == f"{name}-1"

        container = mine.status().hosts[0]
        assert not container.pinned  # this machine's pins no longer match the running host
        logged.clear()
        mine.up(1, log=logged.append)
        assert any("replacing (it presents a host key other than the one pinned" in line for line in logged)
        repaired = mine.status().hosts[0]
        assert repaired.pinned and repaired.state == "running"
        with connect(repaired.target()) as conn:  # SSH with this state dir's pins and key
            assert conn.run("hostname", hide=True).stdout.strip() == f"{name}-1"
        assert not other.status().hosts[0].pinned  # and the other state dir now sees the mismatch
    finally:
        mine.down()
        shutil.rmtree(tmp_path / "other-state", ignore_errors=True)
