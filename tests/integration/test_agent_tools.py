"""Operator tools on a real lab host, over strict SSH: agent.exec runs as the agent's uid, passes its
output and exit status through and keeps each argument one word; agent.logs returns the container's
output (and --follow ends cleanly at Ctrl-C, its follower on the host too); agent.shell refuses without a
terminal and, in a pty, runs a command interactively as the agent. A Ctrl-C ends each following command
(agent.logs --follow, fleet.status --watch, fleet.wait) within 2 s with 0 or 130, whenever it comes.

One 1-host lab and one fleet for the module."""

from __future__ import annotations

import os
import pty
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jackin.lab import Lab

from .conftest import ROOT, at_a_terminal, inv, module_lab, sh


@pytest.fixture(scope="module")
def olab():
    yield from module_lab("ops", 1, shared=True)


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


class Cli:
    """``inv ARGS`` running as an operator runs it. Its stderr is read as it comes, with ``-X importtime``:
    a line as each module is loaded, so ``loaded`` can wait for a moment of the start (our own code
    begins with ``jackin.transport.interrupts``: before it, Python and Invoke are starting and a Ctrl-C is theirs)."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "invoke", *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "COLUMNS": "200"}, preexec_fn=at_a_terminal)  # fmt: skip
        self.out, self.err, self.lines = b"", b"", threading.Condition()
        self.reader = threading.Thread(target=self._read_err, daemon=True)
        self.reader.start()

    def __enter__(self) -> Cli:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a failed test leaves nothing running
            self.proc.kill()
            self.proc.wait()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            with self.lines:
                self.err += line
                self.lines.notify_all()

    def loaded(self, module: str, seconds: float = 60) -> bool:
        """Wait until ``module`` has been imported."""
        with self.lines:
            # "| <module>" at any depth: a module imported by another one is indented under it
            line = re.compile(rb"\|\s+" + re.escape(module.encode()) + rb"\n")
            return self.lines.wait_for(lambda: line.search(self.err) is not None, seconds)

    def read_until(self, text: bytes, seconds: float = 60) -> bytes:
        deadline = time.monotonic() + seconds
        while text not in self.out and time.monotonic() < deadline:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    break
                self.out += data
        return self.out

    def interrupt(self) -> tuple[int | None, float]:
        """SIGINT, as Ctrl-C sends it: the exit status (None: still running 10 s later) and how long it took."""
        self.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            code: int | None = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        took = time.monotonic() - sent
        self.out += self.proc.stdout.read()
        self.reader.join(5)
        return code, took


def followers(fleet: Fleet) -> str:
    """The ``docker logs`` processes for the fleet's container still on the host, after at most 5 s."""
    found, deadline = "", time.monotonic() + 5
    while time.monotonic() < deadline:
        found = sh(fleet.lab, f"pgrep -af '[d]ocker logs.*{fleet.container}' || true").stdout.strip()
        if not found:
            break
        time.sleep(0.5)
    return found


def test_logs_return_the_containers_output_and_follow_ends_at_ctrl_c(ofleet: Fleet) -> None:
    marker = f"jk-log-{secrets.token_hex(4)}"
    # The agent writes to its container's own stdout (PID 1's), which docker logs keeps.
    wrote = inv("agent.exec", "coder-1", "-i", str(ofleet.spec), "--", "sh", "-c", f"echo {marker} > /proc/1/fd/1")
    assert wrote.returncode == 0, wrote.stderr
    done = inv("agent.logs", "coder-1", "-i", str(ofleet.spec), "--tail", "5")
    assert done.returncode == 0 and marker in done.stdout, done.stdout + done.stderr
    with Cli("agent.logs", "coder-1", "-i", str(ofleet.spec), "--follow") as follow:
        assert marker.encode() in follow.read_until(marker.encode()), follow.err[-2000:]  # streaming: the worst case
        assert follow.proc.poll() is None  # still following
        code, took = follow.interrupt()
    assert (code, took < 2, b"Traceback" in follow.err) == (0, True, False), (took, follow.err[-2000:])
    assert followers(ofleet) == ""  # the host's docker logs --follow ended too


# Each following command is interrupted as it starts: its imports, the inventory and lazy imports
# (after jackin.transport.interrupts, the first of ours), and as it connects (after the module it connects with is
# loaded: the SSH stream, the status read, the first poll). It must end within 2 s with 0 or 130.
# fleet.wait --until any: the fleet's agent is idle (no work), so it changes never and the wait goes on (--until
# blocked ends at once, settled, since nothing idle can block: the command was over before the Ctrl-C came, and a
# SIGINT during the interpreter's exit killed it, exit -2).
FOLLOWING = {"logs": ("agent.logs", "coder-1", "--follow"), "status": ("fleet.status", "--watch"),
             "wait": ("fleet.wait", "--until", "any")}  # fmt: skip
CONNECTS_WITH = {"logs": "jackin.transport.ssh", "status": "jackin.lifecycle.status", "wait": "jackin.agents.wait"}


@pytest.mark.parametrize("command", sorted(FOLLOWING))
def test_ctrl_c_while_a_following_command_starts_ends_it_within_2s(ofleet: Fleet, command: str) -> None:
    points = [("jackin.transport.interrupts", 0.05), ("jackin.transport.interrupts", 0.5), (CONNECTS_WITH[command], 0.0),
              (CONNECTS_WITH[command], 0.3)]  # fmt: skip
    for module, delay in points:
        with Cli(*FOLLOWING[command], "-i", str(ofleet.spec)) as cli:
            assert cli.loaded(module), cli.err[-2000:]
            time.sleep(delay)  # the point of the test: Ctrl-C at this moment of the start
            code, took = cli.interrupt()
        assert (code in (0, 130), took < 2, b"Traceback" in cli.err) == (True, True, False), (
            module, delay, code, took, cli.err.decode(errors="replace")[-3000:])  # fmt: skip
    if command == "logs":
        assert followers(ofleet) == ""


@pytest.mark.parametrize("command", ["status", "wait"])
def test_ctrl_c_while_a_following_command_polls_ends_it_within_2s(ofleet: Fleet, command: str) -> None:
    with Cli(*FOLLOWING[command], "-i", str(ofleet.spec)) as cli:
        if command == "wait":
            assert b"coder-1" in cli.read_until(b"coder-1"), cli.err[-2000:]  # its first poll's line
        else:  # --watch to a pipe prints only at its end: by now its first read is done and the next is due
            assert cli.loaded("jackin.lifecycle.status")
            time.sleep(3)
        assert cli.proc.poll() is None
        code, took = cli.interrupt()
    expected = 130 if command == "wait" else 0  # fleet.wait was interrupted; --watch ends cleanly
    assert (code, took < 2, b"Traceback" in cli.err) == (expected, True, False), (took, cli.err[-2000:])


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
