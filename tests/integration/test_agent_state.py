"""Agent state on a real lab host, with the demo role: blocking, answering and health.

One 1-host lab and one fleet of two demo agents with work for the module; the tests run in order,
each building on the last:
- ``asker`` blocks on a question: ``fleet.wait --until blocked`` returns when it does, ``fleet.status``
  shows it blocked with its question, ``agent.answer`` unblocks it and the fleet reaches done;
- ``sick`` makes its healthcheck fail (the demo agent's ``unhealthy`` directive) and then works on:
  ``fleet.status`` shows it stuck with the health message, while the healthy ``asker`` is not stuck;
- answering ``sick`` (never blocked) is refused and writes nothing.
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
from jackin.spec import roles
from jackin.spec.models import AgentSpec

from .conftest import inv, module_lab, sh

pytestmark = pytest.mark.skipif("work" not in AgentSpec.model_fields,
                                reason="needs AgentSpec.work (work delivery, branch s/work) to give the demo agents a task")  # fmt: skip

QUESTION = "Which database should I use?"
ANSWER = f"use postgres {secrets.token_hex(4)}"
ASK_AFTER = 20  # seconds the asker works before it asks: fleet.wait sees it change to blocked
_HEALTH = roles.load("demo").healthcheck
# The demo healthcheck turns unhealthy ``start_period + interval * retries`` seconds after it starts failing;
# the sick agent keeps working 35 s past that, the window in which the tests before it and the stuck check run.
UNHEALTHY_AFTER = _HEALTH.start_period + _HEALTH.interval * _HEALTH.retries
SICK_SLEEP = UNHEALTHY_AFTER + 35  # seconds the sick agent keeps working after its healthcheck starts failing


@pytest.fixture(scope="module")
def alab():
    yield from module_lab("as", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"as{secrets.token_hex(3)}"
        self.repo = tmp / "repo"
        self.repo.mkdir()
        git = ["git", "-C", str(self.repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
        subprocess.run(["git", "init", "-q", "-b", "main", str(self.repo)], check=True)
        (self.repo / "README.md").write_text("a repository for the demo agents\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "first"], check=True)
        self.spec = tmp / f"{self.name}.yaml"
        asker = f"Ask a question\\nsleep: {ASK_AFTER}\\nask: {QUESTION}\\nwrite: notes.txt: answered"
        sick = f"Fall ill\\nunhealthy\\nsleep: {SICK_SLEEP}\\nwrite: notes.txt: recovered"
        self.spec.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  resources: {{memory: 256m, cpus: 0.5, pids: 128}}
  agents:
    - name: asker
      role: demo
      work: {{repo: {self.repo}, task: "{asker}"}}
    - name: sick
      role: demo
      work: {{repo: {self.repo}, task: "{sick}"}}
""")

    def container(self, instance: str) -> str:
        return f"jk-{self.name}--{instance}"

    def in_agent(self, instance: str, command: str, *, warn: bool = False) -> str:
        """``command`` in the agent's container as the agent (the container's own user)."""
        return sh(self.lab, f"docker exec {self.container(instance)} sh -c {shlex.quote(command)}", warn=warn).stdout

    def status(self) -> dict[str, dict]:
        done = inv("fleet.status", "-i", str(self.spec), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        [host] = json.loads(done.stdout)["hosts"]
        return {a["instance"]: a["agent_state"] for a in host["agents"]}


@pytest.fixture(scope="module")
def afleet(alab, tmp_path_factory):
    fleet = Fleet(alab, tmp_path_factory.mktemp("agentstate"))
    try:
        done = inv("fleet.up", "-i", str(fleet.spec), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--discard-snapshots")


def until(check, *, timeout: float, every: float = 1.0):
    """Poll ``check()`` until it returns something truthy; fail with its last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"not within {timeout}s"
            return value
        time.sleep(every)


def test_wait_until_blocked_returns_when_the_agent_blocks(afleet: Fleet) -> None:
    done = inv("fleet.wait", "-i", str(afleet.spec), "--until", "blocked", "--timeout", "4m", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["held"], result["reason"], result["exit_code"]) == (True, "blocked", 0)
    [blocked] = [a for a in result["agents"] if a["state"] == "blocked"]
    assert (blocked["instance"], blocked["question"]) == ("asker-1", QUESTION)
    assert result["agents"][0] == blocked  # blocked first
    assert result["polls"] > 1  # it waited: the agent was working when the wait began
    assert f"asker-1  working -> blocked  waiting for an answer  asks: {QUESTION}" in done.stderr  # as it happened


def test_status_shows_the_blocked_agent_with_its_question(afleet: Fleet) -> None:
    states = afleet.status()
    asker = states["asker-1"]
    assert (asker["state"], asker["question"], asker["reported"]) == ("blocked", QUESTION, "blocked")
    assert asker["heartbeat_age"] < 30
    text = inv("fleet.status", "-i", str(afleet.spec))
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "asker-1" in line and "blocked" in line)
    assert f"asks: {QUESTION}" in lines[first]
    assert any(line.strip().startswith("2 agents: 1 blocked") for line in lines), text.stdout


def test_answering_an_agent_that_is_not_blocked_is_refused_and_writes_nothing(afleet: Fleet) -> None:
    listing = "ls -A /workspace/.jackin; ls -A /workspace/repo"
    before = afleet.in_agent("sick-1", listing)
    done = inv("agent.answer", "sick-1", ANSWER, "-i", str(afleet.spec))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sick-1 is not blocked, nothing written" in done.stderr
    after = afleet.in_agent("sick-1", listing)
    names = lambda text: sorted(n for n in text.split() if not n.endswith(".tmp"))  # noqa: E731 - heartbeat tmp files
    assert names(after) == names(before) and "answer" not in names(after)
    assert ANSWER not in afleet.in_agent("sick-1", "cat /workspace/repo/ANSWERS.md 2>/dev/null; true")


def test_a_failing_healthcheck_shows_stuck_with_its_message(afleet: Fleet) -> None:
    sick = until(lambda: (s := afleet.status()["sick-1"])["state"] == "stuck" and s, timeout=SICK_SLEEP - 10)
    assert sick["health"] == "unhealthy"
    assert sick["message"].startswith("healthcheck unhealthy: unhealthy: the task said so"), sick
    assert sick["reported"] == "working"
    asker = afleet.status()["asker-1"]  # the positive control: a healthy agent is not stuck
    assert (asker["state"], asker["health"]) == ("blocked", "healthy")


def test_answer_unblocks_the_agent_and_the_fleet_reaches_done(afleet: Fleet) -> None:
    done = inv("agent.answer", "asker-1", ANSWER, "-i", str(afleet.spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"answer delivered to asker-1 on {afleet.lab.status().hosts[0].name}" in done.stdout
    assert f"(it asked: {QUESTION})" in done.stdout
    waited = inv("fleet.wait", "-i", str(afleet.spec), "--timeout", "5m", "--json")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    result = json.loads(waited.stdout)
    assert (result["reason"], sorted(a["state"] for a in result["agents"])) == ("done", ["done", "done"])
    assert ANSWER in afleet.in_agent("asker-1", "cat /workspace/repo/ANSWERS.md")
    assert "answer" not in afleet.in_agent("asker-1", "ls -A /workspace/.jackin").split()  # consumed
    states = afleet.status()
    assert {i: s["state"] for i, s in states.items()} == {"asker-1": "done", "sick-1": "done"}
    assert states["asker-1"]["commit"] and len(states["asker-1"]["commit"]) == 40
