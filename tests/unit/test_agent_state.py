"""Agent state derivation (jackin/agents/state.py): every branch of ``derive``, the strict status-file
parser, the text cleaning and the roll-up. Pure: no host, no clock."""

from __future__ import annotations

import json

import pytest

from jackin.agents.state import (STALE_AFTER, AgentFacts, AgentState, clean, derive, order, parse_status_file,
                                rollup)  # fmt: skip

NOW = 1_800_000_000.0


def doc(state: str = "working", message: str = "on it", *, question: str | None = None, age: float = 3,
        commit: str | None = None, **extra) -> bytes:  # fmt: skip
    data = {"schema_version": 1, "state": state, "message": message, "question": question,
            "heartbeat": int(NOW - age), "commit": commit, **extra}  # fmt: skip
    return json.dumps(data).encode()


def facts(status: bytes | None = None, *, container: str = "running", exit_code: int = 0, health: str = "healthy",
          health_output: str | None = "ok: heartbeat 2s ago", restarts: int = 0) -> AgentFacts:  # fmt: skip
    return AgentFacts(container=container, exit_code=exit_code, health=health, health_output=health_output,
                      status=status, now=NOW, restarts=restarts)  # fmt: skip


# --- the states the agent reports ------------------------------------------------------------------


@pytest.mark.parametrize("state", ["working", "idle"])
def test_a_fresh_report_is_the_state(state: str) -> None:
    got = derive(facts(doc(state, "busy")))
    assert (got.state, got.message, got.reported, got.question, got.heartbeat_age) == (state, "busy", state, None, 3.0)


def test_blocked_carries_its_question() -> None:
    got = derive(facts(doc("blocked", "waiting for an answer", question="Which database?")))
    assert (got.state, got.question, got.message) == ("blocked", "Which database?", "waiting for an answer")


def test_a_question_outside_blocked_is_not_shown() -> None:
    assert derive(facts(doc("working", question="old question"))).question is None


def test_done_carries_its_commit() -> None:
    got = derive(facts(doc("done", "committed", commit="a" * 40)))
    assert (got.state, got.commit) == ("done", "a" * 40)


@pytest.mark.parametrize("state", ["done", "failed"])
@pytest.mark.parametrize("how", [
    {"container": "exited", "exit_code": 143}, {"container": "running", "health": "unhealthy"},
    {"container": "exited", "exit_code": 1}, {"container": "restarting"},
])  # fmt: skip
def test_done_and_failed_are_final(state: str, how: dict) -> None:
    """A stopped container, a failing health check or a stale heartbeat do not undo done or failed."""
    got = derive(facts(doc(state, "finished", age=10_000), **how))
    assert got.state == state and got.message == "finished"


# --- stuck -------------------------------------------------------------------------------------------


def test_stale_heartbeat_is_stuck() -> None:
    got = derive(facts(doc("working", "step 3", age=STALE_AFTER + 1)))
    assert got.state == "stuck"
    assert got.message == f"no heartbeat for {int(STALE_AFTER + 1)}s (more than 120s); last said working: step 3"
    assert got.reported == "working"


def test_a_heartbeat_just_within_stale_after_is_not_stuck() -> None:
    """The positive control of the staleness rule, at its edge."""
    assert derive(facts(doc("working", age=STALE_AFTER))).state == "working"


def test_the_roles_stale_after_is_used() -> None:
    assert derive(facts(doc("working", age=50)), stale_after=30).state == "stuck"
    assert derive(facts(doc("working", age=50)), stale_after=60).state == "working"


def test_a_stale_blocked_agent_is_stuck() -> None:
    got = derive(facts(doc("blocked", "waiting", question="Q?", age=500)))
    assert (got.state, got.question) == ("stuck", None)


def test_unhealthy_is_stuck_with_the_health_message() -> None:
    got = derive(facts(doc("working"), health="unhealthy", health_output="unhealthy: the task said so\n"))
    assert (got.state, got.message) == ("stuck", "healthcheck unhealthy: unhealthy: the task said so")
    assert (got.health, got.health_output) == ("unhealthy", "unhealthy: the task said so")


def test_unhealthy_without_output_or_status_file_is_stuck() -> None:
    got = derive(facts(None, health="unhealthy", health_output=None))
    assert (got.state, got.message) == ("stuck", "healthcheck unhealthy: no output")


@pytest.mark.parametrize("health", ["healthy", "starting", "none"])
def test_healthy_starting_or_no_healthcheck_is_not_stuck(health: str) -> None:
    """The positive control of the health rule."""
    assert derive(facts(doc("working"), health=health)).state == "working"


@pytest.mark.parametrize("code", [0, 137, 143])
def test_a_stopped_container_not_done_is_stuck(code: int) -> None:
    got = derive(facts(doc("working", "step 2"), container="exited", exit_code=code))
    assert (got.state, got.message) == ("stuck", f"container exited (exit code {code}); last said working")


def test_restarting_is_stuck() -> None:
    got = derive(facts(None, container="restarting", exit_code=2, restarts=4))
    assert (got.state, got.message) == ("stuck", "container restarting (exit code 2, 4 restart(s))")


