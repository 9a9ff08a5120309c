"""fleet.run's loop with fake phases: the order, where it stops, what it says is left, and its exit status.
Never tears down before collecting; a failed collect leaves the fleet up and says how to retry."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jackin.lifecycle import runloop
from jackin.errors import ConnectError, JackinError
from jackin.lifecycle.runloop import Phases, run, wait_limit

SPEC = SimpleNamespace(fleet=SimpleNamespace(name="demo", agents=[SimpleNamespace(name="coder"), SimpleNamespace(name="reviewer")]))


def agent(instance: str, state: str) -> SimpleNamespace:
    return SimpleNamespace(model_dump=lambda: {"host": "h1", "instance": instance, "state": state})


class Fake:
    """The four phases, recording the order they ran in; each one's result is configurable."""

    def __init__(self, *, up=0, held=True, reason="done", states=("done", "done"), collect=None, down=0):
        self.calls: list[str] = []
        self.up_code, self.down_code, self.collect_result = up, down, collect
        self.waited = SimpleNamespace(held=held, reason=reason, errors={},
                                      agents=[agent(f"coder-{n}", s) for n, s in enumerate(states, 1)])  # fmt: skip
        self.wait_args: dict = {}

    def phases(self) -> Phases:
        return Phases(up=self.up, wait=self.wait, collect=self.collect, down=self.down)

    def up(self) -> int:
        self.calls.append("up")
        return self.up_code

    def wait(self, spec, **kwargs):
        self.calls.append("wait")
        self.wait_args = kwargs
        kwargs["on_change"](SimpleNamespace(host="h1", instance="coder-1", old="working", new="done"))
        if isinstance(self.waited, Exception):
            raise self.waited
        return self.waited

    def collect(self, spec, agents=None, into=None):
        self.calls.append("collect")
        self.collect_agents = agents
        if isinstance(self.collect_result, Exception):
            raise self.collect_result
        return self.collect_result or SimpleNamespace(errors=[])

    def down(self) -> int:
        self.calls.append("down")
        return self.down_code


def statuses(outcome) -> list[str]:
    return [f"{p.phase}:{p.status}" for p in outcome.phases]


def test_the_whole_loop_in_order_and_exit_0() -> None:
    fake, seen, changes = Fake(), [], []
    outcome = run(SPEC, fake.phases(), on_phase=lambda p, _: seen.append(p), on_change=changes.append)
    assert fake.calls == ["up", "wait", "collect", "down"] and seen == ["up", "wait", "collect", "down"]
    assert fake.wait_args["until"] == "done" and fake.wait_args["timeout"] is None
    assert (outcome.exit_code, outcome.stopped_at, outcome.left) == (0, None, None)
    assert statuses(outcome) == ["up:ok", "wait:ok", "collect:ok", "down:ok"]
    assert [c.new for c in changes] == ["done"]


def test_a_failed_up_stops_before_waiting_and_says_what_is_left() -> None:
    fake = Fake(up=3)
    outcome = run(SPEC, fake.phases(), inventory="f.yaml")
    assert fake.calls == ["up"] and outcome.exit_code == 3 and outcome.stopped_at == "up"
    assert statuses(outcome) == ["up:failed", "wait:skipped", "collect:skipped", "down:skipped"]
    assert "inv fleet.down -i f.yaml" in outcome.left


def test_a_failed_collect_never_tears_down_and_says_how_to_retry() -> None:
    report = SimpleNamespace(failed=[SimpleNamespace(host="h1", instance="coder-2", reason="no handoff")],
                             unreachable={})  # the shape of jackin.work.collect.CollectReport
    for result in (JackinError("h1: bundle failed"), SimpleNamespace(errors={"coder-2": "no handoff"}), report):
        fake = Fake(collect=result)
        outcome = run(SPEC, fake.phases(), inventory="f.yaml")
        assert fake.calls == ["up", "wait", "collect"]  # no down
        assert (outcome.stopped_at, outcome.exit_code) == ("collect", 1)
        assert "NOT torn down" in outcome.left and "inv fleet.collect -i f.yaml, then inv fleet.down -i f.yaml" in outcome.left


def test_an_unreachable_host_in_collect_is_exit_3_and_nothing_torn_down() -> None:
    fake = Fake(collect=SimpleNamespace(failed=[], unreachable={"h2": "connection refused"}))
    outcome = run(SPEC, fake.phases())
    assert fake.calls == ["up", "wait", "collect"] and (outcome.stopped_at, outcome.exit_code) == ("collect", 3)
    assert "h2: unreachable: connection refused" in outcome.phases[2].detail


def test_an_unreachable_host_stops_the_wait_with_exit_3() -> None:
    fake = Fake(held=False, reason="unreachable")
    outcome = run(SPEC, fake.phases())
    assert fake.calls == ["up", "wait"] and (outcome.stopped_at, outcome.exit_code) == ("wait", 3)
    fake = Fake()
    fake.waited = ConnectError("h1: connection refused")
    assert run(SPEC, fake.phases()).exit_code == 3


def test_a_timeout_still_collects_and_tears_down_with_exit_4() -> None:
    fake = Fake(held=False, reason="timeout", states=("done", "working"))
    outcome = run(SPEC, fake.phases(), timeout=600, ttl_left=120)
    assert fake.calls == ["up", "wait", "collect", "down"] and outcome.exit_code == 4
    assert fake.wait_args["timeout"] == 120  # the time-to-live comes first
    assert "the time-to-live passed" in outcome.phases[1].detail and "1 working" in outcome.phases[1].detail


