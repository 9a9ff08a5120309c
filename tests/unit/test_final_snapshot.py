"""fleet.down's final snapshot and the restic tier's teardown, without a host: which hosts are
snapshotted, pulled and torn down; the teardown commands (run for real on temporary paths); the
state read's ``##snapshots`` section and the clean check's leftovers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jackin.cli import fleet as cli
from jackin.lifecycle import down as down_api
from jackin.engine import RunResult
from jackin.errors import EXIT_CONNECT, EXIT_FAILED, ConnectError, JackinError, SpecError
from jackin.store.ledger import Ledger
from jackin.operations import restic as restic_ops
from jackin.operations.fleet import snapshot_teardown, teardown_commands
from jackin.plan.fleet import build
from jackin.transport.remote import HostError
from jackin.snapshots import api, copies, final, restic, transfer
from jackin.snapshots import host as snapshot_host
from jackin.snapshots.models import AgentSnapshot, CreateResult, SnapshotRecord
from jackin.spec import parse_inventory
from jackin.transport.ssh import SshTarget
from jackin.facts.state import Container, HostState, SnapshotDirs, User, parse_state
from jackin.facts.state_read import snapshots_section
from jackin.facts.state import PathInfo as StatePath

INVENTORY = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 2
"""
SPEC = parse_inventory(INVENTORY, "f.yaml")
PLAN = build(SPEC.fleet, {"coder-1": 60000, "coder-2": 60001})
DIR = "/var/lib/jackin/snapshots/demo"
RM_DIR = f"rm -rf --one-file-system -- {DIR}"
BINARY_RM = restic_ops.binary_teardown_commands()
HOME = StatePath(kind="d", mode="0750", uid=0, gid=60000)


# --- teardown commands --------------------------------------------------------------------


def test_teardown_removes_the_fleets_snapshot_dir_then_restic_when_no_fleet_needs_it() -> None:
    state = HostState(snapshots=SnapshotDirs(fleet=True, repo=True, restic=True))
    assert snapshot_teardown("demo", state, keep_data=False) == [RM_DIR, *BINARY_RM]
    assert BINARY_RM[0] == "rmdir /var/lib/jackin/snapshots 2>/dev/null || true"
    assert "rm -f -- /usr/local/lib/jackin/restic " in BINARY_RM[1]


def test_teardown_keep_data_keeps_the_snapshot_dir_and_its_restic() -> None:
    state = HostState(snapshots=SnapshotDirs(fleet=True, repo=True, restic=True))
    assert snapshot_teardown("demo", state, keep_data=True) == []


def test_teardown_removes_an_unneeded_restic_alone_and_nothing_when_another_fleet_needs_it() -> None:
    assert snapshot_teardown("demo", HostState(snapshots=SnapshotDirs(restic=True)), keep_data=True) == BINARY_RM
    assert snapshot_teardown("demo", HostState(snapshots=SnapshotDirs(restic=True, others=True)), keep_data=False) == []
    assert snapshot_teardown("demo", HostState(), keep_data=False) == []  # a second run: nothing left, nothing to do


def test_teardown_removes_snapshots_before_the_marker_and_state_dir() -> None:
    state = HostState(marker=True, snapshots=SnapshotDirs(fleet=True))
    commands = teardown_commands(PLAN, state, keep_data=False)
    assert commands[:4] == [RM_DIR, *BINARY_RM, "rm -f /var/lib/jackin/fleet-demo.json"]


def _run(commands: list[str], root: Path) -> None:
    """The commands with the host's absolute paths moved under ``root``, run by sh."""
    script = "\n".join(commands).replace("/var/lib/jackin", f"{root}/var/lib/jackin").replace(
        "/usr/local/lib/jackin", f"{root}/usr/local/lib/jackin")  # fmt: skip
    subprocess.run(["sh", "-ec", script], check=True, timeout=10)


def _host(root: Path, *fleets: str, restic_bin: bool = True) -> None:
    for name in fleets:
        (root / f"var/lib/jackin/snapshots/{name}/repo/data").mkdir(parents=True)
        (root / f"var/lib/jackin/snapshots/{name}/password").write_text("x")
    if restic_bin:
        (root / "usr/local/lib/jackin").mkdir(parents=True)
        (root / "usr/local/lib/jackin/restic").write_text("bin")
        (root / "usr/local/lib/jackin/restic.jk-part-1-2").write_text("half")


