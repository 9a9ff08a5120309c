"""Claude Code in its role image on a lab host, for real: built here offline from its Dockerfile's recipe
(the lab reaches no registry: jackin/images/build.py ``offline_context``), loaded over SSH, run by
``fleet.up`` with work, against a stand-in of Anthropic's Messages API (tests/standin.py) on the lab's
outside-standing address, reached through the agent's egress allowlist (its ``api_url``).

The stand-in's script drives the runtime through a day's work in small: it writes a file with its Write
tool, runs the project's test with its Bash tool and commits, asks with ``jackin-ask`` (answered with
``agent.answer``), writes its handoff, and ends. ``fleet.collect`` then brings its branch back with the
file, the answer and a handoff with evidence. The stand-in's log shows every request carried this agent's
credential, and the task.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from jackin.lab import Lab

from .conftest import inv, module_lab, sh

PORT = 8090
KEY = f"sk-ant-lab-{secrets.token_hex(6)}"
QUESTION = "Ship hello.sh as it is?"
ANSWER = f"yes, ship it {secrets.token_hex(3)}"
TASK = "Add hello.sh, which prints hello, and run it as the project's test."
STANDIN = Path(__file__).resolve().parent.parent / "standin.py"
HANDOFF = ("cat > /workspace/.jackin/handoff.md <<EOF\n## What I did\nAdded hello.sh.\n## Files changed\nhello.sh\n"
           "## Tests run\nsh hello.sh: printed hello\n## Could not verify\nNothing.\n## Risks\nNone.\n"
           "## Commit\n$(git rev-parse HEAD)\nEOF")  # fmt: skip
SCRIPT = [
    {"text": "Writing the file.", "tool": "Write",
     "input": {"file_path": "/workspace/repo/hello.sh", "content": "#!/bin/sh\necho hello\n"}},
    {"text": "Testing and committing.", "tool": "Bash",
     "input": {"command": "sh hello.sh && git add hello.sh && git commit -qm 'Add hello.sh' && git rev-parse HEAD",
               "description": "test and commit"}},
    {"text": "Asking.", "tool": "Bash",
     "input": {"command": f"jackin-ask {shlex.quote(QUESTION)} > answer.txt && cat answer.txt && git add answer.txt "
                          "&& git commit -qm 'Record the answer'", "description": "ask"}},
    {"text": "Handing off.", "tool": "Bash", "input": {"command": HANDOFF, "description": "handoff"}},
    {"text": "Done: hello.sh is in."},
]  # fmt: skip


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("rt", 1, shared=True)


def svc(lab: Lab, command: str, *, check: bool = True) -> subprocess.CompletedProcess:
    """``command`` in the lab's service container (the outside-standing address's machine)."""
    return subprocess.run(["docker", "exec", lab.status().service.container, "sh", "-c", command],  # type: ignore[union-attr]
                          capture_output=True, text=True, check=check, timeout=60)  # fmt: skip


@pytest.fixture(scope="module")
def standin(rlab):
    """The stand-in, serving SCRIPT on the lab's public address; its log's path in the service container."""
    address = rlab.status().service.public_address
    container = rlab.status().service.container
    # its root is read-only (/tmp too): /dev/shm is a tmpfs (and docker cp refuses a read-only root: stdin)
    subprocess.run(["docker", "exec", "-i", container, "sh", "-c", "cat > /dev/shm/standin.py"], input=STANDIN.read_bytes(),
                   check=True, timeout=30)  # fmt: skip
    svc(rlab, f"printf '%s' {shlex.quote(json.dumps(SCRIPT))} > /dev/shm/script.json && rm -f /dev/shm/standin.log && "
              f"(setsid python3 /dev/shm/standin.py {address} {PORT} /dev/shm/script.json /dev/shm/standin.log "
              ">/dev/shm/standin.out 2>&1 &)")  # fmt: skip
    for _ in range(50):
        if svc(rlab, f"python3 -c 'import socket; socket.create_connection((\"{address}\", {PORT}), 1)'", check=False).returncode == 0:
            break
        time.sleep(0.1)
    try:
        yield f"http://{address}:{PORT}", "/dev/shm/standin.log"
    finally:
        svc(rlab, "pkill -f /dev/shm/standin.py; rm -f /dev/shm/standin.py /dev/shm/script.json", check=False)


def requests(lab: Lab, log: str) -> list[dict]:
    out = svc(lab, f"cat {log} 2>/dev/null || true").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_claude_code_in_its_image_works_asks_and_hands_off_through_fleet_up(rlab, standin, tmp_path, monkeypatch):
    url, log = standin
    name = f"rc{secrets.token_hex(3)}"
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("a project\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(json.dumps({"fleet": {
        "name": name, "provider": "lab", "lab": {"name": rlab.name, "hosts": 1},
        "resources": {"memory": "768m", "cpus": 1, "pids": 256},
        "network": {"mode": "allowlist"},
        "agents": [{"name": "coder", "role": "claude-code", "api_url": url,
                    "credentials": [{"name": "ANTHROPIC_API_KEY", "from_env": "JK_TEST_ANTHROPIC_KEY"}],
                    "work": {"repo": str(repo), "task": TASK}}],
    }}))  # fmt: skip
    monkeypatch.setenv("JK_TEST_ANTHROPIC_KEY", KEY)
    try:
        up = inv("fleet.up", "-i", str(spec), "--yes")
        assert up.returncode == 0, up.stdout + up.stderr
        blocked = inv("fleet.wait", "-i", str(spec), "--until", "blocked", "--timeout", "3m", "--json")
        assert blocked.returncode == 0, blocked.stdout + blocked.stderr + json.dumps(requests(rlab, log))[-3000:]
        [agent] = json.loads(blocked.stdout)["agents"]
        assert (agent["state"], agent["question"]) == ("blocked", QUESTION), agent
        answered = inv("agent.answer", "coder-1", ANSWER, "-i", str(spec))
        assert answered.returncode == 0, answered.stdout + answered.stderr
        done = inv("fleet.wait", "-i", str(spec), "--until", "done", "--timeout", "3m", "--json")
        assert done.returncode == 0, done.stdout + done.stderr + json.dumps(requests(rlab, log))[-3000:]
        collected = inv("fleet.collect", "-i", str(spec), "--into", str(repo), "--json")
        assert collected.returncode == 0, collected.stdout + collected.stderr
        refs = subprocess.run([*git, "for-each-ref", "--format=%(refname)", "refs/jackin/"], capture_output=True,
                              text=True, check=True).stdout.split()  # fmt: skip
        [ref] = [r for r in refs if r.endswith("coder-1")]
        files = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True).stdout
        assert {"README.md", "hello.sh", "answer.txt"} <= set(files.split()), files
        shown = subprocess.run([*git, "show", f"{ref}:answer.txt"], capture_output=True, text=True).stdout
        assert shown.strip() == ANSWER
        [result] = json.loads(collected.stdout)["agents"]
        assert (result["state"], result["result"], result["evidence"]["ok"]) == ("done", "collected", True), result
        assert result["evidence"]["commit"] == result["commit"]  # the handoff names the branch's head
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")
    seen = requests(rlab, log)
    main = [r for r in seen if r["body"].get("tools")]
    assert len(main) == len(SCRIPT) and not any(r.get("past_end") for r in seen), [r["path"] for r in seen]
    assert {r["headers"].get("x-api-key") for r in seen} == {KEY}  # this agent's credential, on every request
    assert TASK in json.dumps(main[0]["body"]["messages"][0]) and "jackin-ask" in json.dumps(main[0]["body"])
