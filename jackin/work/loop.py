"""``fleet.work``: the loop that serves the fleet's task queue (jackin/store/tasks.py) with its agents.

Each turn reads every host's agents in one round trip (their state, as ``fleet.wait`` reads it, and the work
record that says which attempt of the queue each one holds), then per agent:

    holds a claim, its task delivered    done or failed: collected (as fleet.collect does), the attempt finished
                                         with its class (jackin/work/gate.py), its commit kept under its own ref;
                                         container gone, exited or restarted: a transient failure; else it works
    holds a claim, not yet delivered     the handover is (re)done (a loop stopped between the two)
    holds no claim                       idle, done or failed (its spec's task collected first, once): the next
                                         task it may take is claimed (one SQLite transaction) and handed over
                                         (jackin/work/handover.py: stop, reset, deliver, start); working on its
                                         spec's task: left alone
    its task was cancelled               its container is stopped; the next claim resets it

A finished task goes through the review gate (``review:``): a review task for the reviewer agent, whose verdict
accepts an attempt (``refs/jackin/<fleet>/accepted/<task>``) or sends the task back with the notes. With no gate,
a single attempt done is accepted; best-of-N waits for the operator's ``task.accept``.

Everything the loop knows is in the ledger (claims, attempts) and on the hosts (states, work records), so
stopping it (Ctrl-C, a lost operator machine) loses nothing: the next ``fleet.work`` takes up where it was.
The loop prints nothing: it reports each turn (``on_progress``) and each event (``on_event``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents import state as derivation
from jackin.agents.read import agent_states, agents_command, parse_agents
from jackin.agents.state import AgentFacts, AgentState
from jackin.errors import EXIT_CONNECT, EXIT_OK, JackinError, SpecError
from jackin.facts.sections import read_sections
from jackin.facts.state import _WORK_DIGEST, _digests
from jackin.hostpaths import work_dir
from jackin.lab.providers import targets as fleet_targets
from jackin.operations.work import QUEUE, work_json
from jackin.paths import private_dir, state_dir
from jackin.plan import fleet as planning
from jackin.plan.make import make_plan
from jackin.spec import Inventory
from jackin.spec.models import is_git_url
from jackin.store.ledger import Ledger
from jackin.store.tasks import Attempt, Task
from jackin.transport.remote import gather
from jackin.work import bundles, gate, handover

EVERY = 1.0  # seconds between turns
UNREACHABLE_AFTER = 60.0  # seconds a host may stay unread before the attempts there fail (transient)
EXIT_LEFT = 4  # --until TIME passed with tasks left (nothing lost: fleet.work goes on with them)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Slot(_Model):
    """One agent instance on one host that serves the queue."""

    host: str
    instance: str
    agent: str
    kinds: tuple[str, ...] = ("work",)


class Event(_Model):
    at: float
    host: str
    instance: str
    what: str  # claimed, delivered, finished, failed, reviewed, accepted, changes, stopped, collected
    task: int | None = None
    detail: str = ""
    seconds: float | None = None  # a handover's time (collect + reset + deliver + start)


class Progress(_Model):
    done: int = 0  # accepted
    failed: int = 0
    running: int = 0
    queued: int = 0
    review: int = 0
    agents: dict[str, str] = Field(default_factory=dict)  # "host/instance" -> its state and task
    rate: float | None = None  # tasks finished per minute since the loop started
    eta: float | None = None  # seconds until the queue is empty at that rate
    unreachable: dict[str, str] = Field(default_factory=dict)


class WorkResult(_Model):
    fleet: str
    exit_code: int
    reason: str  # empty, deadline, interrupted
    elapsed: float
    progress: Progress
    handovers: list[float] = Field(default_factory=list)  # seconds of each handover
    events: list[Event] = Field(default_factory=list)


# --- reading the hosts -----------------------------------------------------------------------------------------


class HostRead(_Model):
    facts: dict[str, AgentFacts]
    records: dict[str, dict[str, str]]  # instance -> its work record (file -> digest, "queue" -> attempt)


def read_command(fleet: str) -> str:
    d = work_dir(fleet)
    return (f"echo '##workdigests'; grep -H '' {d}/*.digests 2>/dev/null; "
            f"{agents_command(fleet)}")  # fmt: skip


def parse(output: str) -> HostRead:
    records = _digests(read_sections(output).get("workdigests", []), _WORK_DIGEST)
    return HostRead(facts=parse_agents(output), records=records)


def slots(plan: planning.FleetPlan, hosts: list[str], reviewers: set[str]) -> list[Slot]:
    """The agents that serve the queue: those with ``work:`` (its repository; its task, if any, done first), on
    the hosts they are placed on. An agent named as a reviewer takes reviews only, unless no other agent works."""
    workers = {a.agent for a in plan.agents if a.work is not None} - reviewers
    found = []
    for host in hosts:
        for agent in plan.at(host):
            if agent.work is None:
                continue
            kinds = ("review",) if agent.agent in reviewers and workers else ("work", "review")
            found.append(Slot(host=host, instance=agent.instance, agent=agent.agent, kinds=kinds))
    return found


# --- the loop --------------------------------------------------------------------------------------------------


class Loop:
    def __init__(self, inventory: Inventory, *, on_event: Callable[[Event], None] = lambda _: None) -> None:
        self.inventory = inventory
        self.fleet = inventory.fleet.name
        with Ledger() as ledger:
            self.plan = make_plan(inventory, ledger, store=False)
        self.targets = {t.name: t for t in fleet_targets(inventory, bring_up=False)}
        if not self.targets:
            raise JackinError(f"fleet {self.fleet} has no host up: nothing can take a task",
                              hint="bring it up with inv fleet.up")  # fmt: skip
        reviewers = {self.inventory.fleet.review.agent} if self.inventory.fleet.review else set()
        reviewers |= {t.review.agent for t in self.inventory.fleet.tasks if t.review}
        with Ledger() as ledger:
            reviewers |= {t.review.agent for t in ledger.tasks(self.fleet) if t.review and t.state not in
                          ("accepted", "failed", "cancelled")}  # fmt: skip
        self.slots = slots(self.plan, list(self.targets), reviewers)
        if not self.slots:
            raise SpecError(f"no agent of fleet {self.fleet} takes tasks: an agent serves the queue when it has "
                            "work: (its repository; the task may be left out)",
                            hint="give the agents work: {repo: ...} and run inv fleet.up")  # fmt: skip
        self.agents = {(s.host, s.instance): next(a for a in self.plan.at(s.host) if a.instance == s.instance)
                       for s in self.slots}  # fmt: skip
        self.stale = derivation.stale_after(inventory.fleet)
        self.on_event = on_event
        self.events: list[Event] = []
        self.handovers: list[float] = []
        self.finished = 0
        self.baseline: dict[tuple[str, str], int] = {}  # restarts seen at delivery
        self.unread_since: dict[str, float] = {}
        self.collected_spec: set[tuple[str, str, str]] = set()

    def event(self, slot: Slot, what: str, *, task: int | None = None, detail: str = "",
              seconds: float | None = None) -> None:  # fmt: skip
        found = Event(at=time.time(), host=slot.host, instance=slot.instance, what=what, task=task, detail=detail,
                      seconds=seconds)  # fmt: skip
        self.events.append(found)
        self.on_event(found)

    # one turn ------------------------------------------------------------------------------------------------

    def turn(self) -> Progress:
        reads = gather(list(self.targets.values()), read_command(self.fleet), parse, timeout=15)
        progress = Progress()
        now = time.time()
        with Ledger() as ledger:
            claims = {(a.host, a.instance): a for a in ledger.running_claims(self.fleet)}
        for slot in self.slots:
            key = f"{slot.host}/{slot.instance}"
            read = reads.get(slot.host)
            if isinstance(read, JackinError):
                self.unread_since.setdefault(slot.host, now)
                progress.unreachable[slot.host] = read.message
                progress.agents[key] = "host not read"
                if now - self.unread_since[slot.host] > UNREACHABLE_AFTER and (slot.host, slot.instance) in claims:
                    self.fail(slot, claims[(slot.host, slot.instance)], "transient",
                              f"host {slot.host} unreachable for {UNREACHABLE_AFTER:.0f} s: {read.message}")  # fmt: skip
                continue
            self.unread_since.pop(slot.host, None)
            assert read is not None
            facts = read.facts.get(slot.instance) or AgentFacts(container="missing", now=now)
            state = agent_states({slot.instance: facts}, self.stale)[slot.instance]
            record = read.records.get(slot.instance, {})
            progress.agents[key] = self.serve(slot, facts, state, record, claims.get((slot.host, slot.instance)))
        with Ledger() as ledger:
            tasks = ledger.tasks(self.fleet)
        progress.done = sum(t.state == "accepted" and t.kind == "work" for t in tasks)
        progress.failed = sum(t.state == "failed" and t.kind == "work" for t in tasks)
        progress.running = sum(t.state == "running" for t in tasks)
        progress.queued = sum(t.state in ("queued", "changes") for t in tasks)
        progress.review = sum(t.state == "review" for t in tasks)
        return progress

    def serve(self, slot: Slot, facts: AgentFacts, state: AgentState, record: dict[str, str],
              claim: Attempt | None) -> str:  # fmt: skip
        """One agent's turn; what it is doing, for the progress line."""
        marker = record.get(QUEUE)
        if claim is not None:
            if marker != str(claim.id):  # claimed, never delivered (a loop stopped in between): deliver it now
                return self.deliver(slot, claim)
            restarted = facts.restarts > self.baseline.setdefault((slot.host, slot.instance), facts.restarts)
            ended = facts.container in ("missing", "exited", "dead") and state.state not in ("done", "failed")
            if state.state in ("done", "failed") or ended or restarted:
                self.finish(slot, claim, facts, state, restarted=restarted)
                return f"{state.state}: task {claim.task} finished"
            return f"{state.state}: task {claim.task}" + (f" ({state.message})" if state.message else "")
        if marker is not None:
            with Ledger() as ledger:
                held = _attempt(ledger, int(marker))
            if held is not None and held.state == "cancelled" and facts.container == "running" and \
                    state.state not in ("done", "failed", "idle"):  # fmt: skip
                handover.stop(self.targets[slot.host], self.agents[(slot.host, slot.instance)])
                self.event(slot, "stopped", task=held.task, detail="its task was cancelled")
        elif state.state in ("done", "failed"):  # its spec's own task: collected once, as fleet.collect does
            self.collect_spec(slot, state)
        elif state.state not in ("idle", "unknown") and facts.container == "running":
            return f"{state.state}: its spec's task"
        return self.next_task(slot)

    def next_task(self, slot: Slot) -> str:
        with Ledger() as ledger:
            claimed = ledger.claim(self.fleet, slot.host, slot.instance, agent=slot.agent, kinds=slot.kinds)
        if claimed is None:
            return "idle: no task for it"
        task, attempt = claimed
        self.event(slot, "claimed", task=task.id, detail=f"attempt {attempt.n}" + (f", round {task.round}"
                                                                                  if task.round > 1 else ""))  # fmt: skip
        return self.deliver(slot, attempt, task)

    # handover --------------------------------------------------------------------------------------------------

    def deliver(self, slot: Slot, attempt: Attempt, task: Task | None = None) -> str:
        agent = self.agents[(slot.host, slot.instance)]
        with Ledger() as ledger:
            task = task or ledger.task(self.fleet, attempt.task)
        try:
            delivery = self.delivery(agent, task, attempt)
        except JackinError as error:  # the task's repository or ref: the task's own failure
            self.fail(slot, attempt, "task", error.message)
            return f"idle: task {task.id} could not be prepared"
        try:
            seconds = handover.run(self.targets[slot.host], delivery)
        except JackinError as error:
            self.fail(slot, attempt, "transient", f"the handover failed: {error.message}")
            return f"handover of task {task.id} failed"
        self.baseline.pop((slot.host, slot.instance), None)
        self.handovers.append(seconds)
        self.event(slot, "delivered", task=task.id, seconds=round(seconds, 2),
                   detail=f"{task.kind} task, attempt {attempt.n}")  # fmt: skip
        return f"working: task {task.id} (delivered)"

    def delivery(self, agent: planning.AgentPlan, task: Task, attempt: Attempt) -> handover.Delivery:
        """The files of ``attempt``'s handover: the bundle of the commit it starts from (and, for a review, every
        attempt it reviews as a branch), the task and work.json."""
        extra: dict[str, str] = {}
        if task.kind == "review" or task.round > 1:
            directory = bundles.git_dir(str(task.repo)) if task.kind == "review" else None
            directory = directory or bundles.git_dir(gate.repo_for(self.fleet, task))
            commit = task.base
            if task.kind == "review" and task.parent is not None:
                with Ledger() as ledger:
                    parent = ledger.task(self.fleet, task.parent)
                extra = {f"jackin/attempt-{a.n}": str(a.commit_id) for a in parent.current()
                         if a.state == "done" and a.commit_id}  # fmt: skip
        else:
            directory = bundles.mirror(task.repo) if task.repo and is_git_url(task.repo) else \
                bundles.git_dir(str(task.repo or ""))  # fmt: skip
            commit = bundles.resolve(directory, task.ref or "HEAD") if directory else None
            if directory is None:
                raise SpecError(f"task {task.id}: {task.repo} is not a git repository")
        if not directory or not commit:
            raise SpecError(f"task {task.id}: {task.ref or task.base} does not name a commit in {task.repo}")
        data = bundle_with(directory, commit, extra)
        text = gate.round_text(task) if task.kind == "work" else task.text
        work = planning.WorkPlan(repo=str(task.repo), name=Path(str(task.repo)).name.removesuffix(".git") or "repo",
                                 ref=task.ref or "HEAD", branch=f"jackin/{agent.instance}", commit=commit)  # fmt: skip
        files = {"repo.bundle": data, "task.md": text.encode(), "work.json": work_json(work)}
        digests = {name: handover.digest(body) for name, body in files.items()}
        return handover.Delivery(agent=agent, attempt=attempt.id, files=files, digests=digests, commit=commit,
                                 cow=self.plan.checkpoints is not None)  # fmt: skip

    # finishing an attempt -----------------------------------------------------------------------------------------

    def fail(self, slot: Slot, attempt: Attempt, failure_class: str, evidence: str) -> None:
        with Ledger() as ledger:
            task = ledger.finish_attempt(attempt.id, ok=False, failure_class=failure_class,  # type: ignore[arg-type]
                                         evidence=evidence)  # fmt: skip
            if task.kind == "review" and task.state == "failed" and task.parent is not None:
                parent = ledger.task(self.fleet, task.parent)
                if parent.state == "review":
                    ledger.fail_task(self.fleet, parent.id, failure_class, f"its review failed: {evidence}")  # type: ignore[arg-type]
        self.finished += task.state in ("failed",)
        self.event(slot, "failed", task=attempt.task, detail=f"{failure_class}: {evidence}")

    def finish(self, slot: Slot, attempt: Attempt, facts: AgentFacts, state: AgentState, *,
               restarted: bool = False) -> None:  # fmt: skip
        """Collect the attempt's work, classify its end, keep its commit, and take its task through the gate."""
        from jackin.work import collect  # lazy: Fabric, for the loop's collections

        agent = self.agents[(slot.host, slot.instance)]
        with Ledger() as ledger:
            task = ledger.task(self.fleet, attempt.task)
        repo = gate.repo_for(self.fleet, task)
        started = time.monotonic()
        try:
            with collect.connect(self.targets[slot.host], timeout=10) as conn:
                got = collect._one(conn, self.inventory, agent, host=slot.host, into=repo, asked=True,
                                   counted=state.gateway)  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the host went away while it was read: retried
            self.fail(slot, attempt, "transient", f"its work could not be collected: {error}")
            return
        handoff = Path(got.handoff).read_text(errors="replace") if got.handoff else None
        kept_handoff = _keep_handoff(self.fleet, attempt.id, handoff)
        with Ledger() as ledger:
            ledger.record_collection(self.fleet, slot.host, slot.instance, got.result, state=got.state, repo=got.repo,
                                     ref=got.ref, commit_id=got.commit, source_commit=got.source_commit,
                                     handoff=got.handoff, evidence=got.evidence.label if got.evidence else None,
                                     detail={"task": task.id, "attempt": attempt.id})  # fmt: skip
        outcome = gate.classify(state.state, state.message, container=facts.container, exit_code=facts.exit_code,
                                restarted=restarted, handoff=handoff, gateway=state.gateway)  # fmt: skip
        if outcome.ok and got.result != "collected":
            outcome = gate.Outcome(ok=False, failure_class="task", evidence=f"its work was not collected: {got.reason}")
        ref = gate.keep_attempt(repo, self.fleet, attempt.id, got.commit) if got.commit else None
        detail: dict[str, Any] = {"repo": repo, "handoff": kept_handoff, "evidence": got.evidence.label if got.evidence else None,
                                  "diff": gate.shortstat(repo, got.source_commit, got.commit),
                                  "source": got.source_commit, "tests": gate.tests_of(handoff),
                                  "usage": got.usage.model_dump() if got.usage else None,
                                  "collect_s": round(time.monotonic() - started, 2)}  # fmt: skip
        verdict = gate.verdict_of(handoff, state.message) if task.kind == "review" and outcome.ok else None
        if task.kind == "review" and outcome.ok and verdict is None:
            outcome = gate.Outcome(ok=False, failure_class="task", evidence="the review gave no verdict (approve, or "
                                   "changes: NOTES, under ## Verdict in its handoff)")  # fmt: skip
        with Ledger() as ledger:
            task = ledger.finish_attempt(attempt.id, ok=outcome.ok, failure_class=outcome.failure_class,  # type: ignore[arg-type]
                                         evidence=outcome.evidence, ref=ref, commit_id=got.commit, detail=detail,
                                         verdict=verdict.verdict if verdict else None,
                                         notes=verdict.notes if verdict else None)  # fmt: skip
        if not outcome.ok:
            if task.kind == "review" and task.state == "failed" and task.parent is not None:
                with Ledger() as ledger:
                    ledger.fail_task(self.fleet, task.parent, outcome.failure_class or "task",  # type: ignore[arg-type]
                                     f"its review (task {task.id}) failed: {outcome.evidence}")  # fmt: skip
            self.finished += task.state == "failed"
            self.event(slot, "failed", task=task.id, detail=f"{outcome.failure_class}: {outcome.evidence}")
            return
        self.event(slot, "finished", task=task.id, detail=f"attempt {attempt.n}: {detail['diff'] or 'no diff'}")
        if task.kind == "review" and verdict is not None:
            self.reviewed(slot, task, verdict)
        elif task.state == "review":
            self.to_gate(slot, task)

    def to_gate(self, slot: Slot, task: Task) -> None:
        """A work task whose attempts are all done: to its reviewer, accepted (one attempt, no gate), or left for
        the operator's pick (best-of-N, no gate)."""
        done = [a for a in task.current() if a.state == "done"]
        if task.review is not None:
            repo = gate.repo_for(self.fleet, task)
            shown = [(a, gate.diff_of(repo, (a.detail or {}).get("source"), a.commit_id),
                      _read((a.detail or {}).get("handoff"))) for a in done]  # fmt: skip
            text = gate.review_text(task, shown, task.review.instructions)
            with Ledger() as ledger:
                review = ledger.add_task(self.fleet, text, repo=repo, ref=done[0].commit_id, base=done[0].commit_id,
                                         kind="review", parent=task.id, agent=task.review.agent, retries=task.retries,
                                         label=f"review of task {task.id}, round {task.round}")  # fmt: skip
            self.event(slot, "review", task=task.id, detail=f"review task {review} for agent {task.review.agent}")
            return
        if len(done) == 1 and task.attempts == 1:
            gate.point_accepted(self.fleet, task, done[0])
            with Ledger() as ledger:
                ledger.accept_task(self.fleet, task.id, done[0].id)
            self.finished += 1
            self.event(slot, "accepted", task=task.id, detail=f"attempt {done[0].n} (no review gate)")
            return
        self.event(slot, "review", task=task.id, detail=f"{len(done)} attempts: pick one with inv task.accept "
                                                        f"{task.id} --attempt K")  # fmt: skip

    def reviewed(self, slot: Slot, review: Task, verdict: gate.Verdict) -> None:
        assert review.parent is not None
        with Ledger() as ledger:
            ledger.settle_review(self.fleet, review.id)
            parent = ledger.task(self.fleet, review.parent)
            if parent.state != "review" or parent.review is None:
                return  # cancelled meanwhile, or accepted by the operator
            done = [a for a in parent.current() if a.state == "done"]
            if verdict.verdict == "approve":
                chosen = next((a for a in done if a.n == verdict.attempt), done[0]) if done else None
                if chosen is None:
                    return
                gate.point_accepted(self.fleet, parent, chosen)
                ledger.accept_task(self.fleet, parent.id, chosen.id)
                self.finished += 1
                self.event(slot, "accepted", task=parent.id, detail=f"attempt {chosen.n}, approved by review task "
                                                                    f"{review.id}")  # fmt: skip
                return
            asked = sum(1 for r in ledger.reviews_of(self.fleet, parent.id)
                        for a in r.runs if a.verdict == "changes")  # fmt: skip
            if asked >= parent.review.rounds:
                ledger.fail_task(self.fleet, parent.id, "task", f"the review asked for changes in all of its "
                                 f"{parent.review.rounds} round(s): {verdict.notes}")  # fmt: skip
                self.finished += 1
                self.event(slot, "failed", task=parent.id, detail=f"task: review rounds spent: {verdict.notes}")
                return
            ledger.request_changes(self.fleet, parent.id, verdict.notes, base=done[0].commit_id if done else None)
        self.event(slot, "changes", task=parent.id, detail=verdict.notes[:200])

    def collect_spec(self, slot: Slot, state: AgentState) -> None:
        """An agent done (or failed) with its spec's own task: collected once, as fleet.collect does."""
        key = (slot.host, slot.instance, state.commit or state.state)
        if key in self.collected_spec:
            return
        from jackin.work import collect  # lazy: Fabric

        with Ledger() as ledger:
            seen = any(r["host"] == slot.host and r["instance"] == slot.instance and r["commit_id"] == state.commit
                       for r in ledger.collections(self.fleet)) if state.commit else False  # fmt: skip
        if not seen:
            report = collect.collect(self.inventory, agents=[slot.instance])
            mine = [a for a in report.agents if a.host == slot.host]
            self.event(slot, "collected", detail=f"its spec's task: {mine[0].result if mine else 'not found'}")
        self.collected_spec.add(key)