def test_teardown_script_removes_restic_and_its_dir_when_the_last_fleet_goes(tmp_path: Path) -> None:
    _host(tmp_path, "demo")
    _run(restic_ops.teardown_commands("demo"), tmp_path)
    assert not (tmp_path / "var/lib/jackin/snapshots").exists()
    assert not (tmp_path / "usr/local/lib/jackin").exists()
    assert (tmp_path / "var/lib/jackin").is_dir()  # the state dir is the marker's business


def test_teardown_script_keeps_restic_and_the_other_fleets_dir(tmp_path: Path) -> None:
    _host(tmp_path, "demo", "other")
    _run(restic_ops.teardown_commands("demo"), tmp_path)
    assert not (tmp_path / "var/lib/jackin/snapshots/demo").exists()
    assert (tmp_path / "var/lib/jackin/snapshots/other/password").read_text() == "x"
    assert (tmp_path / "usr/local/lib/jackin/restic").read_text() == "bin"


def test_teardown_script_keeps_other_files_of_usr_local_lib_jackin(tmp_path: Path) -> None:
    _host(tmp_path, "demo")
    (tmp_path / "usr/local/lib/jackin/nft-guard").write_text("guard")
    _run(restic_ops.teardown_commands("demo"), tmp_path)
    assert not (tmp_path / "usr/local/lib/jackin/restic").exists()
    assert (tmp_path / "usr/local/lib/jackin/nft-guard").read_text() == "guard"


# --- the state read and the clean check ----------------------------------------------------


def _section(root: Path, fleet: str = "demo") -> list[str]:
    command = snapshots_section(fleet).replace("/var/lib/jackin", f"{root}/var/lib/jackin").replace(
        "/usr/local/lib/jackin", f"{root}/usr/local/lib/jackin")  # fmt: skip
    return subprocess.run(["sh", "-c", command + "; true"], capture_output=True, text=True, timeout=10,
                          check=True).stdout.splitlines()  # fmt: skip


def test_section_reads_the_fleets_dir_repo_restic_and_others(tmp_path: Path) -> None:
    assert _section(tmp_path) == ["##snapshots"]
    _host(tmp_path, "demo")
    assert _section(tmp_path) == ["##snapshots", "fleet", "restic"]
    (tmp_path / "var/lib/jackin/snapshots/demo/repo/config").write_text("c")
    assert _section(tmp_path) == ["##snapshots", "fleet", "repo", "restic"]
    assert _section(tmp_path, "other") == ["##snapshots", "restic", "others"]


def test_leftovers_name_the_fleets_dir_and_never_another_fleets() -> None:
    mine = parse_state(["##fleet", "demo", "##snapshots", "fleet", "repo", "restic", "others"])
    assert mine.snapshots == SnapshotDirs(fleet=True, repo=True, restic=True, others=True)
    assert mine.leftovers["snapshots"] == [DIR]
    theirs = parse_state(["##fleet", "demo", "##snapshots", "restic", "others"])  # another fleet's dir and its restic
    assert theirs.leftovers["snapshots"] == []
    alone = parse_state(["##fleet", "demo", "##snapshots", "restic"])  # nothing left to need the uploaded restic
    assert alone.leftovers["snapshots"] == ["/usr/local/lib/jackin/restic"]
    assert parse_state(["##fleet", "demo", "##snapshots", "bogus", "##x"]).snapshots == SnapshotDirs()


def test_clean_check_keep_data_does_not_count_the_kept_snapshot_dir() -> None:
    state = parse_state(["##fleet", "demo", "##snapshots", "fleet", "repo"])
    assert down_api._leftovers(PLAN, state, keep_data=False) == {"snapshots": [DIR]}
    assert not down_api._leftovers(PLAN, state, keep_data=True).get("snapshots")


# --- which hosts are snapshotted, pulled and torn down --------------------------------------


