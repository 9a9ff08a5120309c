"""Work and handoffs on a real lab host, with the demo role: a repository and a task delivered to each
agent as root:<gid> 0440 files only that agent reads, the demo agents' commits collected under their
own refs in the operator's repository with their handoffs, and fleet.review listing them.

Also the edge of the spec: a repository path that does not exist, or a task file that is missing,
fails fleet.validate and fleet.up (exit 2) before anything is touched: lab, hosts and ledger.

And the quarantine of collection: an agent whose branch holds objects ``git fsck --strict`` refuses (a
``.git/hooks/post-checkout`` tree, a ``.gitmodules`` url ``--upload-pack=...``) is refused by fleet.collect
naming both checks, the operator's repository unchanged, while the other agent's new commit lands.

One 1-host lab and one fleet (2 demo agents) for the module; the tests run in order.
"""

from __future__ import annotations

import json
import secrets
import shlex
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from jackin.lab import Lab
from jackin.paths import state_dir

from .conftest import inv, module_lab, sh

STAT = "stat -c '%a %u %g %i %Y'"  # mode, owner, group, inode, mtime


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def wlab():
    yield from module_lab("w", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name, self.tmp = lab, f"w{secrets.token_hex(3)}", tmp
        self.repo = tmp / "src"
        git("init", "-q", "-b", "main", str(self.repo))
        (self.repo / "README.md").write_text("a project\n")
        git("-C", str(self.repo), "add", "-A")
        git("-C", str(self.repo), "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "start")
        self.base = git("-C", str(self.repo), "rev-parse", "HEAD")
        (tmp / "tasks").mkdir()
        (tmp / "tasks" / "review.md").write_text("Review the README\nwrite: REVIEW.md: looks fine\ntest: test -f README.md\n")
        self.spec = tmp / f"{self.name}.yaml"
        self.write_spec("Add notes\\nwrite: notes.txt: first note")
        self.dir = f"/var/lib/jackin/work/{self.name}"
        self.coder, self.reviewer = f"jk-{self.name}--coder-1", f"jk-{self.name}--reviewer-1"

    def write_spec(self, coder_task: str, *, repo: str = "src", task_file: str = "tasks/review.md",
                   path: Path | None = None) -> Path:  # fmt: skip
        path = path or self.spec
        path.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {self.lab.name}, hosts: 1}}
  agents:
    - name: coder
      role: demo
      work: {{repo: {repo}, task: "{coder_task}"}}
    - name: reviewer
      role: demo
      work: {{repo: src, ref: main, task_file: {task_file}}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
        return path

    def uid(self, container: str) -> int:
        return int(sh(self.lab, f"id -u {container}").stdout)


@pytest.fixture(scope="module")
def wfleet(wlab, tmp_path_factory):
    fleet = Fleet(wlab, tmp_path_factory.mktemp("work"))
    try:
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup


def everything(fleet: Fleet) -> tuple:
    """What a run could change: the lab's containers, the host's jackin state (not the agents' .jackin,
    whose heartbeat their entrypoint rewrites every 5 s), the ledger's rows."""
    lab = subprocess.run(["docker", "ps", "-a", "--filter", f"label=jackin.lab={fleet.lab.name}", "--format",
                          "{{.Names}} {{.State}} {{.ID}}"], capture_output=True, text=True).stdout  # fmt: skip
    host = sh(fleet.lab, "ls -laR -I .jackin /var/lib/jackin /srv/jackin 2>&1; docker ps -a --format '{{.Names}}'; "
                         "getent passwd | grep jk- ; docker network ls --format '{{.Name}}'", warn=True).stdout  # fmt: skip
    ledger = state_dir() / "ledger.sqlite3"
    rows: dict[str, list] = {}
    if ledger.exists():
        with sqlite3.connect(ledger) as db:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
                rows[table] = db.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - our own table names
    return lab, host, {table: found for table, found in rows.items() if found}  # an empty new ledger records nothing


def test_a_missing_repository_or_task_file_fails_before_anything_is_touched(wfleet: Fleet) -> None:
    missing_repo = wfleet.write_spec("x", repo="nowhere", path=wfleet.tmp / "bad-repo.yaml")
    missing_task = wfleet.write_spec("x", task_file="tasks/none.md", path=wfleet.tmp / "bad-task.yaml")
    before = everything(wfleet)
    for spec, problem in ((missing_repo, f"agent coder: work.repo {wfleet.tmp}/nowhere does not exist"),
                          (missing_task, f"agent reviewer: work.task_file {wfleet.tmp}/tasks/none.md does not exist")):
        for task in ("fleet.validate", "fleet.up", "fleet.plan"):
            args = [task, "-i", str(spec)] + (["--yes"] if task == "fleet.up" else [])
            done = inv(*args)
            assert done.returncode == 2, (task, done.stdout, done.stderr)
            assert problem in " ".join(done.stderr.split()), (task, done.stderr)
    assert everything(wfleet) == before
    # The positive control: the same fleet with its work in place validates.
    assert inv("fleet.validate", "-i", str(wfleet.spec)).returncode == 0


def test_fleet_up_delivers_each_agents_work_readable_by_that_agent_alone(wfleet: Fleet) -> None:
    done = inv("fleet.up", "-i", str(wfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    coder, reviewer = wfleet.uid(wfleet.coder), wfleet.uid(wfleet.reviewer)
    d = wfleet.dir
    shown = sh(wfleet.lab, f"stat -c '%a %u %g %n' {d} {d}/coder-1 {d}/coder-1/* {d}/coder-1.digests").stdout.splitlines()
    assert shown == [f"700 0 0 {d}", f"750 0 {coder} {d}/coder-1",
                     f"440 0 {coder} {d}/coder-1/repo.bundle", f"440 0 {coder} {d}/coder-1/task.md",
                     f"440 0 {coder} {d}/coder-1/work.json", f"600 0 0 {d}/coder-1.digests"]  # fmt: skip
    task = "/run/jackin/work/task.md"
    own = sh(wfleet.lab, f"docker exec --user {coder}:{coder} {wfleet.coder} cat {task}")
    assert own.stdout == "Add notes\nwrite: notes.txt: first note"
    other = sh(wfleet.lab, f"docker exec --user {reviewer}:{reviewer} {wfleet.coder} cat {task}", warn=True)
    assert other.exited != 0 and "Permission denied" in other.stderr
    mounts = json.loads(sh(wfleet.lab, f"docker inspect --format '{{{{json .Mounts}}}}' {wfleet.coder}").stdout)
    work = [m for m in mounts if m["Destination"] == "/run/jackin/work"]
    assert work and work[0]["Source"] == f"{d}/coder-1" and work[0]["RW"] is False
    meta = json.loads(sh(wfleet.lab, f"docker exec --user {coder}:{coder} {wfleet.coder} cat /run/jackin/work/work.json").stdout)
    assert meta == {"schema_version": 1, "repo": "src", "ref": "HEAD", "commit": wfleet.base, "branch": "jackin/coder-1"}


def status(fleet: Fleet, container: str) -> dict:
    uid = fleet.uid(container)
    found = sh(fleet.lab, f"docker exec --user {uid}:{uid} {container} cat /workspace/.jackin/status.json", warn=True)
    try:
        return json.loads(found.stdout)
    except ValueError:
        return {}


def test_the_demo_agents_commit_and_collect_brings_each_branch_and_handoff(wfleet: Fleet) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        states = {c: status(wfleet, c).get("state") for c in (wfleet.coder, wfleet.reviewer)}
        if set(states.values()) <= {"done", "failed"}:
            break
        time.sleep(1)
    assert set(states.values()) == {"done"}, states
    branches = git("-C", str(wfleet.repo), "for-each-ref", "refs/heads")
    worktree = git("-C", str(wfleet.repo), "status", "--porcelain")
    done = inv("fleet.collect", "-i", str(wfleet.spec), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    host = report["agents"][0]["host"]
    by_instance = {a["instance"]: a for a in report["agents"]}
    assert set(by_instance) == {"coder-1", "reviewer-1"}
    for instance, container in (("coder-1", wfleet.coder), ("reviewer-1", wfleet.reviewer)):
        item = by_instance[instance]
        ref = f"refs/jackin/{wfleet.name}/{host}/{instance}"
        assert (item["result"], item["ref"], item["repo"]) == ("collected", ref, str(wfleet.repo))
        assert item["commit"] == status(wfleet, container)["commit"] == git("-C", str(wfleet.repo), "rev-parse", ref)
        assert item["source_commit"] == wfleet.base
        assert item["evidence"]["ok"], item["evidence"]
        handoff = Path(item["handoff"])
        assert handoff == state_dir() / "work" / wfleet.name / "handoffs" / host / f"{instance}.md"
        assert f"## Commit\n\n{item['commit']}" in handoff.read_text()
    assert git("-C", str(wfleet.repo), "show", f"{by_instance['coder-1']['ref']}:notes.txt") == "first note"
    assert git("-C", str(wfleet.repo), "show", f"{by_instance['reviewer-1']['ref']}:REVIEW.md") == "looks fine"
    assert "`test -f README.md`: exit 0" in Path(by_instance["reviewer-1"]["handoff"]).read_text()
    # The operator's branches and worktree are as they were: only refs/jackin/ was added.
    assert git("-C", str(wfleet.repo), "for-each-ref", "refs/heads") == branches
    assert git("-C", str(wfleet.repo), "status", "--porcelain") == worktree


def test_fleet_review_lists_state_commit_diff_and_evidence(wfleet: Fleet) -> None:
    done = inv("fleet.review", "-i", str(wfleet.spec), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["instance"]: r for r in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"coder-1", "reviewer-1"}
    for row in rows.values():
        assert row["state"] == "done" and row["evidence"] == "ok" and row["source_commit"] == wfleet.base
        assert row["diff"].startswith("1 file changed, 1 insertion(+)"), row
    table = inv("fleet.review", "-i", str(wfleet.spec))
    assert table.returncode == 0 and "coder-1" in table.stdout and "reviewer-1" in table.stdout


def test_a_handoff_without_evidence_is_flagged_and_shown_in_review(wfleet: Fleet) -> None:
    coder = wfleet.uid(wfleet.coder)
    text = "## What I did\\n\\nThings.\\n\\n## Commit\\n\\nsee the branch\\n"
    sh(wfleet.lab, f"docker exec --user {coder}:{coder} {wfleet.coder} sh -c "
                   f"'printf \"{text}\" > /workspace/.jackin/handoff.md'")  # the agent writes a thin handoff
    done = inv("fleet.collect", "-i", str(wfleet.spec), "--agent", "coder-1", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (item,) = json.loads(done.stdout)["agents"]
    assert item["instance"] == "coder-1" and item["result"] == "collected"
    assert item["evidence"]["ok"] is False
    assert item["evidence"]["problems"] == ["no '## Files changed' section", "no '## Tests run' section",
                                            "no '## Could not verify' section", "no '## Risks' section",
                                            "the Commit section names no commit id"]  # fmt: skip
    rows = {r["instance"]: r for r in json.loads(inv("fleet.review", "-i", str(wfleet.spec), "--json").stdout)["rows"]}
    assert rows["coder-1"]["evidence"].startswith("without evidence: ") and rows["reviewer-1"]["evidence"] == "ok"


# Run by the agent in its repository: a commit on its branch whose tree holds .git/hooks/post-checkout
# (fsck's hasDotgit) and a .gitmodules whose url is an option (gitmodulesUrl), made with git plumbing.
PLANT = r"""set -e
cd /workspace/repo
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@x GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@x
hook=$(printf '#!/bin/sh\ntouch /tmp/pwned\n' | git hash-object -w --stdin)
hooks=$(printf '100755 blob %s\tpost-checkout\n' "$hook" | git mktree)
dotgit=$(printf '040000 tree %s\thooks\n' "$hooks" | git mktree)
modules=$(printf '[submodule "x"]\n\tpath = x\n\turl = --upload-pack=touch /tmp/pwned\n' | git hash-object -w --stdin)
tree=$({ git ls-tree HEAD; printf '040000 tree %s\t.git\n100644 blob %s\t.gitmodules\n' "$dotgit" "$modules"; } | git mktree)
commit=$(git commit-tree "$tree" -p refs/heads/jackin/coder-1 -m planted </dev/null)
git update-ref refs/heads/jackin/coder-1 "$commit"
echo "$commit $tree $dotgit $hooks $hook $modules"
"""
MORE = """set -e
cd /workspace/repo
echo 'one more look' >> REVIEW.md
git -c user.name=agent -c user.email=agent@x commit -qam 'one more look'
git rev-parse HEAD
"""


def as_agent(fleet: Fleet, container: str, script: str) -> str:
    uid = fleet.uid(container)
    return sh(fleet.lab, f"docker exec --user {uid}:{uid} {container} sh -c {shlex.quote(script)}").stdout.strip()


def test_collect_refuses_a_branch_that_fails_fsck_and_collects_the_other_agent(wfleet: Fleet) -> None:
    repo = str(wfleet.repo)
    planted = as_agent(wfleet, wfleet.coder, PLANT).split()
    newer = as_agent(wfleet, wfleet.reviewer, MORE)  # the positive control: a clean new commit
    before = (git("-C", repo, "for-each-ref"), git("-C", repo, "count-objects", "-v"))
    done = inv("fleet.collect", "-i", str(wfleet.spec), "--agent", "coder-1", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    (item,) = json.loads(done.stdout)["agents"]
    assert (item["instance"], item["result"], item["checks"]) == ("coder-1", "failed", ["gitmodulesUrl", "hasDotgit"])
    assert "fails git fsck --strict (gitmodulesUrl, hasDotgit): refused" in item["reason"]
    assert (git("-C", repo, "for-each-ref"), git("-C", repo, "count-objects", "-v")) == before
    # The same run over both agents: the reviewer's new commit lands, the coder's ref keeps its clean commit.
    done = inv("fleet.collect", "-i", str(wfleet.spec), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    by = {a["instance"]: a for a in json.loads(done.stdout)["agents"]}
    assert (by["coder-1"]["result"], by["coder-1"]["checks"]) == ("failed", ["gitmodulesUrl", "hasDotgit"])
    assert (by["reviewer-1"]["result"], by["reviewer-1"]["commit"]) == ("collected", newer)
    reviewer_ref = by["reviewer-1"]["ref"]
    old = {line.split()[2]: line.split()[0] for line in before[0].splitlines()}
    now = {line.split()[2]: line.split()[0] for line in git("-C", repo, "for-each-ref").splitlines()}
    assert now == {**old, reviewer_ref: newer} and old[reviewer_ref] != newer
    for oid in planted:
        assert subprocess.run(["git", "-C", repo, "cat-file", "-e", oid]).returncode != 0, oid
    assert list((wfleet.repo / ".git").glob("jackin-quarantine-*")) == []


def files_seen(fleet: Fleet) -> dict[str, str]:
    d = fleet.dir
    names = [f"{d}/{i}/{n}" for i in ("coder-1", "reviewer-1") for n in ("repo.bundle", "task.md", "work.json")]
    lines = sh(fleet.lab, f"{STAT} {' '.join(names)}").stdout.splitlines()
    return dict(zip(names, lines))


def test_the_same_work_is_not_rewritten_and_a_changed_task_is_redelivered_alone(wfleet: Fleet) -> None:
    before = files_seen(wfleet)
    time.sleep(1.1)  # an rewrite would show in the mtime's seconds
    done = inv("fleet.up", "-i", str(wfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert files_seen(wfleet) == before
    assert json.loads(done.stdout)["unchanged"] == [json.loads(done.stdout)["run"]["hosts"][0]["host"]]
    wfleet.write_spec("Add more notes\\nwrite: notes.txt: second note")
    plan = inv("fleet.plan", "-i", str(wfleet.spec), "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    lines = [line for host in json.loads(plan.stdout)["hosts"] for change in host["changes"]["changes"]
             for line in change["lines"]]  # fmt: skip
    size = len(b"Add more notes\nwrite: notes.txt: second note")
    assert lines[0] == f"work of coder-1: deliver task.md ({size} bytes)", lines
    done = inv("fleet.up", "-i", str(wfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    after = files_seen(wfleet)
    changed = sorted(path for path in after if after[path] != before[path])
    assert changed == [f"{wfleet.dir}/coder-1/task.md"]
    coder = wfleet.uid(wfleet.coder)
    seen = sh(wfleet.lab, f"docker exec --user {coder}:{coder} {wfleet.coder} cat /run/jackin/work/task.md").stdout
    assert seen == "Add more notes\nwrite: notes.txt: second note"


def test_fleet_down_removes_the_delivered_work(wfleet: Fleet) -> None:
    done = inv("fleet.down", "-i", str(wfleet.spec), "--yes", "--keep-lab")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(wfleet.lab, "ls -d /var/lib/jackin/work 2>&1", warn=True).exited != 0
    # The collected refs and handoffs stay on the operator's machine.
    assert git("-C", str(wfleet.repo), "for-each-ref", "--format=%(refname)", f"refs/jackin/{wfleet.name}").count("\n") == 1
