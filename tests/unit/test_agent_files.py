"""The reads and the write of files an agent controls (jackin/facts/agent_files.py), run for real on this
machine: the perl programs as a host runs them, switching to a uid of no user here (the tests need root,
as CI has). A FIFO with and without a writer, a leased file, links out of the workspace (to a file only
root reads and to one anyone reads), a sparse terabyte, names with newlines, and an open that blocks
(a fanotify permission event nobody answers): each answered at once, for that record alone, by its
reader or by its deadline, and no process of the agent's uid left behind."""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from jackin.facts import agent_files
from jackin.facts.agent_files import FileRead

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("perl") is None,
                                reason="switches to an agent's uid: needs root and perl")  # fmt: skip

UID, OTHER = 61_901, 61_902  # no user of this machine has them


@pytest.fixture
def ws():
    """A workspace as a host has it: the agent's (UID, 0700), with its .jackin; everything above it
    traversable. Removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="jackin-agent-files-"))
    top.chmod(0o755)
    workspace = top / "workspace"
    (workspace / ".jackin").mkdir(parents=True)
    for path in (workspace, workspace / ".jackin"):
        os.chown(path, UID, UID)
        path.chmod(0o700)
    yield workspace
    shutil.rmtree(top)


def mine(path: Path, data: bytes = b"", mode: int = 0o600) -> Path:
    """A file of the agent's (UID) holding ``data``."""
    path.write_bytes(data)
    os.chown(path, UID, UID)
    path.chmod(mode)
    return path


def leftovers(uid: int = UID) -> list[str]:
    """The processes of ``uid`` on this machine (zombies too), by command line."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") or "?")
        except OSError:  # gone meanwhile
            continue
    return found


def read(ws: Path, *names: str, cap: int = 64, uid: int = UID, wait: int = 2, budget: int = 10) -> list[FileRead]:
    """Each name (relative to ``ws``) read by one reader, as ``uid``; the answers in order."""
    records = [(f"k{i}", uid, uid, str(ws), name) for i, name in enumerate(names)]
    done = subprocess.run(["sh", "-c", agent_files.read_command(records, cap=cap, wait=wait, budget=budget)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done
    answers = agent_files.parse_answers(done.stdout)
    assert sorted(answers) == sorted(f"k{i}" for i in range(len(names))), done.stdout
    return [answers[f"k{i}"] for i in range(len(names))]


def test_a_regular_file_is_read_as_its_bytes(ws: Path) -> None:
    """The positive control: the file's bytes whatever they hold, hex on the wire; none and empty are None."""
    mine(ws / ".jackin/status.json", b'{"a": 1}\n\x00##agents\n')
    mine(ws / ".jackin/empty")
    assert read(ws, ".jackin/status.json", ".jackin/empty", ".jackin/none") == [
        FileRead(data=b'{"a": 1}\n\x00##agents\n'), FileRead(), FileRead()]  # fmt: skip
    assert leftovers() == []


def test_a_fifo_is_refused_at_once_with_or_without_a_writer(ws: Path) -> None:
    fifo, written = ws / ".jackin/status.json", ws / ".jackin/fed"
    for path in (fifo, written):
        os.mkfifo(path)
        os.chown(path, UID, UID)
    writer = os.open(written, os.O_RDWR | os.O_NONBLOCK)  # a writer holding it open, with bytes waiting
    try:
        os.write(writer, b"fed")
        started = time.monotonic()
        answers = read(ws, ".jackin/status.json", ".jackin/fed")
        took = time.monotonic() - started
        assert answers == [FileRead(problem="is a FIFO, not a regular file")] * 2
        assert took < 2, took  # not the reader's deadline: it never waited
        assert os.read(writer, 10) == b"fed"  # not a byte taken from the pipe
    finally:
        os.close(writer)
    assert leftovers() == []