def _targets(tmp_path: Path, *names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="10.0.0.1", known_hosts=tmp_path / "k") for n in names]


def _state(*instances: str, repo: bool = False, extra: tuple[str, ...] = ()) -> HostState:
    paths = {PLAN.fleet_dir: HOME}
    for name in (*instances, *extra):
        paths[f"{PLAN.fleet_dir}/{name}"] = HOME
        paths[f"{PLAN.fleet_dir}/{name}/workspace"] = HOME
    return HostState(fleet="demo", paths=paths, snapshots=SnapshotDirs(fleet=repo, repo=repo))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Fakes for the remote side: each host's state read, ``api.take`` and ``copies.pull_hosts``."""
    seen: dict = {"takes": [], "pulled": []}
    states: dict = {}
    fails: dict = {"take": {}, "pull": {}}
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(final, "gather", lambda hosts, *a, **k: {h.name: states[h.name] for h in hosts})

    def take(ledger, inventory, targets, instances, *, kind, label, extra):
        seen["takes"].append(([t.name for t in targets], list(instances), kind, label))
        seen.setdefault("extra", {}).update(extra)
        record = SnapshotRecord(id="20261203-080000-abcd", fleet="demo", created="t", kind=kind, label=label)
        result = CreateResult(snapshot=record)
        for t in targets:
            error = fails["take"].get(t.name)
            if error:
                result.errors.append(HostError(host=t.name, error=error, unreachable=False))
                continue
            record.agents += [AgentSnapshot(host=t.name, instance=i, agent="coder", restic_id="r") for i in instances
                              if i not in fails["take"].get("skip", [])]  # fmt: skip
        return result

    def pull_hosts(ledger, fleet, targets):
        seen["pulled"].append([t.name for t in targets])
        return {t.name: fails["pull"].get(t.name) or object() for t in targets}

    monkeypatch.setattr(api, "take", take)
    monkeypatch.setattr(copies, "pull_hosts", pull_hosts)
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        yield {"ledger": ledger, "states": states, "fails": fails, "seen": seen, "tmp": tmp_path}


def _final(world, *names: str) -> dict[str, final.FinalHost]:
    entries = final.take_final(world["ledger"], SPEC, PLAN, _targets(world["tmp"], *names))
    return {e.host: e for e in entries}


def test_every_home_is_snapshotted_once_and_every_host_pulled(world) -> None:
    world["states"].update(h1=_state("coder-1", "coder-2"), h2=_state("coder-1", "coder-2"))
    done = _final(world, "h1", "h2")
    assert world["seen"]["takes"] == [(["h1", "h2"], ["coder-1", "coder-2"], "final", "final, before fleet.down")]
    assert world["seen"]["pulled"] == [["h1", "h2"]]
    assert [(e.stage, e.snapshot, e.blocked) for e in done.values()] == [("done", "20261203-080000-abcd", False)] * 2
    assert done["h1"].copy_path == str(world["tmp"] / "state/snapshots/demo/pulled/h1/repo")


def test_a_host_that_never_came_up_needs_nothing_and_one_with_only_a_repository_is_pulled(world) -> None:
    world["states"].update(h1=_state("coder-1", "coder-2"), h2=_state(), h3=_state(repo=True))
    done = _final(world, "h1", "h2", "h3")
    assert world["seen"]["takes"] == [(["h1"], ["coder-1", "coder-2"], "final", "final, before fleet.down")]
    assert world["seen"]["pulled"] == [["h1", "h3"]]
    assert (done["h2"].stage, done["h2"].blocked) == ("nothing", False)
    assert (done["h3"].stage, done["h3"].snapshot, done["h3"].blocked) == ("done", None, False)


def test_hosts_with_different_homes_get_a_snapshot_each(world) -> None:
    world["states"].update(h1=_state("coder-1", "coder-2"), h2=_state("coder-1"))
    _final(world, "h1", "h2")
    assert [t[:2] for t in world["seen"]["takes"]] == [(["h1"], ["coder-1", "coder-2"]), (["h2"], ["coder-1"])]


