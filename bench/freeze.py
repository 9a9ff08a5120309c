"""Freeze benchmark: how long ``snapshot.create`` freezes a busy agent on the restic-only tier.

On a 1-host lab it brings up one fleet (one demo agent, ``snapshots.checkpoints: off``), starts a
writer in the agent's container (temporary files written, renamed and deleted, a counter, a log and a
git commit per round, as a build would), and takes ``--rounds`` snapshots through the CLI
(``python -m invoke snapshot.create --json``). Each snapshot reports how long the agent was frozen
(``frozen_ms``: measured on the host, from ``docker pause`` to the end of ``docker unpause``).

The floor, measured on the same host in the same run right before each snapshot: one bare
``docker pause`` + ``docker unpause`` of the same container (the freezer's own cost, with no backup in
between), timed on the host the same way. Printed: every snapshot's freeze, the median and the
largest, and the median ratio of freeze to floor. The rest of a freeze is restic reading what changed
(an incremental backup). Then the same on the btrfs tier (``--checkpoints``, optional): the agent is
frozen only for the checkpoint itself (``held: checkpoint``).

The lab runs on a shared, noisy machine: compare ratios, not seconds. Never a timed test. Uses a
private state dir and a lab ``freeze-<pid>``, removed at the end.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STATE = tempfile.mkdtemp(prefix="jackin-freeze-")
atexit.register(shutil.rmtree, STATE, True)
os.environ["JACKIN_STATE_DIR"] = STATE  # before jackin is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jackin.lab import Lab  # noqa: E402
from jackin.lab.workloads import BUSY_WRITER  # noqa: E402
from jackin.transport.ssh import connect  # noqa: E402

def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"inv {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def fleet(lab: Lab, work: Path, name: str, snapshots: str) -> Path:
    spec = work / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo}}
  resources: {{memory: 256m, cpus: 0.5, pids: 128}}
  snapshots: {snapshots}
""")
    cli("fleet.up", "-i", str(spec), "--yes")
    return spec


def run_on(lab: Lab, command: str) -> str:
    with connect(lab.status().hosts[0].target()) as conn:
        return conn.run(command, hide=True).stdout


def floor_ms(lab: Lab, container: str) -> float:
    """One bare pause + unpause of ``container``, timed on the host as the snapshot's freeze is."""
    c = shlex.quote(container)
    out = run_on(lab, f"t0=$(date +%s%N); docker pause -- {c} >/dev/null; docker unpause -- {c} >/dev/null; "
                      "echo $(( $(date +%s%N) - t0 ))")  # fmt: skip
    return int(out.strip()) / 1e6


def rounds(lab: Lab, spec: Path, name: str, n: int) -> list[tuple[float | None, float, str]]:
    container = f"jk-{name}--coder-1"
    uid = run_on(lab, f"id -u {container}").strip()
    run_on(lab, f"docker exec -d --user {uid}:{uid} {container} sh -c {shlex.quote(BUSY_WRITER)}")
    out = []
    for _ in range(n):
        floor = floor_ms(lab, container)
        agent = json.loads(cli("snapshot.create", "-i", str(spec), "--json"))["snapshot"]["agents"][0]
        out.append((agent["frozen_ms"], floor, agent["instant"]))
    return out


def report(title: str, results: list[tuple[float | None, float, str]]) -> None:
    print(f"\n{title}")
    print(f"{'#':>3} {'held':<11} {'frozen ms':>10} {'floor ms':>9} {'ratio':>7}")
    for i, (frozen, floor, held) in enumerate(results, 1):
        ratio = f"{frozen / floor:7.1f}" if frozen else "      -"
        print(f"{i:>3} {held:<11} {frozen or 0:>10.0f} {floor:>9.0f} {ratio}")
    times = [f for f, _, _ in results if f]
    if times:
        ratios = [f / fl for f, fl, _ in results if f]
        print(f"freeze: median {statistics.median(times):.0f} ms, largest {max(times):.0f} ms; "
              f"floor (pause+unpause alone): median {statistics.median([fl for _, fl, _ in results]):.0f} ms; "
              f"median ratio {statistics.median(ratios):.1f}x")  # fmt: skip
    else:
        print("freeze: none (the agent was not running)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--checkpoints", action="store_true", help="also the btrfs tier (frozen for the checkpoint only)")
    args = parser.parse_args()
    lab = Lab(f"freeze-{os.getpid()}")
    work = Path(STATE) / "specs"
    work.mkdir()
    try:
        lab.up(1)
        name = f"fz{os.getpid()}"
        report("restic-only tier (the agent frozen for each backup)",
               rounds(lab, fleet(lab, work, name, "{keep: 100}"), name, args.rounds))  # fmt: skip
        if args.checkpoints:
            name = f"fc{os.getpid()}"
            spec = fleet(lab, work, name, "{keep: 100, checkpoints: btrfs, checkpoint_size: 1g}")
            report("btrfs tier (restic reads the checkpoint)", rounds(lab, spec, name, args.rounds))
    finally:
        lab.down()


if __name__ == "__main__":
    main()