def test_links_are_followed_as_the_agent_and_never_out_of_the_workspace(ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.write_bytes(b"root's\n")
    outside.chmod(0o600)
    os.symlink(outside, ws / ".jackin/secret")
    mine(ws / "inside", b"the agent's\n")
    os.symlink("../inside", ws / ".jackin/near")
    assert read(ws, ".jackin/secret", ".jackin/near") == [
        FileRead(problem="cannot be opened: Permission denied"),  # read as the agent: root's file is not opened
        FileRead(data=b"the agent's\n"),  # a link inside the workspace is read (the positive control)
    ]  # fmt: skip
    outside.chmod(0o644)  # one the agent's uid could read: opened, and refused for where it is
    assert read(ws, ".jackin/secret") == [FileRead(problem="leads outside the workspace")]


def test_the_read_is_the_agents_alone(ws: Path) -> None:
    """Not root, not another uid, no group of root's: the reader's switch holds."""
    other = mine(ws / "other", b"x")
    os.chown(other, OTHER, OTHER)
    grouped = mine(ws / "grouped", b"y", mode=0o040)
    os.chown(grouped, OTHER, 0)  # readable by group root only: this test's process would read it
    own = mine(ws / "own", b"z", mode=0o400)
    assert read(ws, "other", "grouped", "own") == [FileRead(problem="cannot be opened: Permission denied")] * 2 + [
        FileRead(data=b"z")]  # fmt: skip
    assert read(ws, "own", uid=999) == [FileRead(problem="not read: cannot read as uid 999: not an agent's uid:gid")]


def test_a_sparse_terabyte_is_read_to_its_cap(ws: Path) -> None:
    with open(mine(ws / ".jackin/handoff.md"), "r+b") as handle:
        handle.truncate(1 << 40)
    started = time.monotonic()
    [answer] = read(ws, ".jackin/handoff.md", cap=8192)
    assert answer == FileRead(data=b"\0" * 8193) and time.monotonic() - started < 5


def test_names_with_newlines_and_other_kinds(ws: Path) -> None:
    mine(ws / ".jackin/a\nb", b"newline\n")
    mine(ws / ".jackin/k1 +41\n##x", b"forged?\n")
    (ws / ".jackin/dir").mkdir()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(ws / ".jackin/sock"))
        answers = read(ws, ".jackin/a\nb", ".jackin/k1 +41\n##x", ".jackin/dir", ".jackin/sock")
    assert answers == [FileRead(data=b"newline\n"), FileRead(data=b"forged?\n"),
                       FileRead(problem="is a directory, not a regular file"),
                       FileRead(problem="is a socket, not a regular file")]  # fmt: skip


def test_a_leased_file_is_refused_not_waited_for(ws: Path) -> None:
    """A write lease makes an ordinary open wait up to lease-break-time (45 s); O_NONBLOCK does not."""
    leased = mine(ws / ".jackin/status.json", b"{}")
    fd = os.open(leased, os.O_WRONLY)
    before = signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease holder is told of the open by SIGIO
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        started = time.monotonic()
        assert read(ws, ".jackin/status.json") == [FileRead(problem="cannot be opened: Resource temporarily unavailable")]
        assert time.monotonic() - started < 2
    finally:
        os.close(fd)
        signal.signal(signal.SIGIO, before)


def _blocked_opens(path: Path) -> int:
    """A fanotify group (this process's) that holds every open of ``path`` until it answers, which it
    never does: an open that blocks whatever its flags. The group's descriptor; closing it lets them go."""
    libc = ctypes.CDLL(None, use_errno=True)
    fan = libc.fanotify_init(0x08, os.O_RDONLY)  # FAN_CLASS_CONTENT
    if fan < 0:
        pytest.skip(f"no fanotify permission events here (errno {ctypes.get_errno()})")
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    if libc.fanotify_mark(fan, 0x1, 0x10000, -100, bytes(path)) != 0:  # FAN_MARK_ADD, FAN_OPEN_PERM, AT_FDCWD
        os.close(fan)
        pytest.skip(f"fanotify_mark failed (errno {ctypes.get_errno()})")
    return fan


def test_a_read_that_blocks_is_killed_at_its_deadline_and_the_next_is_read(ws: Path) -> None:
    stuck = mine(ws / ".jackin/status.json", b"{}")
    mine(ws / ".jackin/next", b"next\n")
    fan = _blocked_opens(stuck)
    try:
        started = time.monotonic()
        answers = read(ws, ".jackin/status.json", ".jackin/next", wait=1)
        took = time.monotonic() - started
        assert answers == [FileRead(problem="not read: no answer within 1s (its reader was killed)"),
                           FileRead(data=b"next\n")]  # fmt: skip
        assert 1 <= took < 5, took
        assert leftovers() == []  # killed and reaped, not left blocked
    finally:
        os.close(fan)


