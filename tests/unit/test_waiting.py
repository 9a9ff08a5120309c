"""fleet.wait's logic (jackin/agents/wait.py) with a scripted poll, clock and sleep: which condition ends
the wait, with which exit code, and which changes are reported. No host, no real time."""

from __future__ import annotations

import pytest

from jackin.errors import SpecError
from jackin.spec import Inventory
from jackin.agents.wait import EXIT_TIMEOUT, UNREACHABLE_POLLS, AgentView, Change, Poll, changes, condition, wait

SPEC = Inventory.model_validate({"fleet": {"name": "f", "agents": [{"name": "coder", "count": 2}]}})


def poll(*states: str, errors: dict[str, str] | None = None, question: str | None = None) -> Poll:
    agents = {f"h1/coder-{n}": AgentView(host="h1", instance=f"coder-{n}", state=s,
                                         question=question if s == "blocked" else None)
              for n, s in enumerate(states, 1)}  # fmt: skip
    return Poll(agents=agents, errors=errors or {})


class Script:
    """Polls in order (the last repeats), a clock that advances only when slept, the sleeps taken."""

    def __init__(self, *polls: Poll):
        self.polls, self.now, self.sleeps = list(polls), 0.0, []

    def poll(self) -> Poll:
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def run(self, until: str = "done", timeout: float | None = 60, seen: list | None = None):
        return wait(SPEC, until=until, timeout=timeout, poll=self.poll, clock=lambda: self.now, wall=lambda: 1000.0,
                    sleep=self.sleep, on_change=(seen.append if seen is not None else lambda _: None))  # fmt: skip


def test_done_waits_until_every_agent_is_done() -> None:
    script = Script(poll("working", "working"), poll("done", "working"), poll("done", "done"))
    result = script.run()
    assert (result.held, result.reason, result.exit_code, result.polls) == (True, "done", 0, 3)
    assert script.sleeps == [2.0, 2.0]


def test_done_with_a_failed_agent_exits_1() -> None:
    result = Script(poll("working", "done"), poll("failed", "done")).run()
    assert (result.held, result.exit_code, [a.state for a in result.failed]) == (True, 1, ["failed"])


def test_idle_counts_as_finished_for_done() -> None:
    assert Script(poll("idle", "done")).run().exit_code == 0


@pytest.mark.parametrize("other", ["stuck", "unknown", "blocked", "working"])
def test_done_does_not_hold_while_an_agent_is_not_finished(other: str) -> None:
    result = Script(poll("done", other)).run(timeout=10)
    assert (result.held, result.reason, result.exit_code) == (False, "timeout", EXIT_TIMEOUT)
    assert result.elapsed == 10.0


def test_done_does_not_hold_while_a_host_cannot_be_read() -> None:
    """Its agents keep their last seen state (done), but done is not proven for them."""
    script = Script(poll("done", "done", errors={"h2": "timed out"}), poll("done", "done"))
    result = script.run()
    assert (result.held, result.polls) == (True, 2)


def test_blocked_returns_when_an_agent_blocks() -> None:
    seen: list[Change] = []
    result = Script(poll("working", "working"), poll("working", "blocked", question="Which db?")).run("blocked", seen=seen)
    assert (result.held, result.reason, result.exit_code, result.polls) == (True, "blocked", 0, 2)
    assert [(c.instance, c.old, c.new, c.question) for c in seen] == [
        ("coder-1", None, "working", None), ("coder-2", None, "working", None),
        ("coder-2", "working", "blocked", "Which db?")]  # fmt: skip


def test_blocked_already_at_the_first_poll_returns_at_once() -> None:
    script = Script(poll("blocked", "done"))
    assert (script.run("blocked").polls, script.sleeps) == (1, [])


def test_blocked_positive_control_times_out_when_none_blocks() -> None:
    result = Script(poll("working", "done")).run("blocked", timeout=5)
    assert (result.reason, result.exit_code) == ("timeout", EXIT_TIMEOUT)


@pytest.mark.parametrize(("states", "code"), [(("done", "failed"), 1), (("done", "idle"), 0)])
def test_blocked_ends_settled_when_no_agent_can_block_any_more(states: tuple[str, str], code: int) -> None:
    result = Script(poll("working", "working"), poll(*states)).run("blocked", timeout=300)
    assert (result.held, result.reason, result.exit_code, result.polls) == (False, "settled", code, 2)
    unread = poll(*states, errors={"h1": "connection refused"})  # a host not read: they may still change
    assert Script(unread).run("blocked", timeout=5).reason == "timeout"


def test_any_ignores_the_first_poll_and_returns_on_the_first_change() -> None:
    script = Script(poll("working", "working"), poll("working", "working"), poll("working", "stuck"))
    result = script.run("any")
    assert (result.held, result.reason, result.polls, result.exit_code) == (True, "any", 3, 0)
    assert [(c.old, c.new) for c in result.changes][-1] == ("working", "stuck")


def test_a_host_unreadable_on_consecutive_polls_ends_with_3() -> None:
    bad = poll("working", "working", errors={"h1": "connection refused"})
    result = Script(poll("working", "working"), bad).run(timeout=None)
    assert (result.reason, result.exit_code, result.polls) == ("unreachable", 3, 1 + UNREACHABLE_POLLS)
    assert result.errors == {"h1": "connection refused"}


def test_a_passing_read_error_neither_ends_the_wait_nor_changes_states() -> None:
    seen: list[Change] = []
    bad = Poll(agents={k: a.model_copy(update={"state": "unknown"}) for k, a in poll("working", "working").agents.items()},
               errors={"h1": "timeout"})  # fmt: skip
    script = Script(poll("working", "working"), bad, bad, poll("done", "done"))
    result = script.run(seen=seen)
    assert (result.reason, result.exit_code) == ("done", 0)
    assert [c.new for c in seen] == ["working", "working", "done", "done"]


def test_the_last_sleep_stops_at_the_timeout() -> None:
    script = Script(poll("working"))
    script.run(timeout=5)
    assert script.sleeps == [2.0, 2.0, 1.0]


def test_no_timeout_waits_as_long_as_it_takes() -> None:
    polls = [poll("working")] * 500 + [poll("done")]
    assert Script(*polls).run(timeout=None).polls == 501


def test_an_unknown_condition_is_a_usage_error() -> None:
    with pytest.raises(SpecError, match="--until expects one of done, blocked, any, got 'all'"):
        Script(poll("done")).run("all")


def test_the_result_lists_agents_blocked_first() -> None:
    result = Script(poll("done", "working", "blocked")).run("blocked")
    assert [a.state for a in result.agents] == ["blocked", "working", "done"]


def test_changes_in_rollup_order() -> None:
    before = poll("working", "working", "working").agents
    after = poll("done", "blocked", "working").agents
    assert [(c.instance, c.new) for c in changes(before, after, 0)] == [("coder-2", "blocked"), ("coder-1", "done")]


def test_condition_with_no_agents_never_holds_done() -> None:
    assert condition("done", Poll(agents={}), False) == (False, 0)
