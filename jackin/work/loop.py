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

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin.agents import state as derivation
from jackin.agents.read import agent_states, agents_command, parse_agents
from jackin.agents.state import AgentFacts, AgentState
from jackin.errors import EXIT_CONNECT, EXIT_OK, BusyError, JackinError, SpecError
from jackin.facts.sections import read_sections
from jackin.facts.state import work_records
from jackin.hostpaths import work_dir
from jackin.lab.providers import targets as fleet_targets
from jackin.operations.work import QUEUE, digest, work_json
from jackin.paths import private_dir, state_dir
from jackin.plan import fleet as planning
from jackin.plan.make import make_plan
from jackin.spec import Inventory
from jackin.spec.models import is_git_url
from jackin.store import locks
from jackin.store.ledger import Ledger
from jackin.store.tasks import FINAL, Attempt, Task
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
    records = work_records(read_sections(output).get("workdigests", []))
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


STUCK_AFTER = 300.0  # seconds an agent may stay stuck (no heartbeat, unhealthy) under a task before it fails, transient
HANDOVER_TRIES = 3  # handovers of one attempt an agent may fail before it is released to another agent
COOL_DOWN = 120.0  # seconds an agent whose handovers keep failing takes no task
REVIEW_LABEL = "review of task {task}, round {round}"


class TaskProblem(SpecError):
    """A task whose repository or ref cannot be used: the task's own failure (class task)."""