def test_the_budget_ends_the_reads_left(ws: Path) -> None:
    mine(ws / "f", b"f")
    assert read(ws, "f", "f", budget=0) == [FileRead(problem="not read: this host's reads took longer than 0s")] * 2


def test_without_perl_each_record_says_so(ws: Path, tmp_path: Path) -> None:
    records = [("k0", UID, UID, str(ws), "f"), ("k1", UID, UID, str(ws), "a b")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "echo"):  # a PATH with the shell and nothing else
        (bin_dir / tool).symlink_to(shutil.which(tool) or "/bin/sh")
    done = subprocess.run([str(bin_dir / "sh"), "-c", agent_files.read_command(records, cap=8)], capture_output=True,
                          text=True, env={"PATH": str(bin_dir)}, timeout=30)  # fmt: skip
    assert agent_files.parse_answers(done.stdout) == {k: FileRead(problem=agent_files.NO_PERL) for k in ("k0", "k1")}


@pytest.mark.parametrize("answer", ["+0g", "?", "", "+4"])
def test_an_answer_that_is_none_of_the_three_does_not_parse(answer: str) -> None:
    with pytest.raises(ValueError):
        agent_files.parse_answer(answer)


# --- the write (agent.answer) ------------------------------------------------------------------


def write(ws: Path, data: bytes, *, directory: str = ".jackin", name: str = "answer", cap: int = 100):
    return subprocess.run(["sh", "-c", agent_files.write_command(UID, UID, str(ws), directory, name, cap=cap)],
                          input=data, capture_output=True, timeout=30)  # fmt: skip


def test_the_write_lands_as_the_agents_private_file_past_a_planted_fifo(ws: Path) -> None:
    os.mkfifo(ws / ".jackin/answer.tmp")
    started = time.monotonic()
    done = write(ws, b"use postgres\n")
    assert (done.returncode, done.stdout) == (0, b"ok\n"), done.stderr
    assert time.monotonic() - started < 5
    answer = ws / ".jackin/answer"
    info = answer.stat()
    assert (answer.read_bytes(), info.st_uid, info.st_gid, info.st_mode & 0o777) == (b"use postgres\n", UID, UID, 0o600)
    assert sorted(p.name for p in (ws / ".jackin").iterdir()) == ["answer", "answer.tmp"]  # the FIFO untouched
    assert leftovers() == []


def test_the_write_makes_its_directory_and_replaces_an_old_answer(ws: Path) -> None:
    shutil.rmtree(ws / ".jackin")
    assert write(ws, b"one\n").returncode == 0
    assert write(ws, b"two\n").returncode == 0
    assert (ws / ".jackin/answer").read_bytes() == b"two\n"
    assert ((ws / ".jackin").stat().st_uid, (ws / ".jackin").stat().st_mode & 0o777) == (UID, 0o700)


def test_the_write_never_leaves_the_workspace(ws: Path) -> None:
    elsewhere = ws.parent / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    elsewhere.chmod(0o777)  # the agent's uid could write there: only the location refuses it
    shutil.rmtree(ws / ".jackin")
    os.symlink(elsewhere, ws / ".jackin")
    done = write(ws, b"x\n")
    assert done.returncode == 1 and done.stderr == b".jackin leads outside the workspace: not written\n"
    assert list(elsewhere.iterdir()) == []


def test_a_write_that_cannot_land_says_why_and_leaves_nothing(ws: Path) -> None:
    (ws / ".jackin/answer").mkdir()
    os.chown(ws / ".jackin/answer", UID, UID)
    done = write(ws, b"x\n")
    assert done.returncode == 1 and b"to .jackin/answer: Is a directory" in done.stderr, done.stderr
    assert sorted(p.name for p in (ws / ".jackin").iterdir()) == ["answer"]  # its temporary file removed
    too_big = write(ws, b"x" * 101)
    assert too_big.returncode == 1 and too_big.stderr == b"more than 100 bytes: not written\n"
