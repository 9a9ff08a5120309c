"""Agent state on a real lab host, with the demo role: blocking, answering and health.

One 1-host lab and one fleet of two demo agents with work for the module; the tests run in order,
each building on the last:
- ``asker`` blocks on a question: ``fleet.wait --until blocked`` returns when it does, ``fleet.status``
  shows it blocked with its question, ``agent.answer`` unblocks it and the fleet reaches done;
- ``sick`` makes its healthcheck fail (the demo agent's ``unhealthy`` directive) and then works on:
  ``fleet.status`` shows it stuck with the health message, while the healthy ``asker`` is not stuck;
- answering ``sick`` (never blocked) is refused and writes nothing.

Then, on the same fleet, done, the agent is hostile with its own files (issue 18): ``answer.tmp`` a FIFO
and ``answer`` a directory, ``handoff.md`` a FIFO for fleet.collect, ``status.json`` a FIFO for
fleet.status while the host's policy is not enforced; each fails (or, for ``answer.tmp``, does not
matter to) that agent alone, at once, and leaves no process of its uid on the host; and fleet.down
ends a process of the agent's uid left blocked on the FIFO (what a status read of old did) before it
removes the user.
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
from jackin.operations import agent_paths
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

    def uid(self, instance: str) -> int:
        return int(sh(self.lab, f"id -u {self.container(instance)}").stdout)

    def host_processes(self, instance: str) -> list[str]:
        """The command lines of the agent's uid's processes in the host's own pid namespace: what a jackin
        command ran as the agent there (its container's processes, in their own namespace, are not)."""
        listing = (f"for p in $(pgrep -u {self.uid(instance)}); do "
                   '[ "$(readlink /proc/$p/ns/pid)" = "$(readlink /proc/1/ns/pid)" ] && '
                   "{ tr '\\0' ' ' < /proc/$p/cmdline; echo; }; done; true")  # fmt: skip
        return [line for line in sh(self.lab, listing).stdout.splitlines() if line.strip()]

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


def test_an_answer_the_host_cannot_land_is_that_agents_error_at_once(afleet: Fleet) -> None:
    """``answer`` a directory (the rename cannot land) and ``answer.tmp`` a FIFO (which the write used to
    open, and block on, for 30 s before calling the host unreachable): exit 1 with the host's reason,
    and nothing left running. The FIFO stays for the next test, whose answer goes past it."""
    afleet.in_agent("asker-1", "mkdir /workspace/.jackin/answer && mkfifo /workspace/.jackin/answer.tmp")
    started = time.monotonic()
    refused = inv("agent.answer", "asker-1", "not delivered", "-i", str(afleet.spec))
    took = time.monotonic() - started
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "answer not delivered (exit 1): cannot rename .jackin/answer." in refused.stderr, refused.stderr
    assert "to .jackin/answer: Is a directory" in refused.stderr and "Traceback" not in refused.stderr
    assert took < 25, took  # not the SSH timeout (30 s) of a blocked write
    kept = "ls -A /workspace/.jackin/answer; ls -A /workspace/.jackin | grep '^answer\\..*\\.tmp$'; [ -p /workspace/.jackin/answer.tmp ] && echo fifo"
    assert afleet.in_agent("asker-1", kept) == "fifo\n"  # nothing landed, no temporary file left, the FIFO as it was
    assert afleet.host_processes("asker-1") == []
    afleet.in_agent("asker-1", "rmdir /workspace/.jackin/answer")
    assert afleet.status()["asker-1"]["state"] == "blocked"  # still waiting: nothing reached it


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
    assert afleet.in_agent("asker-1", "[ -p /workspace/.jackin/answer.tmp ] && echo fifo") == "fifo\n"  # gone past it
    states = afleet.status()
    assert {i: s["state"] for i, s in states.items()} == {"asker-1": "done", "sick-1": "done"}
    assert states["asker-1"]["commit"] and len(states["asker-1"]["commit"]) == 40


# --- issue 18: an agent's own files cannot blind the operator, stall a command or block teardown ------------


def test_collect_with_a_handoff_made_a_fifo_fails_that_agent_alone(afleet: Fleet) -> None:
    afleet.in_agent("sick-1", "rm -f /workspace/.jackin/handoff.md && mkfifo /workspace/.jackin/handoff.md")
    done = inv("fleet.collect", "-i", str(afleet.spec), "--json")
    assert done.returncode == 1, done.stdout + done.stderr  # an agent's collection failed: 1, not 3
    report = json.loads(done.stdout)
    assert report["unreachable"] == {}
    agents = {a["instance"]: a for a in report["agents"]}
    assert (agents["sick-1"]["result"], agents["sick-1"]["reason"]) == (
        "failed", "/workspace/.jackin/handoff.md is a FIFO, not a regular file")  # fmt: skip
    assert agents["sick-1"]["ref"] is None  # failed before anything was fetched
    assert agents["asker-1"]["result"] == "collected" and agents["asker-1"]["commit"]  # the positive control
    refs = subprocess.run(["git", "-C", str(afleet.repo), "for-each-ref", "--format=%(refname)", "refs/jackin/"],
                          capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert [r.rsplit("/", 1)[1] for r in refs] == ["asker-1"]
    assert afleet.host_processes("sick-1") == []


def test_a_status_file_made_a_fifo_hides_neither_the_host_nor_its_policy(afleet: Fleet) -> None:
    """The FIFO made fleet.status wait 19 s and call the whole host unreachable (exit 3), hiding that its
    policy was not enforced. The heartbeat can no longer write (its temporary name is a directory), so
    the FIFO stays; the guard is stopped, so the policy is NOT ENFORCED (exit 4)."""
    afleet.in_agent("asker-1", "cd /workspace/.jackin && mkdir status.json.tmp && rm -f status.json && mkfifo status.json")
    sh(afleet.lab, f"systemctl stop jackin-nft-guard-{afleet.name}.service jackin-nft-check-{afleet.name}.timer")
    done = inv("fleet.status", "-i", str(afleet.spec), "--json")
    assert done.returncode == 4, done.stdout + done.stderr  # not enforced on a reachable host
    [host] = json.loads(done.stdout)["hosts"]
    assert (host["reachable"], host["error"], host["guard"]) == (True, None, "inactive")
    assert host["not_enforced"] and "the guard" in host["not_enforced"]
    agents = {a["instance"]: a for a in host["agents"]}
    asker, sick = agents["asker-1"]["agent_state"], agents["sick-1"]["agent_state"]
    assert (asker["state"], asker["message"]) == ("unknown", "status file is a FIFO, not a regular file")
    assert sick["state"] == "done"  # the positive control: the other agent's file is read
    assert all(a["enforcement"].startswith("NOT ENFORCED") for a in agents.values())
    assert afleet.host_processes("asker-1") == []
    assert afleet.in_agent("asker-1", "[ -p /workspace/.jackin/status.json ] && echo fifo") == "fifo\n"  # still


def test_down_ends_the_agents_processes_before_it_removes_its_user(afleet: Fleet) -> None:
    """A process of the agent's uid blocked on the FIFO, as every status read of old left one: userdel
    refused the user (exit 1), leaving users, homes and units. fleet.down ends it first."""
    uid = afleet.uid("asker-1")
    fifo = f"/srv/jackin/{afleet.name}/asker-1/workspace/.jackin/status.json"
    blocked = agent_paths.as_agent(uid, uid, "head", "-c", "1", "--", fifo)
    sh(afleet.lab, f"setsid -f {blocked} </dev/null >/dev/null 2>&1")
    left = until(lambda: afleet.host_processes("asker-1"), timeout=10, every=0.2)
    assert any(line.startswith("head -c 1") for line in left), left
    done = inv("fleet.down", "-i", str(afleet.spec), "--yes", "--keep-lab", "--discard-snapshots")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"jk-{afleet.name}--" not in sh(afleet.lab, "getent passwd").stdout
    assert sh(afleet.lab, f"pgrep -u {uid}", warn=True).failed  # nothing of the uid is left, anywhere