class Loop:
    def __init__(self, inventory: Inventory, ledger: Ledger, *, on_event: Callable[[Event], None] = lambda _: None):
        self.inventory = inventory
        self.fleet = inventory.fleet.name
        self.ledger = ledger
        self.plan = make_plan(inventory, ledger, store=False)
        self.targets = {t.name: t for t in fleet_targets(inventory, bring_up=False)}
        if not self.targets:
            raise JackinError(f"fleet {self.fleet} has no host up: nothing can take a task",
                              hint="bring it up with inv fleet.up")  # fmt: skip
        reviewers = {self.inventory.fleet.review.agent} if self.inventory.fleet.review else set()
        reviewers |= {t.review.agent for t in self.inventory.fleet.tasks if t.review}
        reviewers |= {t.review.agent for t in ledger.tasks(self.fleet) if t.review and t.state not in FINAL}
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
        self.finished = 0  # work tasks ended (accepted or failed) by this loop: its rate
        self.baseline: dict[tuple[str, str], int] = {}  # restarts seen at delivery
        self.unread_since: dict[str, float] = {}
        self.stuck_since: dict[tuple[str, str], float] = {}
        self.cool_until: dict[tuple[str, str], float] = {}
        self.tries: dict[int, int] = {}  # attempt -> its handovers that failed
        self.spec_done: set[tuple[str, str, str]] = set()  # (host, instance, commit) of spec tasks collected

    def event(self, slot: Slot, what: str, *, task: int | None = None, detail: str = "",
              seconds: float | None = None) -> None:  # fmt: skip
        found = Event(at=time.time(), host=slot.host, instance=slot.instance, what=what, task=task, detail=detail,
                      seconds=seconds)  # fmt: skip
        self.events.append(found)
        self.on_event(found)

    # one turn ------------------------------------------------------------------------------------------------

    def turn(self) -> Progress:
        reads = gather(list(self.targets.values()), read_command(self.fleet), parse, timeout=15)
        self.reconcile()
        progress = Progress()
        now = time.time()
        claims = {(a.host, a.instance): a for a in self.ledger.running_claims(self.fleet)}
        for slot in self.slots:
            key = f"{slot.host}/{slot.instance}"
            read = reads.get(slot.host)
            if isinstance(read, JackinError):
                self.unread_since.setdefault(slot.host, now)
                progress.unreachable[slot.host] = read.message
                progress.agents[key] = "host not read"
                claim = claims.get((slot.host, slot.instance))
                if now - self.unread_since[slot.host] > UNREACHABLE_AFTER and claim is not None:
                    self.fail(slot, claim, "transient",
                              f"host {slot.host} unreachable for {UNREACHABLE_AFTER:.0f} s: {read.message}")  # fmt: skip
                continue
            self.unread_since.pop(slot.host, None)
            assert read is not None
            facts = read.facts.get(slot.instance) or AgentFacts(container="missing", now=now)
            state = agent_states({slot.instance: facts}, self.stale)[slot.instance]
            record = read.records.get(slot.instance, {})
            try:
                progress.agents[key] = self.serve(slot, facts, state, record, claims.get((slot.host, slot.instance)))
            except JackinError as error:  # one agent's trouble (a docker stop that failed...): said, the loop goes on
                progress.agents[key] = f"error: {error.message}"
                self.event(slot, "error", detail=error.message)
        counts = self.ledger.task_counts(self.fleet, kind="work")
        progress.done, progress.failed = counts.get("accepted", 0), counts.get("failed", 0)
        progress.running, progress.review = counts.get("running", 0), counts.get("review", 0)
        progress.queued = counts.get("queued", 0) + counts.get("changes", 0)
        return progress

    def serve(self, slot: Slot, facts: AgentFacts, state: AgentState, record: dict[str, str],
              claim: Attempt | None) -> str:  # fmt: skip
        """One agent's turn; what it is doing, for the progress line."""
        key = (slot.host, slot.instance)
        marker = record.get(QUEUE)
        if claim is not None:
            if marker != str(claim.id):  # claimed, not (fully) delivered: a loop stopped in between, a failed try
                return self.deliver(slot, claim, record)
            restarted = facts.restarts > self.baseline.setdefault(key, facts.restarts)
            ended = facts.container in ("missing", "exited", "dead") and state.state not in ("done", "failed")
            if state.state in ("done", "failed") or ended or restarted:
                self.stuck_since.pop(key, None)
                self.finish(slot, claim, facts, state, restarted=restarted)
                return f"{state.state}: task {claim.task} finished"
            if state.state == "stuck":
                since = self.stuck_since.setdefault(key, time.monotonic())
                if time.monotonic() - since > STUCK_AFTER:
                    self.stuck_since.pop(key, None)
                    self.fail(slot, claim, "transient", f"stuck for {STUCK_AFTER:.0f} s: {state.message}", stop=True)
                    return f"stuck: task {claim.task} given up"
            else:
                self.stuck_since.pop(key, None)
            return f"{state.state}: task {claim.task}" + (f" ({state.message})" if state.message else "")
        if facts.container == "missing":
            return "no container (inv fleet.up makes it)"
        if marker is not None:  # the queue's work, its attempt settled: stopped if it still runs, then the next task
            held = _attempt(self.ledger, int(marker))
            if (held is None or held.state != "running") and facts.container == "running" and \
                    state.state in ("working", "blocked", "stuck"):  # fmt: skip
                handover.stop(self.targets[slot.host], self.agents[key])
                why = "its task was cancelled" if held is not None and held.state == "cancelled" else \
                    "its attempt has ended"  # fmt: skip
                self.event(slot, "stopped", task=held.task if held else None, detail=why)
            return self.next_task(slot, record)
        if state.state == "idle":
            return self.next_task(slot, record)
        if state.state in ("done", "failed"):  # its spec's own task: collected first, as fleet.collect does
            problem = self.collect_spec(slot, state)
            return problem or self.next_task(slot, record)
        return f"{state.state}: its spec's task" + (f" ({state.message})" if state.message else "")

    def next_task(self, slot: Slot, record: dict[str, str]) -> str:
        key = (slot.host, slot.instance)
        if self.cool_until.get(key, 0) > time.monotonic():
            return "cooling down: its handovers failed"
        claimed = self.ledger.claim(self.fleet, slot.host, slot.instance, agent=slot.agent, kinds=slot.kinds)
        if claimed is None:
            return "idle: no task for it"
        task, attempt = claimed
        self.event(slot, "claimed", task=task.id, detail=f"attempt {attempt.n}" + (f", round {task.round}"
                                                                                  if task.round > 1 else ""))  # fmt: skip
        return self.deliver(slot, attempt, record, task)

    # handover --------------------------------------------------------------------------------------------------

    def deliver(self, slot: Slot, attempt: Attempt, record: dict[str, str], task: Task | None = None) -> str:
        key = (slot.host, slot.instance)
        agent = self.agents[key]
        task = task or self.ledger.task(self.fleet, attempt.task)
        try:
            delivery = self.delivery(agent, task, attempt, record)
        except TaskProblem as error:  # the task's repository or ref: its own failure
            self.fail(slot, attempt, "task", error.message)
            return f"idle: task {task.id} could not be prepared"
        except JackinError as error:  # a mirror's fetch, this machine's disk: tried again
            self.fail(slot, attempt, "transient", f"its work could not be prepared: {error.message}")
            return f"idle: task {task.id} could not be prepared"
        try:
            seconds = handover.run(self.targets[slot.host], delivery)
        except JackinError as error:  # the claim stays: the next turn tries again, then another agent takes it
            tries = self.tries[attempt.id] = self.tries.get(attempt.id, 0) + 1
            if tries >= HANDOVER_TRIES:
                self.ledger.release_attempt(attempt.id, f"{slot.instance} on {slot.host} could not take it: "
                                                        f"{error.message}")  # fmt: skip
                self.cool_until[key] = time.monotonic() + COOL_DOWN
                self.event(slot, "released", task=task.id, detail=f"{tries} handovers failed: {error.message}")
            else:
                self.event(slot, "error", task=task.id, detail=f"handover {tries} failed: {error.message}")
            return f"handover of task {task.id} failed"
        self.tries.pop(attempt.id, None)
        self.baseline.pop(key, None)
        self.handovers.append(seconds)
        self.event(slot, "delivered", task=task.id, seconds=round(seconds, 2),
                   detail=f"{task.kind} task, attempt {attempt.n}")  # fmt: skip
        return f"working: task {task.id} (delivered)"

    def delivery(self, agent: planning.AgentPlan, task: Task, attempt: Attempt,
                 record: dict[str, str]) -> handover.Delivery:  # fmt: skip
        """The files of ``attempt``'s handover: the bundle of the commit it starts from (and, for a review, every
        attempt it reviews as a branch; left out when the host has it), the task and work.json."""
        extra: dict[str, str] = {}
        if task.kind == "review" or task.base is not None:  # a review, or a round after changes: attempts' commits
            directory = bundles.git_dir(gate.repo_for(self.fleet, task) if task.kind == "work" else str(task.repo))
            commit = task.base
            if task.kind == "review" and task.parent is not None:
                parent = self.ledger.task(self.fleet, task.parent)
                extra = {f"jackin/attempt-{a.n}": str(a.commit_id) for a in parent.current()
                         if a.state == "done" and a.commit_id}  # fmt: skip
        elif task.repo and is_git_url(task.repo):
            directory = bundles.mirror(task.repo)
            commit = bundles.resolve(directory, task.ref or "HEAD")
        else:
            directory = bundles.git_dir(str(task.repo or ""))
            if directory is None:
                raise TaskProblem(f"task {task.id}: {task.repo} is not a git repository (or not its top directory)")
            commit = bundles.resolve(directory, task.ref or "HEAD")
        if not directory or not commit:
            raise TaskProblem(
                f"task {task.id}: {task.base or task.ref or 'HEAD'} does not name a commit in {task.repo}"
            )
        data = bundles.bundle(directory, commit, extra)
        text = gate.round_text(task) if task.kind == "work" else task.text
        work = planning.WorkPlan(repo=str(task.repo), name=Path(str(task.repo)).name.removesuffix(".git") or "repo",
                                 ref=task.ref or "HEAD", branch=f"jackin/{agent.instance}", commit=commit)  # fmt: skip
        files = {"repo.bundle": data, "task.md": text.encode(), "work.json": work_json(work)}
        digests = {name: digest(body) for name, body in files.items()}
        if record.get("repo.bundle") == digests["repo.bundle"]:
            del files["repo.bundle"]  # the host has it: the same commit as the agent's last task
        return handover.Delivery(agent=agent, attempt=attempt.id, files=files, digests=digests, commit=commit,
                                 branch=work.branch, cow=self.plan.checkpoints is not None)  # fmt: skip

    # finishing an attempt -----------------------------------------------------------------------------------------

    def settle(self, attempt: Attempt, *, ok: bool, failure_class: str | None = None, evidence: str | None = None,
               **fields: Any) -> Task | None:  # fmt: skip
        """``finish_attempt``, or None when the attempt was settled meanwhile (cancelled by task.cancel)."""
        try:
            return self.ledger.finish_attempt(attempt.id, ok=ok, failure_class=failure_class,  # type: ignore[arg-type]
                                              evidence=evidence, **fields)  # fmt: skip
        except SpecError:
            return None

    def fail(self, slot: Slot, attempt: Attempt, failure_class: str, evidence: str, *, stop: bool = False) -> None:
        task = self.settle(attempt, ok=False, failure_class=failure_class, evidence=evidence)
        if stop:  # it may still run under a task that is no longer its own
            try:
                handover.stop(self.targets[slot.host], self.agents[(slot.host, slot.instance)])
            except JackinError:
                pass  # the next turn stops it: its record names an attempt that has ended
        if task is None:
            return
        self.event(slot, "failed", task=attempt.task, detail=f"{failure_class}: {evidence}")
        self.after(slot, task, failure_class=failure_class, evidence=evidence)

    def after(self, slot: Slot, task: Task, *, failure_class: str | None = None, evidence: str | None = None) -> None:
        """A task after one of its attempts ended: a failed review fails the task it reviews; a work task in review
        goes through its gate; a work task failed counts."""
        if task.kind == "review" and task.state == "failed" and task.parent is not None:
            if self.ledger.fail_task(self.fleet, task.parent, "task", f"its review (task {task.id}) failed: "
                                     f"{failure_class}: {evidence}"):  # fmt: skip
                self.finished += 1
                self.event(slot, "failed", task=task.parent, detail=f"its review failed: {evidence}")
        elif task.kind == "work" and task.state == "failed":
            self.finished += 1
        elif task.kind == "work" and task.state == "review":
            self.to_gate(slot, task)

    def finish(self, slot: Slot, attempt: Attempt, facts: AgentFacts, state: AgentState, *,
               restarted: bool = False) -> None:  # fmt: skip
        """Collect the attempt's work, classify its end, keep its commit, and take its task through the gate."""
        from jackin.work import collect  # lazy: Fabric, for the loop's collections

        agent = self.agents[(slot.host, slot.instance)]
        task = self.ledger.task(self.fleet, attempt.task)
        repo = gate.repo_for(self.fleet, task)
        started = time.monotonic()
        try:
            with collect.connect(self.targets[slot.host], timeout=10) as conn:
                got = collect.collect_agent(conn, self.inventory, agent, host=slot.host, into=repo, asked=True,
                                   counted=state.gateway)  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the host went away while it was read: tried again
            self.fail(slot, attempt, "transient", f"its work could not be collected: {error}", stop=restarted)
            return
        handoff = Path(got.handoff).read_text(errors="replace") if got.handoff else None
        kept_handoff = _keep_handoff(self.fleet, attempt.id, handoff)
        self.ledger.record_collection(self.fleet, slot.host, slot.instance, got.result, state=got.state, repo=got.repo,
                                      ref=got.ref, commit_id=got.commit, source_commit=got.source_commit,
                                      handoff=got.handoff, evidence=got.evidence.label if got.evidence else None,
                                      detail={"task": task.id, "attempt": attempt.id})  # fmt: skip
        outcome = gate.classify(state.state, state.message, container=facts.container, exit_code=facts.exit_code,
                                restarted=restarted, handoff=handoff, gateway=state.gateway)  # fmt: skip
        if outcome.ok and got.result != "collected":
            outcome = gate.Outcome(ok=False, failure_class="task", evidence=f"its work was not collected: {got.reason}")
        verdict = None
        if task.kind == "review" and outcome.ok:
            verdict, problem = self.verdict(task, handoff, state.message)
            if problem:
                outcome = gate.Outcome(ok=False, failure_class="task", evidence=problem)
        ref = gate.keep_attempt(repo, self.fleet, attempt.id, got.commit) if got.commit else None
        detail: dict[str, Any] = {"repo": repo, "handoff": kept_handoff, "evidence": got.evidence.label if got.evidence else None,
                                  "diff": gate.shortstat(repo, got.source_commit, got.commit),
                                  "source": got.source_commit, "tests": gate.tests_of(handoff),
                                  "usage": got.usage.model_dump() if got.usage else None,
                                  "collect_s": round(time.monotonic() - started, 2),
                                  "pick": verdict.attempt if verdict else None}  # fmt: skip
        settled = self.settle(attempt, ok=outcome.ok, failure_class=outcome.failure_class, evidence=outcome.evidence,
                              ref=ref, commit_id=got.commit, detail=detail,
                              verdict=verdict.verdict if verdict else None, notes=verdict.notes if verdict else None)  # fmt: skip
        if restarted and not outcome.ok:
            try:
                handover.stop(self.targets[slot.host], agent)
            except JackinError:
                pass  # the next turn stops it: its record names an attempt that has ended
        if settled is None:
            return
        if not outcome.ok:
            self.event(slot, "failed", task=settled.id, detail=f"{outcome.failure_class}: {outcome.evidence}")
            self.after(slot, settled, failure_class=outcome.failure_class, evidence=outcome.evidence)
            return
        self.event(slot, "finished", task=settled.id, detail=f"attempt {attempt.n}: {detail['diff'] or 'no diff'}")
        if settled.kind == "review" and verdict is not None:
            self.reviewed(slot, settled, verdict)
        else:
            self.after(slot, settled)

    def verdict(self, review: Task, handoff: str | None, message: str) -> tuple[gate.Verdict | None, str | None]:
        """The review's verdict, or why it has none that can be used (an ``approve K`` naming no finished attempt)."""
        found = gate.verdict_of(handoff, message)
        if found is None:
            return None, "the review gave no verdict (approve, or changes: NOTES, under ## Verdict in its handoff)"
        if found.verdict == "approve" and found.attempt is not None and review.parent is not None:
            parent = self.ledger.task(self.fleet, review.parent)
            if not any(a.n == found.attempt and a.state == "done" for a in parent.current()):
                return None, f"the review approved attempt {found.attempt}, which did not finish"
        return found, None

    def to_gate(self, slot: Slot | None, task: Task) -> None:
        """A work task whose attempts are all done: to its reviewer (once per round), accepted (one attempt, no
        gate), or left for the operator's pick (best-of-N, no gate)."""
        done = [a for a in task.current() if a.state == "done"]
        if not done:
            return
        if task.review is not None:
            label = REVIEW_LABEL.format(task=task.id, round=task.round)
            if any(r.label == label for r in self.ledger.reviews_of(self.fleet, task.id)):
                return  # made already (a loop stopped after it)
            repo = gate.repo_for(self.fleet, task)
            shown = [(a, gate.diff_of(repo, (a.detail or {}).get("source"), a.commit_id),
                      _read((a.detail or {}).get("handoff"))) for a in done]  # fmt: skip
            text = gate.review_text(task, shown, task.review.instructions)
            review = self.ledger.add_task(self.fleet, text, repo=repo, ref=done[0].commit_id, base=done[0].commit_id,
                                          kind="review", parent=task.id, agent=task.review.agent,
                                          retries=task.retries, label=label)  # fmt: skip
            if slot is not None:
                self.event(slot, "review", task=task.id, detail=f"review task {review} for agent {task.review.agent}")
            return
        if len(done) == 1 and task.attempts == 1:
            self.accept(slot, task, done[0], "no review gate")
        elif slot is not None:
            self.event(slot, "review", task=task.id, detail=f"{len(done)} attempts: pick one with inv task.accept "
                                                            f"{task.id} --attempt K")  # fmt: skip

    def accept(self, slot: Slot | None, task: Task, chosen: Attempt, why: str) -> None:
        try:
            self.ledger.accept_task(self.fleet, task.id, chosen.id,
                                    before=lambda t, a: gate.point_accepted(self.fleet, t, a))  # fmt: skip
        except SpecError:
            return  # accepted (or cancelled) meanwhile: the operator's word stands
        self.finished += 1
        if slot is not None:
            self.event(slot, "accepted", task=task.id, detail=f"attempt {chosen.n}: {why}")

    def reviewed(self, slot: Slot | None, review: Task, verdict: gate.Verdict) -> None:
        """A review's verdict applied to the task it reviews (once: the review is settled after)."""
        assert review.parent is not None
        parent = self.ledger.task(self.fleet, review.parent)
        done = [a for a in parent.current() if a.state == "done"]
        if parent.state == "review" and parent.review is not None and done:
            if verdict.verdict == "approve":
                chosen = next((a for a in done if a.n == verdict.attempt), done[0])
                self.accept(slot, parent, chosen, f"approved by review task {review.id}")
            else:
                asked = sum(1 for r in self.ledger.reviews_of(self.fleet, parent.id)
                            for a in r.runs if a.verdict == "changes")  # fmt: skip
                if asked >= parent.review.rounds:
                    if self.ledger.fail_task(self.fleet, parent.id, "task", f"the review asked for changes in all of "
                                             f"its {parent.review.rounds} round(s): {verdict.notes}"):  # fmt: skip
                        self.finished += 1
                        if slot is not None:
                            self.event(slot, "failed", task=parent.id, detail=f"review rounds spent: {verdict.notes}")
                elif self.ledger.request_changes(self.fleet, parent.id, verdict.notes, base=done[0].commit_id):
                    if slot is not None:
                        self.event(slot, "changes", task=parent.id, detail=verdict.notes[:200])
        self.ledger.settle_review(self.fleet, review.id)

    def reconcile(self) -> None:
        """What a loop stopped between two writes left undone, done now: a task in review with no review of its round
        (or one whose single attempt was never accepted), a review whose verdict was never applied."""
        for task in self.ledger.tasks(self.fleet, state="review"):
            if task.kind == "review":
                run = next((a for a in task.runs if a.state == "done"), None)
                if run is not None and run.verdict:
                    self.reviewed(None, task, gate.Verdict(verdict=run.verdict, notes=run.notes or "",
                                                           attempt=_approved(run)))  # fmt: skip
            else:
                self.to_gate(None, task)

    def collect_spec(self, slot: Slot, state: AgentState) -> str | None:
        """An agent done (or failed) with its spec's own task: collected once, as fleet.collect does. None when it is
        (its workspace may then be reset); else why not (it is tried again after a while)."""
        key = (slot.host, slot.instance, state.commit or state.state)
        if key in self.spec_done:
            return None
        from jackin.work import collect  # lazy: Fabric

        seen = state.commit is not None and any(
            r["host"] == slot.host and r["instance"] == slot.instance and r["commit_id"] == state.commit
            for r in self.ledger.collections(self.fleet))  # fmt: skip
        if not seen:
            report = collect.collect(self.inventory, agents=[slot.instance])
            mine = next((a for a in report.agents if a.host == slot.host), None)
            if mine is None or mine.result not in ("collected", "skipped"):
                why = mine.reason if mine is not None else report.unreachable.get(slot.host, "not found")
                self.cool_until[(slot.host, slot.instance)] = time.monotonic() + COOL_DOWN
                self.event(slot, "error", detail=f"its spec's task could not be collected: {why}")
                return f"{state.state}: its spec's task not collected ({why})"
            self.event(slot, "collected", detail="its spec's task")
        self.spec_done.add(key)
        return None


