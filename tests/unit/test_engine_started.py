"""An engine child started ahead of its request (jackin.engine.client.Engine): used by one run, or
ended unused without doing anything. Real child processes, no host (a run with no targets)."""

from __future__ import annotations

import time

from jackin.engine import client
from jackin.engine.protocol import EngineRequest
from jackin.lifecycle.runs import deploys_dir

REQUEST = EngineRequest(deploy=str(deploys_dir() / "fleet.py"), targets=[])


def test_not_wanted_starts_nothing() -> None:
    with client.started(False) as engine:
        assert engine is None


def test_an_unused_engine_is_ended_on_the_way_out() -> None:
    with client.started(True) as engine:
        assert engine is not None
        proc = engine.proc
        time.sleep(0.2)
        assert proc.poll() is None  # loading, then waiting for its request
    assert proc.returncode is not None  # ended on the way out, with nothing run
    assert proc.stdout is not None and proc.stdout.closed
    assert engine.stderr.closed  # closed with the engine


def test_a_run_uses_the_engine_started_ahead_once() -> None:
    events: list[str] = []
    with client.started(True) as engine:
        assert engine is not None
        first = engine.proc
        result = client.run(REQUEST, lambda e: events.append(e.event), engine=engine)
        assert engine.used and first.returncode == 0
        assert result.hosts == [] and result.error is None
        assert events[0] == "start" and events[-1] == "done"
        again = client.run(REQUEST, engine=engine)  # a second run starts its own child
        assert again.error is None and engine.proc is first


def test_an_engine_that_died_before_its_request_is_an_engine_error() -> None:
    with client.started(True) as engine:
        assert engine is not None
        engine.proc.kill()
        engine.proc.wait()
        try:
            client.run(REQUEST, engine=engine)
        except client.JackinError as error:
            assert "engine exited -9" in error.message
        else:
            raise AssertionError("a dead engine must fail the run")


def test_an_engine_child_given_an_empty_request_exits_0() -> None:
    engine = client.Engine()
    assert engine.proc.stdin is not None
    engine.proc.stdin.close()  # what close() sends first: the child reads it once loaded, and does nothing
    assert engine.proc.wait(timeout=60) == 0
    engine.close()