def test_a_failed_snapshot_blocks_that_host_only_and_it_is_not_pulled(world) -> None:
    world["states"].update(h1=_state("coder-1"), h2=_state("coder-1"))
    world["fails"]["take"]["h1"] = "coder-1: restic backup failed"
    done = _final(world, "h1", "h2")
    assert (done["h1"].stage, done["h1"].blocked, done["h1"].unreachable) == ("snapshot", True, False)
    assert "restic backup failed" in done["h1"].error
    assert world["seen"]["pulled"] == [["h2"]] and not done["h2"].blocked


def test_a_home_left_out_of_the_snapshot_blocks_the_host(world) -> None:
    world["states"].update(h1=_state("coder-1", "coder-2"))
    world["fails"]["take"]["skip"] = ["coder-2"]
    done = _final(world, "h1")
    assert done["h1"].blocked and "not backed up: coder-2" in done["h1"].error


def test_a_failed_pull_blocks_that_host(world) -> None:
    world["states"].update(h1=_state("coder-1"), h2=_state("coder-1"))
    world["fails"]["pull"]["h2"] = ConnectError("connection reset", host="h2")
    done = _final(world, "h1", "h2")
    assert (done["h2"].stage, done["h2"].blocked, done["h2"].unreachable) == ("pull", True, True)
    assert done["h2"].copy_path is None and not done["h1"].blocked


def test_an_unreadable_host_is_blocked_and_take_raising_blocks_its_group(world, monkeypatch) -> None:
    world["states"].update(h1=ConnectError("timed out", host="h1"), h2=_state("coder-1"))

    def broken(*args, **kwargs):
        raise JackinError("no password file")

    monkeypatch.setattr(api, "take", broken)
    done = _final(world, "h1", "h2")
    assert (done["h1"].stage, done["h1"].unreachable) == ("read", True)
    assert (done["h2"].stage, done["h2"].instances) == ("snapshot", ["coder-1"])
    assert "no password file" in done["h2"].error and world["seen"]["pulled"] == [[]]


def test_every_home_is_snapshotted_whoever_names_it_and_dot_names_and_files_are_not_homes(world) -> None:
    row = {"instance": "old-1", "agent": "old", "uid": 60005, "user": "jk-demo--old-1", "container": "jk-demo--old-1",
           "network": "jk-demo--old-1"}  # fmt: skip
    world["ledger"].record_agents("demo", "h1", [row])  # coder-1 is planned but the ledger does not place it on h1
    state = _state("coder-1", extra=("old-1", ".restore"))
    paths = {**state.paths, f"{PLAN.fleet_dir}/gone-1": StatePath(kind="d", mode="0750", uid=0, gid=60007),
             f"{PLAN.fleet_dir}/stray": StatePath(kind="f", mode="0600", uid=0, gid=0)}  # fmt: skip
    users = {"jk-demo--gone-1": User(name="jk-demo--gone-1", uid=60007, gid=60007, comment="", home="", shell="")}
    world["states"]["h1"] = state.model_copy(update={"paths": paths, "users": users})
    done = _final(world, "h1")
    assert done["h1"].instances == ["coder-1", "gone-1", "old-1"] and done["h1"].not_in_spec == ["gone-1"]
    assert world["seen"]["takes"][0][:2] == (["h1"], ["coder-1", "gone-1", "old-1"]) and not done["h1"].blocked
    extra = world["seen"]["extra"]
    assert extra[("h1", "coder-1")] is None and extra[("h1", "old-1")] is None  # the plan, the ledger describe them
    assert extra[("h1", "gone-1")] == {"fleet": "demo", "host": "h1", "instance": "gone-1", "agent": "gone",
                                       "uid": 60007, "user": "jk-demo--gone-1", "container": "jk-demo--gone-1",
                                       "network": "jk-demo--gone-1"}  # fmt: skip


def test_a_home_whose_group_is_no_agent_uid_holds_the_host_back_unsnapshotted(world) -> None:
    state = _state("coder-1")
    paths = {**state.paths, f"{PLAN.fleet_dir}/odd": StatePath(kind="d", mode="0755", uid=0, gid=0)}
    world["states"].update(h1=state.model_copy(update={"paths": paths}), h2=_state("coder-1"))
    done = _final(world, "h1", "h2")
    assert (done["h1"].stage, done["h1"].blocked) == ("read", True) and "cannot say whose it is" in done["h1"].error
    assert world["seen"]["takes"] == [(["h2"], ["coder-1"], "final", final.LABEL)]  # control: h2 goes on
    assert world["seen"]["pulled"] == [["h2"]] and not done["h2"].blocked


