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
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
CREATE UNIQUE INDEX IF NOT EXISTS one_task_per_agent ON task_attempts(fleet, host, instance) WHERE state = 'running';
"""
# Columns added after the first release of the queue (a ledger made then gets them on opening: ``migrate``).
# tasks: ``kind`` work or review; ``parent`` the task a review reviews; ``agent`` the only agent that may claim it
# (a review's reviewer); ``review`` the gate's settings (JSON: agent, rounds, instructions); ``round`` the
# review round the task is in; ``accepted`` the accepted attempt; ``base`` the commit a changes round starts from.
# task_attempts: ``round``; ``agent``; a review's ``verdict`` and ``notes``; ``detail`` (JSON: diff, tests, usage);
# ``final`` a failed attempt that is not tried again (its number is not free: best-of-N runs each number once).
TASK_COLUMNS = {
    "tasks": (("kind", "TEXT NOT NULL DEFAULT 'work'"), ("parent", "INTEGER"), ("agent", "TEXT"), ("review", "TEXT"),
              ("round", "INTEGER NOT NULL DEFAULT 1"), ("accepted", "INTEGER"), ("base", "TEXT")),
    "task_attempts": (("round", "INTEGER NOT NULL DEFAULT 1"), ("agent", "TEXT"), ("verdict", "TEXT"),
                      ("notes", "TEXT"), ("detail", "TEXT"), ("final", "INTEGER NOT NULL DEFAULT 0")),
}  # fmt: skip
# One running claim per attempt of a round (the first release keyed it by (task, n): dropped on migration).
ROUND_INDEX = ("CREATE UNIQUE INDEX IF NOT EXISTS one_running_claim_per_attempt_of_a_round "
               "ON task_attempts(task, round, n) WHERE state = 'running'")  # fmt: skip


def migrate(db: sqlite3.Connection) -> None:
    """The task tables of a ledger made by an earlier release brought up to date: the columns it lacks added."""
    db.executescript(TASK_SCHEMA)
    for table, columns in TASK_COLUMNS.items():
        have = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
        for column, kind in columns:
            if column not in have:
                try:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as error:  # another process added it first
                    if "duplicate column" not in str(error):
                        raise
    db.execute("DROP INDEX IF EXISTS one_running_claim_per_attempt")
    db.execute(ROUND_INDEX)


class Attempt(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int
    task: int
    n: int  # which of the task's attempts (best-of-N: 1..N)
    round: int = 1  # the review round it belongs to
    host: str
    instance: str
    agent: str | None = None
    state: Literal["running", "done", "failed", "cancelled"]
    claimed: float
    finished: float | None = None
    failure_class: str | None = None
    evidence: str | None = None
    ref: str | None = None
    commit_id: str | None = None
    verdict: str | None = None  # a review's: approve, or changes
    notes: str | None = None  # a review's notes (changes: what to change)
    final: bool = False  # failed and not tried again
    detail: dict[str, Any] | None = None  # diff stat, tests and their results, tokens: what fleet.review compares

    @field_validator("detail", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value


class ReviewGate(BaseModel):
    """A task's review gate: which agent reviews it, for how many rounds of changes at most, and what to look for."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    rounds: int = Field(2, ge=1, le=10)
    instructions: str | None = None


class Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int
    fleet: str
    kind: Literal["work", "review"] = "work"
    parent: int | None = None  # a review's: the task it reviews
    agent: str | None = None  # only this agent's instances may claim it (a review's reviewer)
    text: str
    repo: str | None = None
    ref: str | None = None
    base: str | None = None  # the commit a changes round (or a review) starts from
    label: str | None = None
    attempts: int = Field(1, ge=1)  # independent attempts wanted (best-of-N)
    retries: int = Field(2, ge=0)  # transient failures retried at most this often
    review: ReviewGate | None = None
    round: int = 1
    state: TaskState
    created: float
    updated: float
    who: str
    spec_key: str | None = None
    not_before: float = 0.0
    failures: int = 0
    failure_class: str | None = None
    evidence: str | None = None
    notes: str | None = None  # the last review's notes, handed to the next round
    accepted: int | None = None  # the accepted attempt's id
    runs: list[Attempt] = Field(default_factory=list)

    @field_validator("review", mode="before")
    @classmethod
    def _gate(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def current(self) -> list[Attempt]:
        """The attempts of the task's current round."""
        return [a for a in self.runs if a.round == self.round]


class TaskTables(Tables):
    """Tasks and their attempts."""

    def add_task(self, fleet: str, text: str, *, repo: str | None = None, ref: str | None = None,
                 label: str | None = None, attempts: int = 1, retries: int = 2, spec_key: str | None = None,
                 kind: str = "work", parent: int | None = None, agent: str | None = None,
                 review: ReviewGate | None = None, base: str | None = None) -> int:  # fmt: skip
        """A new queued task; its id. With ``spec_key`` (a task of the spec's ``tasks:``), the id of the one
        already queued under it, if any: the spec's tasks are queued once however often it is applied."""
        if spec_key is not None:
            row = self.db.execute("SELECT id FROM tasks WHERE fleet = ? AND spec_key = ?", (fleet, spec_key)).fetchone()
            if row:
                return int(row["id"])
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO tasks (fleet, text, repo, ref, label, attempts, retries, state, created, updated, who, spec_key,"
            " kind, parent, agent, review, base) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fleet, text, repo, ref, label, attempts, retries, now, now, who(), spec_key, kind, parent, agent,
             review.model_dump_json() if review is not None else None, base),
        )  # fmt: skip
        return int(cur.lastrowid or 0)

    def task(self, fleet: str, task_id: int) -> Task:
        row = self.db.execute("SELECT * FROM tasks WHERE fleet = ? AND id = ?", (fleet, task_id)).fetchone()
        if row is None:
            raise SpecError(f"fleet {fleet!r} has no task {task_id}", hint="inv task.list shows its tasks")
        runs = [Attempt(**dict(r)) for r in self.db.execute(
            "SELECT * FROM task_attempts WHERE task = ? ORDER BY id", (task_id,))]  # fmt: skip
        return Task(**dict(row), runs=runs)

    def tasks(self, fleet: str, *, state: str | None = None, kind: str | None = None) -> list[Task]:
        """The fleet's tasks (in ``state``, of ``kind``) with their attempts: two queries, whatever their number."""
        where, args = "fleet = ?", [fleet]
        if state is not None:
            where += " AND state = ?"
            args.append(state)
        if kind is not None:
            where += " AND kind = ?"
            args.append(kind)
        rows = self.db.execute(f"SELECT * FROM tasks WHERE {where} ORDER BY id", args).fetchall()
        runs: dict[int, list[Attempt]] = {}
        for r in self.db.execute(f"SELECT * FROM task_attempts WHERE task IN (SELECT id FROM tasks WHERE {where}) "
                                 "ORDER BY id", args):  # fmt: skip
            runs.setdefault(int(r["task"]), []).append(Attempt(**dict(r)))
        return [Task(**dict(row), runs=runs.get(int(row["id"]), [])) for row in rows]

    def task_counts(self, fleet: str, *, kind: str | None = None) -> dict[str, int]:
        """How many of the fleet's tasks (of ``kind``) are in each state."""
        query, args = "SELECT state, count(*) AS n FROM tasks WHERE fleet = ?", [fleet]
        if kind is not None:
            query += " AND kind = ?"
            args.append(kind)
        return {r["state"]: int(r["n"]) for r in self.db.execute(query + " GROUP BY state", args)}

    def attempt(self, attempt_id: int) -> Attempt:
        row = self.db.execute("SELECT * FROM task_attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise SpecError(f"no attempt {attempt_id}")
        return Attempt(**dict(row))

    def claim(self, fleet: str, host: str, instance: str, *, agent: str | None = None,
              kinds: tuple[str, ...] = ("work", "review"), now: float | None = None) -> tuple[Task, Attempt] | None:  # fmt: skip
        """The oldest task one of whose attempts is free, claimed for ``instance`` (of ``agent``) on ``host`` (None:
        nothing to claim, or the agent holds one already). ``kinds``: which tasks this agent takes (a reviewer,
        reviews only). One transaction: no two claims ever take one attempt."""
        now = time.time() if now is None else now
        with _immediate(self.db):
            busy = self.db.execute("SELECT 1 FROM task_attempts WHERE fleet = ? AND host = ? AND instance = ? AND "
                                   "state = 'running'", (fleet, host, instance)).fetchone()  # fmt: skip
            found = None if busy else self._free_attempt(fleet, host, instance, agent, kinds, now)
            if found is None:
                return None
            task_id, n, round_ = found
            cur = self.db.execute(
                "INSERT INTO task_attempts (task, fleet, n, round, host, instance, agent, state, claimed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)", (task_id, fleet, n, round_, host, instance, agent, now))  # fmt: skip
            self.db.execute("UPDATE tasks SET state = 'running', updated = ? WHERE id = ?", (now, task_id))
        task = self.task(fleet, task_id)
        return task, next(a for a in task.runs if a.id == cur.lastrowid)

    def _free_attempt(self, fleet: str, host: str, instance: str, agent: str | None, kinds: tuple[str, ...],
                      now: float) -> tuple[int, int, int] | None:  # fmt: skip
        """(task, attempt number, round) of the oldest claimable task with an attempt of its round neither running
        nor done, which this agent may take: best-of-N on N different agents; a review on an agent that made
        none of the attempts it reviews; a task reserved for an agent (a review) on that agent only."""
        marks = ",".join("?" * len(kinds))
        rows = self.db.execute(f"SELECT id, attempts, round, kind, parent, agent FROM tasks WHERE fleet = ? AND state IN "
                               f"('queued', 'running', 'changes') AND not_before <= ? AND kind IN ({marks}) ORDER BY id",
                               (fleet, now, *kinds)).fetchall()  # fmt: skip
        for row in rows:
            if row["agent"] is not None and row["agent"] != agent:
                continue
            taken = self.db.execute("SELECT n, host, instance, state, final FROM task_attempts WHERE task = ? AND "
                                    "round = ?", (row["id"], row["round"])).fetchall()  # fmt: skip
            if row["attempts"] > 1 and any((t["host"], t["instance"]) == (host, instance) for t in taken):
                continue  # each of N attempts on another agent
            if row["kind"] == "review" and row["parent"] is not None and self.db.execute(
                    "SELECT 1 FROM task_attempts a JOIN tasks t ON t.id = a.task WHERE a.task = ? AND a.round = t.round "
                    "AND a.host = ? AND a.instance = ? AND a.state = 'done'", (row["parent"], host, instance)).fetchone():  # fmt: skip
                continue  # a review is never the reviewed agent's own
            free = [n for n in range(1, row["attempts"] + 1) if n not in _busy(taken)]
            if free:
                return int(row["id"]), free[0], int(row["round"])
        return None

    def finish_attempt(self, attempt_id: int, *, ok: bool, failure_class: FailureClass | None = None,
                       evidence: str | None = None, ref: str | None = None, commit_id: str | None = None,
                       detail: dict[str, Any] | None = None, verdict: str | None = None, notes: str | None = None,
                       now: float | None = None) -> Task:  # fmt: skip
        """An attempt ended: done (``ok``), or failed with its class and evidence. Its task goes to review when
        every attempt of its round is done; back to the queue (after a backoff) on a transient failure with retries
        left; failed otherwise, when no attempt of the round is running or done."""
        now = time.time() if now is None else now
        if not ok and failure_class not in FAILURE_CLASSES:
            raise ValueError(f"a failed attempt needs one of the failure classes {', '.join(FAILURE_CLASSES)}")
        with _immediate(self.db):
            row = self.db.execute("SELECT * FROM task_attempts WHERE id = ?", (attempt_id,)).fetchone()
            if row is None or row["state"] != "running":
                raise SpecError(f"attempt {attempt_id} is not running")
            self.db.execute("UPDATE task_attempts SET state = ?, finished = ?, failure_class = ?, evidence = ?, "
                            "ref = ?, commit_id = ?, detail = ?, verdict = ?, notes = ? WHERE id = ?",
                            ("done" if ok else "failed", now, failure_class, evidence, ref, commit_id,
                             json.dumps(detail, sort_keys=True) if detail is not None else None, verdict, notes,
                             attempt_id))  # fmt: skip
            task = self.db.execute("SELECT * FROM tasks WHERE id = ?", (row["task"],)).fetchone()
            self._settle(task, ok=ok, failure_class=failure_class, evidence=evidence, now=now, attempt=attempt_id)
        return self.task(row["fleet"], row["task"])

    def _settle(self, task: sqlite3.Row, *, ok: bool, failure_class: str | None, evidence: str | None,
                now: float, attempt: int) -> None:  # fmt: skip
        """The task after one of its attempts ended. A transient failure with retries left frees its attempt's
        number again (after a backoff); any other failure is final for that number. Then: an attempt number still
        free, the task is queued (running while another runs); none free, running while one runs, in review when one
        is done, failed otherwise. Best-of-N: one attempt's own failure does not end the others."""
        if task["state"] in FINAL:
            return
        failures, wait = task["failures"], 0.0
        if not ok:
            failures += 1
            if failure_class == "transient" and failures <= task["retries"]:
                wait = BACKOFF[min(failures - 1, len(BACKOFF) - 1)]
            else:
                self.db.execute("UPDATE task_attempts SET final = 1 WHERE id = ?", (attempt,))
        runs = self.db.execute("SELECT n, state, final FROM task_attempts WHERE task = ? AND round = ?",
                               (task["id"], task["round"])).fetchall()  # fmt: skip
        running = any(r["state"] == "running" for r in runs)
        done = any(r["state"] == "done" for r in runs)
        free = [n for n in range(1, task["attempts"] + 1) if n not in _busy(runs)]
        state = (
            ("running" if running else "queued") if free else "running" if running else "review" if done else "failed"
        )
        fields: dict[str, Any] = {"state": state, "updated": now}
        if not ok:
            fields |= {"failures": failures, "failure_class": failure_class, "evidence": evidence}
            if wait:
                fields["not_before"] = now + wait
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE tasks SET {sets} WHERE id = ?", (*fields.values(), task["id"]))

    def accept_task(self, fleet: str, task_id: int, attempt_id: int,
                    before: Callable[[Task, Attempt], object] = lambda *_: None) -> Task:  # fmt: skip
        """``attempt_id`` (done, of the task's current round) is the task's result: the task is accepted. ``before``
        (the accepted ref moved) runs inside the same transaction, after the checks: a refused accept moves nothing."""
        with _immediate(self.db):
            task = self.task(fleet, task_id)
            chosen = next((a for a in task.runs if a.id == attempt_id), None)
            if chosen is None or chosen.state != "done":
                raise SpecError(f"attempt {attempt_id} of task {task_id} is not a finished attempt",
                                hint=f"inv task.show {task_id} lists its attempts")  # fmt: skip
            if task.state in FINAL:
                raise SpecError(f"task {task_id} is {task.state} already")
            before(task, chosen)
            self.db.execute("UPDATE tasks SET state = 'accepted', accepted = ?, updated = ? WHERE id = ?",
                            (attempt_id, time.time(), task_id))  # fmt: skip
        return self.task(fleet, task_id)

    def request_changes(self, fleet: str, task_id: int, notes: str, *, base: str | None) -> bool:
        """A review asked for changes: the task (in review) goes to its next round, queued with the notes, starting
        from ``base``. False: the task was no longer in review (cancelled or accepted meanwhile)."""
        cur = self.db.execute("UPDATE tasks SET state = 'changes', round = round + 1, notes = ?, base = ?, "
                              "not_before = 0, updated = ? WHERE fleet = ? AND id = ? AND state = 'review'",
                              (notes, base, time.time(), fleet, task_id))  # fmt: skip
        return cur.rowcount == 1

    def fail_task(self, fleet: str, task_id: int, failure_class: FailureClass, evidence: str) -> bool:
        """The task failed for a reason no attempt's own failure says (a review's verdict, a failed review); only a
        task not yet final. False: it was final already."""
        cur = self.db.execute("UPDATE tasks SET state = 'failed', failure_class = ?, evidence = ?, updated = ? "
                              "WHERE fleet = ? AND id = ? AND state NOT IN ('accepted', 'failed', 'cancelled')",
                              (failure_class, evidence, time.time(), fleet, task_id))  # fmt: skip
        return cur.rowcount == 1

    def settle_review(self, fleet: str, task_id: int) -> None:
        """A review task whose attempt is done has served: accepted (its verdict is on its attempt)."""
        self.db.execute("UPDATE tasks SET state = 'accepted', updated = ? WHERE fleet = ? AND id = ? AND kind = 'review' "
                        "AND state = 'review'", (time.time(), fleet, task_id))  # fmt: skip

    def release_attempt(self, attempt_id: int, evidence: str) -> None:
        """An attempt its agent could not take (its handover failed there): ended, its number free again at once, and
        not counted against the task's retries (the agent's fault, not the task's)."""
        with _immediate(self.db):
            row = self.db.execute("SELECT task FROM task_attempts WHERE id = ? AND state = 'running'",
                                  (attempt_id,)).fetchone()  # fmt: skip
            if row is None:
                return
            self.db.execute("UPDATE task_attempts SET state = 'failed', finished = ?, failure_class = 'transient', "
                            "evidence = ? WHERE id = ?", (time.time(), evidence, attempt_id))  # fmt: skip
            self.db.execute("UPDATE tasks SET state = CASE WHEN EXISTS (SELECT 1 FROM task_attempts WHERE task = ? AND "
                            "state = 'running') THEN 'running' ELSE 'queued' END, updated = ? WHERE id = ? AND state "
                            "NOT IN ('accepted', 'failed', 'cancelled', 'review')", (row["task"], time.time(), row["task"]))  # fmt: skip

    def reviews_of(self, fleet: str, task_id: int) -> list[Task]:
        return [self.task(fleet, int(r["id"])) for r in self.db.execute(
            "SELECT id FROM tasks WHERE fleet = ? AND parent = ? ORDER BY id", (fleet, task_id))]  # fmt: skip

    def cancel_task(self, fleet: str, task_id: int) -> Task:
        """Cancelled: never claimed again; its running attempts are marked cancelled (the loop that holds them
        stops their agents). A final task cannot be cancelled. Its open review, if any, is cancelled with it."""
        task = self.task(fleet, task_id)
        if task.state in FINAL:
            raise SpecError(f"task {task_id} is {task.state}: only a task not yet final can be cancelled")
        now = time.time()
        with _immediate(self.db):
            ids = [task_id] + [int(r["id"]) for r in self.db.execute(
                "SELECT id FROM tasks WHERE parent = ? AND state NOT IN ('accepted', 'failed', 'cancelled')", (task_id,))]  # fmt: skip
            for each in ids:
                self.db.execute("UPDATE task_attempts SET state = 'cancelled', finished = ?, failure_class = 'operator' "
                                "WHERE task = ? AND state = 'running'", (now, each))  # fmt: skip
                self.db.execute("UPDATE tasks SET state = 'cancelled', failure_class = 'operator', updated = ? "
                                "WHERE id = ?", (now, each))  # fmt: skip
        return self.task(fleet, task_id)

    def retry_task(self, fleet: str, task_id: int) -> Task:
        """A failed or cancelled task queued again, at once and with its retries anew; its attempts so far stay."""
        task = self.task(fleet, task_id)
        if task.state not in ("failed", "cancelled"):
            raise SpecError(f"task {task_id} is {task.state}: only a failed or cancelled task can be retried")
        with _immediate(self.db):
            self.db.execute("UPDATE task_attempts SET final = 0 WHERE task = ?", (task_id,))
            self.db.execute("UPDATE tasks SET state = 'queued', failures = 0, not_before = 0, failure_class = NULL, "
                            "evidence = NULL, updated = ? WHERE id = ?", (time.time(), task_id))  # fmt: skip
        return self.task(fleet, task_id)

    def running_claims(self, fleet: str) -> list[Attempt]:
        return [Attempt(**dict(r)) for r in self.db.execute(
            "SELECT * FROM task_attempts WHERE fleet = ? AND state = 'running' ORDER BY id", (fleet,))]  # fmt: skip


def _busy(runs: list[sqlite3.Row]) -> set[int]:
    """The attempt numbers of a round that are taken: running, done, or failed for good."""
    return {r["n"] for r in runs if r["state"] in ("running", "done") or (r["state"] == "failed" and r["final"])}


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
