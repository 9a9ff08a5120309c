"""What ``fleet.work`` decides about a finished attempt, on the operator's side: its failure class, its review
task, the reviewer's verdict, and the refs that keep every attempt and the accepted one.

Classes (``jackin.store.tasks.FAILURE_CLASSES``), from what the host and the collection show:

    transient   the container exited abnormally, was restarted or is gone; the host was unreachable; the
                runtime crashed (the entrypoint says "<runtime> exited with status N"); its API answered 5xx or
                429 (the credential gateway counted them, or the runtime's last words name one)
    task        the runtime finished and a test its handoff lists failed, or the agent reported failure itself
    policy      the credential gateway's budget was spent, or it refused the agent's requests (egress it may not make)
    operator    cancelled (``task.cancel``)

Refs, in the repository a task's attempts are fetched into (``repo_for``):

    refs/jackin/<fleet>/attempts/<attempt>     each finished attempt's branch (best-of-N: one per attempt)
    refs/jackin/<fleet>/accepted/<task>        the accepted attempt's

The reviewer's verdict is the first line of its handoff's ``## Verdict`` section, else its status message:
``approve`` (``approve K``: attempt K of a best-of-N task), or ``changes: NOTES``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from jackin.agents.state import clean
from jackin.errors import SpecError
from jackin.spec.models import is_git_url
from jackin.store.tasks import Attempt, Task
from jackin.work import handoffs
from jackin.work.bundles import fleet_repo, git, git_dir

MAX_DIFF = 48 * 1024  # bytes of one attempt's diff a review task carries
MAX_NOTES = 8 * 1024
_TEST_LINE = re.compile(r"^\s*[-*]\s+`?(?P<cmd>.+?)`?\s*:\s*exit\s+(?P<code>-?\d+)\s*$")
_VERDICT = re.compile(r"^\s*(?:verdict\s*:\s*)?(?P<word>approve|approved|changes)\b\s*(?P<rest>.*)$", re.IGNORECASE)
_UPSTREAM = re.compile(r"\b(?:429|5\d\d)\b|rate.?limit|overloaded|too many requests", re.IGNORECASE)


class Outcome(BaseModel):
    """An attempt's end: done (``ok``), or failed with its class and evidence."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    failure_class: str | None = None
    evidence: str | None = None


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: str  # approve | changes
    attempt: int | None = None  # approve K: which of a best-of-N task's attempts
    notes: str = ""


# --- failure classes -------------------------------------------------------------------------------------


def tests_of(handoff: str | None) -> list[tuple[str, int]]:
    """The tests a handoff's ``## Tests run`` lists as ``- `CMD`: exit N`` (the demo role's and the preamble's form)."""
    body = handoffs.sections(handoff or "").get("tests run", "")
    found = []
    for line in body.splitlines():
        match = _TEST_LINE.match(line)
        if match:
            found.append((match["cmd"].strip("`"), int(match["code"])))
    return found


def classify(state: str, message: str, *, container: str = "running", exit_code: int | None = None,
             restarted: bool = False, handoff: str | None = None, gateway: Any = None) -> Outcome:  # fmt: skip
    """An attempt's outcome from the agent's state and message (``jackin.agents.state``), its container, the
    tests its handoff lists and what the credential gateway counted for it (``GatewayAccount``)."""
    said = clean(message, 300) or ""
    spent = getattr(gateway, "spent", None)
    if spent:
        return Outcome(ok=False, failure_class="policy", evidence=f"budget spent: {clean(spent, 200)}")
    if state == "done":
        failed = [f"`{cmd}` exited {code}" for cmd, code in tests_of(handoff) if code != 0]
        if failed:
            return Outcome(ok=False, failure_class="task", evidence="its tests failed: " + ", ".join(failed[:5]))
        return Outcome(ok=True)
    if container in ("missing", "exited", "dead") or restarted:
        what = (
            "is gone"
            if container == "missing"
            else "was restarted"
            if restarted
            else f"{container} with code {exit_code}"
        )
        return Outcome(ok=False, failure_class="transient", evidence=f"the container {what}")
    if state == "failed":
        refused = int(getattr(gateway, "denied", 0) or 0)
        if " exited with status " in said or said.startswith("container "):
            upstream = _UPSTREAM.search(said) or _errors_upstream(gateway)
            why = "its API answered an error" if upstream else "the runtime crashed"
            return Outcome(ok=False, failure_class="transient", evidence=f"{why}: {said}")
        if refused:
            return Outcome(
                ok=False, failure_class="policy", evidence=f"the gateway refused {refused} request(s): {said}"
            )
        return Outcome(ok=False, failure_class="task", evidence=f"the agent reported failure: {said}")
    return Outcome(ok=False, failure_class="transient", evidence=f"state {state}: {said}")


def _errors_upstream(gateway: Any) -> bool:
    statuses = getattr(gateway, "statuses", None) or {}
    return any(str(code) == "429" or str(code).startswith("5") for code in statuses)


# --- verdicts ----------------------------------------------------------------------------------------------


