"""The task queue in the operator's ledger (issue 21, item 2; jackin/store/tasks.py, jackin/work/queue.py): tasks
added from the command line and the spec, claimed atomically (two loops, two processes, never one attempt twice),
best-of-N on different agents, retries by failure class, cancel and retry. No host."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.spec import parse_inventory
from jackin.store.ledger import Ledger
from jackin.work import queue

ROOT = Path(__file__).resolve().parents[2]


def inventory(extra: str = "", work: bool = True):
    agent = "\n      work: {repo: /srv/src, task: t}" if work else ""
    return parse_inventory(f"""
fleet:
  name: q{os.getpid() % 1000}
  provider: lab
  agents:
    - name: coder{agent}{extra}
""")


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite3") as found:
        yield found


def test_a_task_is_claimed_once_then_goes_to_review_when_its_attempt_is_done(ledger):
    task = ledger.add_task("f", "add hello.sh", repo="/srv/src", ref="HEAD")
    task2 = ledger.add_task("f", "second")
    claimed = ledger.claim("f", "h1", "coder-1")
    assert claimed is not None and claimed[0].id == task and claimed[0].state == "running"
    assert ledger.claim("f", "h1", "coder-1") is None  # an agent holds one task at a time
    other = ledger.claim("f", "h1", "coder-2")
    assert other is not None and other[0].id == task2  # the next one, not the running one again
    done = ledger.finish_attempt(claimed[1].id, ok=True, ref="refs/jackin/f/coder-1", commit_id="abc1234")
    assert done.state == "review" and done.runs[0].state == "done"
    assert ledger.claim("f", "h1", "coder-3") is None  # nothing queued


def test_best_of_n_gives_each_attempt_to_a_different_agent(ledger):
    task = ledger.add_task("f", "three tries", attempts=3)
    claims = [ledger.claim("f", "h1", f"coder-{i}") for i in range(1, 4)]
    assert [c[1].n for c in claims if c] == [1, 2, 3]
    assert ledger.claim("f", "h1", "coder-4") is None  # all three attempts taken
    for c in claims:
        assert c is not None
        state = ledger.finish_attempt(c[1].id, ok=True).state
    assert state == "review" and ledger.task("f", task).state == "review"


def test_a_transient_failure_is_retried_after_a_backoff_and_a_tasks_own_failure_is_not(ledger):
    flaky = ledger.add_task("f", "flaky", retries=1)
    first = ledger.claim("f", "h1", "coder-1", now=100.0)
    assert first is not None
    again = ledger.finish_attempt(first[1].id, ok=False, failure_class="transient", evidence="container exited 137",
                                  now=101.0)  # fmt: skip
    assert (again.state, again.failures, again.not_before) == ("queued", 1, 111.0)
    assert ledger.claim("f", "h1", "coder-2", now=105.0) is None  # not before its backoff
    second = ledger.claim("f", "h1", "coder-2", now=112.0)
    assert second is not None and second[0].id == flaky and second[1].n == 1
    ended = ledger.finish_attempt(second[1].id, ok=False, failure_class="transient", evidence="again", now=113.0)
    assert (ended.state, ended.failure_class, ended.evidence) == ("failed", "transient", "again")  # no retry left
    own = ledger.add_task("f", "tests fail", retries=5)
    claim = ledger.claim("f", "h1", "coder-3", now=200.0)
    assert claim is not None and claim[0].id == own
    failed = ledger.finish_attempt(claim[1].id, ok=False, failure_class="task", evidence="sh test.sh: exit 1")
    assert (failed.state, failed.failure_class, len(failed.runs)) == ("failed", "task", 1)  # reported, not looped
    with pytest.raises(ValueError, match="failure classes"):
        ledger.finish_attempt(claim[1].id, ok=False)


def test_cancel_ends_running_attempts_and_retry_queues_it_again(ledger):
    task = ledger.add_task("f", "t")
    claim = ledger.claim("f", "h1", "coder-1")
    assert claim is not None
    cancelled = ledger.cancel_task("f", task)
    assert (cancelled.state, cancelled.failure_class, cancelled.runs[0].state) == ("cancelled", "operator", "cancelled")
    assert ledger.claim("f", "h1", "coder-2") is None
    with pytest.raises(SpecError, match="is cancelled: only a task not yet final can be cancelled"):
        ledger.cancel_task("f", task)
    assert ledger.retry_task("f", task).state == "queued"
    assert ledger.claim("f", "h1", "coder-2") is not None
    with pytest.raises(SpecError, match="is running: only a failed or cancelled task can be retried"):
        ledger.retry_task("f", task)
    with pytest.raises(SpecError, match="fleet 'f' has no task 99"):
        ledger.task("f", 99)


def _claimer(path: str, instance: str, out: multiprocessing.Queue) -> None:
    with Ledger(Path(path)) as ledger:
        got = []
        while (claim := ledger.claim("f", "h1", instance)) is not None:
            got.append(claim[0].id)
            ledger.finish_attempt(claim[1].id, ok=True)
        out.put(got)


def test_two_processes_claiming_at_once_never_take_one_task_twice(tmp_path):
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        ids = [ledger.add_task("f", f"task {n}") for n in range(40)]
    out: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
    workers = [multiprocessing.get_context("fork").Process(target=_claimer, args=(str(path), f"coder-{i}", out))
               for i in range(4)]  # fmt: skip
    for w in workers:
        w.start()
    taken = [tid for _ in workers for tid in out.get(timeout=60)]
    for w in workers:
        w.join(30)
    assert sorted(taken) == ids  # every task once: none lost, none twice
    with Ledger(path) as ledger:
        assert {t.state for t in ledger.tasks("f")} == {"review"} and ledger.running_claims("f") == []


def test_the_specs_tasks_are_queued_once_however_often_it_is_applied(tmp_path):
    (tmp_path / "t.md").write_text("from a file\n")
    inv = parse_inventory(f"""
