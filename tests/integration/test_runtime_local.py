"""Codex CLI, OpenCode and Gemini CLI, each the real runtime at its role's pin (from the npm registry), run by
the role's own command line through the common entrypoint, as a user of its own, against a stand-in of its
vendor's API (tests/standin.py: OpenAI's Responses API, Anthropic's Messages API with OpenCode's own tools,
Gemini's ``streamGenerateContent``; each streamed, every request recorded), on this machine, in a network
namespace whose only interface is loopback (see test_runtime_claude_code.py, whose harness this shares).

The stand-in's script: write a file with the runtime's own file tool, run it as the project's test and
commit with its shell tool, ask with ``jackin-ask`` (answered as ``agent.answer`` does), end. The entrypoint
then records the agent done with its commit and the tokens the runtime reported (jackin-digest); every
request carried the agent's key, the first main one the preamble and the task. The script writes no
handoff: the entrypoint composes one from the runtime's output, flagged as composed. With a wrong key the
agent is failed with the API's error as the runtime reported it, not left hanging.
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


class Runtime:
    """What differs between the runtimes: where the key travels, where the task text is, the API's path."""

    def __init__(self, role: str, header: str, bearer: bool, body: str, path: str, usage: str):
        self.role, self.header, self.bearer, self.body, self.path, self.usage = role, header, bearer, body, path, usage

    def carried(self, key: str) -> str:
        return f"Bearer {key}" if self.bearer else key


RUNTIMES = {
    "codex": Runtime("codex", "authorization", True, "input", "/v1/responses", "its exec --json token_count"),
    "opencode": Runtime("opencode", "x-api-key", False, "messages", "/v1/messages", "its step_finish events"),
    "gemini": Runtime("gemini", "x-goog-api-key", False, "contents", "streamGenerateContent", "its result event"),
}
# A wrong key: the runtime's exit and the API's words in the status message (Codex: 0.39 retries for about 20 s,
# then exits 0: its digest proves that path, tests/unit/test_jackin_digest.py, on a recorded run).
WRONG = {
    "opencode": "opencode exited with status 1: invalid x-api-key",
    "gemini": "gemini exited with status 144: API key not valid. Please pass a valid API key.",
}


@pytest.fixture(scope="module", params=sorted(RUNTIMES))
def runtime(request, tmp_path_factory) -> tuple[Runtime, Path]:
    """(the runtime, the directory of its installed command)."""
    return RUNTIMES[request.param], install(tmp_path_factory, request.param)


def test_the_runtime_writes_tests_asks_and_is_done_against_the_stand_in(runtime: tuple[Runtime, Path], tmp_path: Path):
    rt, bindir = runtime
    key = f"key-{rt.role}-{os.getpid()}"
    agent = Agent(tmp_path, key, role=rt.role)
    repo = agent.repo

    def first(request: dict) -> None:
        text = json.dumps(request["body"].get(rt.body, []))
        assert request["headers"].get(rt.header) == rt.carried(key), "the credential the entrypoint exported"
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
        seen, output = agent.run(bindir, api, netns, answer="yes, ship it")
        assert not api.errors, (api.errors, output[-3000:])
    final = status(agent.jackin_dir)
    assert final.get("state") == "done", (final, seen, output[-3000:])
    assert "blocked" in seen, seen
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    log = subprocess.run([*git, "log", "--format=%s", f"{agent.base}..HEAD"], capture_output=True, text=True).stdout
    assert final["commit"] == head and log.split("\n")[0] == "Add hello.sh", (final, log)
    main = api.main_requests
    assert len(main) == len(script) and {r["headers"].get(rt.header) for r in api.requests if r["method"] == "POST"} == {
        rt.carried(key)}  # fmt: skip
    assert all(rt.path in r["path"] for r in main)
    usage = final["usage"]  # what the runtime reported: the stand-in's 12 in / 7 out per response, at least
    assert usage["input_tokens"] >= 12 * len(main) and usage["output_tokens"] >= 7 * len(main), (rt.usage, usage)
    text = (agent.jackin_dir / "handoff.md").read_text()
    evidence = handoffs.check(text, lambda c: head if head.startswith(c) else None)
    assert evidence.problems == ["composed by jackin from the runtime's output (the runtime wrote no handoff)"]
    assert "jackin-ask" in handoffs.sections(text)["tests run"] and "> Done: hello.sh is in." in text
    print(f"\n{rt.role}: {len(api.requests)} requests, models {sorted({r['body'].get('model') for r in api.requests})}")


def test_a_wrong_credential_fails_the_agent_with_the_apis_own_words(runtime: tuple[Runtime, Path], tmp_path: Path):
    rt, bindir = runtime
    if rt.role not in WRONG:
        pytest.skip("Codex CLI 0.39 retries a 401 for about 20 s: its recorded run is digested in a unit test")
    agent = Agent(tmp_path, "not-the-one", role=rt.role)
    with loopback_only() as netns, StandIn([say("never reached")], netns=netns, key="the-one") as api:
        seen, output = agent.run(bindir, api, netns, timeout=60)
    final = status(agent.jackin_dir)
    assert final.get("state") == "failed", (final, seen, output[-3000:])
    assert final["message"] == WRONG[rt.role], final
    assert all(r["headers"].get(rt.header) == rt.carried("not-the-one") for r in api.requests if r["method"] == "POST")
    assert api.script, "no step was answered"  # control: the stand-in answered no request with a step
