"""fleet.rollback's choices, from the ledger's history of applied specs: which run, which hosts, refusals."""

from __future__ import annotations

import pytest

from jackin.lifecycle import rollback
from jackin.errors import NotImplementedYet, SpecError
from jackin.lifecycle.rollback_choice import SpecRun, Step, check_placement, check_to, choose
from jackin.spec.models import FleetSpec

HOSTS = ["h1", "h2"]


def r(run: int, spec: str, *, failed: tuple[str, ...] = (), hosts: list[str] = HOSTS, action: str = "fleet.up") -> SpecRun:
    results = {h: "failed" if h in failed else "ok" for h in hosts}
    return SpecRun(run=run, action=action, status="failed" if failed else "ok", fleet_hash=spec, hosts=hosts,
                   results=results)  # fmt: skip


def pick(runs: list[SpecRun], **kw) -> tuple[str, list[Step]]:
    return choose(runs, HOSTS, fleet="demo", **kw)


# --- default: step back --------------------------------------------------------------


def test_step_back_to_the_last_successful_run_with_a_different_spec() -> None:
    runs = [r(1, "A"), r(2, "B"), r(3, "B")]  # the same spec applied twice is one state
    assert pick(runs) == ("step-back", [Step(to=1, hosts=HOSTS, from_run=3)])


def test_step_back_skips_failed_runs() -> None:
    runs = [r(1, "A"), r(2, "C", failed=("h1",)), r(3, "B")]
    assert pick(runs) == ("step-back", [Step(to=1, hosts=HOSTS, from_run=3)])


def test_a_second_rollback_goes_forward_again() -> None:
    runs = [r(1, "A"), r(2, "B"), r(3, "A", action="fleet.rollback")]
    assert pick(runs) == ("step-back", [Step(to=2, hosts=HOSTS, from_run=3)])


def test_nothing_to_step_back_to_is_refused() -> None:
    with pytest.raises(SpecError, match="no earlier successful run of fleet 'demo' has a spec different from run 2's"):
        pick([r(1, "A"), r(2, "A")])
    with pytest.raises(SpecError, match="no fleet.up of fleet 'demo' recorded its spec"):
        pick([])


# --- default: repair the hosts the last run failed on ----------------------------------


def test_repair_returns_only_the_failed_hosts_to_their_last_good_spec() -> None:
    runs = [r(1, "A"), r(2, "B", failed=("h2",))]
    assert pick(runs) == ("repair", [Step(to=1, hosts=["h2"], from_run=2)])


def test_repair_per_host_may_choose_different_runs() -> None:
    runs = [r(1, "A"), r(2, "B", failed=("h1",)), r(3, "C", failed=("h1", "h2"))]
    assert pick(runs) == ("repair", [Step(to=1, hosts=["h1"], from_run=3), Step(to=2, hosts=["h2"], from_run=3)])


def test_repair_counts_a_host_with_no_result_as_failed() -> None:
    died = SpecRun(run=2, action="fleet.up", status="failed", fleet_hash="B", hosts=HOSTS, results={"h1": "ok"})
    assert pick([r(1, "A"), died]) == ("repair", [Step(to=1, hosts=["h2"], from_run=2)])


def test_repair_refused_when_a_failed_host_never_succeeded() -> None:
    runs = [r(1, "A", hosts=["h1"]), r(2, "B", failed=("h2",))]
    with pytest.raises(SpecError, match="run 2 failed on h2, and no earlier run succeeded there"):
        pick(runs)


# --- --to and --host ------------------------------------------------------------------


def test_to_applies_that_run_on_every_host() -> None:
    runs = [r(1, "A"), r(2, "B"), r(3, "C")]
    assert pick(runs, to=runs[1]) == ("to", [Step(to=2, hosts=HOSTS, from_run=3)])


