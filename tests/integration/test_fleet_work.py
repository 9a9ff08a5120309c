"""fleet.work on a 2-host lab with demo agents (issue 21): 32 tasks from the spec's queue, the loop killed
mid-run (SIGKILL: a lost operator machine) and started again, one container killed under its task, a test that
fails, an agent that reports failure, a review gate that asks for changes once and then approves, and a best-of-3
picked by the operator.

Checked: every task ends accepted or failed with its class (the best-of-3 waits for the operator's pick); no task
ran twice (one done attempt per task and round, every running claim matching the work record on its host at the
moment the loop was killed); the retry after the killed container; the chain of the review; three refs and one
accepted for the best-of-3; fleet.review's chain. One lab and one fleet for the module.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jackin.lab import Lab
from jackin.paths import state_dir

from .conftest import ROOT, inv, module_lab, sh

PLAIN = 27


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def qlab():
    yield from module_lab("q", 2)


def _spec(lab: Lab, tmp: Path) -> tuple[str, Path, Path]:
    name = f"fw{secrets.token_hex(3)}"
    repo = tmp / "src"
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("a project\n")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "start")
    tasks = [f'    - {{task: "task {i}\\nwrite: out/{i}.txt: {i}", label: plain}}' for i in range(PLAIN)]
    tasks += ['    - {task: "slow task\\nsleep: 6\\nwrite: slow.txt: ok", label: killed}',
              '    - {task: "tested task\\nwrite: t.txt: x\\ntest: false", label: tests-fail}',
              '    - {task: "impossible\\nfail: cannot do this", label: reported}',
              '    - {task: "reviewed task\\nwrite: a.txt: hello", label: reviewed, review: {agent: reviewer, rounds: 2, '
              'instructions: "verdict-if: test -f FIXED.md => write: FIXED.md: yes"}}',
              '    - {task: "best of three\\nwrite: best.txt: x", label: best, attempts: 3}',
              '    - {task: "cancel me\\nsleep: 60\\nwrite: c.txt: no", label: cancelled}']  # fmt: skip
    spec = tmp / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 2}}
  agents:
    - name: coder
      role: demo
      count: 4
      work: {{repo: src}}
    - name: reviewer
      role: demo
      work: {{repo: src}}
  resources: {{memory: 128m, cpus: 0.25, pids: 64}}
  tasks:
""" + "\n".join(tasks) + "\n")
    return name, spec, repo


def ledger() -> sqlite3.Connection:
    db = sqlite3.connect(state_dir() / "ledger.sqlite3")
    db.row_factory = sqlite3.Row
    return db


def records(lab: Lab, fleet: str) -> dict[tuple[int, str], str]:
    """(host index, instance) -> the attempt its work record names (``queue N``)."""
    found = {}
    for host in (0, 1):
        out = sh(lab, f"grep -H '^queue ' /var/lib/jackin/work/{fleet}/*.digests 2>/dev/null", host=host, warn=True)
        for line in out.stdout.splitlines():
            path, _, attempt = line.partition(":queue ")
            found[(host, Path(path).name.removesuffix(".digests"))] = attempt.strip()
    return found


def test_the_queue_is_served_to_the_end_through_a_killed_loop_a_killed_container_and_a_review(qlab, tmp_path) -> None:
    name, spec, repo = _spec(qlab, tmp_path)
    try:
        _run(qlab, name, spec, repo)
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--no-final-snapshot")


