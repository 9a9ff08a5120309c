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
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jackin.images import pins
from jackin.spec import roles
from jackin.work import handoffs
from tests.standin import StandIn, bash, last_tool_result, loopback_only, say, write

NPM, NODE = shutil.which("npm"), shutil.which("node")
PIN = next(p for p in pins.pins() if p.role == "claude-code")
COMMON = Path(roles.roles_dir()) / "common"
TASK = "Add hello.sh, which prints hello, and run it as the project's test."


AGENT_UID = 65534  # the runtime runs as a user of its own, as in its container (never root: Claude Code
# refuses --permission-mode bypassPermissions to root)


@pytest.fixture(scope="module")
def claude(tmp_path_factory) -> Path:
    """The directory of ``claude``, installed from the npm registry at the role's pin (readable by all)."""
    if NPM is None or NODE is None:
        pytest.fail("npm and node are needed (.ci/setup installs them): the runtime comes from the npm registry")
    prefix = tmp_path_factory.mktemp("claude-code")
    for part in (prefix, *prefix.parents):  # pytest's base dirs are root's 0700: the agent's uid must reach it
        if part == Path("/tmp"):
            break
        part.chmod(part.stat().st_mode | 0o755)
    done = subprocess.run([NPM, "install", "--global", "--prefix", str(prefix), "--no-fund", "--no-audit",
                           f"{PIN.package}@{PIN.version}"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix / "bin"


def delivered(tmp_path: Path) -> tuple[Path, str]:
    """The work as fleet.up delivers it (jackin.work): a bundle of a one-commit repository, work.json
    with the agent's branch and the commit, and the task; (the work dir, the commit)."""
    source, work = tmp_path / "source", tmp_path / "work"
    work.mkdir()
    git = ["git", "-C", str(source), "-c", "user.name=op", "-c", "user.email=op@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    (source / "README.md").write_text("a project\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "bundle", "create", "-q", str(work / "repo.bundle"), "main"], check=True,
                   capture_output=True)  # fmt: skip
    (work / "work.json").write_text(json.dumps({"branch": "jackin/coder-1", "commit": commit}, separators=(",", ":")))
    (work / "task.md").write_text(TASK + "\n")
    return work, commit


def status(jackin_dir: Path) -> dict:
    try:
        return json.loads((jackin_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def test_claude_code_writes_tests_asks_hands_off_and_is_done_against_the_stand_in(claude: Path, tmp_path: Path):
    work, base = delivered(tmp_path)
    workspace, creds, bindir = tmp_path / "workspace", tmp_path / "credentials", tmp_path / "bin"
    jackin_dir, repo = workspace / ".jackin", workspace / "repo"
    creds.mkdir()
    key = f"sk-ant-standin-{os.getpid()}"
    (creds / "ANTHROPIC_API_KEY").write_text(key)
    shutil.copytree(COMMON, bindir)  # as the image's /usr/local/bin
    temp = tmp_path / "tmp"
    for mine in (workspace, temp):
        mine.mkdir()
        os.chown(mine, AGENT_UID, AGENT_UID)  # the agent's, as its workspace is; the rest it only reads
    for part in (tmp_path, *tmp_path.parents):
        if part == Path("/tmp"):
            break
        part.chmod(part.stat().st_mode | 0o755)
    handoff = jackin_dir / "handoff.md"

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
    with loopback_only() as netns, StandIn(script, netns=netns) as api:
        script[0].expect = first
        env = {"PATH": f"{bindir}:{claude}:{Path(NODE or '').parent}:/usr/bin:/bin", "HOME": str(workspace),
               "JACKIN_DIR": str(jackin_dir), "JACKIN_WORK": str(work), "JACKIN_REPO": str(repo),
               "JACKIN_CREDENTIALS": str(creds), "ANTHROPIC_BASE_URL": api.url, "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "LANG": "C.UTF-8",
               "TMPDIR": str(temp)}  # fmt: skip - in its container, /tmp is its own tmpfs
        role = roles.load("claude-code")
        as_agent = [f"--net={netns}", "setpriv", f"--reuid={AGENT_UID}", f"--regid={AGENT_UID}", "--clear-groups", "--"]
        as_agent = ["nsenter", *as_agent]  # in a namespace whose only interface is loopback: nothing leaves
        links = subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "link"], capture_output=True, text=True)
        assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"], links.stdout
        agent = subprocess.Popen([*as_agent, str(bindir / "jackin-entrypoint"), *role.command], cwd=workspace, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        seen, deadline = [], time.monotonic() + 120
        try:
            while time.monotonic() < deadline and agent.poll() is None:
                now = status(jackin_dir)
                if now.get("state") and (not seen or seen[-1] != now["state"]):
                    seen.append(now["state"])
                if now.get("state") == "blocked" and not (jackin_dir / "answer").exists():
                    assert now["question"] == "Ship hello.sh as it is?"
                    (jackin_dir / "answer.tmp").write_text("yes, ship it\n")  # as agent.answer delivers it
                    os.replace(jackin_dir / "answer.tmp", jackin_dir / "answer")
                if now.get("state") in ("done", "failed"):
                    break
                time.sleep(0.1)
        finally:
            os.killpg(agent.pid, signal.SIGKILL)  # the entrypoint idles after done, as in a container
            output = agent.communicate(timeout=30)[0].decode(errors="replace")
        assert not api.errors, api.errors
    final = status(jackin_dir)
    assert final.get("state") == "done", (final, output[-3000:])
    assert "blocked" in seen, seen  # jackin-ask set it, and the answer let it go on
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]  # the agent's repository, read as root
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    log = subprocess.run([*git, "log", "--format=%s", f"{base}..HEAD"], capture_output=True, text=True).stdout.split("\n")
    assert final["commit"] == head and log[0] == "Add hello.sh", (final, log)
    evidence = handoffs.check(handoff.read_text(), lambda c: head if head.startswith(c) else None)
    assert evidence.ok and evidence.commit == head, evidence.problems
    main = api.main_requests
    assert len(main) == 5 and {r["headers"].get("x-api-key") for r in api.requests} == {key}
    assert {r["body"].get("model") for r in main} and all(r["body"].get("stream") for r in main)
    print(f"\n{PIN.package}@{PIN.version}: {len(api.requests)} requests, models "
          f"{sorted({r['body'].get('model') for r in api.requests})}")
