"""Claude Code, the real runtime at the role's pinned version, run by the claude-code role's own command
line through the common entrypoint, against a stand-in of Anthropic's Messages API (tests/standin.py).

On this machine, not in a lab: the role's image is built on a host from the node base image
(``build: host``), which no lab host can fetch (no registry is reachable), so this test runs what that
image runs, the same way: roles/common's scripts on PATH as in /usr/local/bin, the entrypoint given the
role's command, the credential as the file the entrypoint exports, ANTHROPIC_BASE_URL as the spec's
``api_url`` sets it, and Claude Code from the npm registry at the Dockerfile's pin (on Node from this
machine). It runs in a network namespace whose only interface is loopback, where the stand-in listens:
nothing it sends can leave this machine.

The stand-in's script is a day's work in small: the runtime writes a file with its Write tool, runs the
project's test with its Bash tool and commits, asks the operator with ``jackin-ask`` (the test answers as
``agent.answer`` does), writes its handoff, and ends. The entrypoint then records the agent done with
its commit. The stand-in checks each request it answers: the credential it carried, the preamble and the
task in the first, each tool's result in the next.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from jackin.images import pins
from jackin.spec.role_checks import dockerfile_instructions
from jackin.spec import roles
from jackin.work import handoffs
from tests.standin import StandIn, bash, delivered, last_tool_result, loopback_only, say, write

NPM, NODE = shutil.which("npm"), shutil.which("node")
PIN = next(p for p in pins.pins() if p.role == "claude-code")
COMMON = Path(roles.roles_dir()) / "common"
TASK = "Add hello.sh, which prints hello, and run it as the project's test."


AGENT_UID = 65534  # the runtime runs as a user of its own, as in its container (never root: Claude Code
# refuses --permission-mode bypassPermissions to root)


@pytest.fixture(scope="module")
def claude(tmp_path_factory) -> Path:
    """The directory of ``claude``, installed from the npm registry at the role's pin (readable by all)."""
    return install(tmp_path_factory, "claude-code")


