"""Work: the spec's checks (before any host is touched), the bundle, the plan's part and the
delivery commands (files by SFTP, re-delivered only when a digest changes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from invoke import Context
from invoke.exceptions import Exit

from jackin.work import bundles as work
from jackin.errors import EXIT_SPEC, SpecError
from jackin.operations.files import Refused, Upload
from jackin.operations.fleet import teardown_commands as fleet_teardown
from jackin.operations import work as work_ops
from jackin.operations.work import digests_file, teardown_commands, work_commands
from jackin.plan.fleet import WORK_TARGET, FleetPlan, build
from jackin.spec import load_inventory
from jackin.facts.state import HostState, PathInfo, parse_state


def sh(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> str:
    """A git repository at ``path`` with one commit; its id."""
    path.mkdir(parents=True, exist_ok=True)
    sh("git", "init", "-q", "-b", "main", str(path))
    for name, text in (files or {"README.md": "hello\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    sh("git", "-C", str(path), "add", "-A")
    sh("git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return sh("git", "-C", str(path), "rev-parse", "HEAD")


def inventory(tmp_path: Path, work_yaml: str, *, name: str = "inv.yaml", count: int = 2):
    path = tmp_path / name
    path.write_text(f"""\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: {count}
      work: {work_yaml}
    - name: plain
""")
    return load_inventory(path)


# --- the spec ---------------------------------------------------------------------------


def test_paths_are_relative_to_the_inventory_file_and_urls_stay(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    spec = inventory(tmp_path, "{repo: ../src, task_file: tasks/t.md}", name="conf/inv.yaml").fleet
    assert spec.agents[0].work.repo == str(tmp_path / "src")
    assert spec.agents[0].work.task_file == str(tmp_path / "conf" / "tasks" / "t.md")
    assert spec.agents[0].work.ref == "HEAD"
    url = inventory(tmp_path, "{repo: 'git@example.invalid:team/app.git', ref: main, task: go}").fleet
    assert url.agents[0].work.repo == "git@example.invalid:team/app.git"


@pytest.mark.parametrize(("work_yaml", "problem"), [
    ("{repo: src, task: a, task_file: b}", "work takes one of task (text) or task_file (a path), not both"),
    ("{repo: src, ref: '--upload-pack=x', task: a}", "expected a git ref"),
    ("{repo: src, task: a, branch: b}", "unknown key 'branch'"),
])  # fmt: skip
def test_bad_work_is_a_spec_error(tmp_path: Path, work_yaml: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        inventory(tmp_path, work_yaml)
    assert any(problem in p and "fleet.agents[0].work" in p for p in caught.value.problems), caught.value.problems


def test_every_problem_names_agent_and_field_at_once(tmp_path: Path) -> None:
    make_repo(tmp_path / "src")
    (tmp_path / "plain-dir").mkdir()
    (tmp_path / "big.md").write_bytes(b"x" * (work.MAX_TASK + 1))
    path = tmp_path / "inv.yaml"
    path.write_text("""\
fleet:
  name: demo
  provider: lab
  agents:
    - {name: missing, work: {repo: nowhere, task: a}}
    - {name: plain, work: {repo: plain-dir, task: a}}
    - {name: badref, work: {repo: src, ref: no-such-branch, task: a}}
    - {name: notask, work: {repo: src, task_file: none.md}}
    - {name: bigtask, work: {repo: src, task_file: big.md}}
    - {name: good, work: {repo: src, task: a}}
