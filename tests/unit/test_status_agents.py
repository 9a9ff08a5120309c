"""The agent-state read of fleet.status and fleet.wait (jackin/lifecycle/status.py, appended part): its output
parsed strictly and NUL-safely, and the command itself run against a fake ``docker`` on PATH (no host)
and this machine's perl (as root, like a host's read): the status file is read as the container's
uid:gid, never as root, only for a plain instance name, and one that cannot be read (a FIFO) is that
agent's problem alone (jackin/facts/agent_files.py, tests/unit/test_agent_files.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from jackin.agents.state import AgentFacts
from jackin.errors import JackinError
from jackin.agents.read import agents_command, parse_agents
from jackin.lifecycle.status import (parse_host_status_with_agents, status_with_agents_command,
                           FleetStatus, HostStatus, AgentStatus, fill_rollup)  # fmt: skip

NOW = 1_800_000_000
A, B = "a" * 64, "b" * 64


def state(status: str = "running", code: int = 0, health: dict | None = None) -> str:
    data = {"Status": status, "Running": status == "running", "ExitCode": code, "Pid": 7}
    if health is not None:
        data["Health"] = health
    return json.dumps(data, separators=(",", ":"))


def row(cid: str, instance: str | None, st: str, *, user: str | None = "60000:60000", restarts: int = 0) -> str:
    """One INSPECT_FORMAT line (jackin/lifecycle/status.py)."""
    name = f"jk-f--{instance}"
    return "\t".join([cid, str(restarts), json.dumps(user), json.dumps(instance), st, "0", json.dumps(f"/{name}"),
                      json.dumps(name), "0"])  # fmt: skip


def status_doc(state_: str = "blocked", question: str | None = "Which db?") -> bytes:
    return json.dumps({"schema_version": 1, "state": state_, "message": "m", "question": question,
                       "heartbeat": NOW - 2, "commit": None}).encode()  # fmt: skip


def output(rows: list[str], files: list[str]) -> str:
    return "\n".join(["##agents-now", str(NOW), "##agents", *rows, "##agent-files", *files]) + "\n"


def hx(data: bytes) -> str:
    """The reader's answer for a file holding ``data`` (jackin.facts.agent_files)."""
    return "+" + data.hex()


def test_parse_agents() -> None:
    health = {"Status": "unhealthy", "FailingStreak": 3,
              "Log": [{"ExitCode": 1, "Output": "old"}, {"ExitCode": 1, "Output": "unhealthy: the task said so\n"}]}
    out = output([row(A, "coder-1", state()), row(B, "coder-2", state("exited", 143, health), restarts=2)],
                 [f"{A} {hx(status_doc())}", f"{B} -"])  # fmt: skip
    assert parse_agents(out) == {
        "coder-1": AgentFacts(container="running", user="60000:60000", exit_code=0, now=NOW, status=status_doc()),
        "coder-2": AgentFacts(container="exited", user="60000:60000", exit_code=143, restarts=2, health="unhealthy",
                              health_output="unhealthy: the task said so\n", now=NOW),
    }  # fmt: skip


def test_a_status_file_with_nuls_newlines_and_section_markers_stays_in_its_field() -> None:
    """The file is the agent's: whatever bytes it holds arrive as bytes, and break no section."""
    nasty = b"\x00\n##agents\n" + B.encode() + b"\t0\t\"\"\tnull\t{}\n##agents-now\n1\n"
    out = output([row(A, "coder-1", state())], [f"{A} {hx(nasty)}"])
    found = parse_agents(out)
    assert list(found) == ["coder-1"] and found["coder-1"].status == nasty


def test_an_empty_status_file_reads_as_none() -> None:
    assert parse_agents(output([row(A, "coder-1", state())], [f"{A} -"]))["coder-1"].status is None


def test_a_container_without_an_agent_label_is_not_an_agent() -> None:
    assert parse_agents(output([row(A, None, state())], [])) == {}


def test_no_containers_no_agents() -> None:
    assert parse_agents(f"##agents-now\n{NOW}\n") == {}


@pytest.mark.parametrize("bad", [
    output([row(A, "coder-1", state()).replace("\t", " ", 1)], []),
    output([row(A, "coder-1", "{not json")], []),
    output([row(A, "coder-1", '{"Running":true}')], []),
    output([row(A, "coder-1", state()).rsplit("\t", 1)[0]], []),  # a field short
    output([row(A, "coder-1", state()).replace('"jk-f--coder-1"', "7")], []),  # a name that is not a string
    output([row(A, "coder-1", state())], [f"{A} not*base64"]),
    output([row(A, "coder-1", state())], [f"{A} +0g"]),
    "##agents\n" + row(A, "coder-1", state()),
])  # fmt: skip
def test_output_docker_did_not_print_fails_the_hosts_read(bad: str) -> None:
    with pytest.raises(JackinError, match="agent state read"):
        parse_agents(bad)


