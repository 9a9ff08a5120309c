"""Snapshots on a real lab host: the restic tier end to end, over real SSH, through the CLI.

One 1-host lab and one fleet of two small agents for the module; the tests run in
file order and share the fleet (each leaves the workspaces as it found them or says so).
The lab host has no restic: the first snapshot uploads the operator's. Workspace
contents are planted as the agent (``setpriv``); listings are taken as root, NUL-safe:
type, mode, owner, group, mtime (ns), size, link target and content hash of every path.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import threading
import time

import pytest

from jackin.lab import Lab
from jackin.operations import agent_paths
from jackin.snapshots import repokey

from .conftest import inv, module_lab, sh

script_fleet: list[str] = []  # the module's fleet name, for as_agent
# While a restic restore runs: kill -9 the sshd session process above it (the first ancestor named sshd).
KILL_RESTORE_SESSION = """for p in $(pgrep -x restic); do
  if tr '\\0' ' ' < /proc/$p/cmdline | grep -q ' restore '; then
    s=$p
    while [ "$s" -gt 1 ] && [ "$(cat /proc/$s/comm)" != sshd ]; do s=$(ps -o ppid= -p $s | tr -d ' '); done
    [ "$s" -gt 1 ] && kill -9 $s && echo $s
    exit 0
  fi
done"""


@pytest.fixture(scope="module")
def slab():
    yield from module_lab("s", 1, shared=True)


@pytest.fixture(scope="module")
def fleet(slab, tmp_path_factory):
    name = f"s{secrets.token_hex(3)}"
    spec = tmp_path_factory.mktemp("snap") / f"{name}.yaml"
    script_fleet[:] = [name]
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {slab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo, count: 2}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
  snapshots: {{keep: 3}}
""")
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield name, str(spec)
    finally:  # a cleanup: the final snapshot and pull are proven in test_final_pull, not here
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")



def as_agent(lab: Lab, script: str, instance: str = "coder-1") -> None:
    """``script`` on the host as the agent (its uid and gid only): what the agent itself could do."""
    fleet = script_fleet[0]
    uid = int(sh(lab, f"id -u jk-{fleet}--{instance}").stdout)
    sh(lab, agent_paths.as_agent(uid, uid, "sh", "-c", script))


def ws(name: str, instance: str = "coder-1") -> str:
    return f"/srv/jackin/{name}/{instance}/workspace"


def listing(lab: Lab, path: str) -> list[str]:
    """Every path under ``path``: type, mode, uid, gid, mtime (ns), size, name and link target; then
    every file's sha256. NUL-separated, so names with newlines are read right."""
    meta = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -printf '%y %m %U %G %T@ %s %p\\0%l\\0'").stdout.split("\0")
    sums = sh(lab, f"cd {path} && find . -path ./.jackin -prune -o -type f -print0 | xargs -0r sha256sum -z").stdout.split("\0")
    return sorted(f"{m} -> {link}" for m, link in zip(meta[0::2], meta[1::2])) + sorted(x for x in sums if x)


