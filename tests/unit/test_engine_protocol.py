"""The engine's wire format: events and results survive JSON, and per-host
results say which hosts succeeded and which failed."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from jackin.engine import EngineRequest, Event, HostResult, RunResult
from jackin.transport.ssh import SshTarget


def test_host_result_round_trip() -> None:
    result = HostResult(
        host="web-1", connected=True, ops=7, changed=3, failed=1, error="apt: boom",
        facts={"os": "Debian", "cpus": 4, "nested": {"a": [1, 2]}}, elapsed=1.5,
    )  # fmt: skip
    assert HostResult.model_validate_json(result.model_dump_json()) == result
    assert HostResult.model_validate(json.loads(json.dumps(result.model_dump()))) == result


def test_event_round_trip_with_result() -> None:
    event = Event(event="host_done", t=1700000000.25, host="web-1",
                  result=HostResult(host="web-1", connected=True, ops=2, changed=1))  # fmt: skip
    line = event.model_dump_json()
    assert "\n" not in line  # one JSON object a line
    back = Event.model_validate_json(line)
    assert back == event
    assert back.result is not None and back.result.ok


def test_event_as_the_runner_writes_it() -> None:
    line = json.dumps({"event": "op_error", "t": 1.0, "host": "web-2", "op": "prepare", "error": "ValueError: x"})
    event = Event.model_validate_json(line)
    assert (event.event, event.host, event.op, event.error, event.data, event.result) == (
        "op_error", "web-2", "prepare", "ValueError: x", {}, None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [
        '{"event": "bogus", "t": 1}',
        '{"event": "done"}',
        '{"event": "done", "t": 1, "extra": 1}',
        "not json",
    ],
)
def test_event_rejects_bad_lines(line: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        Event.model_validate_json(line)


def test_run_result_round_trip() -> None:
    result = RunResult(
        hosts=[HostResult(host="a", connected=True), HostResult(host="b", error="refused")],
        error="engine exited 70", elapsed=3.25, dry_run=True,
    )  # fmt: skip
    assert RunResult.model_validate_json(result.model_dump_json()) == result


def test_engine_request_round_trip() -> None:
    target = SshTarget(name="a", address="10.0.0.1", port=2222, key_file=Path("/k"), known_hosts=Path("/kh"),
                       jump=SshTarget(name="bastion", address="10.0.0.254", known_hosts=Path("/kh")))  # fmt: skip
    request = EngineRequest(deploy="deploys/x.py", targets=[target], data={"fleet": "demo"}, dry_run=True)
    assert EngineRequest.model_validate_json(request.model_dump_json()) == request


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({"connected": True}, True),
        ({"connected": True, "ops": 5, "changed": 5}, True),
        ({}, False),  # never connected
        ({"connected": False, "error": "refused"}, False),
        ({"connected": True, "failed": 1}, False),
        ({"connected": True, "error": "prepare: boom"}, False),
    ],
)
def test_host_result_ok(fields: dict, ok: bool) -> None:
    assert HostResult(host="h", **fields).ok is ok


def test_run_result_failed_and_succeeded_keep_order() -> None:
    hosts = [
        HostResult(host="a", connected=True),
        HostResult(host="b", connected=False, error="refused"),
        HostResult(host="c", connected=True, ops=3, changed=1),
        HostResult(host="d", connected=True, failed=2, error="apt: boom"),
    ]
    result = RunResult(hosts=hosts)
    assert [h.host for h in result.succeeded] == ["a", "c"]
    assert [h.host for h in result.failed] == ["b", "d"]
    assert RunResult(hosts=[]).failed == RunResult(hosts=[]).succeeded == []


def test_models_forbid_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError):
        HostResult(host="h", hostname="x")  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        RunResult(hosts=[], warnings=[])  # type: ignore[call-arg]