def combined(files: list[str], *, agents_now: str = str(NOW)) -> str:
    """What the combined read prints: the rows once, the agent sections inside the CPU window."""
    return "\n".join([f"{NOW}.5", "##rows", row(A, "coder-1", state()), "##1", "##agents-now", agents_now,
                      "##agent-files", *files, "##2"]) + "\n"  # fmt: skip


def test_status_rows_gain_their_agent_state() -> None:
    """The combined read: the status rows are the agent read's lines too (printed once)."""
    out = combined([f"{A} {hx(status_doc())}"])
    _now, [agent], _fields = parse_host_status_with_agents(out, stale_after={})
    assert (agent.state, agent.agent_state.state, agent.agent_state.question) == ("running", "blocked", "Which db?")
    _now, [agent], _fields = parse_host_status_with_agents(out.replace(f"{A} {hx(status_doc())}", f"{A} -"),
                                                           stale_after={})  # fmt: skip
    assert agent.agent_state.state == "unknown"


def test_an_agent_read_that_does_not_parse_leaves_the_rest_of_the_status() -> None:
    _now, [agent], _fields = parse_host_status_with_agents(combined([], agents_now="not a clock"), stale_after={})
    assert (agent.state, agent.uid, agent.agent_state.state) == ("running", 60000, "unknown")
    assert agent.agent_state.message.startswith("agent state read: no host clock")


def test_fill_rollup_counts_every_host() -> None:
    from jackin.agents.state import AgentState

    def agent(instance: str, st: str) -> AgentStatus:
        return AgentStatus(instance=instance, container=instance, state="running", agent_state=AgentState(state=st))

    hosts = [HostStatus(host=h, address="x", port=22, reachable=True, agents=[agent("c-1", s1), agent("c-2", s2)])
             for h, s1, s2 in (("h1", "working", "blocked"), ("h2", "done", "working"))]  # fmt: skip
    status = fill_rollup(FleetStatus(fleet="f", at=0, hosts=hosts))
    assert status.rollup == "4 agents: 1 blocked, 2 working, 1 done"
    assert status.agent_states == {"blocked": 1, "working": 2, "done": 1}


# --- the command, against a fake docker and this machine's perl ---------------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perl") is None,
                             reason="the reader switches to the agents' uids: needs root and perl")  # fmt: skip

FAKE_DOCKER = r"""#!/bin/sh
echo "$1" >> "$FAKE/docker.log"
case "$1" in
    ps) cat "$FAKE/ids" ;;
    inspect) cat "$FAKE/rows" ;;
esac
"""
# perl as the host has it, each call logged: whether the reader ran at all
FAKE_PERL = r"""#!/bin/sh
echo called >> "$FAKE/perl.log"
exec "$REAL_PERL" "$@"
"""


@pytest.fixture
def srv():
    """A fleet root every uid may traverse (pytest's own tmp dirs are root's, 0700), removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="jackin-status-agents-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top)


def fake_host(tmp_path: Path, containers: list[tuple[str, str, str]]) -> dict[str, str]:
    """A PATH where docker lists ``containers`` (id, user, instance) and perl logs its call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("docker", FAKE_DOCKER), ("perl", FAKE_PERL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "ids").write_text("".join(f"{c}\n" for c, _, _ in containers))
    (tmp_path / "rows").write_text("".join(row(c, i, state(), user=u) + "\n" for c, u, i in containers))
    # DOCKER_HOST set: the docker CLI (this fake), never the perl read of this machine's own daemon socket
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path), "DOCKER_HOST": "unix:///fake",
            "REAL_PERL": shutil.which("perl") or "perl"}  # fmt: skip


def run(command: str, env: dict[str, str]) -> str:
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, check=True).stdout


def status_file(root: Path, instance: str, data: bytes | None, owner: int) -> Path:
    """``instance``'s workspace (``owner``'s, 0700) under ``root/f``, with a status file holding ``data``."""
    workspace = root / "f" / instance / "workspace"
    (workspace / ".jackin").mkdir(parents=True)
    path = workspace / ".jackin" / "status.json"
    if data is not None:
        path.write_bytes(data)
        path.chmod(0o400)
    for p in (workspace, workspace / ".jackin", *([path] if data is not None else [])):
        os.chown(p, owner, owner)
    workspace.chmod(0o700)
    return path