def verdict_of(handoff: str | None, message: str | None) -> Verdict | None:
    """The reviewer's verdict: its handoff's ``## Verdict`` section's first line, else its status message."""
    for text in (handoffs.sections(handoff or "").get("verdict"), message):
        line = next((raw.strip() for raw in (text or "").splitlines() if raw.strip()), "")
        match = _VERDICT.match(line)
        if not match:
            continue
        rest = match["rest"].strip()
        if match["word"].lower().startswith("approve"):
            number = re.match(r"^(?:attempt\s*)?#?(\d{1,2})\b", rest)
            return Verdict(verdict="approve", attempt=int(number[1]) if number else None)
        body = (text or "").split(line, 1)[-1].strip() if text else ""
        notes = " ".join([rest.lstrip(":").strip(), body]).strip()
        return Verdict(verdict="changes", notes=(notes or "changes requested (no notes)")[:MAX_NOTES])
    return None


def _quoted(text: str) -> str:
    """Another agent's or the task's text, indented as a Markdown code block: shown, never read as instructions of
    this task (a scripted agent's directives start a line)."""
    return "\n".join("    " + line if line.strip() else "" for line in text.strip().splitlines())


def review_text(task: Task, attempts: list[tuple[Attempt, str | None, str | None]], instructions: str | None) -> str:
    """A review task's text: what is asked, the original task, then per attempt its branch, diff and handoff (the
    task, the notes and the handoffs quoted, ``_quoted``)."""
    lines = [f"# Review of task {task.id}" + (f" ({task.label})" if task.label else ""), "",
             "You review another agent's work. Do not change the repository. Decide, then write your verdict as the",
             "first line under a `## Verdict` heading in your handoff: `approve`"
             + (" K (the attempt you pick)" if len(attempts) > 1 else "")
             + " or `changes: WHAT TO CHANGE`.", ""]  # fmt: skip
    if instructions:
        lines += ["## What to check", "", instructions.strip(), ""]
    lines += ["## The task", "", _quoted(task.text), ""]
    if task.notes and task.round > 1:
        lines += ["## The last review asked for", "", _quoted(task.notes), ""]
    for attempt, diff, handoff in attempts:
        branch = "your branch (checked out)" if attempt is attempts[0][0] else f"branch jackin/attempt-{attempt.n}"
        lines += [f"## Attempt {attempt.n}: {branch}, commit {attempt.commit_id}", "", "### Diff", "", "```diff",
                  (diff or "(no diff)").rstrip(), "```", "", "### Its handoff", "", _quoted(handoff or "(none)"), ""]  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


def round_text(task: Task) -> str:
    """A work task's text for its next round: the task, then what the review asked."""
    if task.round <= 1 or not task.notes:
        return task.text
    return f"{task.text.rstrip()}\n\nThe review of your earlier attempt asked for changes:\n{task.notes.strip()}\n"


# --- repositories and refs -----------------------------------------------------------------------------------


def repo_for(fleet: str, task: Task) -> str:
    """The local repository a task's attempts are fetched into: its repository when that is a local path, else a
    bare repository of the fleet's under the state dir (made on first use)."""
    if task.repo and not is_git_url(task.repo) and git_dir(task.repo):
        return task.repo
    return fleet_repo(fleet)


def attempt_ref(fleet: str, attempt: int) -> str:
    return f"refs/jackin/{fleet}/attempts/{attempt}"


def accepted_ref(fleet: str, task: int) -> str:
    return f"refs/jackin/{fleet}/accepted/{task}"


def keep_attempt(repo: str, fleet: str, attempt: int, commit: str) -> str:
    """The attempt's commit kept under its own ref (the agent's next collection moves the host/instance ref)."""
    ref = attempt_ref(fleet, attempt)
    git("-C", repo, "update-ref", ref, commit)
    return ref


def point_accepted(fleet: str, task: Task, attempt: Attempt) -> str:
    """``refs/jackin/<fleet>/accepted/<task>`` at the accepted attempt's commit, in the repository it was fetched into."""
    repo = (attempt.detail or {}).get("repo")
    if not repo or not attempt.commit_id or not Path(repo).exists():  # a pick of an attempt with no commit kept here
        raise SpecError(f"attempt {attempt.n} of task {task.id} has no collected commit on this machine")
    ref = accepted_ref(fleet, task.id)
    git("-C", repo, "update-ref", ref, attempt.commit_id)
    return ref


def diff_of(repo: str, base: str | None, commit: str | None) -> str | None:
    """``git diff BASE..COMMIT`` (capped at MAX_DIFF), or None."""
    if not (base and commit):
        return None
    found = git("-C", repo, "diff", "--no-color", "--no-ext-diff", f"{base}..{commit}", "--", check=False)
    if found.returncode != 0:
        return None
    text = found.stdout[:MAX_DIFF].decode(errors="replace")
    return text + ("\n[... cut at 48 KiB]" if len(found.stdout) > MAX_DIFF else "")


def shortstat(repo: str, base: str | None, commit: str | None) -> str | None:
    if not (base and commit):
        return None
    found = git("-C", repo, "diff", "--shortstat", f"{base}..{commit}", "--", check=False)
    return (found.stdout.decode(errors="replace").strip() or "no changes") if found.returncode == 0 else None
