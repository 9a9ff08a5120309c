"""The ledger's task queue (issue 21): tasks a fleet's agents take one at a time, and each attempt at one.

Task states::

    queued ──claim──▶ running (agent, host) ──▶ review ──▶ accepted | changes (queued again, with the notes)
       ▲                    │
       └─ transient failure, retries left (after a backoff)     └──▶ failed (its class and evidence) | cancelled

A claim is one SQLite transaction (``BEGIN IMMEDIATE``: writers wait for each other, across processes), and
the ledger's indexes refuse a second running claim of one attempt or a second task for one agent, so two
loops (two operators, a restarted loop) never hand one task to two agents. An attempt's failure has a class
(``FAILURE_CLASSES``): a ``transient`` one is retried while the task has ``retries`` left, the others end the
task with their evidence. A mixin of ``jackin.store.ledger.Ledger``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import SpecError
from jackin.store.schema import Tables, who

TaskState = Literal["queued", "running", "review", "accepted", "changes", "failed", "cancelled"]
FailureClass = Literal["transient", "task", "policy", "operator"]
FAILURE_CLASSES: dict[str, str] = {
    "transient": "the container exited abnormally, the host was unreachable, the runtime crashed, the API answered "
                 "5xx or 429: retried while retries are left",
    "task": "the runtime finished and the task's tests failed, or the agent reported failure: not retried",
    "policy": "a refused egress or a spent budget: not retried",
    "operator": "cancelled: not retried",
}  # fmt: skip
FINAL = ("accepted", "failed", "cancelled")
BACKOFF = (10.0, 30.0, 90.0)  # seconds before a transient failure's retry may be claimed: 1st, 2nd, later

TASK_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, fleet TEXT NOT NULL, text TEXT NOT NULL, repo TEXT, ref TEXT,
    label TEXT, attempts INTEGER NOT NULL DEFAULT 1, retries INTEGER NOT NULL DEFAULT 2, state TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, who TEXT NOT NULL, spec_key TEXT, not_before REAL NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0, failure_class TEXT, evidence TEXT, notes TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_from_the_spec ON tasks(fleet, spec_key) WHERE spec_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS task_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task INTEGER NOT NULL, fleet TEXT NOT NULL, n INTEGER NOT NULL,
    host TEXT NOT NULL, instance TEXT NOT NULL, state TEXT NOT NULL, claimed REAL NOT NULL, finished REAL,
    failure_class TEXT, evidence TEXT, ref TEXT, commit_id TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS one_running_claim_per_attempt ON task_attempts(task, n) WHERE state = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS one_task_per_agent ON task_attempts(fleet, host, instance) WHERE state = 'running';
"""


