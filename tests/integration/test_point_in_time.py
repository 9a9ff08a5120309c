"""A snapshot is one instant, proven on a real lab host with an agent that never stops writing.

In each agent's container ``jackin.lab.workloads.BUSY_WRITER`` loops as the agent: temporary files
written, renamed and deleted (a build's churn), a log and a counter written in order, a git commit
per round. At every instant the counter and the log agree; a file-by-file read while it runs breaks
that, and a repository read mid-commit can fail ``git fsck``.

Twenty ``snapshot.create`` runs in a row, through the CLI, on each tier (one fleet each on one
1-host lab): the restic-only tier (the container frozen for the backup) and the btrfs tier (restic
reads the checkpoint, taken with the agent frozen for it). All must succeed and say how the home was held; each
snapshot is then restored and checked, all twenty in one container of the agent's own image (it has
git, the lab host has none): the host's restic restores each from the host's repository into a tmpfs,
then ``git fsck --strict`` and the counter against the log. The writer must have advanced across the
snapshots (it really ran) and be running after them (thawed); then it is told to stop (it ends after
a whole round), so it does not load the machine for the rest of the module.

The fleets are torn down with ``--discard-snapshots``: their final snapshot and pull are
``test_final_pull``'s proof, not this module's (here they cost about 40 s of reading every snapshot back).
"""

from __future__ import annotations

import json
import secrets
import shlex
import signal
import subprocess
import sys
import time

import pytest

from jackin.lab import Lab
from jackin.lab.workloads import BUSY_WRITER, CHECK_COPY, STOP_WRITER
from jackin.snapshots import restic

from .conftest import ROOT, at_a_terminal, inv, module_lab, sh

ROUNDS = 20


@pytest.fixture(scope="module")
def plab():
    yield from module_lab("pit", 1)


def up(lab: Lab, tmp, snapshots: str) -> tuple[str, str]:
    name = f"pit{secrets.token_hex(3)}"
    spec = tmp / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo}}
  resources: {{memory: 256m, cpus: 0.5, pids: 128}}
  snapshots: {snapshots}
""")
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    container = f"jk-{name}--coder-1"
    uid = sh(lab, f"id -u jk-{name}--coder-1").stdout.strip()
    sh(lab, f"docker exec -d --user {uid}:{uid} {container} sh -c {shlex.quote(BUSY_WRITER)}")
    return name, str(spec)


@pytest.fixture(scope="module")
def frozen_fleet(plab, tmp_path_factory):
    name, spec = up(plab, tmp_path_factory.mktemp("pit"), "{keep: 50}")
    try:
        yield name, spec
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")


@pytest.fixture(scope="module")
def checkpoint_fleet(plab, tmp_path_factory):
    name, spec = up(plab, tmp_path_factory.mktemp("pit"), "{keep: 50, checkpoints: btrfs, checkpoint_size: 1g}")
    try:
        yield name, spec
    finally:
        inv("fleet.down", "-i", spec, "--yes", "--keep-lab", "--discard-snapshots")


def counter(lab: Lab, name: str) -> int:
    out = sh(lab, f"cat /srv/jackin/{name}/coder-1/workspace/churn/a-counter 2>/dev/null || echo 0").stdout
    return int(out.strip() or 0)


def await_counter(lab: Lab, name: str, above: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while counter(lab, name) <= above:
        assert time.monotonic() < deadline, f"the writer did not pass {above} within {seconds:.0f}s"
        time.sleep(0.5)


def stop_writer(lab: Lab, name: str) -> None:
    """Tell the busy writer to end (after its round): nothing of it loads the machine for the other tests."""
    uid = sh(lab, f"id -u jk-{name}--coder-1").stdout.strip()
    sh(lab, f"docker exec --user {uid}:{uid} jk-{name}--coder-1 {STOP_WRITER}")


def twenty_snapshots(lab: Lab, name: str, spec: str) -> list[dict]:
    """``snapshot.create`` ROUNDS times through the CLI; every run must succeed. The agents' JSON rows."""
    await_counter(lab, name, 5)  # the writer is under way (it commits every few tens of ms)
    rows = []
    for n in range(ROUNDS):
        done = inv("snapshot.create", "-i", spec, "--json")
        assert done.returncode == 0, f"snapshot {n + 1} of {ROUNDS}: {done.stdout}\n{done.stderr}"
        rows += json.loads(done.stdout)["snapshot"]["agents"]
    return rows