def test_a_home_the_state_alone_describes_takes_the_naming_rules_user_when_no_user_has_its_uid() -> None:
    state = _state(extra=("gone-1",))
    row = final.from_state(PLAN, state, "h1", "gone-1")
    assert (row["uid"], row["user"], row["container"], row["agent"]) == (60000, "jk-demo--gone-1", "jk-demo--gone-1", "gone")


def _running(*names: str) -> dict[str, Container]:
    return {n: Container(name=n, status="running", running=True) for n in names}


@pytest.fixture
def docker(world, monkeypatch):
    """Fakes ``api.in_parallel`` (no SSH) and ``host.set_running``; ``events`` logs stops, takes, starts."""
    events: list = []
    fails: dict = {}

    def in_parallel(targets, work):
        out = {}
        for t in targets:
            try:
                out[t.name] = work(None, t)
            except JackinError as error:
                out[t.name] = error
        return out

    def set_running(conn, names, running, *, host):
        events.append(("start" if running else "stop", host, list(names)))
        if fails.get((host, running)):
            raise JackinError(fails[(host, running)])

    take = api.take

    def take_logged(*args, **kwargs):
        events.append(("take", [t.name for t in args[2]]))
        return take(*args, **kwargs)

    monkeypatch.setattr(api, "in_parallel", in_parallel)
    monkeypatch.setattr(snapshot_host, "set_running", set_running)
    monkeypatch.setattr(api, "take", take_logged)
    return {"events": events, "fails": fails}


def test_containers_are_stopped_before_the_snapshot_and_started_again_where_the_host_is_held_back(world, docker) -> None:
    c1, c2 = "jk-demo--coder-1", "jk-demo--coder-2"
    stopped = {**_running(c1), c2: Container(name=c2, status="exited", running=False)}
    world["states"].update(h1=_state("coder-1", "coder-2").model_copy(update={"containers": stopped}),
                           h2=_state("coder-1", "coder-2").model_copy(update={"containers": _running(c1, c2)}))  # fmt: skip
    world["fails"]["pull"]["h2"] = JackinError("restic check failed")
    done = _final(world, "h1", "h2")
    assert docker["events"] == [("stop", "h1", [c1]), ("stop", "h2", [c1, c2]), ("take", ["h1", "h2"]),
                                ("start", "h2", [c1, c2])]  # fmt: skip
    assert not done["h1"].blocked and done["h1"].stopped == [c1]  # it goes down stopped: nothing to start
    assert done["h2"].blocked and done["h2"].restart_error is None


def test_a_host_where_stopping_fails_is_held_back_unsnapshotted_and_a_failed_restart_is_reported(world, docker) -> None:
    c1 = "jk-demo--coder-1"
    world["states"].update(h1=_state("coder-1").model_copy(update={"containers": _running(c1)}),
                           h2=_state("coder-1").model_copy(update={"containers": _running(c1)}))  # fmt: skip
    docker["fails"].update({("h1", False): "docker stop timed out", ("h1", True): "docker start failed"})
    done = _final(world, "h1", "h2")
    assert (done["h1"].stage, done["h1"].blocked) == ("stop", True) and "docker stop timed out" in done["h1"].error
    assert done["h1"].restart_error == "docker start failed"
    assert world["seen"]["takes"][0][0] == ["h2"] and world["seen"]["pulled"] == [["h2"]]  # control: h2 goes on
    result = down_api.DownResult(fleet="demo", run=RunResult(hosts=[]), checks=[], final=list(done.values()))
    assert cli.final_errors(result) == [EXIT_FAILED]