@as_root
def test_the_command_reads_each_status_file_as_its_agent(tmp_path: Path, srv: Path) -> None:
    """Each file is its agent's alone (0400): read by each container's uid, and refused to another's."""
    status_file(srv, "coder-1", status_doc(), 60000)
    status_file(srv, "coder-2", b"\x00##x\n", 60002)
    status_file(srv, "coder-3", b"{}", 60002)  # coder-3's container runs as 60004: not its file
    env = fake_host(tmp_path, [(A, "60000:60001", "coder-1"), (B, "60002:60002", "coder-2"),
                               ("c" * 64, "60004:60004", "coder-3")])  # fmt: skip
    found = parse_agents(run(agents_command("f", root=str(srv)), env))
    assert {i: (f.status, f.status_problem) for i, f in found.items()} == {
        "coder-1": (status_doc(), None), "coder-2": (b"\x00##x\n", None),
        "coder-3": (None, "not read: the workspace cannot be opened: Permission denied")}  # fmt: skip
    assert (tmp_path / "perl.log").read_text().split() == ["called"]  # one reader for the host


@as_root
def test_a_fifo_for_a_status_file_is_that_agents_problem_alone(tmp_path: Path, srv: Path) -> None:
    """The issue-18 read: a FIFO used to block the whole host's read; now it is named, for that agent."""
    fifo = status_file(srv, "coder-1", None, 60000)
    os.mkfifo(fifo)
    os.chown(fifo, 60000, 60000)
    status_file(srv, "coder-2", status_doc(), 60002)
    env = fake_host(tmp_path, [(A, "60000:60000", "coder-1"), (B, "60002:60002", "coder-2")])
    out = subprocess.run(["sh", "-c", status_with_agents_command("f", root=str(srv))], env=env, capture_output=True,
                         text=True, check=True, timeout=20).stdout  # fmt: skip
    _now, agents, _fields = parse_host_status_with_agents(out, stale_after={})
    shown = {a.instance: (a.agent_state.state, a.agent_state.message) for a in agents}
    assert shown == {"coder-1": ("unknown", "status file is a FIFO, not a regular file"),
                     "coder-2": ("blocked", "m")}  # fmt: skip


@pytest.mark.parametrize("user, instance", [
    ("0:0", "coder-1"), ("", "coder-1"), ("999:999", "coder-1"), ("60000:0", "coder-1"), ("root", "coder-1"),
    ("60000:60000", "../../etc"), ("60000:60000", "-rf"), ("60000:60000", "Coder"), ("60000:60000", "a/b"),
    (None, "coder-1"), ("60000:60000", None), ("60000:60000", 'a"b'), ("60000:60000", "a\\"), ('6"0000:60000', "c"),
    ("60000:60000", "a\tb"), ("60000:60000", "a b"),
])  # fmt: skip
def test_no_file_is_read_for_a_system_user_or_an_odd_instance(tmp_path: Path, user: str, instance: str) -> None:
    """Nothing is read (``-``) unless uid and gid are >= 1000 and the instance is a plain name."""
    env = fake_host(tmp_path, [(A, user, instance)])
    out = run(agents_command("f", root=str(tmp_path)), env)
    assert f"{A} -\n" in out
    assert not (tmp_path / "perl.log").exists()


@as_root
def test_the_combined_read_lists_and_inspects_once_and_reads_as_the_agent(tmp_path: Path, srv: Path) -> None:
    """One docker ps and one docker inspect feed the status rows and the agent state."""
    status_file(srv, "coder-1", status_doc(), 60000)
    env = fake_host(tmp_path, [(A, "60000:60001", "coder-1"), (B, "0:0", "coder-2")])
    out = run(status_with_agents_command("f", root=str(srv)), env)
    _now, agents, _fields = parse_host_status_with_agents(out, stale_after={})
    assert [(a.instance, a.uid, a.agent_state.state) for a in agents] == [("coder-1", 60000, "blocked"),
                                                                           ("coder-2", 0, "unknown")]  # fmt: skip
    assert (tmp_path / "docker.log").read_text().split() == ["ps", "inspect"]
    assert (tmp_path / "perl.log").read_text().split() == ["called"]


def test_no_containers_prints_the_clock_only(tmp_path: Path) -> None:
    env = fake_host(tmp_path, [])
    assert parse_agents(run(agents_command("f", root=str(tmp_path)), env)) == {}


def test_combined_command_is_valid_posix_sh() -> None:
    subprocess.run(["sh", "-n", "-c", status_with_agents_command("demo")], check=True)


def test_a_container_the_reader_left_out_is_not_read() -> None:
    """The reader cut short (its own alarm): an agent without an answer says so, it is not "no status file"."""
    found = parse_agents(output([row(A, "coder-1", state()), row(B, "coder-2", state())], [f"{A} {hx(status_doc())}"]))
    assert (found["coder-1"].status, found["coder-2"].status_problem) == (status_doc(),
                                                                           "not read: the host's read gave no answer for it")  # fmt: skip
    assert parse_agents(output([row(B, "coder-2", state())], [f"{B} !is a FIFO, not a regular file"]))[
        "coder-2"].status_problem == "is a FIFO, not a regular file"  # fmt: skip