""")
    with pytest.raises(work.WorkError) as caught:
        work.check(load_inventory(path).fleet)
    error = caught.value
    assert error.exit_code == EXIT_SPEC
    assert error.message == "5 problems with the fleet's work"
    assert error.problems == [
        f"agent missing: work.repo {tmp_path}/nowhere does not exist",
        f"agent plain: work.repo {tmp_path}/plain-dir is not a git repository (or not its top directory)",
        f"agent badref: work.ref 'no-such-branch' does not resolve to a commit in {tmp_path}/src",
        f"agent notask: work.task_file {tmp_path}/none.md does not exist",
        f"agent bigtask: work.task_file {tmp_path}/big.md is larger than 256 KiB",
    ]


def test_a_directory_inside_a_repository_is_not_one(tmp_path: Path) -> None:
    make_repo(tmp_path / "src", {"sub/file": "x\n"})
    assert work.git_dir(str(tmp_path / "src" / "sub")) is None
    assert work.git_dir(str(tmp_path / "src")) == str(tmp_path / "src" / ".git")


def test_fleet_validate_exits_2_on_a_missing_repository(tmp_path: Path, capsys) -> None:
    import tasks

    inventory(tmp_path, "{repo: nowhere, task: a}")
    with pytest.raises(Exit) as caught:
        tasks.fleet_validate(Context(), inventory=str(tmp_path / "inv.yaml"))
    assert caught.value.code == EXIT_SPEC
    assert f"agent coder: work.repo {tmp_path}/nowhere does not exist" in " ".join(capsys.readouterr().err.split())


def test_a_task_file_that_is_not_utf8_names_the_byte_and_its_offset(tmp_path: Path) -> None:
    make_repo(tmp_path / "src")
    (tmp_path / "t.md").write_bytes(b"fix the \xc3(bug\n")
    with pytest.raises(work.WorkError) as caught:
        work.check(inventory(tmp_path, "{repo: src, task_file: t.md}").fleet)
    assert caught.value.message == (f"agent coder: work.task_file {tmp_path}/t.md is not UTF-8 text: byte 0xc3 at "
                                    "byte offset 8 (invalid continuation byte)")  # fmt: skip


def test_fleet_up_checks_work_before_it_opens_the_ledger(tmp_path: Path, monkeypatch) -> None:
    import jackin.lifecycle.fleet as fleet_api

    touched: list[str] = []
    monkeypatch.setattr(fleet_api, "Ledger", lambda *a, **k: touched.append("ledger"))
    with pytest.raises(work.WorkError, match="work.repo .* does not exist"):
        fleet_api.up(inventory(tmp_path, "{repo: nowhere, task: a}"))
    with pytest.raises(work.WorkError, match="work.repo .* does not exist"):
        fleet_api.plan(inventory(tmp_path, "{repo: nowhere, task: a}"))
    assert touched == []


# --- bundles ----------------------------------------------------------------------------------


def test_the_bundle_holds_the_commit_on_one_branch_and_the_source_is_untouched(tmp_path: Path) -> None:
    commit = make_repo(tmp_path / "src")
    before = sh("git", "-C", str(tmp_path / "src"), "for-each-ref")
    data = work.bundle(str(tmp_path / "src" / ".git"), commit)
    (tmp_path / "b.bundle").write_bytes(data)
    heads = sh("git", "bundle", "list-heads", str(tmp_path / "b.bundle"))
    assert heads.splitlines() == [f"{commit} HEAD", f"{commit} refs/heads/jackin/source"]
    sh("git", "clone", "-q", "--no-checkout", str(tmp_path / "b.bundle"), str(tmp_path / "clone"))
    sh("git", "-C", str(tmp_path / "clone"), "checkout", "-q", "-b", "jackin/coder-1", commit)
    assert (tmp_path / "clone" / "README.md").read_text() == "hello\n"
    assert sh("git", "-C", str(tmp_path / "src"), "for-each-ref") == before
    assert work.bundle(str(tmp_path / "src" / ".git"), commit) == data  # kept per commit: same bytes


def test_prepare_and_attach_fill_in_commit_and_digests(tmp_path: Path) -> None:
    commit = make_repo(tmp_path / "src")
    spec = inventory(tmp_path, "{repo: src, task: 'write: A: b'}").fleet
    ready = work.prepare(spec)
    assert list(ready) == ["coder"] and ready["coder"].commit == commit
    plan = work.attach(build(spec, {"coder-1": 60000, "coder-2": 60001, "plain-1": 60002}), ready)
    coder, plain = plan.agents[1], plan.agents[2]
    assert plain.work is None
    assert coder.work.branch == "jackin/coder-2" and coder.work.commit == commit
    assert work_ops.file_data(coder.work, "task.md") == b"write: A: b"
    assert work_ops.file_data(coder.work, "work.json") == (
        '{"schema_version":1,"repo":"src","ref":"HEAD","commit":"%s","branch":"jackin/coder-2"}\n' % commit).encode()
    assert work.digest(work_ops.file_data(coder.work, "repo.bundle")) == coder.work.files["repo.bundle"]


def test_a_file_url_is_mirrored_then_fetched(tmp_path: Path) -> None:
    first = make_repo(tmp_path / "upstream")
    spec = inventory(tmp_path, f"{{repo: 'file://{tmp_path}/upstream', ref: main, task: a}}").fleet
    assert work.prepare(spec)["coder"].commit == first
    (tmp_path / "upstream" / "more").write_text("more\n")
    sh("git", "-C", str(tmp_path / "upstream"), "add", "-A")
    sh("git", "-C", str(tmp_path / "upstream"), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two")
    second = sh("git", "-C", str(tmp_path / "upstream"), "rev-parse", "HEAD")
    assert work.prepare(spec)["coder"].commit == second


# --- the plan and the delivery ----------------------------------------------------------------


def plan_of(tmp_path: Path, task: str = "go") -> FleetPlan:
    make_repo(tmp_path / "src") if not (tmp_path / "src").exists() else None
    spec = inventory(tmp_path, f"{{repo: src, task: '{task}'}}").fleet
    return work.attach(build(spec, {"coder-1": 60000, "coder-2": 60001, "plain-1": 60002}), work.prepare(spec))


def test_only_agents_with_work_mount_it_read_only(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    mount = f"type=bind,src=/var/lib/jackin/work/demo/coder-1,dst={WORK_TARGET},readonly"
    assert mount in plan.agents[0].run_args()
    assert not any(WORK_TARGET in arg for arg in plan.agents[2].run_args())


def _delivered(plan: FleetPlan) -> HostState:
    base = "/var/lib/jackin/work/demo"
    paths = {base: PathInfo(kind="d", mode="0700", uid=0, gid=0)}
    digests = {}
    for agent in plan.agents:
        if agent.work is None:
            continue
        paths[agent.work_dir] = PathInfo(kind="d", mode="0750", uid=0, gid=agent.uid)
        paths[digests_file("demo", agent.instance)] = PathInfo(kind="f", mode="0600", uid=0, gid=0)
        for name in work_ops.FILES:
            paths[f"{agent.work_dir}/{name}"] = PathInfo(kind="f", mode="0440", uid=0, gid=agent.uid)
        digests[agent.instance] = dict(agent.work.files)
    return HostState(work=paths, work_digests=digests)


def _text(commands) -> str:
    return "\n".join(c for c in commands if isinstance(c, str))


def test_first_delivery_sends_three_files_root_group_0440(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    commands = work_commands(plan, HostState())
    uploads = [c for c in commands if isinstance(c, Upload) and not c.target.endswith(".digests")]
    assert [u.target for u in uploads] == [f"/var/lib/jackin/work/demo/coder-{i}/{n}" for i in (1, 2)
                                           for n in work_ops.FILES]  # fmt: skip
    text = _text(commands)
    assert "install -m 0440 -o 0 -g 60000 -T" in text
    assert "chown -h 0:60000 -- /var/lib/jackin/work/demo/coder-1" in text and "chmod 00750" in text
    assert "chmod 00700 -- /var/lib/jackin/work/demo" in text
    assert "plain-1" not in text


def test_unchanged_work_yields_nothing_and_a_changed_task_is_redelivered_alone(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    state = _delivered(plan)
    assert work_commands(plan, state) == []
    changed = plan_of(tmp_path, task="another task")
    uploads = [c for c in work_commands(changed, state) if isinstance(c, Upload) and not c.target.endswith(".digests")]
    assert [(u.target.rsplit("/", 2)[1], u.target.rsplit("/", 1)[1], u.data) for u in uploads] == [
        ("coder-1", "task.md", b"another task"), ("coder-2", "task.md", b"another task")]


def test_a_wrong_mode_is_redelivered_and_a_stray_file_removed(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    state = _delivered(plan)
    paths = dict(state.work)
    paths["/var/lib/jackin/work/demo/coder-1/task.md"] = PathInfo(kind="f", mode="0444", uid=0, gid=60000)
    paths["/var/lib/jackin/work/demo/coder-2/stray"] = PathInfo(kind="f", mode="0600", uid=0, gid=0)
    commands = work_commands(plan, state.model_copy(update={"work": paths}))
    assert [u.target for u in commands if isinstance(u, Upload) and not u.target.endswith(".digests")] == ["/var/lib/jackin/work/demo/coder-1/task.md"]
    assert "rm -rf --one-file-system -- /var/lib/jackin/work/demo/coder-2/stray" in _text(commands)


def test_unprepared_work_is_refused(tmp_path: Path) -> None:
    make_repo(tmp_path / "src")
    spec = inventory(tmp_path, "{repo: src, task: go}").fleet
    with pytest.raises(Refused, match="was not prepared"):
        work_commands(build(spec, {"coder-1": 60000, "coder-2": 60001, "plain-1": 60002}), HostState())


def test_teardown_removes_the_fleets_work_even_keeping_data(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    state = _delivered(plan)
    assert teardown_commands("demo", state) == ["rm -rf --one-file-system -- /var/lib/jackin/work/demo",
                                                "rmdir /var/lib/jackin/work 2>/dev/null || true"]  # fmt: skip
    assert teardown_commands("demo", HostState()) == []
    for keep in (False, True):
        assert "rm -rf --one-file-system -- /var/lib/jackin/work/demo" in fleet_teardown(plan, state, keep_data=keep)


def test_state_read_parses_work_paths_and_digests() -> None:
    base = "/var/lib/jackin/work/demo"
    records = b"".join(f"{k} {m} {u} {g} {p}\0".encode() for k, m, u, g, p in [
        ("d", "700", 0, 0, base), ("d", "750", 0, 60000, f"{base}/coder-1"),
        ("f", "440", 0, 60000, f"{base}/coder-1/task.md")])  # fmt: skip
    digest = "cd" * 32
    state = parse_state(["##work", " ".join(f"{b:02x}" for b in records), "##workdigests",
                         f"{base}/coder-1.digests:task.md {digest}", f"{base}/coder-1.digests:BAD {digest}"])  # fmt: skip
    assert state.work[f"{base}/coder-1/task.md"] == PathInfo(kind="f", mode="0440", uid=0, gid=60000)
    assert state.work_digests == {"coder-1": {"task.md": digest}}
    assert state.leftovers["work"] == sorted(state.work)