def test_without_a_final_snapshot_only_the_repositories_are_pulled(world, docker) -> None:
    c1 = "jk-demo--coder-1"
    world["states"].update(h1=_state("coder-1", repo=True).model_copy(update={"containers": _running(c1)}),
                           h2=_state("coder-1"))  # fmt: skip
    world["fails"]["pull"]["h1"] = JackinError("no space left")
    entries = final.take_final(world["ledger"], SPEC, PLAN, _targets(world["tmp"], "h1", "h2"), snapshot=False)
    done = {e.host: e for e in entries}
    assert world["seen"]["takes"] == [] and docker["events"] == [] and world["seen"]["pulled"] == [["h1"]]
    assert (done["h1"].stage, done["h1"].blocked) == ("pull", True) and "no space left" in done["h1"].error
    assert (done["h2"].stage, done["h2"].blocked, done["h2"].instances) == ("nothing", False, [])


# --- api.take's placement: extra (host, instance) pairs ---------------------------------------


def test_take_snapshots_extra_pairs_the_ledger_does_not_place_with_their_rows(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(api, "fleet_plan", lambda inventory, ledger: PLAN)
    monkeypatch.setattr(api, "in_parallel", lambda targets, work: {t.name: work(None, t) for t in targets})
    monkeypatch.setattr(api, "_prepare_or_error", lambda conn, fleet, host, probed: ("restic", None))
    monkeypatch.setattr(api.remote, "backup_room", lambda conn, fleet, instances, host, min_free: ({}, "/usr/bin/restic\n"))
    monkeypatch.setattr(api.remote, "container_states", lambda conn, names, host: {n: "true sha256:i" for n in names})
    monkeypatch.setattr(api, "_every_agent", lambda conn, bin_, items, host, unprepared, max_freeze, refused: [(
        AgentSnapshot(host=host, instance=item.instance, agent=item.agent, restic_id="r", manifest=item), [])
        for item in items])  # fmt: skip
    gone = {"fleet": "demo", "host": "h1", "instance": "gone-1", "agent": "gone", "uid": 60007,
            "user": "jk-demo--gone-1", "container": "jk-demo--gone-1", "network": "jk-demo--gone-1"}  # fmt: skip
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        ledger.record_agents("demo", "h1", [{**gone, "instance": "coder-2", "agent": "coder", "uid": 60001}])
        targets = _targets(tmp_path, "h1")
        plain = api.take(ledger, SPEC, targets, ["coder-1", "coder-2"])  # control: the ledger's placement alone
        assert [a.instance for a in plain.snapshot.agents] == ["coder-2"]
        result = api.take(ledger, SPEC, targets, ["coder-1", "coder-2"], kind="final",
                          extra={("h1", "coder-1"): None, ("h1", "gone-1"): gone, ("h9", "coder-1"): None})  # fmt: skip
    by = {a.instance: a.manifest for a in result.snapshot.agents}
    assert list(by) == ["coder-2", "coder-1", "gone-1"] and not result.errors
    assert (by["coder-1"].uid, by["coder-1"].spec["name"]) == (60000, "coder")  # from the plan
    assert (by["gone-1"].uid, by["gone-1"].gid, by["gone-1"].user, by["gone-1"].home) == (
        60007, 60007, "jk-demo--gone-1", "/srv/jackin/demo/gone-1")
    assert by["gone-1"].image_id == "sha256:i"


# --- when there is no final snapshot, and what the CLI says -----------------------------------


def test_skip_reasons() -> None:
    off = parse_inventory(INVENTORY + "  snapshots: {before_teardown: false}\n", "f.yaml")
    assert down_api.final_skip_reason(SPEC, keep_data=False, final_snapshot=True) is None
    assert down_api.final_skip_reason(SPEC, keep_data=True, final_snapshot=True).startswith("--keep-data")
    assert down_api.final_skip_reason(SPEC, keep_data=False, final_snapshot=False) == "--no-final-snapshot"
    assert down_api.final_skip_reason(off, keep_data=False, final_snapshot=True) == "snapshots.before_teardown: false"
    assert down_api.final_skip_reason(SPEC, keep_data=False, final_snapshot=True,
                                       discard_snapshots=True) == "--discard-snapshots"  # fmt: skip
    with pytest.raises(SpecError, match="give one of them"):
        down_api.final_skip_reason(SPEC, keep_data=True, final_snapshot=True, discard_snapshots=True)


def test_preview_says_what_is_snapshotted_and_where_it_goes(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    text = cli.final_preview(SPEC, keep_data=False, no_final_snapshot=False)
    assert "coder-1, coder-2" in text and f"{tmp_path}/snapshots/demo/pulled/<host>/repo" in text
    assert not (tmp_path / "snapshots").exists()  # showing the plan creates nothing
    assert "stopped" in text and "any home an agent dropped from the spec left" in text
    skipped = cli.final_preview(SPEC, keep_data=False, no_final_snapshot=True)
    assert "workspaces are removed with no copy" in skipped and "earlier snapshots is still pulled" in skipped
    assert "--discard-snapshots" in skipped
    lost = cli.final_preview(SPEC, keep_data=False, no_final_snapshot=False, discard_snapshots=True)
    assert "no pull" in lost and "every snapshot kept only on the hosts" in lost and "ledger forgets" in lost
    assert not (tmp_path / "snapshots").exists()


def _snap(ledger: Ledger, snapshot: str, *hosts: str) -> None:
    ledger.record_snapshot({"id": snapshot, "fleet": "demo", "created": snapshot, "kind": "manual"},
                           [{"host": h, "instance": "coder-1", "agent": "coder", "tiers": ["restic"]} for h in hosts])  # fmt: skip


def test_discard_forgets_only_what_no_surviving_copy_holds(tmp_path) -> None:
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        for snapshot in ("s1", "s2", "s3", "s4"):
            _snap(ledger, snapshot, "h1", "h2")
        ledger.record_copy("demo", "h1", copies.OPERATOR, "/x", ["s1"])  # pulled here before s2
        ledger.record_copy("demo", "h1", "h3", "/y", ["s2"])  # pushed to a host that stays
        ledger.record_copy("demo", "h1", "h2", "/z", ["s3"])  # pushed to a host torn down with it
        run = ledger.start_run("demo", "fleet.down")
        assert down_api.discard(ledger, "demo", ["h1", "h2"], run) == {"h1": ["s3", "s4"], "h2": ["s1", "s2", "s3", "s4"]}
        left = {r["id"]: [a["host"] for a in r["agents"]] for r in ledger.snapshot_rows("demo")}
        assert left == {"s1": ["h1"], "s2": ["h1"]}
        assert [a["action"] for a in ledger.audit_trail("demo")] == ["snapshot.discard"] * 2
        assert down_api.discard(ledger, "demo", ["h9"], run) == {}  # a host with no snapshot: nothing to forget


def test_a_blocked_host_makes_down_unclean_and_exits_by_its_kind() -> None:
    ok = final.FinalHost(host="h1", snapshot="s")
    failed = final.FinalHost(host="h2", stage="snapshot", error="disk full")
    lost = final.FinalHost(host="h3", stage="pull", error="reset", unreachable=True)
    result = down_api.DownResult(fleet="demo", run=RunResult(hosts=[]), checks=[], final=[ok, failed, lost])
    assert not result.clean and [f.host for f in result.blocked] == ["h2", "h3"]
    assert cli.final_errors(result) == [EXIT_FAILED, EXIT_CONNECT]
    assert down_api.DownResult(fleet="demo", run=RunResult(hosts=[]), checks=[], final=[ok]).clean


def test_transfer_and_final_agree_on_the_pulled_path(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    assert str(transfer.pulled_repo("demo", "h1")) == f"{final.pulled_root('demo')}/h1/repo"


def test_an_ssh_fault_escaping_the_pull_holds_every_pulled_host_back(world, monkeypatch) -> None:
    import paramiko

    world["states"].update(h1=_state("coder-1"), h2=_state())

    def broken(ledger, fleet, targets):
        raise paramiko.SSHException("channel closed")

    monkeypatch.setattr(copies, "pull_hosts", broken)
    done = _final(world, "h1", "h2")
    assert (done["h1"].stage, done["h1"].unreachable) == ("pull", True) and "channel closed" in done["h1"].error
    assert not done["h2"].blocked  # nothing to pull there
