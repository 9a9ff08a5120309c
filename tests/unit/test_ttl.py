"""The time-to-live: its deadline in the ledger (fixed at the first fleet.up, ended by fleet.down), the
host's commands (written once, unchanged on a second run, shifted by a skewed host clock, refused
when passed, removed at teardown), the state read's section, and the line fleet.status prints."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jackin.plan import ttl
from jackin.spec.credentials import Secrets
from jackin.lifecycle.hostplan import host_changes
from jackin.store.ledger import Ledger
from jackin.facts import ttl as ttl_facts
from jackin.operations import ttl as ops
from jackin.operations.files import Refused, Upload
from jackin.facts.state import HostState

from .test_hostplan import provisioned
from .test_operations_fleet import PLAN

NOW = 1_800_000_000
DEADLINE = NOW + 3600
TTL_PLAN = PLAN.model_copy(update={"ttl_deadline": DEADLINE})


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    db = Ledger(tmp_path / "l.sqlite3")
    yield db
    db.close()


def applied(deadline: int = DEADLINE, **change) -> ops.TtlState:
    """The state of a host where the time-to-live with ``deadline`` was applied."""
    fields = {"deadline": deadline, "file": True, "timer": ops.sha(ops.timer_unit(PLAN.fleet, deadline)),
              "service": ops.sha(ops.service_unit(PLAN.fleet)), "enabled": "enabled", "active": "active", "now": NOW}
    return ops.TtlState(**{**fields, **change})


def uploads(commands) -> dict[str, bytes]:
    return {c.target: c.data for c in commands if isinstance(c, Upload)}


# --- the ledger: the lifecycle's start -------------------------------------------------------


def test_the_first_up_fixes_the_start_and_a_later_up_keeps_it(ledger: Ledger) -> None:
    assert ledger.start_ttl("demo", 100.0) == 100.0
    assert ledger.start_ttl("demo", 200.0) == 100.0
    assert ledger.ttl_started("demo") == 100.0 and ledger.ttl_started("other") is None


@pytest.mark.parametrize("end", ["forget", "keep"])
def test_fleet_down_ends_the_lifecycle(ledger: Ledger, end: str) -> None:
    ledger.start_ttl("demo", 100.0)
    ledger.forget_fleet("demo") if end == "forget" else ledger.keep_fleet("demo", [], ["homes"])
    assert ledger.ttl_started("demo") is None
    assert ledger.start_ttl("demo", 300.0) == 300.0  # the next fleet.up starts a new one


def test_deadline_is_start_plus_the_specs_ttl_and_a_preview_stores_nothing(ledger: Ledger) -> None:
    spec = PLAN_SPEC.model_copy(update={"ttl": 600})
    assert ttl.deadline(ledger, spec, start=False, now=1000) == 1600 and ledger.ttl_started(spec.name) is None
    assert ttl.deadline(ledger, spec, start=True, now=1000) == 1600
    assert ttl.deadline(ledger, spec, start=True, now=5000) == 1600  # kept
    assert ttl.deadline(ledger, spec.model_copy(update={"ttl": 1200}), start=True, now=5000) == 2200  # moved
    assert ttl.deadline(ledger, spec.model_copy(update={"ttl": None}), start=True, now=5000) is None


# --- the host's commands ----------------------------------------------------------------------


def test_a_host_without_it_gets_the_file_and_both_units() -> None:
    commands = ops.ttl_commands(TTL_PLAN, ops.TtlState(now=NOW), now=NOW)
    files = uploads(commands)
    assert files["/var/lib/jackin/ttl/demo"] == f"{DEADLINE}\n".encode()
    timer = files["/etc/systemd/system/jackin-ttl-demo.timer"].decode()
    assert "OnCalendar=2027-01-15 09:00:00 UTC\nPersistent=true\n" in timer
    service = files["/etc/systemd/system/jackin-ttl-demo.service"].decode()
    assert "docker ps -q --filter label=jackin.fleet=demo" in service and "docker stop $$ids" in service
    # systemd expands % and $ in ExecStart: the shell must see date +%s and $d
    assert '[ "$$(date +%%s)" -ge "$$d" ]' in service and "%s" not in service.replace("%%s", "")
    assert [c.mode for c in commands if isinstance(c, Upload) and c.target.endswith("/demo")] == ["0600"]
    assert "systemctl enable jackin-ttl-demo.timer" in commands and "systemctl restart jackin-ttl-demo.timer" in commands


def test_an_unchanged_deadline_changes_nothing() -> None:
    assert ops.ttl_commands(TTL_PLAN, applied(), now=NOW) == []
    assert ops.ttl_commands(TTL_PLAN, applied(DEADLINE + 20), now=NOW) == []  # within the tolerance: kept as is


@pytest.mark.parametrize("change", [{"active": "inactive"}, {"enabled": "disabled"}, {"timer": None},
                                    {"service": "0" * 64}, {"deadline": DEADLINE + 600}])  # fmt: skip
def test_drift_of_the_units_or_file_is_repaired(change) -> None:
    assert ops.ttl_commands(TTL_PLAN, applied(**change), now=NOW) != []


def test_a_skewed_host_clock_gets_the_deadline_on_its_own_clock() -> None:
    ahead = ops.TtlState(now=NOW + 600)  # the host's clock is 10 minutes ahead of the operator's
    assert uploads(ops.ttl_commands(TTL_PLAN, ahead, now=NOW))["/var/lib/jackin/ttl/demo"] == f"{DEADLINE + 600}\n".encode()
    assert ops.ttl_commands(TTL_PLAN, applied(DEADLINE + 600, now=NOW + 600), now=NOW) == []


def test_a_passed_deadline_is_refused_and_shown_by_the_plan() -> None:
    with pytest.raises(Refused, match="time-to-live of fleet demo passed"):
        ops.ttl_commands(TTL_PLAN, ops.TtlState(), now=DEADLINE + 1)
    plan = PLAN.model_copy(update={"ttl_deadline": int(time.time()) - 10})  # the hostplan reads the real clock
    changes = host_changes(plan, provisioned(), Secrets({}, b""))
    assert [r.split(":")[0] for r in changes.refused] == ["time-to-live of fleet demo"]


def test_no_ttl_removes_what_is_left_and_else_does_nothing() -> None:
    assert ops.ttl_commands(PLAN, ops.TtlState(), now=NOW) == []
    removal = ops.ttl_commands(PLAN, applied(), now=NOW)
    assert removal == ops.teardown_commands("demo", applied())
    assert "systemctl disable --now jackin-ttl-demo.timer 2>/dev/null || true" in removal
    assert any(c.startswith("rm -f /etc/systemd/system/jackin-ttl-demo.timer") for c in removal)


def test_the_hostplan_step_is_the_time_to_live_category_and_then_nothing() -> None:
    now = int(time.time())  # the hostplan reads the real clock
    plan = PLAN.model_copy(update={"ttl_deadline": now + 3600})
    assert host_changes(plan, provisioned(), Secrets({}, b"")).categories() == ["time-to-live"]
    done = provisioned().model_copy(update={"ttl": applied(now + 3600, now=now)})
    assert host_changes(plan, done, Secrets({}, b""), host="h1").empty


# --- the state read ---------------------------------------------------------------------------


def test_the_section_parses_and_drops_malformed_values() -> None:
    digest = "a" * 64
    found = ttl_facts.parse_section(["file=yes", f"deadline={DEADLINE}", f"timer={digest}", "service=zz",
                               "enabled=enabled", "active=active", f"now={NOW}"])  # fmt: skip
    assert found == ops.TtlState(deadline=DEADLINE, file=True, timer=digest, service=None, enabled="enabled",
                                 active="active", now=NOW)  # fmt: skip
    assert found.leftovers("demo") == ["/var/lib/jackin/ttl/demo", "/etc/systemd/system/jackin-ttl-demo.timer"]
    assert ttl_facts.parse_section(["deadline=12a", "now="]) == ops.TtlState(enabled="", active="")


def test_leftovers_name_the_ttl_files() -> None:
    state = HostState(fleet="demo", ttl=applied())
    assert state.leftovers["ttl"] == ["/var/lib/jackin/ttl/demo", "/etc/systemd/system/jackin-ttl-demo.timer",
                                      "/etc/systemd/system/jackin-ttl-demo.service"]  # fmt: skip


# --- fleet.status's line ------------------------------------------------------------------------


def test_the_status_line() -> None:
    assert ttl.line("demo", ttl.TtlStatus()) == "time-to-live: none (fleet demo runs until fleet.down)"
    assert ttl.line("demo", ttl.TtlStatus(ttl=7200)) == "time-to-live: 2h, not started (the first fleet.up starts it)"
    left = ttl.TtlStatus(ttl=7200, deadline=DEADLINE, left=3725)
    assert ttl.line("demo", left, {"h1": "active"}) == (
        "time-to-live: 1h 2m left (until 2027-01-15 09:00:00 UTC); timer h1 active")
    passed = ttl.line("demo", ttl.TtlStatus(ttl=60, deadline=DEADLINE, left=-90))
    assert passed.startswith("time-to-live: passed 1m 30s ago (2027-01-15 09:00:00 UTC)")


def test_status_from_the_ledger(ledger: Ledger) -> None:
    spec = PLAN_SPEC.model_copy(update={"ttl": 600})
    assert ttl.status(spec, now=1000, ledger=ledger) == ttl.TtlStatus(ttl=600)
    ledger.start_ttl(spec.name, 1000)
    assert ttl.status(spec, now=1100, ledger=ledger) == ttl.TtlStatus(ttl=600, deadline=1600, left=500)


PLAN_SPEC = None  # set below: the FleetSpec the shared PLAN was built from


def _spec():
    from jackin.spec import parse_inventory

    text = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n"
    return parse_inventory(text, "f.yaml").fleet


PLAN_SPEC = _spec()