def _run(lab: Lab, name: str, spec: Path, repo: Path) -> None:
    done = inv("fleet.up", "-i", str(spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    added = inv("task.add", "-i", str(spec), "--json")
    assert added.returncode == 0, added.stderr
    assert len(json.loads(added.stdout)) == PLAIN + 6
    hosts = {f"{lab.name}-{i + 1}": i for i in range(2)}

    # The first loop, a process of its own, killed hard once a third of the tasks are accepted.
    first = subprocess.Popen([sys.executable, "-m", "invoke", "fleet.work", "-i", str(spec), "--json"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
                             start_new_session=True)  # fmt: skip
    killed_container = None
    cancelled, stopped = None, False
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            with ledger() as db:
                accepted = db.execute("SELECT count(*) FROM tasks WHERE fleet = ? AND state = 'accepted'",
                                      (name,)).fetchone()[0]  # fmt: skip
                slow = db.execute("SELECT a.id, a.host, a.instance FROM task_attempts a JOIN tasks t ON t.id = a.task "
                                  "WHERE t.fleet = ? AND t.label = 'killed' AND a.state = 'running'", (name,)).fetchone()  # fmt: skip
                cancel = db.execute("SELECT a.id, a.task, a.host, a.instance, a.state FROM task_attempts a JOIN tasks t "
                                    "ON t.id = a.task WHERE t.fleet = ? AND t.label = 'cancelled' ORDER BY a.id",
                                    (name,)).fetchone()  # fmt: skip
            if killed_container is None and slow is not None:
                found = records(lab, name).get((hosts[slow["host"]], slow["instance"]))
                if found == str(slow["id"]):  # delivered: its container is killed under it
                    killed_container = f"jk-{name}--{slow['instance']}"
                    sh(lab, f"docker kill {killed_container}", host=hosts[slow["host"]])
            if cancel is not None and cancelled is None and cancel["state"] == "running":
                if records(lab, name).get((hosts[cancel["host"]], cancel["instance"])) == str(cancel["id"]):
                    assert inv("task.cancel", str(cancel["task"]), "-i", str(spec)).returncode == 0
                    cancelled = cancel
            if cancelled is not None and not stopped:  # the loop stops its container, or hands it the next task
                host, instance = hosts[cancelled["host"]], cancelled["instance"]
                running = sh(lab, f"docker inspect -f '{{{{.State.Running}}}}' jk-{name}--{instance}", host=host).stdout
                stopped = running.strip() == "false" or records(lab, name).get((host, instance)) != str(cancelled["id"])
            if accepted >= 10 and killed_container is not None and stopped:
                with ledger() as db:  # killed while tasks are in flight: some agent holds a claim
                    claims = db.execute("SELECT id, host, instance FROM task_attempts WHERE fleet = ? AND "
                                        "state = 'running'", (name,)).fetchall()  # fmt: skip
                if claims:
                    on_hosts = records(lab, name)
                    break
            assert first.poll() is None, first.communicate()
            time.sleep(0.3)
        else:
            pytest.fail("the first loop did not accept 10 tasks with some in flight within 240 s")
        # At the kill: every running claim is its agent's own, and no agent's record names another's claim.
        running = {str(c["id"]): (hosts[c["host"]], c["instance"]) for c in claims}
        assert running and len(set(running.values())) == len(running)  # one task per agent
        for where, attempt in on_hosts.items():  # an agent works only on what the ledger says is its own
            assert attempt not in running or running[attempt] == where, (where, attempt, running)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    # The second loop takes up where the first was, to the end.
    second = inv("fleet.work", "-i", str(spec), "--json")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    result = json.loads(second.stdout)
    assert result["reason"] == "empty"

    shown = json.loads(inv("task.list", "-i", str(spec), "--json", check=True).stdout)
    by_label: dict[str, list[dict]] = {}
    for task in shown:
        by_label.setdefault(task["label"] or "", []).append(task)
    for task in shown:  # no task ran twice: one done attempt per task, round and number, and none at once
        done_runs = [(r["round"], r["n"]) for r in task["runs"] if r["state"] == "done"]
        assert len(done_runs) == len(set(done_runs)), task
        for a in task["runs"]:
            for b in task["runs"]:
                if a["id"] < b["id"] and (a["round"], a["n"]) == (b["round"], b["n"]):
                    assert a["finished"] is not None and a["finished"] <= b["claimed"], (a, b)
    plain = by_label["plain"]
    assert [t["state"] for t in plain] == ["accepted"] * PLAIN
    for task in plain:
        assert sum(r["state"] == "done" for r in task["runs"]) == 1
        accepted = git("-C", str(repo), "rev-parse", f"refs/jackin/{name}/accepted/{task['id']}")
        i = task["text"].split()[1]
        assert git("-C", str(repo), "show", f"{accepted}:out/{i}.txt") == i  # the task's own work, fresh workspace
        assert git("-C", str(repo), "ls-tree", "--name-only", accepted, "out/") == f"out/{i}.txt"

    (slow,) = by_label["killed"]
    assert slow["state"] == "accepted", slow
    assert slow["runs"][0]["state"] == "failed" and slow["runs"][0]["failure_class"] == "transient", slow["runs"]
    assert slow["runs"][-1]["state"] == "done"

    (tested,) = by_label["tests-fail"]
    assert (tested["state"], tested["failure_class"], len(tested["runs"])) == ("failed", "task", 1), tested
    assert "`false` exited 1" in tested["evidence"]
    (reported,) = by_label["reported"]
    assert (reported["state"], reported["failure_class"], len(reported["runs"])) == ("failed", "task", 1), reported
    assert "cannot do this" in reported["evidence"]

    (reviewed,) = by_label["reviewed"]
    assert reviewed["state"] == "accepted" and reviewed["round"] == 2, reviewed
    chain = json.loads(inv("fleet.review", "-i", str(spec), "--json").stdout)["tasks"]
    mine = next(t for t in chain if t["id"] == reviewed["id"])
    verdicts = [r["verdict"] for review in mine["reviews"] for r in review["runs"] if r["state"] == "done"]
    assert verdicts == ["changes", "approve"], mine["reviews"]
    assert all(r["instance"].startswith("reviewer-") for review in mine["reviews"] for r in review["runs"])
    accepted = git("-C", str(repo), "rev-parse", f"refs/jackin/{name}/accepted/{reviewed['id']}")
    assert git("-C", str(repo), "show", f"{accepted}:FIXED.md") == "yes"  # the second round did what was asked

    (gone,) = by_label["cancelled"]
    assert (gone["state"], gone["failure_class"]) == ("cancelled", "operator") and len(gone["runs"]) == 1, gone
    assert gone["runs"][0]["state"] == "cancelled"

    (best,) = by_label["best"]
    assert best["state"] == "review", best  # no gate: the operator picks
    runs = [r for r in best["runs"] if r["state"] == "done"]
    assert len(runs) == 3 and len({(r["host"], r["instance"]) for r in runs}) == 3
    refs = git("-C", str(repo), "for-each-ref", "--format=%(refname)", f"refs/jackin/{name}/attempts/").split()
    assert {f"refs/jackin/{name}/attempts/{r['id']}" for r in runs} <= set(refs)
    picked = inv("task.accept", str(best["id"]), "--attempt", "2", "-i", str(spec), "--json")
    assert picked.returncode == 0, picked.stderr
    second_commit = next(r["commit_id"] for r in runs if r["n"] == 2)
    assert git("-C", str(repo), "rev-parse", f"refs/jackin/{name}/accepted/{best['id']}") == second_commit
    again = inv("task.accept", str(best["id"]), "--attempt", "1", "-i", str(spec))
    assert again.returncode == 2 and "accepted already" in again.stderr
    assert git("-C", str(repo), "rev-parse", f"refs/jackin/{name}/accepted/{best['id']}") == second_commit  # unmoved


def test_fleet_run_serves_the_specs_tasks_then_tears_the_fleet_down(qlab, tmp_path) -> None:
    name, repo = f"fr{secrets.token_hex(3)}", tmp_path / "src"
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("a project\n")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "start")
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {qlab.name}, hosts: 2}}
  agents:
    - {{name: coder, role: demo, count: 2, work: {{repo: src}}}}
  resources: {{memory: 128m, cpus: 0.25, pids: 64}}
  tasks:
    - {{task: "one\\nwrite: one.txt: 1"}}
    - {{task: "two\\nwrite: two.txt: 2"}}
    - {{task: "three\\nfail: not today"}}
""")
    try:
        done = inv("fleet.run", "-i", str(spec), "--yes", "--keep-lab", "--json")
        assert done.returncode == 5, done.stdout[-3000:] + done.stderr[-3000:]  # ran to the end; a task failed
        phases = [(p["phase"], p["status"]) for p in json.loads(done.stdout)["phases"]]
        assert phases == [("up", "ok"), ("wait", "ok"), ("collect", "ok"), ("down", "ok")], phases
        tasks = {t["text"].split()[0]: t for t in json.loads(inv("task.list", "-i", str(spec), "--json").stdout)}
        assert {k: t["state"] for k, t in tasks.items()} == {"one": "accepted", "two": "accepted", "three": "failed"}
        for word, number in (("one", "1"), ("two", "2")):
            accepted = f"refs/jackin/{name}/accepted/{tasks[word]['id']}"
            assert git("-C", str(repo), "show", f"{accepted}:{word}.txt") == number
        for host in (0, 1):  # torn down: nothing of the fleet is left on its hosts
            assert not sh(qlab, f"docker ps -aq --filter label=jackin.fleet={name}", host=host).stdout.strip()
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--no-final-snapshot")
