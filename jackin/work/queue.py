"""The fleet's task queue as the operator uses it (``inv task.*``): tasks added from the command line or from
the spec's ``tasks:``, listed, shown with their attempts, cancelled and queued again. The queue itself, its
states and its atomic claims: ``jackin.store.tasks``. Touches no host.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jackin.errors import SpecError
from jackin.spec import Inventory
from jackin.spec.models import ReviewSpec, TaskSpec
from jackin.store.ledger import Ledger
from jackin.store.tasks import Attempt, ReviewGate, Task

MAX_TASK = 256 * 1024  # bytes of a task's text


def task_text(text: str | None, task_file: str | None) -> str:
    """The task's text, given as text or as a file (UTF-8, at most MAX_TASK bytes); SpecError (exit 2) otherwise."""
    if (text is None) == (task_file is None):
        raise SpecError("give the task as --task TEXT or --task-file FILE (one of them)")
    if text is not None:
        if not text.strip():
            raise SpecError("--task: the task is empty")
        return text
    assert task_file is not None
    path = Path(task_file).expanduser()
    try:
        data = path.read_bytes()[: MAX_TASK + 1] if path.is_file() else None
    except OSError as error:
        raise SpecError(f"--task-file {task_file}: cannot be read ({error.strerror})") from None
    if data is None:
        raise SpecError(f"--task-file {task_file}: not a file")
    if len(data) > MAX_TASK:
        raise SpecError(f"--task-file {task_file}: larger than {MAX_TASK // 1024} KiB")
    try:
        found = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(f"--task-file {task_file}: not UTF-8 (at byte {error.start})") from None
    if not found.strip():
        raise SpecError(f"--task-file {task_file}: the task is empty")
    return found


def default_repo(inventory: Inventory) -> tuple[str, str]:
    """(repository, ref) a task is for when it names none: the fleet's agents' work's, when they share one."""
    found = {(a.work.repo, a.work.ref) for a in inventory.fleet.agents if a.work is not None}
    if len(found) == 1:
        return next(iter(found))
    why = "no agent of the fleet has work" if not found else "the fleet's agents work on several repositories"
    raise SpecError(f"--repo: which repository the task is for ({why})", hint="give --repo (and --ref)")


def gate(inventory: Inventory, own: ReviewSpec | None = None, *, reviewer: str | None = None,
         rounds: int | None = None) -> ReviewGate | None:  # fmt: skip
    """A task's review gate: ``reviewer`` (and ``rounds``) given on the command line, else the task's own
    ``review:``, else the fleet's; None: no review (a single attempt done is accepted as it is)."""
    names = [a.name for a in inventory.fleet.agents]
    if reviewer is not None:
        if reviewer not in names:
            raise SpecError(f"--reviewer: {reviewer!r} is not an agent of fleet {inventory.fleet.name}",
                            hint=f"its agents: {', '.join(names)}")  # fmt: skip
        base = own or inventory.fleet.review
        return ReviewGate(agent=reviewer, rounds=rounds or (base.rounds if base else 2),
                          instructions=base.instructions if base else None)  # fmt: skip
    if rounds is not None:
        raise SpecError("--rounds goes with --reviewer")
    chosen = own or inventory.fleet.review
    return ReviewGate(**chosen.model_dump()) if chosen is not None else None


def add(inventory: Inventory, *, text: str | None, task_file: str | None, repo: str | None = None,
        ref: str | None = None, attempts: int = 1, retries: int = 2, label: str | None = None,
        reviewer: str | None = None, rounds: int | None = None) -> Task:  # fmt: skip
    """One task queued for the fleet (``text`` or ``task_file``); with neither, the spec's ``tasks:`` (see
    ``from_spec``) is not this: this adds exactly one."""
    body = task_text(text, task_file)
    review = gate(inventory, reviewer=reviewer, rounds=rounds)
    if repo is None:
        repo, spec_ref = default_repo(inventory)
        ref = ref or spec_ref
    if not 1 <= attempts <= 10:
        raise SpecError(f"--attempts: expected a whole number from 1 to 10, got {attempts}")
    if not 0 <= retries <= 10:
        raise SpecError(f"--retries: expected a whole number from 0 to 10, got {retries}")
    with Ledger() as ledger:
        task_id = ledger.add_task(inventory.fleet.name, body, repo=repo, ref=ref or "HEAD", label=label,
                                  attempts=attempts, retries=retries, review=review)  # fmt: skip
        return ledger.task(inventory.fleet.name, task_id)


