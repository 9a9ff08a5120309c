"""Both snapshot tiers as one feature, through the CLI on a real lab host: ``snapshot.create`` takes
the btrfs checkpoint and the restic backup under one id, ``snapshot.restore`` uses the checkpoint
while it exists and restic after, the restic restore on a btrfs home swaps by rename, the
pre-restore snapshot undoes a restore, and ``snapshot.prune`` deletes the checkpoints it forgets.

One 1-host lab and one fleet (``snapshots: {checkpoints: btrfs, keep: 2}``, one agent) for the
module; the tests run in file order on it and share ``STATE`` (the ids and listings they made).
"""

from __future__ import annotations

import io
import json
import secrets
import shlex
import time

import pytest

from jackin.lab import Lab
from jackin.store.ledger import Ledger
from jackin.operations import agent_paths
from jackin.snapshots import api, cow
from jackin.snapshots import host as remote
from jackin.transport.channel import pump
from jackin.transport.ssh import connect

from .conftest import inv, module_lab, sh

STATE: dict[str, object] = {}
POPULATE = ("mkdir -p src/deep && echo one > a && printf 'two\\n' > src/deep/b && head -c 200000 /dev/urandom > blob && "
            "chmod 0600 blob && echo x > run.sh && chmod 0755 run.sh && ln -s /etc link && ln -s src/deep/b rel && "
            "touch -d '2001-02-03 04:05:06' a && printf 'nl' > \"$(printf 'new\\nline')\"")  # fmt: skip
# delete, modify, chmod, replace a file with a symlink (to a root file), turn a link into a directory
DAMAGE = ("rm a && echo changed >> src/deep/b && chmod 0644 blob && chmod 0700 src && rm run.sh && "
          "ln -s /etc/shadow run.sh && rm -f link && mkdir link && echo new > fresh")  # fmt: skip


@pytest.fixture(scope="module")
def tlab():
    yield from module_lab("k", 1, shared=True)


