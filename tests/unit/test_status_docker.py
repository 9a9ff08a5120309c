"""The status read's Docker part (``jackin.lifecycle.status.STATUS_READ``): run by the real perl against a fake
Docker daemon on a local unix socket, it prints one INSPECT_FORMAT line per container of the fleet,
the fields the docker CLI's format printed (free text as the JSON Docker wrote), parsed as before."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jackin.facts.dockerapi import SOCKET
from jackin.agents.read import INSPECT_FIELDS, STATUS_READ, parse_agents
from jackin.agents.read import inspect_command as _inspect
from jackin.lifecycle.status import parse_host_status_with_agents, parse_status
from tests.unit.test_state_docker import CONTAINER_ID, OTHER_ID, FakeDocker

pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="no perl here")

HOSTILE = 'boom\t"Pid":4242, "User":"0:0"}\n##policy\nenforced'  # an error text with tabs, quotes, braces, newlines
DOC = {
    "Id": CONTAINER_ID, "Created": "2026-01-02T15:58:00Z", "Path": "/jackin-entrypoint", "Args": ["{\"Pid\":1}"],
    "State": {"Status": "running", "Running": True, "Pid": 4321, "ExitCode": 0, "Error": HOSTILE,
              "StartedAt": "2026-01-02T15:59:00.123456789Z",
              "Health": {"Status": "healthy", "Log": [{"ExitCode": 0, "Output": "ok ] } \" {"}]}},
    "Name": "/jk-demo--coder-1", "RestartCount": 2,
    "HostConfig": {"NetworkMode": "jk-demo--coder-1", "Memory": 536870912, "Binds": ["/a:/b:ro"]},
    "Config": {"User": "60000:60000", "Labels": {"jackin.fleet": "demo", "jackin.agent": "coder-1", "x": "}{"}},
}  # fmt: skip


class StatusDocker(FakeDocker):
    def answer(self, target: str) -> tuple[int, object]:
        if target == f"/containers/{CONTAINER_ID}/json":
            return 200, DOC
        return super().answer(target)


@pytest.fixture
def docker(tmp_path: Path) -> Iterator[StatusDocker]:
    fake = StatusDocker(tmp_path / "docker.sock")
    yield fake
    if fake.server.fileno() != -1:
        fake.stop()


def run(docker: FakeDocker, fleet: str = "demo") -> subprocess.CompletedProcess[str]:
    script = STATUS_READ.replace(SOCKET, str(docker.path))
    return subprocess.run(["perl", "-e", script, fleet], capture_output=True, text=True, timeout=10)


def test_one_line_per_container_with_the_cli_formats_fields(docker: StatusDocker) -> None:
    done = run(docker)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1  # OTHER_ID vanished before its inspect: skipped, as the CLI does
    fields = lines[0].split("\t")
    assert len(fields) == INSPECT_FIELDS
    cid, restarts, user, label, state, pid, name, network, memory = fields
    assert (cid, restarts, pid, memory) == (CONTAINER_ID, "2", "4321", "536870912")
    assert json.loads(user) == "60000:60000" and json.loads(label) == "coder-1"
    assert json.loads(state) == DOC["State"] and json.loads(name) == "/jk-demo--coder-1"
    assert json.loads(network) == "jk-demo--coder-1"
    assert f"/containers/{OTHER_ID}/json" in docker.requests


def test_the_lines_parse_as_the_status_rows_and_the_agent_state(docker: StatusDocker) -> None:
    info = run(docker).stdout
    now, agents = parse_status(f"1767369600.0\n##rows\n{info}")
    assert [(a.instance, a.state, a.restarts, a.uid, a.memory_limit) for a in agents] == [
        ("coder-1", "running", 2, 60000, 536870912)]  # fmt: skip
    assert agents[0].error == HOSTILE  # one row, whatever the error holds: no forged field or section
    facts = parse_agents(f"##agents-now\n1767369600\n##rows\n{info}", section="rows")
    assert facts["coder-1"].health == "healthy" and facts["coder-1"].user == "60000:60000"


def test_missing_members_read_as_the_cli_prints_them(docker: StatusDocker) -> None:
    DOC_BARE = {"Id": CONTAINER_ID, "State": {"Status": "created", "Pid": "x"}}
    docker.answer = lambda target: (200, DOC_BARE) if target.endswith(f"{CONTAINER_ID}/json") else StatusDocker.answer(docker, target)  # type: ignore[method-assign]
    cid, restarts, user, label, _, pid, name, network, memory = run(docker).stdout.splitlines()[0].split("\t")
    assert (restarts, user, label, pid, name, network, memory) == ("0", '""', "null", "0", '""', '""', "0")


def test_a_daemon_that_does_not_answer_exits_1_and_the_shell_says_docker_is_down(docker: StatusDocker) -> None:
    docker.stop()
    done = run(docker)
    assert (done.returncode, done.stdout) == (1, "")
    shell = _inspect("demo")
    assert "|| { info=; echo '##docker'; echo down; }" in shell  # the perl path's failure
    assert shell.count("echo '##docker'; echo down") == 2  # and the docker CLI fallback's


def test_the_command_uses_perl_only_on_the_default_socket_and_falls_back_to_the_cli() -> None:
    shell = _inspect('x"y')
    assert f"[ -S {SOCKET} ]" in shell and '"${DOCKER_HOST:-}${DOCKER_CONTEXT:-}${DOCKER_CONFIG:-}"' in shell
    assert "command -v perl" in shell and "elif ids=$(docker ps -aq" in shell
    assert "' 'x\"y')" in shell  # the fleet's name is perl's argument, quoted, never code


def test_a_health_output_with_unicode_line_breaks_forges_no_section(docker: StatusDocker) -> None:
    """Docker writes U+0085 (and other non-ASCII breaks) raw in its JSON; the parsers split on newlines
    only, so an agent's health-check output cannot add a ##policy or ##guard line before the real ones."""
    forged = "x\u0085##policy\u0085enforced\u0085##guard\u0085active\u0085active\u0085active\u2028##docker\u0085down"
    doc = {**DOC, "State": {**DOC["State"], "Health": {"Status": "unhealthy", "Log": [{"ExitCode": 1, "Output": forged}]}}}
    body = json.dumps(doc, ensure_ascii=False) + "\n"  # raw UTF-8, as Docker writes it
    docker.answer = lambda t: (200, body) if t.endswith(f"{CONTAINER_ID}/json") else StatusDocker.answer(docker, t)  # type: ignore[method-assign]
    info = run(docker).stdout
    assert "\u0085##policy" in info  # the raw break did reach the output
    output = "\n".join(["1767369600.0", "##rows", info.rstrip("\n"), "##drops", "##guard", "inactive", "inactive",
                        "inactive", "##policy", "missing", "##agents-now", "1767369600"])  # fmt: skip
    _, agents, fields = parse_host_status_with_agents(output, stale_after={})
    assert (fields["policy"], fields["guard"], fields["guard_timer"]) == ("missing", "inactive", "inactive")
    assert "error" not in fields  # no forged "docker down"
    assert [a.instance for a in agents] == ["coder-1"] and agents[0].agent_state is not None
    assert agents[0].agent_state.state != "unknown", agents[0].agent_state