def bundle_with(directory: str, commit: str, branches: dict[str, str]) -> bytes:
    """The bundle of ``commit`` (``bundles.bundle``, kept per commit), or with ``branches`` beside it (a review's
    attempts), made in a scratch repository that borrows ``directory``'s objects."""
    if not branches:
        return bundles.bundle(directory, commit)
    import subprocess
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix=".review-", dir=private_dir(state_dir() / "work")))
    try:
        bundles.git("init", "--quiet", "--bare", str(scratch))
        (scratch / "objects" / "info" / "alternates").write_text(f"{(Path(directory) / 'objects').resolve()}\n")
        bundles.git("-C", str(scratch), "update-ref", bundles.SOURCE_BRANCH, commit)
        bundles.git("-C", str(scratch), "symbolic-ref", "HEAD", bundles.SOURCE_BRANCH)
        refs = [bundles.SOURCE_BRANCH]
        for branch, at in sorted(branches.items()):
            bundles.git("-C", str(scratch), "update-ref", f"refs/heads/{branch}", at)
            refs.append(f"refs/heads/{branch}")
        out = scratch / "out.bundle"
        bundles.git("-C", str(scratch), "bundle", "create", "--quiet", str(out), "HEAD", *refs)
        return out.read_bytes()
    finally:
        subprocess.run(["rm", "-rf", "--", str(scratch)], check=False)


