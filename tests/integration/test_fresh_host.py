"""Restoring onto a fresh host, through the CLI, over real SSH: a snapshot pulled to the operator's
machine (snapshot.pull) outlives its host; after that host is destroyed, snapshot.push puts it onto
another host of the fleet and snapshot.restore --from-host restores the agent there.

One 2-host lab and one fleet (one agent, ``coder-1`` on both hosts) for the module; the tests run in
file order and share its state: the first host is destroyed half way. Workspace contents are planted
as the agent (``setpriv``); listings are taken as root, NUL-safe: type, mode, owner, group, mtime,
size, link target and content hash of every path.
"""

from __future__ import annotations

import json
import secrets
import shutil

import pytest

from jackin.lifecycle.fleet import load
from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.operations import agent_paths
from jackin.paths import state_dir
from jackin.lab.providers import provider_for
from jackin.snapshots import binary, transfer
from jackin.transport.ssh import connect

from .conftest import _engine_or_skip, inv, new_lab_name

pytestmark = pytest.mark.skipif(not shutil.which("restic"), reason="restic is not installed here")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    _engine_or_skip()
    lab = Lab(new_lab_name("m"))
    name = f"m{secrets.token_hex(3)}"
    spec = tmp_path_factory.mktemp("fresh") / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 2}}
  agents:
    - {{name: coder, role: demo, count: 1, placement: each}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
    try:
        lab.up(2)
        done = inv("fleet.up", "-i", str(spec), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        hosts = lab.status().hosts
        yield {"lab": lab, "fleet": name, "spec": str(spec), "h0": hosts[0].target(), "h1": hosts[1].target(), "state": {}}
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab")
        lab.down()
        shutil.rmtree(state_dir() / "snapshots" / name, ignore_errors=True)
        assert lab.leftovers()["containers"] == []


def sh(target, command: str, *, warn: bool = False):
    with connect(target) as conn:
        return conn.run(command, hide=True, warn=warn, timeout=300)


def ws(world) -> str:
    return f"/srv/jackin/{world['fleet']}/coder-1/workspace"


def uid(world, target) -> int:
    return int(sh(target, f"id -u jk-{world['fleet']}--coder-1").stdout)


def as_agent(world, target, script: str) -> None:
    """``script`` on ``target`` as coder-1 (its uid and gid only), in its workspace."""
    n = uid(world, target)
    sh(target, agent_paths.as_agent(n, n, "sh", "-c", f"cd {ws(world)} && {script}"))


def listing(world, target) -> list[str]:
    """Every path of coder-1's workspace on ``target``: type, mode, uid, gid, mtime, size, name, link
    target; then every file's sha256."""
    w = ws(world)
    meta = sh(target, f"cd {w} && find . -path ./.jackin -prune -o -printf '%y %m %U %G %T@ %s %p\\0%l\\0'").stdout.split("\0")
    sums = sh(target, f"cd {w} && find . -path ./.jackin -prune -o -type f -print0 | xargs -0r sha256sum -z").stdout.split("\0")
    return sorted(f"{m} -> {link}" for m, link in zip(meta[0::2], meta[1::2])) + sorted(x for x in sums if x)


def cli(world, *args: str):
    return inv(*args[:1], "-i", world["spec"], *args[1:])


def as_json(done) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_pull_copies_each_origin_and_the_copy_checks(world) -> None:
    h0, h1 = world["h0"], world["h1"]
    as_agent(world, h0, "mkdir -p src/deep && echo from-h0 > a && head -c 200000 /dev/urandom > blob && "
                        "chmod 0600 blob && printf 'x\\n' > run.sh && chmod 0755 run.sh && ln -s src/deep/b rel && "
                        "echo deep > src/deep/b && touch -d '2001-02-03 04:05:06' a")  # fmt: skip
    as_agent(world, h1, "echo from-h1 > a && echo only-h1 > mine")
    world["state"]["h0"], world["state"]["h1"] = listing(world, h0), listing(world, h1)
    taken = as_json(cli(world, "snapshot.create", "--json"))["snapshot"]
    assert sorted(a["host"] for a in taken["agents"]) == sorted([h0.name, h1.name])
    sid = world["state"]["sid"] = taken["id"]
    pulled = as_json(cli(world, "snapshot.pull", sid, "--json"))
    assert {h["host"]: h["status"] for h in pulled["hosts"]} == {h0.name: "pulled", h1.name: "pulled"}
    assert all(h["copied"] > 0 for h in pulled["hosts"])
    for host in (h0, h1):  # the copies on this machine check with the fleet's password
        binary.verify_local(transfer.pulled_repo(world["fleet"], host.name), transfer.fleet_password_file(world["fleet"]))
    again = as_json(cli(world, "snapshot.pull", sid, "--json"))  # incremental: nothing new to copy
    assert [(h["status"], h["copied"]) for h in again["hosts"]] == [("pulled", 0), ("pulled", 0)]
    listed = {s["id"]: s["copies"] for s in as_json(cli(world, "snapshot.list", "--json"))}
    assert listed[sid] == ["operator"]
    unknown = cli(world, "snapshot.pull", "20000101-000000-abcd")
    assert unknown.returncode == 2 and "no snapshot" in unknown.stderr


def test_push_pulls_first_when_this_machines_copy_is_older_than_the_snapshot(world) -> None:
    h0, h1 = world["h0"], world["h1"]
    as_agent(world, h1, "echo second > second")
    world["state"]["h1"] = listing(world, h1)
    later = as_json(cli(world, "snapshot.create", "--json"))["snapshot"]["id"]  # this machine's copies predate it
    pushed = as_json(cli(world, "snapshot.push", later, "--host", h0.name, "--json"))
    assert [(o["origin"], o["pulled_first"]) for o in pushed["origins"]] == [(h1.name, True)]
    assert pushed["origins"][0]["copied"] > 0 and not pushed["errors"]
    path = transfer.imported_path(world["fleet"], h1.name)
    assert sh(h0, f"stat -c '%a %U' {path}").stdout.split() == ["700", "root"]
    listed = {s["id"]: s["copies"] for s in as_json(cli(world, "snapshot.list", "--json"))}
    assert listed[later] == ["operator", h0.name]


def test_after_the_host_is_destroyed_restore_is_refused_with_the_push_hint(world) -> None:
    lab, h0, h1 = world["lab"], world["h0"], world["h1"]
    sid = world["state"]["sid"]
    dk.docker("rm", "-f", "-v", lab.container(h0.name))
    dk.docker("volume", "rm", "-f", lab.volume(h0.name), check=False)
    assert [t.name for t in provider_for(load(world["spec"])).targets(bring_up=False)] == [h1.name]
    before = listing(world, h1)
    refused = cli(world, "snapshot.restore", sid, "--agent", "coder-1", "--stop", "--yes")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert h0.name in refused.stderr and "snapshot.push" in refused.stderr
    assert listing(world, h1) == before == world["state"]["h1"]
    # the gone host's snapshot is already on this machine: pulling again is not an error
    pulled = as_json(cli(world, "snapshot.pull", sid, "--json"))
    assert {h["host"]: h["status"] for h in pulled["hosts"]} == {h0.name: "already pulled", h1.name: "pulled"}


def test_push_puts_the_pulled_copy_onto_the_remaining_host(world) -> None:
    h0, h1 = world["h0"], world["h1"]
    sid = world["state"]["sid"]
    gone = cli(world, "snapshot.push", sid, "--host", h0.name)
    assert gone.returncode == 2 and "not a host of fleet" in gone.stderr and h1.name in gone.stderr
    path = transfer.imported_path(world["fleet"], h0.name)
    # without the operator's copy, and its origin gone, there is nothing to push: refused, h1 unchanged
    local = transfer.pulled_repo(world["fleet"], h0.name)
    local.rename(local.with_name("aside"))
    try:
        missing = cli(world, "snapshot.push", sid, "--host", h1.name)
    finally:
        local.with_name("aside").rename(local)
    assert missing.returncode == 1 and "no copy of" in missing.stderr and "snapshot.pull" in missing.stderr
    assert sh(h1, f"test -e {path}", warn=True).failed
    pushed = as_json(cli(world, "snapshot.push", sid, "--host", h1.name, "--json"))
    assert [(o["origin"], o["pulled_first"]) for o in pushed["origins"]] == [(h0.name, False)]
    assert pushed["origins"][0]["path"] == path and pushed["origins"][0]["copied"] > 0
    assert sh(h1, f"stat -c '%a %U' {path} {path}/config").stdout.split() == ["700", "root", "600", "root"]
    listed = {s["id"]: s["copies"] for s in as_json(cli(world, "snapshot.list", "--json"))}
    assert listed[sid][0] == "operator" and h1.name in listed[sid]
    again = as_json(cli(world, "snapshot.push", sid, "--host", h1.name, "--json"))
    assert again["origins"][0]["copied"] == 0  # incremental


def test_restore_onto_the_fresh_host_needs_from_host_then_restores_the_origins_bytes(world) -> None:
    h0, h1 = world["h0"], world["h1"]
    sid = world["state"]["sid"]
    before = listing(world, h1)
    ambiguous = cli(world, "snapshot.restore", sid, "--agent", "coder-1", "--stop", "--yes")
    assert ambiguous.returncode == 2, ambiguous.stdout + ambiguous.stderr
    assert f"--from-host {h0.name}" in ambiguous.stderr and f"--from-host {h1.name}" in ambiguous.stderr
    assert listing(world, h1) == before
    done = cli(world, "snapshot.restore", sid, "--agent", "coder-1", "--from-host", h0.name, "--stop", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    after = listing(world, h1)
    assert after == world["state"]["h0"]  # h0's bytes, modes, owners, mtimes and links, now on h1
    owners = {line.split()[2] for line in after if line[:2] in ("f ", "d ", "l ")}
    assert owners == {str(uid(world, h1))}
    assert sh(h1, f"cat {ws(world)}/a").stdout == "from-h0\n"
    container = f"jk-{world['fleet']}--coder-1"
    assert sh(h1, f"docker inspect -f '{{{{.State.Running}}}}' {container}").stdout.strip() == "true"
    pre = [s for s in as_json(cli(world, "snapshot.list", "--json")) if s["kind"] == "pre-restore"][-1]
    assert pre["hosts"] == [h1.name]
    # the pre-restore snapshot undoes it: h1's own workspace comes back
    undo = cli(world, "snapshot.restore", pre["id"], "--stop", "--yes")
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert listing(world, h1) == before


def snapshot_ids(world) -> list[str]:
    return [s["id"] for s in as_json(cli(world, "snapshot.list", "--json"))]


def test_a_replaced_host_of_the_same_name_restores_once_its_own_copy_is_pushed_onto_it(world) -> None:
    lab, sid = world["lab"], world["state"]["sid"]
    lab.up(2)  # h0's container is gone: the lab brings back a new, empty host under the same name
    hosts = lab.status().hosts
    assert [h.name for h in hosts] == [world["h0"].name, world["h1"].name]
    world["h0"] = h0 = hosts[0].target()
    up = cli(world, "fleet.up", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    before, ids = listing(world, h0), snapshot_ids(world)
    assert before != world["state"]["h0"]
    refused = cli(world, "snapshot.restore", sid, "--agent", "coder-1", "--from-host", h0.name, "--stop", "--yes")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"snapshot {sid} is not in {h0.name}'s repository (was {h0.name} replaced?)" in refused.stderr
    assert f"snapshot.push {sid} --host {h0.name}" in refused.stderr
    assert listing(world, h0) == before and snapshot_ids(world) == ids  # refused before the pre-restore snapshot
    pushed = as_json(cli(world, "snapshot.push", sid, "--host", h0.name, "--json"))
    assert not pushed["errors"]
    assert {o["origin"]: o["path"] for o in pushed["origins"]}[h0.name] == transfer.imported_path(world["fleet"], h0.name)
    done = cli(world, "snapshot.restore", sid, "--agent", "coder-1", "--from-host", h0.name, "--stop", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert listing(world, h0) == world["state"]["h0"]  # the destroyed h0's bytes, back on the new h0


def same_but_owner(lines: list[str], old: int, new: int) -> list[str]:
    """``listing`` lines (in its order) with the owner ``old`` (uid and gid fields) read as ``new``."""
    out = []
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[0] in ("f", "d", "l"):
            parts[2:4] = [str(new) if p == str(old) else p for p in parts[2:4]]
        out.append(" ".join(parts))
    return out


def test_a_second_lifecycle_with_the_same_names_pulls_at_down_and_restores_under_a_new_uid(world) -> None:
    from jackin.store.ledger import Ledger

    h0, h1, fleet = world["h0"], world["h1"], world["fleet"]
    old_uid, kept = uid(world, h0), listing(world, h0)
    first = cli(world, "fleet.down", "--yes", "--keep-lab")  # the replaced h0 made a new repository: pulled beside
    assert first.returncode == 0, first.stdout + first.stderr
    final = [s for s in as_json(cli(world, "snapshot.list", "--json")) if s["kind"] == "final"][-1]["id"]
    pulled = state_dir() / "snapshots" / fleet / "pulled"
    assert len(list((pulled / h0.name).glob("repo-*"))) == 1
    occupier = f"{fleet}-occupier"
    with Ledger() as ledger:  # the agent's old uid is taken when the fleet comes back: it gets another one
        ledger.db.execute("INSERT INTO uids (uid, fleet, instance) VALUES (?, ?, ?)", (old_uid, occupier, "x"))
    try:
        up = cli(world, "fleet.up", "--yes")
        assert up.returncode == 0, up.stdout + up.stderr
        new_uid = uid(world, h0)
        assert new_uid != old_uid
        refused = cli(world, "snapshot.restore", final, "--from-host", h0.name, "--stop", "--yes")
        assert refused.returncode == 1 and f"is not in {h0.name}'s repository" in refused.stderr
        as_json(cli(world, "snapshot.push", final, "--host", h0.name, "--json"))
        done = as_json(cli(world, "snapshot.restore", final, "--from-host", h0.name, "--stop", "--yes", "--json"))
        assert [(a["restored"], a["tier"]) for a in done["agents"]] == [(True, "restic")]
        assert f"uid {old_uid}:{old_uid} in the snapshot now belong to the agent's uid {new_uid}:{new_uid}" in (
            done["agents"][0]["note"] or "")  # fmt: skip
        after = listing(world, h0)
        assert after == same_but_owner(kept, old_uid, new_uid) and after != kept
        second = cli(world, "fleet.down", "--yes", "--keep-lab")  # both hosts' repositories are new again
        assert second.returncode == 0, second.stdout + second.stderr
        assert len(list((pulled / h1.name).glob("repo-*"))) == 1 and len(list((pulled / h0.name).glob("repo-*"))) == 2
        with Ledger() as ledger:
            paths = {c["path"]: c["snapshots"] for c in ledger.copies(fleet, origin=h0.name, place="operator")}
        assert len(paths) == 3 and sum(final in s for s in paths.values()) == 1
    finally:
        with Ledger() as ledger:
            ledger.db.execute("DELETE FROM uids WHERE fleet = ?", (occupier,))