@pytest.fixture(scope="module")
def fleet(tlab, tmp_path_factory):
    """(name, spec path) of a fleet with the checkpoint tier, one agent, keep 2, up on the lab's host."""
    name = f"k{secrets.token_hex(3)}"
    spec = tmp_path_factory.mktemp("tiers") / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {tlab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
  snapshots: {{checkpoints: btrfs, checkpoint_size: 1g, keep: 2}}
""")
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield name, str(spec)
    finally:  # a cleanup: the final snapshot and pull are proven in test_final_pull, not here
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")



def as_agent(lab: Lab, name: str, script: str) -> None:
    """``script`` in the workspace, as the agent (its uid and gid only): what the agent itself could do."""
    uid = int(sh(lab, f"id -u jk-{name}--coder-1").stdout)
    sh(lab, agent_paths.as_agent(uid, uid, "sh", "-c", f"cd {ws(name)} && {script}"))


def ws(name: str) -> str:
    return f"/srv/jackin/{name}/coder-1/workspace"


def listing(lab: Lab, path: str) -> list[str]:
    """Every path under ``path``: type, mode, uid, gid, mtime (ns), size, name and link target; then every
    file's sha256. NUL-separated, so names with newlines are read right."""
    meta = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -printf '%y %m %U %G %T@ %s %p\\0%l\\0'").stdout.split("\0")
    sums = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -type f -print0 | xargs -0r sha256sum -z").stdout.split("\0")
    return sorted(f"{m} -> {link}" for m, link in zip(meta[0::2], meta[1::2])) + sorted(x for x in sums if x)


def checkpoints(lab: Lab, name: str) -> list[str]:
    with connect(lab.status().hosts[0].target()) as conn:
        return [c.snapshot_id for c in cow.list_checkpoints(conn, name, "coder-1")]


def snapshots(spec: str) -> list[dict]:
    done = inv("snapshot.list", "-i", spec, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def restore(spec: str, sid: str, *args: str):
    return inv("snapshot.restore", "-i", spec, sid, "--yes", *args)


def last_restore_audit(name: str) -> dict:
    with Ledger() as ledger:
        rows = [r for r in ledger.audit_trail(name) if r["action"] == "snapshot.restore" and r["detail"]]
    return json.loads(rows[-1]["detail"])


def started(lab: Lab, name: str) -> str:
    return sh(lab, f"docker inspect -f '{{{{.State.Running}}}} {{{{.State.StartedAt}}}}' jk-{name}--coder-1").stdout


def test_create_takes_the_checkpoint_and_the_restic_backup_under_one_id(tlab, fleet):
    name, spec = fleet
    as_agent(tlab, name, POPULATE)
    running = started(tlab, name)
    done = inv("snapshot.create", "-i", spec, "--json", "--label", "tiers")
    assert done.returncode == 0, done.stdout + done.stderr
    taken = json.loads(done.stdout)["snapshot"]
    [agent] = taken["agents"]
    assert agent["tiers"] == ["checkpoint", "restic"] and agent["manifest"]["tiers"] == ["checkpoint", "restic"]
    assert agent["restic_id"]
    assert started(tlab, name) == running and running.startswith("true")  # the agent ran on throughout
    assert checkpoints(tlab, name) == [taken["id"]]
    path = cow.checkpoint_path(name, "coder-1", taken["id"])
    assert sh(tlab, f"btrfs property get -ts {path} ro").stdout.strip() == "ro=true"
    assert listing(tlab, f"{path}/workspace") == listing(tlab, ws(name))
    tags = sh(tlab, f"cat /var/lib/jackin/snapshots/{name}/manifests/coder-1.json").stdout
    assert json.loads(tags)["tiers"] == ["checkpoint", "restic"]  # the manifest restic keeps says so too
    [row] = snapshots(spec)
    assert (row["id"], row["tiers"]) == (taken["id"], ["checkpoint", "restic"])
    show = inv("snapshot.show", "-i", spec, taken["id"])
    assert show.returncode == 0 and "checkpoint+restic" in show.stdout, show.stdout
    STATE.update(first=taken["id"], restic_id=agent["restic_id"], before=listing(tlab, ws(name)))


def test_restore_uses_the_checkpoint_and_puts_back_bytes_modes_owners_and_links(tlab, fleet):
    name, spec = fleet
    etc = sh(tlab, "stat -c '%a %u %g %Y' /etc/shadow /etc/passwd").stdout
    as_agent(tlab, name, DAMAGE)
    damaged = listing(tlab, ws(name))
    assert damaged != STATE["before"]
    count = len(snapshots(spec))
    refused = restore(spec, STATE["first"])  # the agent runs: refused on this tier too
    assert refused.returncode == 1 and "restore refused" in refused.stderr, refused.stdout + refused.stderr
    assert listing(tlab, ws(name)) == damaged and len(snapshots(spec)) == count  # nothing changed, nothing taken
    done = restore(spec, STATE["first"], "--stop")  # positive control
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(tlab, ws(name)) == STATE["before"]
    assert sh(tlab, "stat -c '%a %u %g %Y' /etc/shadow /etc/passwd").stdout == etc  # the planted link led nowhere
    audit = last_restore_audit(name)
    assert (audit["tier"], audit["snapshot"], audit["error"]) == ("checkpoint", STATE["first"], None)
    assert "checkpoint" in done.stdout
    pre = snapshots(spec)[-1]
    assert (pre["kind"], pre["id"], pre["tiers"]) == ("pre-restore", audit["pre_restore"], ["checkpoint", "restic"])
    assert started(tlab, name).startswith("true")  # started again
    assert sh(tlab, f"ls -A /srv/jackin/{name}/.checkpoints/.swap/coder-1").stdout == ""  # the old home is gone
    STATE.update(damaged=damaged, pre1=pre["id"])


def test_without_its_checkpoint_restore_falls_back_to_restic_on_the_btrfs_home(tlab, fleet):
    name, spec = fleet
    with connect(tlab.status().hosts[0].target()) as conn:
        assert cow.delete_checkpoint(conn, name, "coder-1", STATE["first"])
    assert STATE["first"] not in checkpoints(tlab, name)
    as_agent(tlab, name, DAMAGE)
    damaged = listing(tlab, ws(name))
    done = restore(spec, STATE["first"], "--stop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(tlab, ws(name)) == STATE["before"]
    audit = last_restore_audit(name)
    assert (audit["tier"], audit["error"]) == ("restic", None)
    assert f"checkpoint {STATE['first']} of coder-1 is no longer on" in audit["note"]
    assert sh(tlab, f"ls -A /srv/jackin/{name}/coder-1").stdout.split() == ["workspace"]  # no staging left
    with connect(tlab.status().hosts[0].target()) as conn:
        assert cow.supported(conn, name, "coder-1")  # the home is still a subvolume
    STATE.update(damaged2=damaged, pre2=audit["pre_restore"])


def test_a_restic_restore_on_a_btrfs_home_stages_inside_it_and_swaps_by_rename(tlab, fleet):
    """The restore script is held at ``staged``: the staged tree is inside the home's subvolume, root-only;
    after the swap the workspace is that very directory (same device and inode: renamed, not copied)."""
    name, _ = fleet
    home, fleet_dir = f"/srv/jackin/{name}/coder-1", f"/srv/jackin/{name}"
    stage = remote.in_home_staging(name, "coder-1")
    # control: the plain staging dir beside the homes is another subvolume (a rename from it fails with EXDEV)
    assert sh(tlab, f"stat -c %d {home}").stdout != sh(tlab, f"stat -c %d {fleet_dir}").stdout
    sh(tlab, f"docker stop -t 2 jk-{name}--coder-1")
    try:
        with connect(tlab.status().hosts[0].target()) as conn:
            restic_bin = api.prepare(conn, name, host="lab")
            script = remote.restore_script(restic_bin, name, "coder-1", STATE["restic_id"])
            channel = conn.client.get_transport().open_session()
            channel.exec_command("bash -c " + shlex.quote(script))
            out, err = io.BytesIO(), io.BytesIO()
            held = pump(channel, out=out.write, err=err.write, until=lambda: b"staged\n" in out.getvalue(),
                        deadline=time.monotonic() + 300)  # fmt: skip
            assert held == "until", err.getvalue()
            staged = sh(tlab, f"stat -c '%d %i' {stage}/tree{ws(name)}").stdout
            home_dev, stage_dev, mode = sh(tlab, f"stat -c %d {home} {stage}; stat -c '%a %U %G' {stage}").stdout.split("\n")[:3]
            assert stage_dev == home_dev and mode == "700 root root"
            channel.sendall(b"swap\n")
            channel.shutdown_write()
            pump(channel, out=out.write, err=err.write, deadline=time.monotonic() + 300)
            assert channel.recv_exit_status() == 0, err.getvalue()
            assert b"done\n" in out.getvalue()
    finally:
        sh(tlab, f"docker start jk-{name}--coder-1", warn=True)
    assert sh(tlab, f"stat -c '%d %i' {ws(name)}").stdout == staged
    assert listing(tlab, ws(name)) == STATE["before"]
    assert sh(tlab, f"ls -A {home}").stdout.split() == ["workspace"]


def test_a_subvolume_the_agent_made_is_kept_aside_and_the_next_restic_restore_works(tlab, fleet):
    """Any user may create a btrfs subvolume: rm cannot empty the staging dir that holds the old workspace
    then, so it is renamed aside (root-only); without that, every later restic restore would stop."""
    name, spec = fleet
    home = f"/srv/jackin/{name}/coder-1"
    as_agent(tlab, name, "btrfs subvolume create nested >/dev/null && echo inner > nested/f")
    for _ in range(2):
        done = restore(spec, STATE["first"], "--stop")
        assert done.returncode == 0, done.stdout + done.stderr
        assert last_restore_audit(name)["tier"] == "restic" and listing(tlab, ws(name)) == STATE["before"]
    [kept, workspace] = sh(tlab, f"ls -A {home}").stdout.split()
    assert workspace == "workspace" and kept.startswith(".restore.kept-")
    assert sh(tlab, f"stat -c '%a %U %G' {home}/{kept}; cat {home}/{kept}/old/nested/f").stdout.split() == [
        "700", "root", "root", "inner"]  # fmt: skip


def test_restoring_the_pre_restore_snapshot_undoes_the_restore(tlab, fleet):
    name, spec = fleet
    done = restore(spec, STATE["pre2"], "--stop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(tlab, ws(name)) == STATE["damaged2"]
    assert last_restore_audit(name)["tier"] == "checkpoint"


def test_prune_deletes_the_checkpoints_of_the_snapshots_it_forgets(tlab, fleet):
    name, spec = fleet
    ids = [s["id"] for s in snapshots(spec)]
    assert ids[:3] == [STATE["first"], STATE["pre1"], STATE["pre2"]] and len(ids) == 6
    assert [s["kind"] for s in snapshots(spec)] == ["manual"] + ["pre-restore"] * 5
    there = checkpoints(tlab, name)
    assert there == ids[1:]  # the first one's checkpoint was deleted above
    done = inv("snapshot.prune", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    # retention is per agent and kind (keep 2): the one manual snapshot stays, and the newest two of the
    # five pre-restore ones; the three older pre-restore snapshots go, with their checkpoints
    assert (result["removed"], result["checkpoints"]) == (ids[1:4], 3)
    assert checkpoints(tlab, name) == ids[4:]  # the kept snapshots keep theirs (control)
    assert [s["id"] for s in snapshots(spec)] == [ids[0], *ids[4:]]
    restic = sh(tlab, f"ls /var/lib/jackin/snapshots/{name}/repo/snapshots | wc -l").stdout.strip()
    assert int(restic) == 3