def test_to_a_failed_run_is_refused_unless_for_a_host_it_succeeded_on() -> None:
    runs = [r(1, "A"), r(2, "B", failed=("h2",)), r(3, "C")]
    with pytest.raises(SpecError, match=r"--to 2: run 2 did not succeed \(failed on h2\)"):
        pick(runs, to=runs[1])
    assert pick(runs, to=runs[1], host="h1") == ("host", [Step(to=2, hosts=["h1"], from_run=3)])
    with pytest.raises(SpecError, match="--to 2: run 2 did not succeed on h2"):
        pick(runs, to=runs[1], host="h2")


def test_host_steps_back_or_repairs_that_host_alone() -> None:
    runs = [r(1, "A"), r(2, "B", failed=("h2",))]
    assert pick(runs, host="h1") == ("host", [Step(to=1, hosts=["h1"], from_run=2)])  # ok there: step back
    assert pick(runs, host="h2") == ("host", [Step(to=1, hosts=["h2"], from_run=2)])  # failed there: repair


def test_host_uses_only_the_runs_that_ran_on_it() -> None:
    runs = [r(1, "A"), r(2, "B"), r(3, "A", hosts=["h2"], action="fleet.rollback")]
    assert pick(runs, host="h1") == ("host", [Step(to=1, hosts=["h1"], from_run=2)])
    assert pick(runs, host="h2") == ("host", [Step(to=2, hosts=["h2"], from_run=3)])


def test_unknown_host_is_refused() -> None:
    with pytest.raises(SpecError, match=r"--host 'h9' is not one of the hosts of fleet 'demo' \(h1, h2\)"):
        pick([r(1, "A")], host="h9")


# --- --to RUN must be this fleet's fleet.up or rollback with a spec ---------------------------


def row(**over) -> dict:
    return {"id": 5, "fleet": "demo", "action": "fleet.up", "status": "ok", "fleet_hash": "A", "spec": "{}",
            "spec_hosts": HOSTS, "results": {"h1": "ok", "h2": "ok"}, "detail": "{}", **over}  # fmt: skip


@pytest.mark.parametrize(("found", "message"), [
    (None, "--to 5: no run 5 in the ledger"),
    (row(fleet="other"), "--to 5: run 5 belongs to fleet 'other', not 'demo'"),
    (row(action="fleet.down", spec=None), "--to 5: run 5 was a fleet.down, not a fleet.up or fleet.rollback"),
    (row(spec=None), "--to 5: run 5 recorded no spec"),
])  # fmt: skip
def test_check_to_refusals(found: dict | None, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_to(found, 5, "demo")
    assert caught.value.message.startswith(message)
    assert caught.value.exit_code == 2


def test_check_to_accepts_a_run_of_this_fleet_with_a_spec() -> None:
    assert check_to(row(detail='{"to": 2}', action="fleet.rollback"), 5, "demo").to == 2


# --- placement, snapshots --------------------------------------------------------------------


def fleet(**over) -> FleetSpec:
    return FleetSpec.model_validate({"name": "demo", "provider": "lab", "agents": [{"name": "coder"}], **over})


def test_placement_must_match_and_agents_may_differ() -> None:
    check_placement(fleet(agents=[{"name": "web", "count": 3}], ttl="1h"), fleet(), 4)
    with pytest.raises(SpecError) as caught:
        check_placement(fleet(lab={"name": "other", "hosts": 1}), fleet(), 4)
    assert caught.value.message == "run 4's spec cannot be applied to this inventory's hosts"
    assert caught.value.problems == ["fleet.lab: run 4 had LabSpec(name='other', hosts=1, sizes=[]), the inventory has None"]


def test_with_snapshots_refused_only_when_disconnected(monkeypatch: pytest.MonkeyPatch) -> None:
    rollback.check_snapshots(True)  # connected: snapshot restore is the default seam
    monkeypatch.setattr(rollback, "restore_snapshots", None)
    rollback.check_snapshots(False)
    with pytest.raises(NotImplementedYet, match="--with-snapshots is not available"):
        rollback.check_snapshots(True)
