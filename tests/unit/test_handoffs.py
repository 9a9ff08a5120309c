"""Handoffs: the evidence check, and fetching an agent's bundle under its own ref (refs only) through its
quarantine (tests/unit/test_collect_quarantine.py: what the quarantine refuses)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jackin.work import collect
from jackin.work import handoffs
from jackin.errors import SpecError
from jackin.work.bundles import WorkError

from .test_collect_quarantine import land as fetch  # through a quarantine, as fleet.collect does

GOOD = """# Handoff from coder-1

## What I did

Followed the task.

## Files changed

- notes.txt

## Tests run

- `true`: exit 0

## Could not verify

- Nothing beyond the scripted lines.

## Risks

- None known.

## Commit

{commit}
"""


def on(commits: set[str]):
    return lambda word: next((c for c in commits if c.startswith(word)), None)


def test_a_complete_handoff_has_evidence() -> None:
    commit = "a" * 40
    found = handoffs.check(GOOD.format(commit=commit), on({commit}))
    assert found.ok and found.problems == [] and found.commit == commit and found.label == "ok"


@pytest.mark.parametrize(("text", "problems"), [
    (None, ["no handoff file"]),
    ("  \n", ["the handoff is empty"]),
    (GOOD.replace("## Risks\n\n- None known.\n", ""), ["no '## Risks' section"]),
    (GOOD.replace("- `true`: exit 0", ""), ["'## Tests run' is empty"]),
    (GOOD.format(commit="b" * 40).replace("{", ""), ["the Commit section names no commit the agent made on its branch"]),
    (GOOD.replace("{commit}", "see above"), ["the Commit section names no commit id"]),
])  # fmt: skip
def test_a_handoff_without_evidence_is_flagged_with_reasons(text: str | None, problems: list[str]) -> None:
    found = handoffs.check(text if text is None or "{commit}" not in text else text.format(commit="a" * 40),
                           on({"a" * 40}))  # fmt: skip
    assert not found.ok and found.problems == problems
    assert found.label.startswith("without evidence: ")


def test_a_heading_inside_a_code_block_does_not_count() -> None:
    text = GOOD.format(commit="a" * 40).replace("## Risks\n\n- None known.\n", "```\n## Risks\nx\n```\n")
    assert "no '## Risks' section" in handoffs.check(text, on({"a" * 40})).problems


# --- fetching an agent's bundle -------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


def _agent_bundle(tmp_path: Path) -> tuple[Path, str, str, bytes]:
    """A source repository, an agent's clone with one commit on jackin/coder-1, and its bundle."""
    src, agent = tmp_path / "src", tmp_path / "agent"
    git("init", "-q", "-b", "main", str(src))
    (src / "a").write_text("a\n")
    git("-C", str(src), "add", "-A")
    git("-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    base = git("-C", str(src), "rev-parse", "HEAD")
    git("clone", "-q", str(src), str(agent))
    git("-C", str(agent), "checkout", "-q", "-b", "jackin/coder-1")
    (agent / "b").write_text("b\n")
    git("-C", str(agent), "add", "-A")
    git("-C", str(agent), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two")
    head = git("-C", str(agent), "rev-parse", "HEAD")
    data = subprocess.run(["git", "-C", str(agent), "bundle", "create", "-", "refs/heads/jackin/coder-1"],
                          check=True, capture_output=True).stdout  # fmt: skip
    return src, base, head, data


def test_fetch_adds_only_the_agents_ref_and_the_evidence_check_finds_the_commit(tmp_path: Path) -> None:
    src, base, head, data = _agent_bundle(tmp_path)
    (src / "dirty").write_text("uncommitted\n")  # the operator's worktree, index and branches stay as they are
    before = (git("-C", str(src), "status", "--porcelain"), git("-C", str(src), "branch", "--list"))
    ref = collect.ref_name("demo", "host-1", "coder-1")
    assert fetch(src, data, "jackin/coder-1", ref) == head
    assert git("-C", str(src), "for-each-ref", "--format=%(refname) %(objectname)") == (
        f"refs/heads/main {base}\n{ref} {head}")
    assert (git("-C", str(src), "status", "--porcelain"), git("-C", str(src), "branch", "--list")) == before
    found = handoffs.check(GOOD.format(commit=head[:12]), collect.on_branch(str(src), ref))
    assert found.ok and found.commit == head
    assert "1 file changed" in collect.diff_stat(str(src), base, ref)
    other = handoffs.check(GOOD.format(commit=base), collect.on_branch(str(src), ref))
    assert other.ok  # the starting commit is on the branch too


def test_a_commit_not_on_the_branch_is_flagged(tmp_path: Path) -> None:
    src, base, head, data = _agent_bundle(tmp_path)
    ref = collect.ref_name("demo", "host-1", "coder-1")
    fetch(src, data, "jackin/coder-1", ref)
    (src / "c").write_text("c\n")
    git("-C", str(src), "add", "-A")
    git("-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "elsewhere")
    elsewhere = git("-C", str(src), "rev-parse", "HEAD")
    found = handoffs.check(GOOD.format(commit=elsewhere), collect.on_branch(str(src), ref))
    assert found.problems == ["the Commit section names no commit the agent made on its branch"]


def test_a_bundle_that_does_not_verify_is_refused(tmp_path: Path) -> None:
    src, _, _, data = _agent_bundle(tmp_path)
    with pytest.raises(WorkError, match="does not verify|cannot be read"):
        fetch(src, data[:-200], "jackin/coder-1", "refs/jackin/demo/h/coder-1")
    assert "refs/jackin" not in git("-C", str(src), "for-each-ref")


def test_a_host_name_that_cannot_be_in_a_ref_is_refused() -> None:
    with pytest.raises(SpecError):
        collect.ref_name("demo", "bad..host", "coder-1")


# --- what collect reads from the agent (agent-written: never shown raw) ----------------------


def test_only_the_contracts_states_are_shown() -> None:
    assert [collect.state_of(s) for s in ({"state": "done"}, {"state": "\x1b[2Jdone"}, {}, {"state": 3})] == [
        "done", "unknown", "unknown", "unknown"]


def test_the_starting_commit_is_taken_only_when_it_is_a_commit_id() -> None:
    commit = "ab" * 20
    assert collect._started_from(f'{{"commit":"{commit}"}}'.encode()) == commit
    assert collect._started_from(b'{"commit":"HEAD; rm -rf /"}') is None
    assert collect._started_from(b"not json") is None and collect._started_from(None) is None


def test_agents_are_chosen_by_instance_or_agent_and_an_unknown_name_is_exit_2() -> None:
    from jackin.plan.fleet import build
    from jackin.spec import parse_inventory

    spec = parse_inventory("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - {name: coder, count: 2}\n"
                           "    - {name: rev}\n", "f.yaml").fleet  # fmt: skip
    plan = build(spec, {"coder-1": 60000, "coder-2": 60001, "rev-1": 60002})
    assert [a.instance for a in collect.select(plan, ["coder"])] == ["coder-1", "coder-2"]
    assert [a.instance for a in collect.select(plan, ["rev-1", "coder-2"])] == ["coder-2", "rev-1"]
    assert len(collect.select(plan, None)) == 3
    with pytest.raises(SpecError, match="no agent nobody in fleet demo"):
        collect.select(plan, ["nobody"])
    assert collect.as_agent(plan.agents[0], "head", "-c", "10", "/workspace/.jackin/handoff.md") == (
        "docker exec --user 60000:60000 jk-demo--coder-1 head -c 10 /workspace/.jackin/handoff.md")


@pytest.mark.parametrize(("code", "out", "expected"), [
    (0, b"file +68616e646f6666\n", b"handoff"),
    (0, b"file -\n", None),
    (0, b"file +\n", None),
    (0, b"file +" + (b"x" * 9).hex().encode() + b"\n", b"x" * 8),  # cap + 1 bytes come (to tell "larger"): cap kept
    (0, b"file !is a FIFO, not a regular file\n", "/workspace/.jackin/handoff.md is a FIFO, not a regular file"),
    (0, b"file !leads outside the workspace\n", "/workspace/.jackin/handoff.md leads outside the workspace"),
    (0, b"file ?\n", "/workspace/.jackin/handoff.md: the host's reader failed (exit 0): boom"),
    (137, b"", "/workspace/.jackin/handoff.md: the host's reader failed (exit 137): boom"),
])  # fmt: skip
def test_a_workspace_file_is_read_on_the_host_as_the_agent(monkeypatch, code, out, expected) -> None:
    """fleet.collect's reads of the handoff and the status file: the host's reader of files an agent controls
    (jackin/facts/agent_files.py, run for real in tests/unit/test_agent_files.py), as the agent's uid, in its
    workspace; a file it does not read fails that agent's collection with the reason."""
    from jackin.errors import RemoteCommandError
    from jackin.facts import agent_files
    from jackin.plan.fleet import build
    from jackin.spec import parse_inventory

    spec = parse_inventory("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - {name: coder}\n", "f.yaml").fleet
    [agent] = build(spec, {"coder-1": 60000}).agents
    sent = []

    def run(conn, command, *, cap, host, timeout):
        sent.append((command, cap))
        return code, out, b"boom\n"

    monkeypatch.setattr(collect, "_exec", run)
    if isinstance(expected, str):
        with pytest.raises(RemoteCommandError) as caught:
            collect.read_workspace_file(None, agent, collect.HANDOFF_FILE, 8, host="h1")  # type: ignore[arg-type]
        assert caught.value.message == expected
    else:
        assert collect.read_workspace_file(None, agent, collect.HANDOFF_FILE, 8, host="h1") == expected  # type: ignore[arg-type]
    record = ("file", 60000, 60000, "/srv/jackin/demo/coder-1/workspace", ".jackin/handoff.md")
    assert sent == [(agent_files.read_command([record], cap=8), 2 * 8 + 4096)]

