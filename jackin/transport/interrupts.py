"""Ctrl-C while SSH work is in flight: the work runs on daemon threads, the main thread only waits.

Python raises KeyboardInterrupt in the main thread between any two bytecodes. Raised inside
paramiko, it can land right after a lock's ``acquire()`` and before the ``try`` that releases it
(``BufferedPipe.read_ready``, ``Transport._send_user_message``): the lock stays held, and closing
the channel waits on it for ever (issue 23: ``agent.logs --follow`` did not end under load).
Raised while a ``ThreadPoolExecutor`` waits, the pool's shutdown, and the interpreter's exit after
it, wait for every SSH command still in flight, up to its timeout.

So that code never runs on the main thread while a Ctrl-C can come. ``run`` starts the work on a
daemon thread and waits in ``select`` on a pipe the work closes when it ends: no lock is held
there, so the KeyboardInterrupt is raised in our own wait. It then sets the work's ``stop`` event
(the work closes its channel and connection), waits at most ``grace`` seconds, and is raised on;
a daemon thread that is still busy does not keep the process alive.

Before a command has started (Invoke loading ``tasks.py`` and parsing), Invoke would turn a
KeyboardInterrupt into exit 1: ``exit_until_started`` makes a Ctrl-C there exit 130 at once
(nothing has been touched yet), until ``started`` gives SIGINT back to Python.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

INTERRUPTED = 130  # the shell's status for a command ended by SIGINT
GRACE = 0.5  # seconds the stopped work may take to close its channel before the command goes on
TICK = 0.1  # seconds: the longest a waiting main thread sleeps before it checks for a Ctrl-C

_previous: list[Any] = []  # the SIGINT handler ``exit_until_started`` replaced, while it is replaced
_interrupted: list[str] = []  # the work ``run`` was running when a Ctrl-C came (it may still run)


def run(work: Callable[[threading.Event], T], *, grace: float = 0.0, name: str = "jackin-work") -> T:
    """``work(stop)`` on a daemon thread; its result, or its exception raised here.

    A Ctrl-C while it runs is raised here as KeyboardInterrupt, after ``stop`` is set and the
    work had up to ``grace`` seconds to end (``work`` should check ``stop`` where it waits)."""
    stop = threading.Event()
    outcome: list[tuple[bool, Any]] = []
    ended, ends = os.pipe()

    def body() -> None:
        try:
            outcome.append((True, work(stop)))
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome.append((False, error))
        finally:
            os.close(ends)  # the waiting end reads end-of-file: the wait is over

    try:
        try:
            threading.Thread(target=body, name=name, daemon=True).start()
            _wait(ended, None)
        except KeyboardInterrupt:
            _interrupted.append(name)
            stop.set()
            if grace > 0:
                _wait(ended, grace)
            raise
    finally:
        os.close(ended)  # only this end: the work closes its own, so no descriptor is closed twice
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _wait(fd: int, timeout: float | None) -> None:
    """Until ``fd`` is readable or ``timeout`` passed. The KeyboardInterrupt comes from here: a signal
    the kernel gave to another thread does not interrupt ``select``, so it wakes every ``TICK``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = TICK if deadline is None else min(TICK, deadline - time.monotonic())
        if left <= 0 or select.select([fd], [], [], left)[0]:
            return


def end_if_interrupted(code: int) -> None:
    """After a Ctrl-C interrupted ``run``'s work, end the process now with ``code``: stdout and stderr
    flushed, and no interpreter teardown, which would run beside work still on its daemon thread (a
    connection handshaking or closing, in paramiko and OpenSSL) and costs up to a second of a busy
    machine's time; nothing else is left to do. Otherwise return."""
    if not _interrupted:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_until_started() -> None:
    """From now until ``started``, a Ctrl-C exits the process with 130 at once (main thread only)."""
    if threading.current_thread() is threading.main_thread() and not _previous:
        _previous.append(signal.signal(signal.SIGINT, _exit))


def started() -> None:
    """The command has started: a Ctrl-C is Python's KeyboardInterrupt again (the CLI's guard maps it)."""
    if _previous and threading.current_thread() is threading.main_thread():
        before = _previous.pop()
        if signal.getsignal(signal.SIGINT) is _exit:
            signal.signal(signal.SIGINT, signal.default_int_handler if before is None else before)


def _exit(signum: int, frame: object) -> None:
    os._exit(INTERRUPTED)