def restore_and_check(lab: Lab, name: str, ids: list[str]) -> list[str]:
    """Restore every restic snapshot of ``ids`` and check it, in ONE container of the agent's image: the
    host's restic, its repository and password mounted read-only, restores each into a tmpfs (``--no-lock``,
    ``--no-cache``: nothing is written to the repository), ``check`` reads it, and it is removed before the
    next. The OK/BAD lines, in the order of ``ids``."""
    include = f"/srv/jackin/{name}/coder-1/workspace/churn"
    each = (CHECK_COPY + 'n=0; for i in "$@"; do n=$((n + 1)); d=/r/$(printf %02d "$n"); '
            'restic --repo /repo --password-file /password --no-cache --no-lock --quiet restore "$i" --target "$d" '
            f'--include {include} || echo "BAD restore $i"; check "$d"; rm -rf "$d" "$d.fsck"; done')  # fmt: skip
    image = sh(lab, f"docker inspect -f '{{{{.Config.Image}}}}' jk-{name}--coder-1").stdout.strip()
    mounts = (f'-v "$R":/usr/local/bin/restic:ro -v {restic.repo_path(name)}:/repo:ro '
              f"-v {restic.password_path(name)}:/password:ro")  # fmt: skip
    script = (f"R=$(command -v restic || echo {restic.UPLOADED_RESTIC}); docker run --rm --network none --user 0 "
              f"--tmpfs /r --entrypoint /bin/sh {mounts} {image} -c {shlex.quote(each)} sh {' '.join(ids)}")  # fmt: skip
    return sh(lab, script, timeout=600).stdout.splitlines()


def assert_one_instant_each(lab: Lab, name: str, rows: list[dict], how: str) -> None:
    assert len(rows) == ROUNDS and all(r["instant"] == how and r["restic_id"] for r in rows), rows
    lines = restore_and_check(lab, name, [r["restic_id"] for r in rows])
    bad = [line for line in lines if not line.startswith("OK ")]
    assert not bad, "\n".join(lines)
    counts = [int(line.split()[-1]) for line in lines]
    assert len(counts) == ROUNDS and counts[-1] > counts[0] > 0, counts  # the writer ran all along


def test_twenty_frozen_snapshots_of_a_busy_agent_all_succeed_and_each_is_one_instant(plab, frozen_fleet) -> None:
    name, spec = frozen_fleet
    rows = twenty_snapshots(plab, name, spec)
    assert all(r["frozen_ms"] and r["frozen_ms"] > 0 for r in rows), [r["frozen_ms"] for r in rows]
    assert_one_instant_each(plab, name, rows, "frozen")
    state = sh(plab, f"docker inspect -f '{{{{.State.Status}}}}' jk-{name}--coder-1").stdout.strip()
    assert state == "running"
    await_counter(plab, name, counter(plab, name))  # thawed: it writes on
    stop_writer(plab, name)


def test_twenty_checkpoint_snapshots_of_a_busy_agent_all_succeed_and_each_is_one_instant(plab, checkpoint_fleet) -> None:
    name, spec = checkpoint_fleet
    rows = twenty_snapshots(plab, name, spec)
    assert all(r["tiers"] == ["checkpoint", "restic"] for r in rows), rows
    assert all(r["frozen_ms"] and r["frozen_ms"] < 5000 for r in rows), [r["frozen_ms"] for r in rows]  # the checkpoint's freeze
    assert_one_instant_each(plab, name, rows, "checkpoint")
    stop_writer(plab, name)


def test_ctrl_c_during_a_frozen_backup_thaws_the_agent_at_once(plab, frozen_fleet) -> None:
    """A backup long enough to interrupt (a 300 MB file the backup must read), SIGINT to the CLI
    while the container is frozen: the CLI ends, and the container runs again within seconds."""
    name, spec = frozen_fleet
    container = f"jk-{name}--coder-1"
    uid = sh(plab, f"id -u jk-{name}--coder-1").stdout.strip()
    sh(plab, f"docker exec --user {uid}:{uid} {container} sh -c 'head -c 300000000 /dev/urandom > /workspace/big'")
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "snapshot.create", "-i", spec], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=at_a_terminal)  # fmt: skip
    try:
        paused = f"docker inspect -f '{{{{.State.Paused}}}}' {container}"
        deadline = time.monotonic() + 120
        while sh(plab, paused).stdout.strip() != "true":
            assert time.monotonic() < deadline and proc.poll() is None, "never saw the container frozen"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) in (1, 130)
        deadline = time.monotonic() + 10
        while sh(plab, paused).stdout.strip() != "false":
            assert time.monotonic() < deadline, "the container stayed frozen after the operator's Ctrl-C"
        # Nothing of the backup is left on the host: restic, its freeze's cap and watchdog, the FIFO's dir.
        leftovers = f"pgrep -af '[r]estic .*backup|[d]ocker unpause -- {container}' || true"  # [x]: not this shell
        deadline = time.monotonic() + 15
        while sh(plab, leftovers).stdout.strip():
            assert time.monotonic() < deadline, sh(plab, leftovers).stdout
            time.sleep(0.5)
        assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
        sh(plab, f"rm -f /srv/jackin/{name}/coder-1/workspace/big; docker unpause {container} 2>/dev/null || true")