def _approved(run: Attempt) -> int | None:
    pick = (run.detail or {}).get("pick")
    return pick if isinstance(pick, int) else None


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
    """Serve the queue until it is empty (no task queued, running or in review, but the operator's picks), or
    ``deadline`` (epoch seconds) passes. One loop per fleet at a time (a second is refused, exit 1). Ctrl-C stops it
    between two agents' turns: nothing is lost (see the module's docstring)."""
    fleet = inventory.fleet.name
    started = time.monotonic()
    reason, code = "empty", EXIT_OK
    progress = Progress()
    with Ledger() as ledger, locks.held(private_dir(ledger.path.parent / "locks") / f"{fleet}.work.lock",
                                        busy=lambda holder: BusyError(f"fleet {fleet!r} is served already: {holder}",
                                                                      hint="one fleet.work per fleet at a time"),
                                        note=f"fleet.work (pid {os.getpid()})"):  # fmt: skip
        loop = Loop(inventory, ledger, on_event=on_event)
        try:
            while True:
                progress = loop.turn()
                minutes = (time.monotonic() - started) / 60
                if loop.finished and minutes > 0:
                    progress.rate = round(loop.finished / minutes, 2)
                    left = progress.queued + progress.running + progress.review
                    progress.eta = round(left / progress.rate * 60, 1) if progress.rate else None
                on_progress(progress)
                if emptied(ledger, fleet):  # no task left to serve, but the operator's picks
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
    return WorkResult(fleet=fleet, exit_code=code, reason=reason, elapsed=round(time.monotonic() - started, 1),
                      progress=progress, handovers=loop.handovers, events=loop.events)  # fmt: skip


def emptied(ledger: Ledger, fleet: str) -> bool:
    """No task left for the loop: every one final, or in review waiting for the operator (``task.accept ID
    [--attempt K]``: best-of-N with no gate, or a task whose review of its round was cancelled). Reads the open
    tasks only, never the fleet's whole history."""
    counts = ledger.task_counts(fleet)
    waiting = sum(n for state, n in counts.items() if state not in FINAL)
    if waiting != counts.get("review", 0):  # some task is queued, running or in changes
        return waiting == 0
    for task in ledger.tasks(fleet, state="review"):
        if task.kind == "review":
            return False  # a review's verdict not yet applied
        mine = [r for r in ledger.reviews_of(fleet, task.id) if r.label == REVIEW_LABEL.format(task=task.id,
                                                                                               round=task.round)]  # fmt: skip
        if task.review is not None and not (mine and all(r.state == "cancelled" for r in mine)):
            return False
    return True
