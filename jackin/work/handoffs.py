"""Handoffs: the Markdown an agent leaves in ``/workspace/.jackin/handoff.md``, and its evidence check.

A handoff answers six questions, each under its own heading (the contract every role follows)::

    ## What I did
    ## Files changed
    ## Tests run
    ## Could not verify
    ## Risks
    ## Commit

It has evidence when every heading is there with something under it, and the Commit section
names a commit that is on the agent's collected branch. One without is *flagged* ("without
evidence", with the reasons), never refused: the operator decides. Pure: the commit lookup is
handed in, so this module runs no git and touches no host.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

# The first line of a handoff the entrypoint composed from the runtime's output (roles/common/jackin-digest)
# because the runtime wrote none: flagged, whatever else it holds.
COMPOSED = "<!-- jackin: composed by jackin-entrypoint from the runtime's output: the runtime wrote no handoff -->"
HEADINGS = ("What I did", "Files changed", "Tests run", "Could not verify", "Risks", "Commit")
MAX_HANDOFF = 256 * 1024
_HEADING = re.compile(r"^##\s+(.+?)\s*#*\s*$")
_COMMIT = re.compile(r"\b[0-9a-f]{7,64}\b")


class Evidence(BaseModel):
    """Whether a handoff has evidence; ``problems`` says what is missing when it has not."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    problems: list[str] = Field(default_factory=list)
    commit: str | None = None  # the commit the Commit section names that is on the branch

    @property
    def label(self) -> str:
        return "ok" if self.ok else "without evidence: " + "; ".join(self.problems)


def sections(text: str) -> dict[str, str]:
    """Level-2 sections by heading (compared case-insensitively, as written kept), each with its body.
    A heading inside a fenced code block does not start a section. A repeated heading's bodies join."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            current = match.group(1).strip().lower()
            found.setdefault(current, [])
        elif current is not None:
            found[current].append(line)
    return {name: "\n".join(lines).strip() for name, lines in found.items()}


def check(text: str | None, on_branch: Callable[[str], str | None]) -> Evidence:
    """The evidence check of a handoff's ``text`` (None: there is none). ``on_branch(word)``: the full
    commit id when ``word`` names a commit on the agent's collected branch, else None."""
    if text is None:
        return Evidence(ok=False, problems=["no handoff file"])
    if not text.strip():
        return Evidence(ok=False, problems=["the handoff is empty"])
    found = sections(text)
    problems = []
    if text.lstrip().startswith(COMPOSED):
        problems.append("composed by jackin from the runtime's output (the runtime wrote no handoff)")
    for heading in HEADINGS:
        body = found.get(heading.lower())
        if body is None:
            problems.append(f"no '## {heading}' section")
        elif not body:
            problems.append(f"'## {heading}' is empty")
    commit = None
    body = found.get("commit") or ""
    if body:
        words = _COMMIT.findall(body)
        commit = next((c for c in (on_branch(w) for w in words[:20]) if c), None)
        if commit is None:
            problems.append("the Commit section names no commit the agent made on its branch"
                            if words else "the Commit section names no commit id")  # fmt: skip
    return Evidence(ok=not problems, problems=problems, commit=commit)