fleet:
  name: qs{os.getpid() % 1000}
  provider: lab
  agents: [{{name: coder, work: {{repo: /srv/src, task: t}}}}]
  tasks:
    - {{task: first, attempts: 2, label: a}}
    - {{task_file: {tmp_path / "t.md"}, repo: /srv/other, ref: main}}
""")
    first = queue.from_spec(inv)
    assert [(t.text, t.attempts, t.repo, t.ref, t.label) for t in first] == [
        ("first", 2, "/srv/src", "HEAD", "a"), ("from a file\n", 1, "/srv/other", "main", None)]  # fmt: skip
    assert [t.id for t in queue.from_spec(inv)] == [t.id for t in first]
    assert len(queue.listed(inv)) == 2


def test_bad_task_input_is_a_clear_error_and_queues_nothing(tmp_path):
    inv = inventory()
    with pytest.raises(SpecError, match="give the task as --task TEXT or --task-file FILE"):
        queue.add(inv, text=None, task_file=None)
    with pytest.raises(SpecError, match="--task-file .*: not a file"):
        queue.add(inv, text=None, task_file=str(tmp_path / "missing"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(SpecError, match="not UTF-8 \\(at byte 0\\)"):
        queue.add(inv, text=None, task_file=str(tmp_path / "bin"))
    with pytest.raises(
        SpecError, match="--repo: which repository the task is for \\(no agent of the fleet has work\\)"
    ):
        queue.add(inventory(work=False), text="x", task_file=None)
    with pytest.raises(SpecError) as caught:
        parse_inventory("fleet:\n  name: x\n  provider: lab\n  agents: [{name: c}]\n  tasks: [{label: l}]\n")
    assert any("fleet.tasks[0]: a task needs exactly one of task" in p for p in caught.value.problems), caught.value
    assert queue.listed(inv) == []


def test_the_task_commands_from_the_cli(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "fleet:\n  name: qcli\n  provider: lab\n  agents: [{name: coder, work: {repo: /srv/src, task: t}}]\n"
    )
    env = {**os.environ, "COLUMNS": "200"}

    def inv(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                              timeout=60)  # fmt: skip

    added = inv("task.add", "-i", str(spec), "--task", "add hello.sh", "--attempts", "2", "--json")
    assert added.returncode == 0, added.stderr
    [task] = json.loads(added.stdout)
    assert (task["state"], task["attempts"], task["repo"]) == ("queued", 2, "/srv/src")
    listed = inv("task.list", "-i", str(spec))
    assert listed.returncode == 0 and "add hello.sh" in listed.stdout and "queued" in listed.stdout
    bad = inv("task.add", "-i", str(spec), "--task", "x", "--attempts", "80;id")
    assert bad.returncode == 2 and "--attempts expects a whole number from 1 to 10, got '80;id'" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = inv("task.show", "99", "-i", str(spec))
    assert missing.returncode == 2 and "fleet 'qcli' has no task 99" in missing.stderr
    cancelled = inv("task.cancel", str(task["id"]), "-i", str(spec), "--json")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)[0]["state"] == "cancelled"
    retried = inv("task.retry", str(task["id"]), "-i", str(spec), "--json")
    assert retried.returncode == 0 and json.loads(retried.stdout)[0]["state"] == "queued"
    shown = inv("task.show", str(task["id"]), "-i", str(spec))
    assert shown.returncode == 0 and "attempts" in shown.stdout and "none yet" in shown.stdout