def _attempt(ledger: Ledger, attempt_id: int) -> Attempt | None:
    try:
        return ledger.attempt(attempt_id)
    except SpecError:
        return None


def _keep_handoff(fleet: str, attempt: int, text: str | None) -> str | None:
    if text is None:
        return None
    path = private_dir(state_dir() / "work" / fleet / "attempts") / f"{attempt}.md"
    path.write_text(text)
    return str(path)


def _read(path: str | None) -> str | None:
    try:
        return Path(path).read_text(errors="replace") if path else None
    except OSError:
        return None


# --- the command -----------------------------------------------------------------------------------------------


def work(inventory: Inventory, *, deadline: float | None = None, on_progress: Callable[[Progress], None] = lambda _: None,
         on_event: Callable[[Event], None] = lambda _: None, every: float = EVERY,
         sleep: Callable[[float], None] = time.sleep) -> WorkResult:  # fmt: skip
    """Serve the queue until it is empty (no task queued, running or in review), or ``deadline`` (epoch seconds)
    passes. Ctrl-C stops it between two agents' turns: nothing is lost (see the module's docstring)."""
    loop = Loop(inventory, on_event=on_event)
    started = time.monotonic()
    reason, code = "empty", EXIT_OK
    progress = Progress()
    try:
        while True:
            progress = loop.turn()
            minutes = (time.monotonic() - started) / 60
            if loop.finished and minutes > 0:
                progress.rate = round(loop.finished / minutes, 2)
                left = progress.queued + progress.running + progress.review
                progress.eta = round(left / progress.rate * 60, 1) if progress.rate else None
            on_progress(progress)
            with Ledger() as ledger:
                tasks = ledger.tasks(inventory.fleet.name)
            waiting = [t for t in tasks if t.state not in ("accepted", "failed", "cancelled")]
            if len(waiting) == len(operators_pick(tasks)):  # empty, or only the operator's picks left
                break
            if progress.unreachable and len(progress.unreachable) == len(loop.targets) and \
                    time.monotonic() - started > UNREACHABLE_AFTER:  # fmt: skip
                reason, code = "unreachable", EXIT_CONNECT
                break
            if deadline is not None and time.time() >= deadline:
                reason, code = "deadline", EXIT_LEFT
                break
            sleep(every)
    except KeyboardInterrupt:
        reason, code = "interrupted", 130
    return WorkResult(fleet=inventory.fleet.name, exit_code=code, reason=reason,
                      elapsed=round(time.monotonic() - started, 1), progress=progress, handovers=loop.handovers,
                      events=loop.events)  # fmt: skip


def operators_pick(tasks: list[Task]) -> list[Task]:
    """Tasks waiting in review with no gate (best-of-N): the operator picks with ``task.accept ID --attempt K``."""
    return [t for t in tasks if t.state == "review" and t.review is None and t.kind == "work"]