def status(jackin_dir: Path) -> dict:
    try:
        return json.loads((jackin_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def image_env(role: roles.Role) -> dict[str, str]:
    """The ``ENV`` of the role's Dockerfile (but its PATH), as its image sets them."""
    text = (role.directory / str(role.image.dockerfile)).read_text()
    pairs = [w.split("=", 1) for _, word, rest in dockerfile_instructions(text) if word == "ENV" for w in shlex.split(rest)]
    return {k: v for k, v in pairs if k != "PATH"}


def install(tmp_path_factory, role: str) -> Path:
    """The directory of the role's runtime, installed from the npm registry at its Dockerfile's pins."""
    if NPM is None or NODE is None:
        pytest.fail("npm and node are needed (.ci/setup installs them): the runtime comes from the npm registry")
    prefix = tmp_path_factory.mktemp(role)
    for part in (prefix, *prefix.parents):  # pytest's base dirs are root's 0700: the agent's uid must reach it
        if part == Path("/tmp"):
            break
        part.chmod(part.stat().st_mode | 0o755)
    wanted = [f"{p.package}@{p.version}" for p in pins.pins() if p.role == role]
    done = subprocess.run([NPM, "install", "--global", "--prefix", str(prefix), "--no-fund", "--no-audit", *wanted],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix / "bin"


class Agent:
    """An agent's paths under ``tmp_path``, set up as its container has them: the delivered work, its
    credential file (``key``), roles/common as the image's /usr/local/bin, its workspace and /tmp its own."""

    def __init__(self, tmp_path: Path, key: str, *, role: str = "claude-code"):
        self.role = roles.load(role)
        self.work, self.base = delivered(tmp_path, TASK)
        self.workspace, self.creds, self.bindir = tmp_path / "workspace", tmp_path / "credentials", tmp_path / "bin"
        self.jackin_dir, self.repo, self.temp = self.workspace / ".jackin", self.workspace / "repo", tmp_path / "tmp"
        self.creds.mkdir()
        (self.creds / self.role.credentials[0]).write_text(key)
        shutil.copytree(COMMON, self.bindir)
        for mine in (self.workspace, self.temp):
            mine.mkdir()
            os.chown(mine, AGENT_UID, AGENT_UID)  # the agent's, as its workspace is; the rest it only reads
        for part in (tmp_path, *tmp_path.parents):
            if part == Path("/tmp"):
                break
            part.chmod(part.stat().st_mode | 0o755)

    def run(self, claude: Path, api: StandIn, netns: str, *, answer: str | None = None, timeout: float = 120,
            extra: dict[str, str] | None = None) -> tuple[list[str], str]:  # fmt: skip
        """The role's command through the entrypoint, as the agent, in ``netns``, until done or failed (answering
        a question with ``answer``, as agent.answer delivers it); (the states seen, the container's output)."""
        assert self.role.api is not None
        env = {**image_env(self.role), "PATH": f"{self.bindir}:{claude}:{Path(NODE or '').parent}:/usr/bin:/bin",
               "HOME": str(self.workspace), "JACKIN_DIR": str(self.jackin_dir), "JACKIN_WORK": str(self.work),
               "JACKIN_REPO": str(self.repo), "JACKIN_CREDENTIALS": str(self.creds), self.role.api.env: api.url + urlsplit(self.role.api.url).path,
               "LANG": "C.UTF-8", "TMPDIR": str(self.temp), **(extra or {})}  # fmt: skip - /tmp: its own tmpfs
        as_agent = ["nsenter", f"--net={netns}", "setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}",
                    "--clear-groups", "--"]  # in a namespace whose only interface is loopback: nothing leaves
        links = subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "link"], capture_output=True, text=True)
        assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"], links.stdout
        agent = subprocess.Popen([*as_agent, str(self.bindir / "jackin-entrypoint"), *self.role.command],
                                 cwd=self.workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
        seen, deadline = [], time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and agent.poll() is None:
                now = status(self.jackin_dir)
                if now.get("state") and (not seen or seen[-1] != now["state"]):
                    seen.append(now["state"])
                if now.get("state") == "blocked" and answer is not None and not (self.jackin_dir / "answer").exists():
                    (self.jackin_dir / "answer.tmp").write_text(answer + "\n")  # as agent.answer delivers it
                    os.replace(self.jackin_dir / "answer.tmp", self.jackin_dir / "answer")
                if now.get("state") in ("done", "failed"):
                    break
                time.sleep(0.1)
        finally:
            os.killpg(agent.pid, signal.SIGKILL)  # the entrypoint idles after done, as in a container
            output = agent.communicate(timeout=30)[0].decode(errors="replace")
        return seen, output


def test_claude_code_writes_tests_asks_hands_off_and_is_done_against_the_stand_in(claude: Path, tmp_path: Path):
    key = f"sk-ant-standin-{os.getpid()}"
    agent = Agent(tmp_path, key)
    repo, handoff = agent.repo, agent.jackin_dir / "handoff.md"

    def first(request: dict) -> None:
        text = json.dumps(request["body"]["messages"][0])
        assert request["headers"].get("x-api-key") == key, "the credential the entrypoint exported"
        assert TASK in text and "jackin-ask" in text and "handoff.md" in text, "the preamble and the task"

    def written(request: dict) -> None:
        assert (repo / "hello.sh").read_text() == "#!/bin/sh\necho hello\n", last_tool_result(request)

    def tested(request: dict) -> None:
        result = last_tool_result(request)
        assert "hello" in result and re.search(r"\b[0-9a-f]{40}\b", result), result

    def answered(request: dict) -> None:
        assert last_tool_result(request).strip() == "yes, ship it", last_tool_result(request)

    script = [
        write(str(repo / "hello.sh"), "#!/bin/sh\necho hello\n"),
        bash("sh hello.sh && git add hello.sh && git commit -qm 'Add hello.sh' && git rev-parse HEAD", expect=written),
        bash('jackin-ask "Ship hello.sh as it is?"', expect=tested),
        bash(f"cat > {handoff} <<EOF\n## What I did\nAdded hello.sh.\n## Files changed\nhello.sh\n## Tests run\n"
             "sh hello.sh: printed hello\n## Could not verify\nNothing.\n## Risks\nNone.\n## Commit\n"
             "$(git rev-parse HEAD)\nEOF", expect=answered),
        say("Done: hello.sh is in."),
    ]  # fmt: skip
    script[0].expect = first
    with loopback_only() as netns, StandIn(script, netns=netns, key=key) as api:
        seen, output = agent.run(claude, api, netns, answer="yes, ship it")
        assert not api.errors, api.errors
    final = status(agent.jackin_dir)
    assert final.get("state") == "done", (final, output[-3000:])
    assert "blocked" in seen and final["question"] is None, seen  # jackin-ask set it, the answer let it go on
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]  # the agent's repository, read as root
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    log = subprocess.run([*git, "log", "--format=%s", f"{agent.base}..HEAD"], capture_output=True, text=True).stdout.split("\n")
    assert final["commit"] == head and log[0] == "Add hello.sh", (final, log)
    evidence = handoffs.check(handoff.read_text(), lambda c: head if head.startswith(c) else None)
    assert evidence.ok and evidence.commit == head, evidence.problems
    main = api.main_requests
    assert len(main) == 5 and {r["headers"].get("x-api-key") for r in api.requests} == {key}
    assert all(r["body"].get("model") and r["body"].get("stream") for r in main)  # a model named, streamed
    usage = final["usage"]  # from its stream-json result event: tokens of the main loop, its own cost figure
    assert usage["input_tokens"] >= 12 * len(main) and usage["output_tokens"] >= 7 * len(main) and usage["cost_usd"] > 0
    print(f"\n{PIN.package}@{PIN.version}: {len(api.requests)} requests, models "
          f"{sorted({r['body'].get('model') for r in api.requests})}")


def test_a_wrong_credential_fails_the_agent_with_the_runtimes_own_words(claude: Path, tmp_path: Path):
    """Claude Code 2.0.0 retries a 401 (it clears its key cache and asks again) up to CLAUDE_CODE_MAX_RETRIES
    times, with backoff (10 by default: still retrying after 90 s here); with 1, it gives up at once. The
    entrypoint then records the agent failed with the runtime's own last words."""
    agent = Agent(tmp_path, "sk-ant-not-the-one")
    with loopback_only() as netns, StandIn([say("never reached")], netns=netns, key="sk-ant-the-one") as api:
        started = time.monotonic()
        seen, output = agent.run(claude, api, netns, timeout=60, extra={"CLAUDE_CODE_MAX_RETRIES": "1"})
        took = time.monotonic() - started
    final = status(agent.jackin_dir)
    assert final.get("state") == "failed", (final, seen, output[-3000:])
    assert final["message"] == "claude exited with status 1: Invalid API key · Fix external API key", final
    assert api.requests and all(r["headers"].get("x-api-key") == "sk-ant-not-the-one" for r in api.requests)
    assert api.script, "no step was answered"  # control: the stand-in answered no request with a step
    print(f"\nwrong credential: failed in {took:.1f}s: {final['message']}")