def snap(spec: str, *args: str) -> dict:
    done = inv("snapshot.create", "-i", spec, "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["snapshot"]


def snapshots(spec: str) -> list[dict]:
    done = inv("snapshot.list", "-i", spec, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def restore(spec: str, sid: str, *args: str):
    return inv("snapshot.restore", "-i", spec, sid, "--yes", *args)


def etc_state(lab: Lab) -> str:
    return sh(lab, "stat -c '%a %u %g %Y' /etc /etc/passwd && sha256sum /etc/passwd && ls -a /etc | sha256sum").stdout


def test_round_trip_restores_bytes_modes_owners_links_and_mtimes(slab, fleet):
    name, spec = fleet
    w = ws(name)
    as_agent(slab, f"cd {w} && mkdir -p src/deep && echo one > a && printf 'two\\n' > src/deep/b && "
                   "head -c 100000 /dev/urandom > blob && chmod 0600 blob && echo x > run.sh && chmod 0755 run.sh && "
                   "ln -s /etc link && ln -s src/deep/b rel && touch -d '2001-02-03 04:05:06' a && "
                   "printf 'nl' > \"$(printf 'new\\nline')\"")  # fmt: skip
    before, etc = listing(slab, w), etc_state(slab)
    taken = snap(spec, "--label", "round trip")
    assert {a["instance"] for a in taken["agents"]} == {"coder-1", "coder-2"}
    # restic reached the host by SFTP (the lab image has none): the operator's own binary
    local = hashlib.sha256(open(shutil.which("restic"), "rb").read()).hexdigest()  # noqa: SIM115
    assert sh(slab, "stat -c '%a %U' /usr/local/lib/jackin/restic; sha256sum /usr/local/lib/jackin/restic"
              ).stdout.split()[:3] == ["755", "root", local]  # fmt: skip
    # the repository and its password are root's alone, and out of the agent's reach
    base = f"/var/lib/jackin/snapshots/{name}"
    assert sh(slab, f"stat -c '%a %U' {base} {base}/password {base}/repo").stdout.split() == [
        "700", "root", "600", "root", "700", "root"]
    uid = int(sh(slab, f"id -u jk-{name}--coder-1").stdout)
    peek = sh(slab, agent_paths.as_agent(uid, uid, "cat", f"{base}/password"), warn=True)
    assert peek.failed and "Permission denied" in peek.stderr
    # its one key is sealed with cheap scrypt parameters (jackin.snapshots.repokey), restic's 0400 kept;
    # every restic command below and in this module opens the repository with it
    key = sh(slab, f"stat -c '%a %U' {base}/repo/keys/*; cat {base}/repo/keys/*").stdout.split("\n", 1)
    assert key[0].split() == ["400", "root"]
    assert {k: json.loads(key[1])[k] for k in ("N", "r", "p")} == repokey.CHEAP
    # damage: delete, modify, change modes, replace a file with a symlink, plant a link to /etc
    as_agent(slab, f"cd {w} && rm a && echo changed >> src/deep/b && chmod 0644 blob && chmod 0700 src && "
                   "rm run.sh && ln -s /etc/shadow run.sh && ln -s /etc escape && rm -f link && mkdir link")  # fmt: skip
    damaged = listing(slab, w)
    assert damaged != before
    done = restore(spec, taken["id"], "--agent", "coder-1", "--stop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(slab, w) == before
    assert etc_state(slab) == etc  # the planted links led root nowhere
    assert sh(slab, f"ls -A /srv/jackin/{name}/.restore").stdout == ""  # the staging dir was removed
    # the pre-restore snapshot exists and restores back the damaged state
    pre = [s for s in snapshots(spec) if s["kind"] == "pre-restore"][-1]
    assert pre["agents"] == ["coder-1"] and pre["label"] == f"before restoring {taken['id']}"
    done = restore(spec, pre["id"], "--stop")
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(slab, w) == damaged
    assert etc_state(slab) == etc
    assert restore(spec, taken["id"], "--agent", "coder-1", "--stop").returncode == 0
    assert listing(slab, w) == before


def test_a_sparse_file_comes_back_sparse_and_a_restore_without_room_is_refused(slab, fleet, tmp_path):
    name, spec = fleet
    w = ws(name)
    as_agent(slab, f"mkdir -p {w}/sparse && truncate -s 64M {w}/sparse/disk.img && echo tail >> {w}/sparse/disk.img")
    allocated = f"stat -c '%s %b %B' {w}/sparse/disk.img"
    size, blocks, unit = (int(n) for n in sh(slab, allocated).stdout.split())
    assert size == 64 * 2**20 + 5 and blocks * unit < 2**20  # sparse in the workspace
    taken = snap(spec, "--agent", "coder-1")
    restic_id = taken["agents"][0]["restic_id"]
    # Control: this restic (0.14, no restore --sparse) writes the holes as zeros
    base = f"/var/lib/jackin/snapshots/{name}"
    plain = sh(slab, f"R=$(command -v restic || echo /usr/local/lib/jackin/restic); d=$(mktemp -d); "
                     f"$R --repo {base}/repo --password-file {base}/password --no-cache -q restore {restic_id} "
                     f"--target $d --include {w}/sparse && stat -c '%b %B' $d{w}/sparse/disk.img; rm -rf $d").stdout.split()
    assert int(plain[0]) * int(plain[1]) >= 64 * 2**20
    as_agent(slab, f"echo changed > {w}/sparse/disk.img")
    before = listing(slab, w)
    # A restore that would leave less than snapshots.min_free is refused, the workspace untouched
    tight = tmp_path / f"{name}.yaml"
    tight.write_text(open(spec).read().replace("snapshots: {keep: 3}", "snapshots: {keep: 3, min_free: 100t}"))
    count = len(snapshots(spec))
    started = f"docker inspect -f '{{{{.State.Running}}}} {{{{.State.StartedAt}}}}' jk-{name}--coder-1"
    running = sh(slab, started).stdout
    refused = restore(str(tight), taken["id"], "--agent", "coder-1", "--stop")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    # the first gate: its pre-restore snapshot would not fit either (the restore's own size check, restic
    # stats against df, is run here with stand-ins: tests/unit/test_snapshot_host.py)
    assert "refused before anything changed" in said and "snapshots.min_free" in said, said
    assert "the pre-restore snapshot: coder-1: no restic snapshot" in said, said
    assert listing(slab, w) == before
    assert len(snapshots(spec)) == count  # refused before its pre-restore snapshot, too
    assert sh(slab, started).stdout == running  # and before --stop stopped the agent
    # With room, the file comes back whole, and sparse again
    done = restore(spec, taken["id"], "--agent", "coder-1", "--stop")
    assert done.returncode == 0, done.stdout + done.stderr
    size, blocks, unit = (int(n) for n in sh(slab, allocated).stdout.split())
    assert size == 64 * 2**20 + 5 and blocks * unit < 2**20
    assert sh(slab, f"cmp -n {64 * 2**20} {w}/sparse/disk.img /dev/zero && tail -c 5 {w}/sparse/disk.img").stdout == "tail\n"
    as_agent(slab, f"rm -rf {w}/sparse")


def test_restore_is_refused_while_the_agent_runs_and_works_with_stop(slab, fleet):
    name, spec = fleet
    w, c = ws(name, "coder-2"), f"jk-{name}--coder-2"
    as_agent(slab, f"echo kept > {w}/k", "coder-2")
    taken = snap(spec, "--agent", "coder-2")
    assert [a["instance"] for a in taken["agents"]] == ["coder-2"]
    as_agent(slab, f"echo gone > {w}/k", "coder-2")
    before = listing(slab, w)
    count = len(snapshots(spec))
    refused = restore(spec, taken["id"], "--agent", "coder-2")
    assert refused.returncode == 1 and "restore refused" in refused.stderr and "--stop" in refused.stderr
    assert listing(slab, w) == before and len(snapshots(spec)) == count  # nothing changed, nothing taken
    no_tty = inv("snapshot.restore", "-i", spec, taken["id"], "--agent", "coder-2", "--stop")
    assert no_tty.returncode == 2 and "--yes" in no_tty.stderr
    assert listing(slab, w) == before
    done = restore(spec, taken["id"], "--agent", "coder-2", "--stop")  # positive control
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(slab, f"cat {w}/k").stdout == "kept\n"
    assert sh(slab, f"docker inspect -f '{{{{.State.Running}}}}' {c}").stdout.strip() == "true"


def test_diff_against_live_and_another_snapshot(slab, fleet):
    name, spec = fleet
    w = ws(name)
    first = snap(spec, "--agent", "coder-1")
    as_agent(slab, f"cd {w} && echo n > added && rm -f src/deep/b && echo m >> blob")
    done = inv("snapshot.diff", "-i", spec, first["id"], "--agent", "coder-1", "--json")
    assert done.returncode == 0, done.stderr
    [agent] = json.loads(done.stdout)["agents"]
    assert (agent["added"], agent["removed"]) == (["workspace/added"], ["workspace/src/deep/b"])
    assert "workspace/blob" in agent["changed"]
    second = snap(spec, "--agent", "coder-1")
    done = inv("snapshot.diff", "-i", spec, first["id"], "--other", second["id"], "--json")
    assert json.loads(done.stdout)["agents"][0]["added"] == ["workspace/added"]
    restic_tmp = sh(slab, f"ls /var/lib/jackin/snapshots/{name}/repo/snapshots | wc -l").stdout.strip()
    assert int(restic_tmp) == sum(len(s["agents"]) for s in snapshots(spec))  # the live diff's temporary snapshot is gone
    assert restore(spec, first["id"], "--agent", "coder-1", "--stop").returncode == 0


def test_diff_on_a_host_without_the_fleets_repository_is_refused_and_creates_nothing(slab, fleet):
    name, spec = fleet
    base = f"/var/lib/jackin/snapshots/{name}"
    sid = snap(spec, "--agent", "coder-1")["id"]
    sh(slab, f"mv {base} {base}.aside")  # as after a teardown that removed the repository
    try:
        done = inv("snapshot.diff", "-i", spec, sid, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"fleet {name!r} has no snapshot repository on" in done.stdout + done.stderr
        assert sh(slab, f"test -e {base} && echo there || echo absent").stdout.strip() == "absent"  # no password, no repo
    finally:
        sh(slab, f"rm -rf {base} && mv {base}.aside {base}")
    done = inv("snapshot.diff", "-i", spec, sid, "--json")  # positive control: the repository is back
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_corrupt_repository_is_refused_and_the_workspace_untouched(slab, fleet):
    name, spec = fleet
    w, repo = ws(name), f"/var/lib/jackin/snapshots/{name}/repo"
    as_agent(slab, f"head -c 3000000 /dev/urandom > {w}/big")
    taken = snap(spec, "--agent", "coder-1")
    as_agent(slab, f"rm {w}/big && echo after > {w}/after")
    before = listing(slab, w)
    pack = sh(slab, f"ls -S {repo}/data/*/* | head -1").stdout.strip()
    sh(slab, f"cp -a {pack} /root/good-pack")
    try:
        sh(slab, f"python3 -c \"import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=1; "
                 f"open(p,'wb').write(b)\" {pack} || "
                 f"printf '\\x55' | dd of={pack} bs=1 seek=1000 conv=notrunc")  # fmt: skip
        done = restore(spec, taken["id"], "--agent", "coder-1", "--stop")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "restore of coder-1 failed" in done.stderr and "workspace was not touched" in done.stderr
        assert listing(slab, w) == before
        assert sh(slab, f"ls -A /srv/jackin/{name}/.restore").stdout == ""
    finally:
        sh(slab, f"cp -a /root/good-pack {pack} && rm /root/good-pack")
    done = restore(spec, taken["id"], "--agent", "coder-1", "--stop")  # positive control: the good repository
    assert done.returncode == 0, done.stdout + done.stderr
    assert "big" in sh(slab, f"ls {w}").stdout.split()


def test_an_ssh_connection_killed_mid_restore_leaves_the_old_workspace(slab, fleet):
    name, spec = fleet
    w = ws(name)
    as_agent(slab, f"head -c 400000000 /dev/urandom > {w}/huge")
    taken = snap(spec, "--agent", "coder-1")
    as_agent(slab, f"rm {w}/huge && echo old > {w}/old")
    sh(slab, f"docker stop jk-{name}--coder-1")
    before = listing(slab, w)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(done=restore(spec, taken["id"], "--agent", "coder-1")))
    thread.start()
    killed = ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        killed = sh(slab, KILL_RESTORE_SESSION, warn=True).stdout.strip()
        time.sleep(0.2)
    thread.join(300)
    assert killed, "the restore never ran"
    assert box["done"].returncode != 0
    sh(slab, "while pgrep -x restic >/dev/null || pgrep -f 'echo stage[d]' >/dev/null; do sleep 0.2; done")
    assert listing(slab, w) == before  # the old workspace, untouched
    # the restored tree got as far as the root-only staging dir, and no further
    assert sh(slab, f"ls -A /srv/jackin/{name}/.restore/coder-1").stdout.split() == ["tree"]
    done = restore(spec, taken["id"], "--agent", "coder-1")  # the next restore cleans up and succeeds
    assert done.returncode == 0, done.stdout + done.stderr
    assert "huge" in sh(slab, f"ls {w}").stdout.split()
    assert sh(slab, f"ls -A /srv/jackin/{name}/.restore").stdout == ""
    as_agent(slab, f"rm -f {w}/huge")
    sh(slab, f"docker start jk-{name}--coder-1")


def test_a_snapshot_without_room_is_refused_first_and_a_full_disk_mid_snapshot_loses_nothing(slab, fleet, tmp_path):
    name, spec = fleet
    w, repo = ws(name), f"/var/lib/jackin/snapshots/{name}/repo"
    small = tmp_path / f"{name}.yaml"  # a margin the 8 MB left can hold: what the snapshot adds decides
    small.write_text(open(spec).read().replace("snapshots: {keep: 3}", "snapshots: {keep: 3, min_free: 1m}"))
    count = len(snapshots(spec))
    used = int(sh(slab, f"du -sm {repo}").stdout.split()[0])
    sh(slab, f"mkdir -p /tmp/full && cp -a {repo}/. /tmp/full/ && mount -t tmpfs -o size={used + 8}m,mode=0700 tmpfs {repo} && "
             f"cp -a /tmp/full/. {repo}/ && rm -rf /tmp/full")  # fmt: skip
    try:
        as_agent(slab, f"head -c 40000000 /dev/urandom > {w}/toobig")
        before = listing(slab, w)
        files = f"cd {repo} && find . -printf '%p %s %T@\\n' | sort | sha256sum"
        held = sh(slab, files).stdout
        # The 40 MB the agent wrote since its last snapshot cannot fit the 8 MB left: refused before restic ran
        refused = inv("snapshot.create", "-i", str(small), "--agent", "coder-1")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = " ".join((refused.stdout + refused.stderr).split())
        assert "coder-1: no restic snapshot: it may add up to" in said and "(snapshots.min_free); nothing of it" in said
        assert sh(slab, files).stdout == held and listing(slab, w) == before and len(snapshots(spec)) == count
        # An estimate made blind (the manifest's time moved past the write) lets restic meet the full disk itself
        sh(slab, f"touch /var/lib/jackin/snapshots/{name}/manifests/coder-1.json")
        done = inv("snapshot.create", "-i", str(small), "--agent", "coder-1")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "no space left" in done.stderr.lower()
        assert listing(slab, w) == before and len(snapshots(spec)) == count
        check = sh(slab, f"$(command -v restic || echo /usr/local/lib/jackin/restic) -r {repo} "
                         f"--password-file /var/lib/jackin/snapshots/{name}/password --no-cache check", warn=True)  # fmt: skip
        assert check.ok, check.stdout + check.stderr  # the repository is still whole
    finally:
        sh(slab, f"umount {repo}")
    done = inv("snapshot.create", "-i", spec, "--agent", "coder-1")  # positive control: room on the real disk
    assert done.returncode == 0, done.stdout + done.stderr
    as_agent(slab, f"rm -f {w}/toobig")


def test_a_second_snapshot_after_one_percent_changed_adds_far_fewer_bytes(slab, fleet):
    name, spec = fleet
    w = ws(name, "coder-2")
    as_agent(slab, f"mkdir -p {w}/many && cd {w}/many && for i in $(seq 1 200); do head -c 50000 /dev/urandom > f$i; done",
             "coder-2")  # fmt: skip
    full = snap(spec, "--agent", "coder-2")["agents"][0]
    as_agent(slab, f"cd {w}/many && head -c 50000 /dev/urandom > f1 && head -c 50000 /dev/urandom > f2", "coder-2")
    incremental = snap(spec, "--agent", "coder-2")["agents"][0]
    assert full["added"] > 10_000_000
    assert incremental["added"] < full["added"] / 20
    # The two files and the manifest (its snapshot id and time); and when the agent's heartbeat ticked in
    # between (every 5 s while its container runs), its status file and the status lock (.jackin/).
    assert 3 <= incremental["files_changed"] <= 5


def test_prune_keeps_exactly_the_policys_count(slab, fleet):
    """keep 3 counts per (host, instance) and kind: four snapshots of coder-2 alone, taken after
    coder-1's, never push out coder-1's newest three (the newest three fleet snapshots would)."""
    name, spec = fleet
    ones = [snap(spec, "--agent", "coder-1")["id"] for _ in range(4)]
    twos = [snap(spec, "--agent", "coder-2")["id"] for _ in range(4)]
    before = snapshots(spec)

    def newest(instance: str, kind: str) -> list[str]:
        return [s["id"] for s in before if s["kind"] == kind and instance in s["agents"]][-3:]

    kinds = {s["kind"] for s in before} - {"final"}
    expected = {i for inst in ("coder-1", "coder-2") for k in kinds for i in newest(inst, k)}
    expected |= {s["id"] for s in before if s["kind"] == "final"}
    done = inv("snapshot.prune", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    after = snapshots(spec)
    assert [s["id"] for s in after] == [s["id"] for s in before if s["id"] in expected]
    assert ones[0] not in expected and twos[0] not in expected and len(after) < len(before)
    assert set(ones[1:]) <= {s["id"] for s in after}
    assert not set(ones[1:]) & {s["id"] for s in before[-3:]}  # the old rule (newest three overall) dropped them
    on_host = int(sh(slab, f"ls /var/lib/jackin/snapshots/{name}/repo/snapshots | wc -l").stdout)
    assert on_host == sum(len(s["agents"]) for s in after)


def test_every_snapshot_and_restore_is_in_the_ledger_with_audit_entries(slab, fleet):
    from jackin.store.ledger import Ledger

    name, spec = fleet
    with Ledger() as ledger:
        runs = ledger.runs(name)
        trail = ledger.audit_trail(name)
        rows = ledger.snapshot_rows(name)
    assert {"snapshot.create", "snapshot.restore", "snapshot.prune"} <= {r["action"] for r in runs}
    assert all(r["status"] in ("ok", "failed") for r in runs)  # every run finished
    assert {(a["action"], a["host"]) for a in trail if a["action"].startswith("snapshot.")} >= {
        ("snapshot.create", slab.status().hosts[0].name), ("snapshot.restore", slab.status().hosts[0].name)}
    assert [r["id"] for r in rows] == [s["id"] for s in snapshots(spec)]
    assert all(a["manifest"]["uid"] >= 60000 and a["restic_id"] for r in rows for a in r["agents"])