class Attempt(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int
    task: int
    n: int  # which of the task's attempts (best-of-N: 1..N)
    host: str
    instance: str
    state: Literal["running", "done", "failed", "cancelled"]
    claimed: float
    finished: float | None = None
    failure_class: str | None = None
    evidence: str | None = None
    ref: str | None = None
    commit_id: str | None = None


class Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int
    fleet: str
    text: str
    repo: str | None = None
    ref: str | None = None
    label: str | None = None
    attempts: int = Field(1, ge=1)  # independent attempts wanted (best-of-N)
    retries: int = Field(2, ge=0)  # transient failures retried at most this often
    state: TaskState
    created: float
    updated: float
    who: str
    spec_key: str | None = None
    not_before: float = 0.0
    failures: int = 0
    failure_class: str | None = None
    evidence: str | None = None
    notes: str | None = None
    runs: list[Attempt] = Field(default_factory=list)


class TaskTables(Tables):
    """Tasks and their attempts."""

    def add_task(self, fleet: str, text: str, *, repo: str | None = None, ref: str | None = None,
                 label: str | None = None, attempts: int = 1, retries: int = 2, spec_key: str | None = None) -> int:  # fmt: skip
        """A new queued task; its id. With ``spec_key`` (a task of the spec's ``tasks:``), the id of the one
        already queued under it, if any: the spec's tasks are queued once however often it is applied."""
        if spec_key is not None:
            row = self.db.execute("SELECT id FROM tasks WHERE fleet = ? AND spec_key = ?", (fleet, spec_key)).fetchone()
            if row:
                return int(row["id"])
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO tasks (fleet, text, repo, ref, label, attempts, retries, state, created, updated, who, spec_key)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
            (fleet, text, repo, ref, label, attempts, retries, now, now, who(), spec_key),
        )
        return int(cur.lastrowid or 0)

    def task(self, fleet: str, task_id: int) -> Task:
        row = self.db.execute("SELECT * FROM tasks WHERE fleet = ? AND id = ?", (fleet, task_id)).fetchone()
        if row is None:
            raise SpecError(f"fleet {fleet!r} has no task {task_id}", hint="inv task.list shows its tasks")
        runs = [Attempt(**dict(r)) for r in self.db.execute(
            "SELECT * FROM task_attempts WHERE task = ? ORDER BY id", (task_id,))]  # fmt: skip
        return Task(**dict(row), runs=runs)

    def tasks(self, fleet: str, *, state: str | None = None) -> list[Task]:
        query, args = "SELECT id FROM tasks WHERE fleet = ?", [fleet]
        if state is not None:
            query += " AND state = ?"
            args.append(state)
        return [self.task(fleet, int(r["id"])) for r in self.db.execute(query + " ORDER BY id", args)]

    def claim(self, fleet: str, host: str, instance: str, *, now: float | None = None) -> tuple[Task, Attempt] | None:
        """The oldest task one of whose attempts is free, claimed for ``instance`` on ``host`` (None: nothing to
        claim, or the agent holds one already). One transaction: no two claims ever take one attempt."""
        now = time.time() if now is None else now
        with _immediate(self.db):
            busy = self.db.execute("SELECT 1 FROM task_attempts WHERE fleet = ? AND host = ? AND instance = ? AND "
                                   "state = 'running'", (fleet, host, instance)).fetchone()  # fmt: skip
            found = None if busy else self._free_attempt(fleet, host, instance, now)
            if found is None:
                return None
            task_id, n = found
            cur = self.db.execute(
                "INSERT INTO task_attempts (task, fleet, n, host, instance, state, claimed) "
                "VALUES (?, ?, ?, ?, ?, 'running', ?)", (task_id, fleet, n, host, instance, now))  # fmt: skip
            self.db.execute("UPDATE tasks SET state = 'running', updated = ? WHERE id = ?", (now, task_id))
        task = self.task(fleet, task_id)
        return task, next(a for a in task.runs if a.id == cur.lastrowid)

    def _free_attempt(self, fleet: str, host: str, instance: str, now: float) -> tuple[int, int] | None:
        """(task, attempt number) of the oldest queued or running task with an attempt neither running nor done,
        which this agent has not tried before (best-of-N: N different agents)."""
        rows = self.db.execute("SELECT id, attempts FROM tasks WHERE fleet = ? AND state IN ('queued', 'running') "
                               "AND not_before <= ? ORDER BY id", (fleet, now)).fetchall()  # fmt: skip
        for row in rows:
            taken = self.db.execute("SELECT n, host, instance, state FROM task_attempts WHERE task = ?",
                                    (row["id"],)).fetchall()  # fmt: skip
            if row["attempts"] > 1 and any((t["host"], t["instance"]) == (host, instance) for t in taken):
                continue  # each of N attempts on another agent
            busy = {t["n"] for t in taken if t["state"] in ("running", "done")}
            free = [n for n in range(1, row["attempts"] + 1) if n not in busy]
            if free:
                return int(row["id"]), free[0]
        return None

    def finish_attempt(self, attempt_id: int, *, ok: bool, failure_class: FailureClass | None = None,
                       evidence: str | None = None, ref: str | None = None, commit_id: str | None = None,
                       now: float | None = None) -> Task:  # fmt: skip
        """An attempt ended: done (``ok``), or failed with its class and evidence. Its task goes to review when
        every attempt is done; back to the queue (after a backoff) on a transient failure with retries left;
        failed otherwise, when no attempt is running or done."""
        now = time.time() if now is None else now
        if not ok and failure_class not in FAILURE_CLASSES:
            raise ValueError(f"a failed attempt needs one of the failure classes {', '.join(FAILURE_CLASSES)}")
        with _immediate(self.db):
            row = self.db.execute("SELECT * FROM task_attempts WHERE id = ?", (attempt_id,)).fetchone()
            if row is None or row["state"] != "running":
                raise SpecError(f"attempt {attempt_id} is not running")
            self.db.execute("UPDATE task_attempts SET state = ?, finished = ?, failure_class = ?, evidence = ?, "
                            "ref = ?, commit_id = ? WHERE id = ?",
                            ("done" if ok else "failed", now, failure_class, evidence, ref, commit_id, attempt_id))  # fmt: skip
            task = self.db.execute("SELECT * FROM tasks WHERE id = ?", (row["task"],)).fetchone()
            self._settle(task, ok=ok, failure_class=failure_class, evidence=evidence, now=now)
        return self.task(row["fleet"], row["task"])

    def _settle(self, task: sqlite3.Row, *, ok: bool, failure_class: str | None, evidence: str | None,
                now: float) -> None:  # fmt: skip
        runs = self.db.execute("SELECT state FROM task_attempts WHERE task = ?", (task["id"],)).fetchall()
        done = sum(r["state"] == "done" for r in runs)
        running = sum(r["state"] == "running" for r in runs)
        if task["state"] == "cancelled":
            return
        if ok:
            state = "review" if done >= task["attempts"] else "running" if running else "queued"
            self.db.execute("UPDATE tasks SET state = ?, updated = ? WHERE id = ?", (state, now, task["id"]))
            return
        failures = task["failures"] + 1
        if failure_class == "transient" and failures <= task["retries"]:
            wait = BACKOFF[min(failures - 1, len(BACKOFF) - 1)]
            self.db.execute("UPDATE tasks SET state = ?, failures = ?, not_before = ?, updated = ?, failure_class = ?, "
                            "evidence = ? WHERE id = ?",
                            ("running" if running else "queued", failures, now + wait, now, failure_class, evidence,
                             task["id"]))  # fmt: skip
            return
        state = "review" if done else "running" if running else "failed"
        self.db.execute("UPDATE tasks SET state = ?, failures = ?, failure_class = ?, evidence = ?, updated = ? "
                        "WHERE id = ?", (state, failures, failure_class, evidence, now, task["id"]))  # fmt: skip

    def cancel_task(self, fleet: str, task_id: int) -> Task:
        """Cancelled: never claimed again; its running attempts are marked cancelled (the loop that holds them
        stops their agents). A final task cannot be cancelled."""
        task = self.task(fleet, task_id)
        if task.state in FINAL:
            raise SpecError(f"task {task_id} is {task.state}: only a task not yet final can be cancelled")
        now = time.time()
        with _immediate(self.db):
            self.db.execute("UPDATE task_attempts SET state = 'cancelled', finished = ?, failure_class = 'operator' "
                            "WHERE task = ? AND state = 'running'", (now, task_id))  # fmt: skip
            self.db.execute("UPDATE tasks SET state = 'cancelled', failure_class = 'operator', updated = ? WHERE id = ?",
                            (now, task_id))  # fmt: skip
        return self.task(fleet, task_id)

    def retry_task(self, fleet: str, task_id: int) -> Task:
        """A failed or cancelled task queued again, at once and with its retries anew; its attempts so far stay."""
        task = self.task(fleet, task_id)
        if task.state not in ("failed", "cancelled"):
            raise SpecError(f"task {task_id} is {task.state}: only a failed or cancelled task can be retried")
        self.db.execute("UPDATE tasks SET state = 'queued', failures = 0, not_before = 0, failure_class = NULL, "
                        "evidence = NULL, updated = ? WHERE id = ?", (time.time(), task_id))  # fmt: skip
        return self.task(fleet, task_id)

    def running_claims(self, fleet: str) -> list[Attempt]:
        return [Attempt(**dict(r)) for r in self.db.execute(
            "SELECT * FROM task_attempts WHERE fleet = ? AND state = 'running' ORDER BY id", (fleet,))]  # fmt: skip


class _immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any error), unless a transaction is open already."""

    def __init__(self, db: sqlite3.Connection):
        self.db, self.mine = db, False

    def __enter__(self) -> None:
        if not self.db.in_transaction:
            self.db.execute("BEGIN IMMEDIATE")
            self.mine = True

    def __exit__(self, kind: object, *_: object) -> None:
        if self.mine:
            self.db.execute("ROLLBACK" if kind else "COMMIT")


def as_json(task: Task) -> dict[str, Any]:
    return json.loads(task.model_dump_json())
