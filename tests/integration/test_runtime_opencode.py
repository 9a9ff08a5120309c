"""OpenCode, the real runtime at the opencode role's pin (its platform binary from npm), run by the role's
own command line through the common entrypoint, against a stand-in of Anthropic's Messages API
(tests/standin.py: OpenCode's own ``write`` and ``bash`` tools), on this machine, in a network namespace
whose only interface is loopback (see test_runtime_claude_code.py, whose harness this shares): OpenCode
1.18 needs nothing but its model API (no models.dev lookup: the image sets OPENCODE_DISABLE_MODELS_FETCH).

The stand-in's script: write a file, run it as the project's test and commit, ask with ``jackin-ask``
(answered as ``agent.answer`` does), end. The entrypoint then records the agent done with its commit and
the usage OpenCode reported (``--format json``: its step_finish events); every request carried the agent's
key, and the first main one the preamble and the task. The script writes no handoff: the entrypoint
composes one from OpenCode's output, flagged as composed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jackin.work import handoffs
from tests.integration.test_runtime_claude_code import TASK, Agent, install, status
from tests.standin import StandIn, bash, last_tool_result, loopback_only, say, write


@pytest.fixture(scope="module")
def opencode(tmp_path_factory) -> Path:
    return install(tmp_path_factory, "opencode")


def test_opencode_writes_tests_asks_and_is_done_against_the_stand_in(opencode: Path, tmp_path: Path):
    key = f"sk-ant-standin-{os.getpid()}"
    agent = Agent(tmp_path, key, role="opencode")
    repo = agent.repo

    def first(request: dict) -> None:
        text = json.dumps(request["body"].get("messages", []))
        assert request["headers"].get("x-api-key") == key, "the credential the entrypoint exported"
        assert TASK in text and "jackin-ask" in text, "the preamble and the task"

    def written(request: dict) -> None:
        assert (repo / "hello.sh").read_text() == "#!/bin/sh\necho hello\n", last_tool_result(request)

    def tested(request: dict) -> None:
        assert "hello" in last_tool_result(request), last_tool_result(request)

    def answered(request: dict) -> None:
        assert "yes, ship it" in last_tool_result(request), last_tool_result(request)

    script = [
        write(str(repo / "hello.sh"), "#!/bin/sh\necho hello\n"),
        bash("sh hello.sh && git add hello.sh && git commit -qm 'Add hello.sh'", expect=written),
        bash('jackin-ask "Ship hello.sh as it is?"', expect=tested),
        say("Done: hello.sh is in.", expect=answered),
    ]
    script[0].expect = first
    with loopback_only() as netns, StandIn(script, netns=netns, key=key) as api:
        seen, output = agent.run(opencode, api, netns, answer="yes, ship it")
        assert not api.errors, (api.errors, output[-3000:])
    final = status(agent.jackin_dir)
    assert final.get("state") == "done", (final, seen, output[-3000:])
    assert "blocked" in seen, seen
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    log = subprocess.run([*git, "log", "--format=%s", f"{agent.base}..HEAD"], capture_output=True, text=True).stdout
    assert final["commit"] == head and log.split("\n")[0] == "Add hello.sh", (final, log)
    main = api.main_requests
    assert len(main) == len(script) and {r["headers"].get("x-api-key") for r in api.requests} == {key}
    assert all(r["path"] == "/v1/messages" and r["body"].get("stream") for r in main)
    assert final["usage"]["input_tokens"] >= 12 * len(main) and final["usage"]["output_tokens"] >= 7 * len(main)
    text = (agent.jackin_dir / "handoff.md").read_text()
    evidence = handoffs.check(text, lambda c: head if head.startswith(c) else None)
    assert evidence.problems == ["composed by jackin from the runtime's output (the runtime wrote no handoff)"]
    assert "jackin-ask" in handoffs.sections(text)["tests run"] and "> Done: hello.sh is in." in text
    print(f"\nopencode: {len(api.requests)} requests, models {sorted({r['body'].get('model') for r in api.requests})}")


def test_a_wrong_credential_fails_the_agent_with_opencodes_own_words(opencode: Path, tmp_path: Path):
    """OpenCode 1.18 gives up on a 401 at once (exit 1); the entrypoint records the agent failed with the API's
    error as OpenCode reported it, from its --format json output."""
    agent = Agent(tmp_path, "sk-ant-not-the-one", role="opencode")
    with loopback_only() as netns, StandIn([say("never reached")], netns=netns, key="sk-ant-the-one") as api:
        seen, output = agent.run(opencode, api, netns, timeout=60)
    final = status(agent.jackin_dir)
    assert final.get("state") == "failed", (final, seen, output[-3000:])
    assert final["message"] == "opencode exited with status 1: invalid x-api-key", final
    assert api.requests and all(r["headers"].get("x-api-key") == "sk-ant-not-the-one" for r in api.requests)
    assert api.script, "no step was answered"  # control: the stand-in answered no request with a step
