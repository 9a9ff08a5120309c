"""jackin.transport.interrupts: work on daemon threads, a Ctrl-C raised in the main thread's own wait (never
inside the work), the work told to stop and given a bounded time, the process ended at once after it;
and exit 130 before a command starts.

A Ctrl-C is simulated with ``_thread.interrupt_main`` (what SIGINT does to the main thread), sent
by the work itself, so no test waits for a timer."""

from __future__ import annotations

import _thread
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jackin.transport import fanout, interrupts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's Ctrl-Cs are its own: a later task's guard must not end this pytest process."""
    monkeypatch.setattr(interrupts, "_interrupted", [])


def test_run_returns_the_works_result_or_raises_its_error() -> None:
    assert interrupts.run(lambda stop: ("done", stop.is_set())) == ("done", False)
    with pytest.raises(ValueError, match="bad"):
        interrupts.run(lambda stop: (_ for _ in ()).throw(ValueError("bad")))


def test_a_ctrl_c_sets_stop_and_is_raised_once_the_work_has_ended() -> None:
    seen: list[bool] = []

    def work(stop: threading.Event) -> str:
        _thread.interrupt_main()
        seen.append(stop.wait(5))  # the interrupted wait sets it
        return "closed"

    with pytest.raises(KeyboardInterrupt):
        interrupts.run(work, grace=5)
    assert seen == [True]


def test_work_that_does_not_stop_is_left_behind_after_the_grace() -> None:
    release = threading.Event()

    def work(stop: threading.Event) -> None:
        _thread.interrupt_main()
        release.wait(10)  # as a connection that is still handshaking: it does not look at stop

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        interrupts.run(work, grace=0.05)
    assert time.monotonic() - started < 1
    release.set()


def test_each_runs_in_parallel_keeps_the_order_and_raises_the_first_error_after_all() -> None:
    together = threading.Barrier(3, timeout=5)  # passes only when all three run at once
    assert fanout.each(lambda n: (together.wait(), n * 2)[1], [1, 2, 3]) == [2, 4, 6]
    assert fanout.each(lambda n: n, []) == []
    ran: list[int] = []

    def fail_on_two(n: int) -> int:
        ran.append(n)
        if n == 2:
            raise RuntimeError("two")
        return n

    with pytest.raises(RuntimeError, match="two"):
        fanout.each(fail_on_two, [1, 2, 3], workers=1)
    assert ran == [1, 2, 3]


def test_a_ctrl_c_in_each_is_raised_at_once_with_items_still_running() -> None:
    release = threading.Event()

    def item(n: int) -> int:
        if n == 1:
            _thread.interrupt_main()
        release.wait(10)
        return n

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fanout.each(item, [1, 2])
    assert time.monotonic() - started < 1
    release.set()


def _python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python whose SIGINT starts at its default, as under a terminal (the suite may run
    as a background job that ignores SIGINT, which children inherit)."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


def test_before_the_command_starts_a_ctrl_c_exits_130_at_once() -> None:
    done = _python("import os, signal, time; from jackin.transport import interrupts; interrupts.exit_until_started(); "
                   "os.kill(os.getpid(), signal.SIGINT); time.sleep(20); print('not reached')")  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")


def test_once_started_a_ctrl_c_is_a_keyboard_interrupt_again() -> None:
    done = _python("import os, signal, time; from jackin.transport import interrupts; interrupts.exit_until_started(); "
                   "interrupts.started()\n"
                   "try:\n    os.kill(os.getpid(), signal.SIGINT); time.sleep(20)\n"
                   "except KeyboardInterrupt:\n    print('interrupted')")  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "interrupted\n"), done.stderr


def test_after_a_ctrl_c_interrupted_work_the_process_ends_at_once_without_its_teardown() -> None:
    """Work still running (here: holding a lock the teardown would need) cannot hold the exit up."""
    done = _python("import _thread, threading, atexit; from jackin.transport import interrupts\n"
                   "held = threading.Lock()\n"
                   "atexit.register(lambda: held.acquire())  # as a teardown waiting on the work's lock\n"
                   "def work(stop):\n    with held:\n        _thread.interrupt_main(); threading.Event().wait(60)\n"
                   "try:\n    interrupts.run(work, grace=0.05)\n"
                   "except KeyboardInterrupt:\n    print('interrupted', end='')\n    interrupts.end_if_interrupted(130)\n")  # fmt: skip
    assert (done.returncode, done.stdout) == (130, "interrupted"), done.stderr  # printed: flushed first
    assert interrupts.end_if_interrupted(0) is None  # in this process nothing was interrupted: it goes on