def spec_key(index: int, task: TaskSpec) -> str:
    """A spec task's identity: its place and content (the same task applied again is not queued twice; an edited
    one is a new task)."""
    return hashlib.sha256(json.dumps([index, task.model_dump()], sort_keys=True).encode()).hexdigest()[:16]


def from_spec(inventory: Inventory) -> list[Task]:
    """The spec's ``tasks:``, each queued once (a task already queued from the spec is left as it is)."""
    if not inventory.fleet.tasks:
        raise SpecError("the spec has no tasks: (and no --task or --task-file was given)",
                        hint="give --task TEXT, --task-file FILE, or a tasks: list in the spec")  # fmt: skip
    prepared = []
    for index, task in enumerate(inventory.fleet.tasks):
        body = task_text(task.task, task.task_file)
        repo, ref = (task.repo, task.ref or "HEAD") if task.repo else default_repo(inventory)
        prepared.append((index, task, body, repo, task.ref or ref))
    with Ledger() as ledger, ledger.transaction():
        ids = [ledger.add_task(inventory.fleet.name, body, repo=repo, ref=ref, label=task.label,
                               attempts=task.attempts, retries=task.retries, spec_key=spec_key(index, task),
                               review=gate(inventory, task.review))
               for index, task, body, repo, ref in prepared]  # fmt: skip
    with Ledger() as ledger:
        return [ledger.task(inventory.fleet.name, i) for i in ids]


def listed(inventory: Inventory, *, state: str | None = None) -> list[Task]:
    with Ledger() as ledger:
        return ledger.tasks(inventory.fleet.name, state=state)


def shown(inventory: Inventory, task_id: int) -> Task:
    with Ledger() as ledger:
        return ledger.task(inventory.fleet.name, task_id)


def cancel(inventory: Inventory, task_id: int) -> Task:
    with Ledger() as ledger:
        return ledger.cancel_task(inventory.fleet.name, task_id)


def retry(inventory: Inventory, task_id: int) -> Task:
    with Ledger() as ledger:
        return ledger.retry_task(inventory.fleet.name, task_id)


def accept(inventory: Inventory, task_id: int, attempt: int | None) -> Task:
    """The operator's pick (``task.accept ID [--attempt K]``): attempt K of the task's current round (the only
    finished one when not given) is its result; ``refs/jackin/<fleet>/accepted/<task>`` points to it."""
    from jackin.work import gate as review_gate  # lazy: git, needed by this command alone

    with Ledger() as ledger:
        task = ledger.task(inventory.fleet.name, task_id)
        done = [a for a in task.current() if a.state == "done"]
        chosen: Attempt | None
        if attempt is None:
            if len(done) != 1:
                raise SpecError(f"task {task_id} has {len(done)} finished attempts in its round {task.round}: "
                                "say which with --attempt K", hint=f"inv task.show {task_id} lists them")  # fmt: skip
            chosen = done[0]
        else:
            chosen = next((a for a in done if a.n == attempt), None)
            if chosen is None:
                raise SpecError(f"task {task_id} has no finished attempt {attempt} in its round {task.round}",
                                hint=f"finished: {', '.join(str(a.n) for a in done) or 'none'}")  # fmt: skip
        return ledger.accept_task(inventory.fleet.name, task_id, chosen.id,
                                  before=lambda t, a: review_gate.point_accepted(inventory.fleet.name, t, a))  # fmt: skip
