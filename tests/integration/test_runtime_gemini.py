"""Gemini CLI, the real runtime at the gemini role's pin, run by the role's own command line through the
common entrypoint, against a stand-in of Gemini's API (tests/standin.py: ``streamGenerateContent`` as
server-sent events, function calls, every request recorded), on this machine, in a network namespace
whose only interface is loopback (see test_runtime_claude_code.py, whose harness this shares).

The stand-in's script: write a file (``write_file``), run it as the project's test and commit
(``run_shell_command``), ask with ``jackin-ask`` (answered as ``agent.answer`` does), end. The entrypoint
then records the agent done with its commit; every request carried the agent's key, and the first one
the preamble and the task.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_runtime_claude_code import TASK, Agent, install, status
from tests.standin import StandIn, bash, last_tool_result, loopback_only, say, write


@pytest.fixture(scope="module")
def gemini(tmp_path_factory) -> Path:
    return install(tmp_path_factory, "gemini")


def test_gemini_cli_writes_tests_asks_and_is_done_against_the_stand_in(gemini: Path, tmp_path: Path):
    key = f"gk-standin-{os.getpid()}"
    agent = Agent(tmp_path, key, role="gemini")
    repo = agent.repo

    def first(request: dict) -> None:
        text = json.dumps(request["body"].get("contents", []))
        assert request["headers"].get("x-goog-api-key") == key, "the credential the entrypoint exported"
        assert TASK in text and "jackin-ask" in text, "the preamble and the task"

    def tested(request: dict) -> None:
        assert "hello" in last_tool_result(request), last_tool_result(request)

    def answered(request: dict) -> None:
        assert "yes, ship it" in last_tool_result(request), last_tool_result(request)

    script = [
        write(str(repo / "hello.sh"), "#!/bin/sh\necho hello\n"),
        bash("sh hello.sh && git add hello.sh && git commit -qm 'Add hello.sh'"),
        bash('jackin-ask "Ship hello.sh as it is?"', expect=tested),
        say("Done: hello.sh is in.", expect=answered),
    ]
    script[0].expect = first
    with loopback_only() as netns, StandIn(script, netns=netns, key=key) as api:
        seen, output = agent.run(gemini, api, netns, answer="yes, ship it")
        assert not api.errors, api.errors
    final = status(agent.jackin_dir)
    assert final.get("state") == "done", (final, seen, output[-3000:])
    assert "blocked" in seen, seen
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    log = subprocess.run([*git, "log", "--format=%s", f"{agent.base}..HEAD"], capture_output=True, text=True).stdout
    assert final["commit"] == head and log.split("\n")[0] == "Add hello.sh", (final, log)
    main = api.main_requests
    assert len(main) == len(script) and {r["headers"].get("x-goog-api-key") for r in api.requests} == {key}
    assert all("streamGenerateContent" in r["path"] for r in main)
    assert final["usage"]["input_tokens"] >= 12 * len(main) and final["usage"]["cost_usd"] is None
    print(f"\ngemini: {len(api.requests)} requests: {sorted({r['path'].split('?')[0] for r in api.requests})}")


def test_a_wrong_credential_fails_the_agent_with_the_apis_own_words(gemini: Path, tmp_path: Path):
    """Gemini CLI 0.40 stops on the API's 400 for a bad key (exit 144, a stack trace last on its output): the
    entrypoint records the agent failed with the API's message, from its stream-json result event."""
    agent = Agent(tmp_path, "gk-not-the-one", role="gemini")
    with loopback_only() as netns, StandIn([say("never reached")], netns=netns, key="gk-the-one") as api:
        seen, output = agent.run(gemini, api, netns, timeout=60)
    final = status(agent.jackin_dir)
    assert final.get("state") == "failed", (final, seen, output[-3000:])
    assert final["message"] == "gemini exited with status 144: API key not valid. Please pass a valid API key.", final
    assert all(r["headers"].get("x-goog-api-key") == "gk-not-the-one" for r in api.requests if r["method"] == "POST")
    assert api.script, "no step was answered"  # control: the stand-in answered no request with a step
