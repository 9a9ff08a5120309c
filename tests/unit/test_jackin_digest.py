"""roles/common/jackin-digest and the entrypoint's use of it, run here (sh, node, git) on recorded output of
the real runtimes (tests/fixtures/runtime-output: Claude Code 2.0.0 and Gemini CLI 0.40.1 stream-json,
Codex CLI 0.39.0 exec --json, OpenCode 1.18.33 run --format json, each against the stand-in, with a good key and a wrong one): the usage,
final message, commands and error each runtime reports; a run whose runtime exits 0 after an API error is
failed; a handoff the runtime did not write is composed, and flagged by the evidence check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jackin.agents.state import parse_status_file
from jackin.work import handoffs
from tests.standin import delivered

COMMON = Path(__file__).resolve().parents[2] / "roles" / "common"
OUTPUT = Path(__file__).resolve().parents[1] / "fixtures" / "runtime-output"

pytestmark = pytest.mark.skipif(shutil.which("node") is None or shutil.which("flock") is None,
                                reason="node and flock are needed (every runtime image has them)")  # fmt: skip


def digest(log: Path, tmp_path: Path) -> tuple[dict, str]:
    done = subprocess.run(["node", str(COMMON / "jackin-digest"), str(log), str(tmp_path)], capture_output=True,
                          text=True, check=True, timeout=30)  # fmt: skip
    return json.loads((tmp_path / "runtime.json").read_text()), done.stdout


@pytest.mark.parametrize(("log", "runtime", "final", "error", "usage"), [
    ("claude-good", "claude-code", "fin: all good", None, {"input_tokens": 36, "output_tokens": 21, "cost_usd": 0.0006486}),
    ("claude-bad", "claude-code", None, "Invalid API key · Fix external API key", None),
    ("gemini-good", "gemini", "fin: all good", None, {"input_tokens": 48, "output_tokens": 28, "cost_usd": None}),
    ("gemini-bad", "gemini", None, "API key not valid. Please pass a valid API key.", None),
    ("codex-good", "codex", "fin: all good", None, {"input_tokens": 36, "output_tokens": 21, "cost_usd": None}),
    ("codex-bad", "codex", None, "exceeded retry limit, last status: 401 Unauthorized", None),
    ("opencode-good", "opencode", "fin: all good", None, {"input_tokens": 36, "output_tokens": 21, "cost_usd": 0.000423}),
    ("opencode-bad", "opencode", None, "invalid x-api-key", None),
])  # fmt: skip
def test_the_digest_reads_each_runtimes_own_output(tmp_path: Path, log: str, runtime: str, final: str | None,
                                                   error: str | None, usage: dict | None) -> None:  # fmt: skip
    run, said = digest(OUTPUT / f"{log}.log", tmp_path)
    assert (run["runtime"], run["error"]) == (runtime, error), run
    if final is not None:
        assert run["final"] == final
        assert run["usage"] == pytest.approx(usage)
        assert run["commands"] == [{"command": "sh hello.sh && git add -A && git commit -qm add", "exit": 0}]
        assert said.startswith("usage ")
    else:
        assert f"error {error}\n" in said and not (run["usage"] or {}).get("output_tokens")
    assert not (tmp_path / "handoff.md").exists()  # no repository given: nothing composed


def test_a_log_that_is_not_a_file_or_not_json_gives_an_empty_digest(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened without blocking, refused as not a regular file
    empty = {"runtime": None, "session": None, "final": None, "error": None, "commands": [], "usage": None}
    assert digest(tmp_path / "fifo", tmp_path) == (empty, "")
    (tmp_path / "text.log").write_text("plain words\n{not json\n")
    assert digest(tmp_path / "text.log", tmp_path) == (empty, "")


def test_events_of_an_unexpected_shape_are_skipped_and_the_rest_still_read(tmp_path: Path) -> None:
    """A null content block, an empty command, a warning before success: the digest keeps going, a later
    success clears an earlier error, and a handoff is still composed (the entrypoint acts on what it prints)."""
    events = [
        {"type": "system", "subtype": "init", "session_id": "s-1"},
        {"type": "assistant", "message": {"content": [None, 7, {"type": "tool_use", "id": "t1", "name": "Bash",
                                                                "input": {"command": "   "}}]}},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "t2", "name": "Bash",
                                                       "input": {"command": "make test"}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t2", "is_error": False}]}},
        {"type": "result", "subtype": "error_during_execution", "is_error": True, "result": "overloaded"},
        {"type": "result", "subtype": "success", "is_error": False, "result": "fine", "usage": {"input_tokens": 5,
                                                                                               "output_tokens": 2}},
    ]  # fmt: skip
    (tmp_path / "run.log").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    done = subprocess.run(["node", str(COMMON / "jackin-digest"), str(tmp_path / "run.log"), str(tmp_path), str(repo), ""],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    run = json.loads((tmp_path / "runtime.json").read_text())
    assert (run["error"], run["final"], run["session"]) == (None, "fine", "s-1"), run
    assert run["commands"] == [{"command": "make test", "exit": 0}]
    assert done.stdout == "usage 5 2 null\n" and "- `make test` (exit 0)" in (tmp_path / "handoff.md").read_text()


def entrypoint(tmp_path: Path, script: str, name: str, credentials: dict[str, str] | None = None) -> tuple[dict, Path]:
    """The entrypoint running ``sh -c SCRIPT NAME`` as a role's command does, until the state is final;
    (the status file, the agent's .jackin directory)."""
    tmp_path.mkdir(exist_ok=True)
    work, _ = delivered(tmp_path, "a task")
    jackin_dir, repo, temp = tmp_path / "workspace" / ".jackin", tmp_path / "workspace" / "repo", tmp_path / "tmp"
    temp.mkdir()
    (tmp_path / "none").mkdir()
    for cred, value in (credentials or {}).items():
        (tmp_path / "none" / cred).write_text(value)
    mine = {k: v for k, v in os.environ.items() if k != "NODE_EXTRA_CA_CERTS"}  # this machine's, not a container's
    env = {**mine, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(jackin_dir),
           "JACKIN_WORK": str(work), "JACKIN_REPO": str(repo), "JACKIN_CREDENTIALS": str(tmp_path / "none"),
           "TMPDIR": str(temp), "OUTPUT": str(OUTPUT)}  # fmt: skip
    agent = subprocess.Popen([str(COMMON / "jackin-entrypoint"), "sh", "-c", script, name], env=env, cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline, found = time.monotonic() + 30, {}
    try:
        while time.monotonic() < deadline:
            try:
                found = json.loads((jackin_dir / "status.json").read_text())
            except (OSError, ValueError):
                found = {}
            if found.get("state") in ("done", "failed"):
                break
            time.sleep(0.05)
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
    return found, jackin_dir


def test_a_runtime_that_exits_0_after_an_api_error_is_failed_with_its_own_words(tmp_path: Path) -> None:
    """Codex CLI 0.39 gives up on a 401 and exits 0: its --json output says so."""
    found, _ = entrypoint(tmp_path, 'cat "$OUTPUT/codex-bad.log"', "codex")
    assert found["state"] == "failed", found
    assert found["message"] == ("codex exited with status 0 but its runtime ended in error: "
                                "exceeded retry limit, last status: 401 Unauthorized")  # fmt: skip


def test_a_failed_runtimes_message_is_its_api_error_not_a_stack_frame(tmp_path: Path) -> None:
    found, _ = entrypoint(tmp_path, 'cat "$OUTPUT/gemini-bad.log"; exit 144', "gemini")
    assert (found["state"], found["message"]) == (
        "failed", "gemini exited with status 144: API key not valid. Please pass a valid API key."), found


def test_a_runtime_without_a_handoff_gets_one_composed_and_flagged_and_its_usage_recorded(tmp_path: Path) -> None:
    found, jackin_dir = entrypoint(tmp_path, 'cat "$OUTPUT/claude-good.log"; echo hi > hello.sh', "claude")
    document = parse_status_file((jackin_dir / "status.json").read_bytes())  # the operator's strict parse
    assert (document.state, document.message) == ("done", "claude finished"), found
    assert document.usage is not None and document.usage.model_dump() == {
        "input_tokens": 36, "output_tokens": 21, "cost_usd": 0.0006486}  # fmt: skip
    assert document.usage.label == "36 in, 21 out, $0.0006"
    text = (jackin_dir / "handoff.md").read_text()
    head = document.commit
    assert head and text.rstrip().endswith(head)  # the entrypoint's commit of what was left uncommitted
    sections = handoffs.sections(text)
    assert "> fin: all good" in sections["what i did"] and "hello.sh" in sections["files changed"]
    assert "`sh hello.sh && git add -A && git commit -qm add` (exit 0)" in sections["tests run"]
    evidence = handoffs.check(text, lambda c: head if head.startswith(c) else None)
    assert not evidence.ok and evidence.problems == [
        "composed by jackin from the runtime's output (the runtime wrote no handoff)"], evidence
    assert evidence.commit == head  # control: all else in it holds


def test_a_handoff_the_runtime_wrote_is_kept(tmp_path: Path) -> None:
    found, jackin_dir = entrypoint(tmp_path, 'cat "$OUTPUT/gemini-good.log"; echo mine > "$JACKIN_DIR/handoff.md"',
                                   "gemini")  # fmt: skip
    assert found["state"] == "done" and found["usage"] == {"input_tokens": 48, "output_tokens": 28, "cost_usd": None}
    assert (jackin_dir / "handoff.md").read_text() == "mine\n"


def test_api_cas_credential_is_what_node_trusts_beside_the_system(tmp_path: Path) -> None:
    """The credential JACKIN_API_CA (a spec's api_ca) is the file NODE_EXTRA_CA_CERTS names, in the runtime's
    environment only; without it the variable is not set (control)."""
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    script = 'printf "%s" "${NODE_EXTRA_CA_CERTS:-unset}" > ../ca-seen'
    found, _ = entrypoint(tmp_path / "a", script, "gemini", {"JACKIN_API_CA": pem, "GEMINI_API_KEY": "k"})
    assert found["state"] == "done", found
    assert (tmp_path / "a" / "workspace" / "ca-seen").read_text() == str(tmp_path / "a" / "none" / "JACKIN_API_CA")
    found, _ = entrypoint(tmp_path / "b", script, "gemini", {"GEMINI_API_KEY": "k"})
    assert (tmp_path / "b" / "workspace" / "ca-seen").read_text() == "unset"


def test_attach_stops_the_headless_run_and_its_commands_resumes_the_session_and_leaves_idle(tmp_path: Path) -> None:
    """jackin-attach (inv agent.attach's, in the container): the headless runtime and a command it runs (a
    jackin-ask waiting) end; the entrypoint records nothing for that run; the attach command runs in the
    repository with the runtime's session (from its output) and its credentials; when it ends, a state it
    did not set becomes idle."""
    init = '{"type":"system","subtype":"init","session_id":"5fb90492-d926-449e-8d35"}'
    script = f"echo '{init}'; sleep 300 & echo $! > ../asked; wait"  # the runtime, and a command it waits on
    base = tmp_path / "a"
    base.mkdir()
    work, _ = delivered(base, "a task")
    jackin_dir, repo, temp, creds = base / "workspace" / ".jackin", base / "workspace" / "repo", base / "tmp", base / "creds"
    temp.mkdir()
    creds.mkdir()
    (creds / "ANTHROPIC_API_KEY").write_text("sk-the-agents")
    mine = {k: v for k, v in os.environ.items() if k != "NODE_EXTRA_CA_CERTS"}
    env = {**mine, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(jackin_dir), "JACKIN_WORK": str(work),
           "JACKIN_REPO": str(repo), "JACKIN_CREDENTIALS": str(creds), "TMPDIR": str(temp)}  # fmt: skip
    agent = subprocess.Popen([str(COMMON / "jackin-entrypoint"), "sh", "-c", script, "claude"], env=env, cwd=base,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not ((jackin_dir / ".runtime").exists() and (base / "workspace" / "asked").exists()):
            assert time.monotonic() < deadline and agent.poll() is None
            time.sleep(0.05)
        runtime, asked = int((jackin_dir / ".runtime").read_text()), int((base / "workspace" / "asked").read_text())
        seen = base / "seen"
        attach = subprocess.run([str(COMMON / "jackin-attach"), "sh", "-c",
                                 f'printf "%s %s %s\\n" "$JACKIN_SESSION" "$ANTHROPIC_API_KEY" "$(pwd)" > {seen}; '
                                 f'cat "$JACKIN_DIR/status.json" >> {seen}; exit 3'],
                                env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert attach.returncode == 3, attach.stderr  # the session's own exit status
        said, during = seen.read_text().split("\n", 1)
        session, key, where = said.split(" ")
        assert (session, key, where) == ("5fb90492-d926-449e-8d35", "sk-the-agents", str(repo))
        assert json.loads(during)["message"] == "attached: the operator's session"
        for pid in (runtime, asked):  # the headless run and the command it ran: ended
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        deadline = time.monotonic() + 30  # the entrypoint has seen its runtime end, and digested its output
        while (jackin_dir / ".runtime").exists() or not (jackin_dir / "runtime.json").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while '"idle"' not in (jackin_dir / "status.json").read_text():  # the entrypoint's last word, awaited
            assert time.monotonic() < deadline, (jackin_dir / "status.json").read_text()
            time.sleep(0.05)
        final = json.loads((jackin_dir / "status.json").read_text())  # it recorded nothing: the session's state
        assert (final["state"], final["message"]) == ("idle", "the operator's session ended (exit 3)"), final
        assert not (jackin_dir / "attached").exists() and not (jackin_dir / "handoff.md").exists()
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
    # a restart of its container runs the task no more (the run was taken over), as after done
    again = subprocess.Popen([str(COMMON / "jackin-entrypoint"), "sh", "-c", "echo ran > ../ran-again", "claude"],
                             env=env, cwd=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while "a restart does not run it again" not in (jackin_dir / "status.json").read_text():
            assert time.monotonic() < deadline, (jackin_dir / "status.json").read_text()
            time.sleep(0.05)
        time.sleep(0.5)
        assert not (base / "workspace" / "ran-again").exists()
        assert json.loads((jackin_dir / "status.json").read_text())["state"] == "idle"
    finally:
        os.killpg(again.pid, signal.SIGKILL)
        again.wait(timeout=10)


def test_attaching_to_a_done_agent_leaves_it_done_with_the_sessions_commits(tmp_path: Path) -> None:
    """No headless run to stop: the session runs; one that set no state leaves the agent done again, its commit
    the branch's head (the session committed); a failed one stays failed with its message."""
    found, jackin_dir = entrypoint(tmp_path / "d", "echo hi > a.txt", "claude")
    assert found["state"] == "done", found
    repo = tmp_path / "d" / "workspace" / "repo"
    env = {**os.environ, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(jackin_dir),
           "JACKIN_REPO": str(repo), "JACKIN_CREDENTIALS": str(tmp_path / "d" / "none"),
           "TMPDIR": str(tmp_path / "d" / "tmp")}  # fmt: skip
    session = ("git -c user.name=op -c user.email=op@x.invalid commit -q --allow-empty -m more && "
               "grep -q attached \"$JACKIN_DIR/status.json\"")  # fmt: skip
    done = subprocess.run([str(COMMON / "jackin-attach"), "sh", "-c", session], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    final = json.loads((jackin_dir / "status.json").read_text())
    assert (final["state"], final["commit"]) == ("done", head) and head != found["commit"], final
    assert final["message"] == "the operator's session ended (exit 0); done before it"
    failed, failed_dir = entrypoint(tmp_path / "f", "exit 4", "claude")
    assert failed["state"] == "failed", failed
    env["JACKIN_DIR"], env["JACKIN_REPO"] = str(failed_dir), str(tmp_path / "f" / "workspace" / "repo")
    subprocess.run([str(COMMON / "jackin-attach"), "true"], env=env, capture_output=True, timeout=60, check=True)
    after = json.loads((failed_dir / "status.json").read_text())
    assert (after["state"], after["message"]) == ("failed", failed["message"]), after