def test_paused_is_stuck() -> None:
    assert derive(facts(doc(), container="paused")).message == "container paused (exit code 0); last said working"


# --- failed, unknown ------------------------------------------------------------------------------------


def test_a_container_that_exited_with_an_error_code_failed() -> None:
    got = derive(facts(doc("working"), container="exited", exit_code=2))
    assert (got.state, got.message, got.reported) == ("failed", "container exited with code 2", "working")


def test_no_container_is_unknown() -> None:
    assert derive(AgentFacts(container="missing", now=NOW)) == AgentState(state="unknown", message="no container")


def test_created_never_started_is_unknown() -> None:
    assert derive(facts(None, container="created")).message == "container created, never started"


def test_no_status_file_is_unknown() -> None:
    got = derive(facts(None))
    assert (got.state, got.message) == ("unknown", "no status file (missing or empty)")


@pytest.mark.parametrize("raw, why", [
    (b"{", "not JSON: "),
    (b"\xff\xfe", "not JSON"),
    (b"[]", "document: "),
    (doc(schema_version=2), "schema_version: "),
    (doc("sleeping"), "state: "),
    (doc(extra_field=1), "extra_field: "),
    (b'{"schema_version":1,"state":"working","message":"a","message":"b","heartbeat":1}', "not JSON: duplicate key 'message'"),
    (b'{"schema_version":1,"state":"working","message":"a","heartbeat":NaN}', "not JSON: NaN is not a number"),
    (b'{"schema_version":1,"state":"working","message":"a","heartbeat":1e999}', "heartbeat: not a finite number"),
    (b'{"schema_version":1,"state":"working","message":1,"heartbeat":1}', "message: "),
    (b'{"schema_version":1,"state":"working","message":"m","heartbeat":"1"}', "heartbeat: "),
    (b'{"schema_version":1,"state":"working","message":"m","heartbeat":1,"commit":"HEAD"}', "commit: "),
    (b'{"schema_version":1,"state":"working","message":"m","heartbeat":1}\x00', "not JSON: "),
    (b" " * 8193, "larger than 8192 bytes"),
])  # fmt: skip
def test_a_malformed_status_file_is_unknown_with_the_reason(raw: bytes, why: str) -> None:
    got = derive(facts(raw))
    assert got.state == "unknown"
    assert got.message.startswith(f"malformed status file: {why}"), got.message


def test_the_entrypoints_document_parses() -> None:
    """The exact shape roles/common/jackin-status writes (integer heartbeat, no spaces)."""
    raw = (b'{"schema_version":1,"state":"blocked","message":"waiting for an answer","question":"Which db?",'
           b'"commit":null,"heartbeat":1800000000}\n')  # fmt: skip
    document = parse_status_file(raw)
    assert (document.state, document.question, document.heartbeat) == ("blocked", "Which db?", 1_800_000_000)


def test_unhealthy_wins_over_a_malformed_file_but_not_over_no_container() -> None:
    assert derive(facts(b"{", health="unhealthy", health_output="x")).state == "stuck"
    assert derive(AgentFacts(container="missing", health="unhealthy", now=NOW)).state == "unknown"


# --- the agent's text reaches a terminal --------------------------------------------------------------------


def test_control_characters_and_escapes_are_removed() -> None:
    raw = doc("blocked", "a\x1b[31mred\x1b[0m\nline\u202e", question="q\x07?\r\n")
    got = derive(facts(raw))
    assert (got.message, got.question) == ("a [31mred [0m line", "q ?")


def test_clean_caps_the_length() -> None:
    assert clean("x" * 5000) == "x" * 1999 + "…"
    assert clean(None) is None


# --- roll-up and order -------------------------------------------------------------------------------------


def test_rollup_lists_states_blocked_first() -> None:
    assert rollup(["done", "working", "blocked", "working"]) == "4 agents: 1 blocked, 2 working, 1 done"
    assert rollup(["idle"]) == "1 agent: 1 idle"
    assert rollup([]) == "0 agents"


def test_order_puts_blocked_first_and_the_ones_to_look_at_next() -> None:
    states = ["done", "idle", "working", "unknown", "failed", "stuck", "blocked"]
    assert sorted(states, key=order) == ["blocked", "stuck", "failed", "unknown", "working", "idle", "done"]


def test_stale_after_comes_from_each_agents_role() -> None:
    from jackin.spec import roles
    from jackin.agents.state import stale_after
    from jackin.spec.models import FleetSpec

    fleet = FleetSpec.model_validate({"name": "f", "agents": [{"name": "coder", "count": 2, "role": "demo"}]})
    seconds = float(roles.load("demo").state.stale_after)
    assert stale_after(fleet) == {"coder-1": seconds, "coder-2": seconds}


def test_a_status_file_cut_inside_a_character_still_parses() -> None:
    from jackin.agents.state import parse_status_file

    question = ("中" * 400).encode()[:1000].decode(errors="ignore").encode() + "中".encode()[:2]  # cut mid-character
    raw = b'{"schema_version":1,"state":"blocked","message":"m","question":"' + question + b'","heartbeat":1,"commit":null}'
    document = parse_status_file(raw)
    assert document.state == "blocked" and document.question.startswith("中")