def test_a_failed_agent_runs_to_the_end_with_exit_5_and_a_failed_down_says_so() -> None:
    assert run(SPEC, Fake(states=("done", "failed")).phases()).exit_code == 5
    fake = Fake(down=1)
    outcome = run(SPEC, fake.phases())
    assert (outcome.stopped_at, outcome.exit_code) == ("down", 1) and "was collected" in outcome.left


@pytest.mark.parametrize("timeout, ttl, expected", [(None, None, (None, "")), (600, None, (600, "--timeout")),
                                                    (600, 30, (30, "the time-to-live")), (None, -5, (0.0, "the time-to-live"))])  # fmt: skip
def test_wait_limit(timeout, ttl, expected) -> None:
    assert wait_limit(timeout, ttl) == expected


def test_change_line() -> None:
    from jackin.cli.render.run import change_line

    line = change_line(SimpleNamespace(at=0, host="h1", instance="coder-1", old="working", new="blocked",
                                       question="which branch?", message=""))  # fmt: skip
    assert line.endswith(" h1 coder-1: working -> blocked: which branch?")


def test_cli_run_prints_each_phase_and_one_json_document(monkeypatch, capsys) -> None:
    """The CLI's side: the up and down are fleet.up's and fleet.down's (with --yes passed on), the wait
    gets the time-to-live as its limit, and --json prints only the outcome on stdout."""
    import json

    from jackin.cli import fleet as cli
    from jackin.cli import render as ui
    from jackin.cli import run as run_cli
    from jackin.lifecycle import fleet as fleet_api
    from jackin.spec import parse_inventory
    from rich.console import Console

    spec = parse_inventory("fleet:\n  name: demo\n  provider: lab\n  ttl: 1h\n  agents:\n    - name: coder\n", "f.yaml")
    fake, calls, outs = Fake(), [], []
    monkeypatch.setattr(fleet_api, "load", lambda _: spec)
    monkeypatch.setattr(runloop, "default_wait", lambda: fake.wait)
    monkeypatch.setattr(runloop, "default_collect", lambda: fake.collect)
    monkeypatch.setattr(cli, "fleet_up", lambda inv, out=None, **kw: calls.append(("up", kw)) or outs.append(out) or 0)
    monkeypatch.setattr(cli, "fleet_down", lambda inv, out=None, **kw: calls.append(("down", kw)) or outs.append(out) or 0)
    out, err = Console(file=__import__("io").StringIO(), width=200), Console(file=__import__("io").StringIO(), width=200)
    monkeypatch.setattr(ui, "out", out)
    monkeypatch.setattr(ui, "err", err)
    monkeypatch.setattr(ui, "print_json", lambda data: out.print(json.dumps(data)))
    assert run_cli.fleet_run("f.yaml", yes=True, timeout=None, json=True) == 0
    assert calls == [("up", {"yes": True, "json": False, "dry_run": False}),
                     ("down", {"yes": True, "keep_data": False, "keep_lab": False})]  # fmt: skip
    assert outs == [err, err]  # --json: fleet.up's and fleet.down's own output goes to stderr
    assert fake.wait_args["timeout"] == 3600 - 60  # an unstarted fleet: its whole ttl, less the margin for collect
    document = json.loads(out.file.getvalue())
    assert [p["status"] for p in document["phases"]] == ["ok"] * 4 and document["exit_code"] == 0
    assert "fleet.run: wait" in err.file.getvalue() and "coder-1: working -> done" in err.file.getvalue()
    with pytest.raises(JackinError, match="--json needs --yes"):
        run_cli.fleet_run("f.yaml", yes=False, timeout=None, json=True)


def test_timeout_takes_seconds_or_a_duration() -> None:
    from jackin.cli.run import timeout_seconds

    assert [timeout_seconds(v) for v in (None, "90", "10m", "1h30m")] == [None, 90.0, 600.0, 5400.0]
    for bad in ("0", "soon", "-5"):
        with pytest.raises(JackinError, match="--timeout expects seconds or a duration") as error:
            timeout_seconds(bad)
        assert error.value.exit_code == 2


def test_the_collect_takes_every_agent_whatever_its_state_before_the_teardown() -> None:
    fake = Fake(states=("done", "failed"))
    run(SPEC, fake.phases())
    assert fake.collect_agents == ["coder", "reviewer"]  # not only the done ones: down deletes the workspaces


def test_the_time_to_live_left_is_asked_after_the_up_which_fixes_the_deadline() -> None:
    fake, asked = Fake(), []

    def ttl_left() -> float:
        asked.append(list(fake.calls))
        return 30.0

    run(SPEC, fake.phases(), ttl_left=ttl_left)
    assert asked == [["up"]] and fake.wait_args["timeout"] == 30.0


def test_a_failed_phase_detail_loses_the_agents_control_characters() -> None:
    fake = Fake(collect=JackinError("bundle failed: \x1b]0;owned\x07 [/] \x1b[2J"))
    outcome = run(SPEC, fake.phases())
    detail = next(p.detail for p in outcome.phases if p.phase == "collect")
    assert "\x1b" not in detail and "\x07" not in detail and "[/]" in detail and "down" not in fake.calls
