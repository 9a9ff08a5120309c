"""Start the engine child process and stream its events back."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from pydantic import ValidationError

from jackin.engine.protocol import EngineRequest, Event, HostResult, RunResult
from jackin.errors import JackinError

OnEvent = Callable[[Event], None]


def run(request: EngineRequest, on_event: OnEvent = lambda _: None, *, timeout: float = 3600,
        secrets: str | None = None) -> RunResult:
    """Run a deploy on every target in the engine process; return per-host results.

    ``secrets``: credential values (``Secrets.to_wire``), written to the child's stdin after the
    request, never into the request (its data is the plan) or the child's argv or environment.

    Events are handed to ``on_event`` as they arrive, so the CLI can show progress.
    A host that fails is a failed ``HostResult``, never an exception.
    """
    started = time.monotonic()
    results: dict[str, HostResult] = {}
    engine_error: str | None = None
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jackin.engine.runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request.model_dump_json() + "\n")  # one line: JSON escapes every newline
        if secrets:
            proc.stdin.write(secrets + "\n")
        proc.stdin.close()
        watchdog = threading.Timer(timeout, proc.kill)  # a run that outlives its deadline is stopped
        watchdog.daemon = True
        watchdog.start()
        for line in proc.stdout:
            try:
                event = Event.model_validate_json(line)
            except ValidationError:
                continue  # not an event line; the engine's stdout carries events only
            if event.event == "host_done" and event.result is not None:
                results[event.result.host] = event.result
            elif event.event == "error":
                engine_error = event.error
            on_event(event)
        code = proc.wait()
        watchdog.cancel()
        if code == -9 and engine_error is None:
            engine_error = f"the run did not finish within {timeout:.0f}s and was stopped"
        if code != 0 and engine_error is None:
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace").strip().splitlines()[-5:]
            engine_error = f"engine exited {code}: {' | '.join(tail)}"
    if not results and engine_error:
        raise JackinError(engine_error)
    hosts = [results.get(t.name) or HostResult(host=t.name, error="no result from the engine") for t in request.targets]
    return RunResult(hosts=hosts, error=engine_error, elapsed=round(time.monotonic() - started, 3), dry_run=request.dry_run)
