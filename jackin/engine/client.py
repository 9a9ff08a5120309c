"""Start the engine child process and stream its events back."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from pydantic import ValidationError

from jackin.engine.protocol import EngineRequest, Event, HostResult, RunResult
from jackin.errors import JackinError

OnEvent = Callable[[Event], None]
# The engine child's command, for the test suite alone: it runs several hundred engines, and starts each
# from a process that has loaded pyinfra already (tests/zygote.py) instead of paying those imports again.
COMMAND_ENV = "JACKIN_ENGINE_COMMAND"


def command() -> list[str]:
    """How the engine child is started: this interpreter running ``jackin.engine.runner``, or the
    command ``JACKIN_ENGINE_COMMAND`` names (split as a shell would, never run by one)."""
    custom = os.environ.get(COMMAND_ENV, "").strip()
    return shlex.split(custom) if custom else [sys.executable, "-m", "jackin.engine.runner"]


class Engine:
    """An engine child started ahead of its request (``started``): it loads pyinfra and gevent, then
    waits on its stdin, so that load overlaps the caller's own work (``fleet.up`` reading and
    planning its hosts). Handed to ``run``; when no run needs it, ``close`` ends it (an empty
    stdin: the child exits without doing anything)."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
            )
        except BaseException:
            self.stderr.close()
            raise
        self.used = False

    def close(self) -> None:
        """End the child: one never handed a request has done nothing and is stopped at once; one that
        ran (the caller stopped reading it, e.g. on an error) is given 10 s to finish, then stopped."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()  # an empty request: the child exits without doing anything
            except BrokenPipeError:
                pass
        if not self.used:
            self.proc.terminate()
        elif self.proc.poll() is None and self.proc.stdout is not None:
            self.proc.stdout.close()  # nobody reads it any more: the child stops at its next event, not on a full pipe
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@contextmanager
def started(wanted: bool) -> Iterator[Engine | None]:
    """An ``Engine`` started now when ``wanted`` (else None), always ended on the way out."""
    if not wanted:
        yield None
        return
    with Engine() as engine:
        yield engine


def run(
    request: EngineRequest,
    on_event: OnEvent = lambda _: None,
    *,
    timeout: float = 3600,
    secrets: str | None = None,
    engine: Engine | None = None,
) -> RunResult:
    """Run a deploy on every target in the engine process; return per-host results.

    ``secrets``: credential values (``Secrets.to_wire``), written to the child's stdin after the
    request, never into the request (its data is the plan) or the child's argv or environment.
    ``engine``: a child already started (``started``), used instead of starting one.

    Events are handed to ``on_event`` as they arrive, so the CLI can show progress.
    A host that fails is a failed ``HostResult``, never an exception.
    """
    if engine is None or engine.used:
        with Engine() as own:
            return run(request, on_event, timeout=timeout, secrets=secrets, engine=own)
    engine.used = True
    t0 = time.monotonic()
    proc, stderr = engine.proc, engine.stderr  # ``engine`` owns them and closes them
    assert proc.stdin is not None and proc.stdout is not None
    fired = threading.Event()

    def stop() -> None:  # a run past its deadline is stopped
        fired.set()
        proc.kill()

    watchdog = threading.Timer(timeout, stop)
    watchdog.daemon = True
    watchdog.start()  # before the request is written: a child that never reads it is stopped too
    try:
        _send(proc.stdin, request, secrets)
        results, engine_error = _events(proc.stdout, on_event)
        code = proc.wait()
    finally:
        watchdog.cancel()
    if fired.is_set() and engine_error is None:
        engine_error = f"the run did not finish within {timeout:.0f}s and was stopped"
    if code != 0 and engine_error is None:
        stderr.seek(0)
        tail = stderr.read().decode(errors="replace").strip().splitlines()[-5:]
        engine_error = f"engine exited {code}: {' | '.join(tail)}"
    if not results and engine_error:
        raise JackinError(engine_error)
    hosts = [results.get(t.name) or HostResult(host=t.name, error="no result from the engine") for t in request.targets]
    return RunResult(hosts=hosts, error=engine_error, elapsed=round(time.monotonic() - t0, 3), dry_run=request.dry_run)


def _send(stdin: IO[str], request: EngineRequest, secrets: str | None) -> None:
    """The request (one line: JSON escapes every newline), then the secrets' line, then end of input."""
    try:
        stdin.write(request.model_dump_json() + "\n")
        if secrets:
            stdin.write(secrets + "\n")
        stdin.close()
    except BrokenPipeError:  # a child started ahead that died before its request: its stderr says why
        pass


def _events(stdout: IO[str], on_event: OnEvent) -> tuple[dict[str, HostResult], str | None]:
    """Every event the engine writes, handed to ``on_event`` as it arrives; per host its result, and the
    engine's own error (None: none)."""
    results: dict[str, HostResult] = {}
    engine_error: str | None = None
    for line in stdout:
        try:
            event = Event.model_validate_json(line)
        except ValidationError:
            continue  # not an event line; the engine's stdout carries events only
        if event.event == "host_done" and event.result is not None:
            results[event.result.host] = event.result
        elif event.event == "error":
            engine_error = event.error
        on_event(event)
    return results, engine_error
