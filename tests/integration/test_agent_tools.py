"""Operator tools on a real lab host, over strict SSH: agent.exec runs as the agent's uid, passes its
output and exit status through and keeps each argument one word; agent.logs returns the container's
output (and --follow ends cleanly at Ctrl-C); agent.shell refuses without a terminal and, in a pty,
runs a command interactively as the agent.

One 1-host lab and one fleet for the module."""

from __future__ import annotations

import os
import pty
import secrets
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jackin.lab import Lab

from .conftest import ROOT, inv, module_lab, sh


@pytest.fixture(scope="module")
def olab():
    yield from module_lab("ops", 1)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"o{secrets.token_hex(3)}"
        self.spec = tmp / f"{self.name}.yaml"
        self.spec.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
    - name: coder
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
        self.container = f"jk-{self.name}--coder-1"


@pytest.fixture(scope="module")
def ofleet(olab, tmp_path_factory):
    fleet = Fleet(olab, tmp_path_factory.mktemp("ops"))
    try:
        done = inv("fleet.up", "-i", str(fleet.spec), "--yes", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")


def uid(fleet: Fleet) -> str:
    return sh(fleet.lab, f"id -u {fleet.container}").stdout.strip()


def test_exec_runs_as_the_agent_and_passes_output_and_status_through(ofleet: Fleet) -> None:
    done = inv("agent.exec", "coder-1", "-i", str(ofleet.spec), "--", "id", "-u")
    assert (done.returncode, done.stdout.strip()) == (0, uid(ofleet)), done.stderr
    assert uid(ofleet) != "0"
    failed = inv("agent.exec", "coder-1", "-i", str(ofleet.spec), "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (failed.returncode, failed.stdout, failed.stderr) == (7, "out\n", "err\n")
    words = inv("agent.exec", "coder-1", "-i", str(ofleet.spec), "--", "printf", "[%s]", "a b", "$HOME", "'q'")
    assert words.stdout == "[a b][$HOME]['q']"  # each argument one word, nothing expanded by a shell


def test_exec_of_an_unknown_agent_lists_the_known_ones(ofleet: Fleet) -> None:
    done = inv("agent.exec", "coder-9", "-i", str(ofleet.spec), "--", "true")
    assert done.returncode == 2 and "expected an instance name, one of: coder-1" in done.stderr
    assert "Traceback" not in done.stderr


def test_logs_return_the_containers_output_and_follow_ends_at_ctrl_c(ofleet: Fleet) -> None:
    marker = f"jk-log-{secrets.token_hex(4)}"
    # The agent writes to its container's own stdout (PID 1's), which docker logs keeps.
    wrote = inv("agent.exec", "coder-1", "-i", str(ofleet.spec), "--", "sh", "-c", f"echo {marker} > /proc/1/fd/1")
    assert wrote.returncode == 0, wrote.stderr
    done = inv("agent.logs", "coder-1", "-i", str(ofleet.spec), "--tail", "5")
    assert done.returncode == 0 and marker in done.stdout, done.stdout + done.stderr
    follow = subprocess.Popen([sys.executable, "-m", "invoke", "agent.logs", "coder-1", "-i", str(ofleet.spec),
                               "--follow"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        seen, deadline = b"", time.time() + 60
        while marker.encode() not in seen and time.time() < deadline:
            ready, _, _ = select.select([follow.stdout], [], [], 1)
            if ready:
                seen += os.read(follow.stdout.fileno(), 4096)
        assert marker.encode() in seen
        assert follow.poll() is None  # still following
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 0
        assert b"Traceback" not in follow.stderr.read()
    finally:
        if follow.poll() is None:
            follow.kill()


def test_shell_refuses_without_a_terminal(ofleet: Fleet) -> None:
    done = inv("agent.shell", "coder-1", "-i", str(ofleet.spec))
    assert done.returncode == 2 and "agent.shell needs a terminal" in done.stderr


def test_shell_in_a_pty_runs_a_command_as_the_agent(ofleet: Fleet) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the operator's terminal runs inv agent.shell
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "invoke", "agent.shell", "coder-1", "-i", str(ofleet.spec)])
    seen = b""

    def read_until(text: bytes, seconds: float = 60) -> bytes:
        nonlocal seen
        deadline = time.time() + seconds
        while text not in seen and time.time() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if ready:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    break
        return seen

    try:
        assert b"$ " in read_until(b"$ "), seen  # the shell's prompt: it is ready for input
        time.sleep(1)
        os.write(fd, b"echo jk-uid=$(id -u)=\n")
        assert f"jk-uid={uid(ofleet)}=".encode() in read_until(b"jk-uid=" + uid(ofleet).encode()), seen
        os.write(fd, b"exit 3\n")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3  # the shell's exit status, passed through
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
