"""Handover benchmark: what ``fleet.work`` costs per agent between two tasks, beyond the agent's own work.

On a 1-host lab it brings up one fleet of demo agents that serve the queue (``work: {repo}``, no task of their
own), queues ``--tasks`` one-line tasks and runs ``inv fleet.work --json`` to the end. Each task's handover is
its collection (status, handoff and branch brought back: the attempt's ``collect_s``) plus the handover itself
(stop, reset, deliver, start: the ``delivered`` event's seconds). The target: at most 2 s per agent.

The floor, measured on the same host in the same run: one bare ``docker stop`` + ``docker start`` of an agent's
container (what any reset between two tasks pays), timed on the host. Printed: the median and largest handover,
whether the median is within the 2 s target, and the median ratio to the floor. ``--checkpoints``: the same on the
btrfs tier (the workspace a copy-on-write copy of a clean clone).

The lab runs on a shared, noisy machine: compare ratios, not seconds. Never a timed test. Uses a private state
dir and a lab ``handover-<pid>``, removed at the end.
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

STATE = tempfile.mkdtemp(prefix="jackin-handover-")
atexit.register(shutil.rmtree, STATE, True)
os.environ["JACKIN_STATE_DIR"] = STATE  # before jackin is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jackin.lab import Lab  # noqa: E402
from jackin.transport.ssh import connect  # noqa: E402

TARGET = 2.0  # seconds per agent (issue 21)


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"inv {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def fleet(lab: Lab, work: Path, name: str, agents: int, tasks: int, snapshots: str) -> Path:
    repo = work / f"src-{name}"
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("a project\n")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "start")
    queued = "\n".join(f'    - {{task: "task {i}\\nwrite: out/{i}.txt: {i}"}}' for i in range(tasks))
    spec = work / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo, count: {agents}, work: {{repo: {repo}}}}}
  resources: {{memory: 128m, cpus: 0.25, pids: 64}}
  snapshots: {snapshots}
  tasks:
{queued}
""")
    cli("fleet.up", "-i", str(spec), "--yes")
    cli("task.add", "-i", str(spec))
    return spec


def floor_s(lab: Lab, container: str, rounds: int = 5) -> list[float]:
    """Bare ``docker stop`` + ``docker start`` of ``container``, timed on the host."""
    c = shlex.quote(container)
    with connect(lab.status().hosts[0].target()) as conn:
        out = conn.run(f"for i in $(seq {rounds}); do t0=$(date +%s%N); docker stop -t 10 {c} >/dev/null; "
                       f"docker start {c} >/dev/null; echo $(( $(date +%s%N) - t0 )); done", hide=True).stdout  # fmt: skip
    return [int(line) / 1e9 for line in out.split()]


def measure(lab: Lab, spec: Path, name: str) -> tuple[list[float], list[float]]:
    result = json.loads(cli("fleet.work", "-i", str(spec), "--json"))
    tasks = json.loads(cli("task.list", "-i", str(spec), "--json"))
    delivered = {(e["host"], e["instance"], e["task"]): e["seconds"] for e in result["events"] if e["what"] == "delivered"}
    costs = []
    for task in tasks:
        for run in task["runs"]:
            collect = (run.get("detail") or {}).get("collect_s")
            hand = delivered.get((run["host"], run["instance"], task["id"]))
            if collect is not None and hand is not None:
                costs.append(collect + hand)
    floor = floor_s(lab, f"jk-{name}--coder-1")
    cli("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--no-final-snapshot")
    return costs, floor


def report(title: str, costs: list[float], floor: list[float]) -> None:
    print(f"== {title}")
    if not costs:
        print("no handover measured")
        return
    median, worst, base = statistics.median(costs), max(costs), statistics.median(floor)
    verdict = "within" if median <= TARGET else "OVER"
    print(f"handover (collect + stop, reset, deliver, start): {len(costs)} tasks, median {median:.2f} s, largest "
          f"{worst:.2f} s: {verdict} the {TARGET:g} s target; floor (docker stop + start alone): median {base:.2f} s; "
          f"median ratio {median / base:.1f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--checkpoints", action="store_true", help="also the btrfs tier (copy-on-write clean clone)")
    args = parser.parse_args()
    lab = Lab(f"handover-{os.getpid()}")
    work = Path(STATE) / "specs"
    work.mkdir()
    try:
        lab.up(1)
        name = f"ho{os.getpid() % 100000}"
        spec = fleet(lab, work, name, args.agents, args.tasks, "{keep: 10}")
        report("plain homes (a fresh clone at each start)", *measure(lab, spec, name))
        if args.checkpoints:
            name = f"hc{os.getpid() % 100000}"
            spec = fleet(lab, work, name, args.agents, args.tasks, "{keep: 10, checkpoints: btrfs, checkpoint_size: 1g}")
            report("btrfs tier (a copy-on-write copy of a clean clone)", *measure(lab, spec, name))
    finally:
        lab.down()


if __name__ == "__main__":
    main()
