"""fleet.collect's quarantine (jackin/work/quarantine.py), with this machine's real git and bundles built
here with git plumbing: a bundle whose objects fail ``git fsck --strict`` (a tree holding
``.git/hooks/post-checkout``: ``hasDotgit``; a ``.gitmodules`` whose url is ``--upload-pack=...``:
``gitmodulesUrl``) is refused naming the checks, and leaves every ref and object of the operator's
repository as it was, while a clean bundle landed in the same run is the positive control. Also: the
bundle is streamed to its file (never held whole, the byte cap enforced while it comes) and the
quarantine is always removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from jackin.errors import RemoteCommandError
from jackin.plan.fleet import build
from jackin.spec import load_inventory
from jackin.transport.channel import CHUNK
from jackin.work import collect, quarantine

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=input, check=True, capture_output=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(repo), **IDENTITY})  # fmt: skip
    return done.stdout.decode().strip()


def state(repo: Path) -> tuple[str, str]:
    """Every ref and the object count of ``repo``: what a refused collection must leave as it was."""
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)"), git(repo, "count-objects", "-v")


def leftovers(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / ".git").glob("jackin-quarantine-*"))


def plant(repo: Path, branch: str, checks: set[str]) -> tuple[str, list[str]]:
    """A commit on ``branch`` of ``repo`` made with plumbing, whose tree holds what fails ``checks``
    (hasDotgit: ``.git/hooks/post-checkout``; gitmodulesUrl: a .gitmodules with ``url = --upload-pack=...``);
    its id and the planted objects' ids."""

    def blob(data: bytes) -> str:
        return git(repo, "hash-object", "-w", "--stdin", input=data)

    notes = blob(b"work\n")
    entries = [f"100644 blob {notes}\tNOTES.md"]
    planted: list[str] = []
    if "hasDotgit" in checks:
        hook = blob(b"#!/bin/sh\ntouch /tmp/pwned\n")
        hooks = git(repo, "mktree", input=f"100755 blob {hook}\tpost-checkout\n".encode())
        dotgit = git(repo, "mktree", input=f"040000 tree {hooks}\thooks\n".encode())
        entries.append(f"040000 tree {dotgit}\t.git")
        planted += [hook, hooks, dotgit]
    if "gitmodulesUrl" in checks:
        modules = blob(b'[submodule "x"]\n\tpath = x\n\turl = --upload-pack=touch /tmp/pwned\n')
        entries.append(f"100644 blob {modules}\t.gitmodules")
        planted.append(modules)
    tree = git(repo, "mktree", input=("\n".join(entries) + "\n").encode())
    commit = git(repo, "commit-tree", tree, "-p", f"refs/heads/{branch}", "-m", "planted", input=b"")
    git(repo, "update-ref", f"refs/heads/{branch}", commit)
    return commit, planted + [tree]


def agent_clone(src: Path, where: Path, branch: str) -> str:
    """An agent's clone of ``src`` with one clean commit of its own on ``branch``; that commit."""
    subprocess.run(["git", "clone", "-q", str(src), str(where)], check=True, capture_output=True)
    git(where, "checkout", "-q", "-b", branch)
    (where / f"{branch.replace('/', '-')}.txt").write_text("done\n")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "clean work")
    return git(where, "rev-parse", "HEAD")


def bundle_of(repo: Path, branch: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "bundle", "create", "--quiet", "-", f"refs/heads/{branch}"],
                          check=True, capture_output=True).stdout  # fmt: skip


def land(repo: Path, data: bytes, branch: str, ref: str) -> str:
    """``data`` (a bundle) landed in ``repo`` as ``ref`` through a quarantine, as fleet.collect does."""
    with quarantine.opened(str(repo)) as place:
        place.bundle.write_bytes(data)
        return place.land(branch, ref)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """The operator's repository: a worktree with one commit and an uncommitted file."""
    path = tmp_path / "src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("a project\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "start")
    (path / "scratch.txt").write_text("uncommitted\n")
    return path


# --- the quarantine --------------------------------------------------------------------------


@pytest.mark.parametrize("checks", [{"hasDotgit"}, {"gitmodulesUrl"}, {"hasDotgit", "gitmodulesUrl"}])
def test_a_bundle_failing_fsck_is_refused_naming_the_checks_and_changes_nothing(
    src: Path, tmp_path: Path, checks: set[str]
) -> None:
    bad, good = tmp_path / "bad-agent", tmp_path / "good-agent"
    agent_clone(src, bad, "jackin/coder-1")
    commit, planted = plant(bad, "jackin/coder-1", checks)
    clean_commit = agent_clone(src, good, "jackin/coder-2")
    before = state(src)
    with pytest.raises(quarantine.BundleRefused) as refused:
        land(src, bundle_of(bad, "jackin/coder-1"), "jackin/coder-1", "refs/jackin/demo/h1/coder-1")
    assert refused.value.checks == sorted(checks)
    assert f"fails git fsck --strict ({', '.join(sorted(checks))})" in refused.value.message
    assert state(src) == before
    for oid in [commit, *planted]:
        assert subprocess.run(["git", "-C", str(src), "cat-file", "-e", oid]).returncode != 0, oid
    assert leftovers(src) == []
    # The positive control, in the same repository: a clean agent's bundle lands, under its ref alone.
    assert land(src, bundle_of(good, "jackin/coder-2"), "jackin/coder-2", "refs/jackin/demo/h1/coder-2") == clean_commit
    refs, _ = state(src)
    assert refs == before[0] + f"\nrefs/jackin/demo/h1/coder-2 {clean_commit}"
    assert leftovers(src) == []
    assert git(src, "status", "--porcelain") == "?? scratch.txt"


def test_the_operators_git_config_cannot_turn_a_check_off(src: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    bad = tmp_path / "bad-agent"
    agent_clone(src, bad, "jackin/coder-1")
    plant(bad, "jackin/coder-1", {"hasDotgit", "gitmodulesUrl"})
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[fsck]\n\thasDotgit = ignore\n")  # the operator's ~/.gitconfig
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for name, value in (("COUNT", "1"), ("KEY_0", "fsck.gitmodulesUrl"), ("VALUE_0", "ignore")):
        monkeypatch.setenv(f"GIT_CONFIG_{name}", value)  # as `git -c fsck.gitmodulesUrl=ignore` passes it on
    # The control: that configuration does turn both checks off for a plain git fsck --strict.
    plain = tmp_path / "plain.git"
    subprocess.run(["git", "init", "-q", "--bare", str(plain)], check=True)
    subprocess.run(["git", "-C", str(plain), "fetch", "-q", str(bad), "jackin/coder-1:refs/heads/x"], check=True)
    assert subprocess.run(["git", "-C", str(plain), "fsck", "--strict"], capture_output=True).returncode == 0
    before = state(src)
    with pytest.raises(quarantine.BundleRefused) as refused:
        land(src, bundle_of(bad, "jackin/coder-1"), "jackin/coder-1", "refs/jackin/demo/h1/coder-1")
    assert refused.value.checks == ["gitmodulesUrl", "hasDotgit"]
    assert state(src) == before


def test_a_bundle_lands_in_a_bare_destination_and_nothing_it_does_not_reach(src: Path, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    head = agent_clone(src, agent, "jackin/coder-1")
    stray = git(agent, "hash-object", "-w", "--stdin", input=b"not on the branch\n")
    data = bundle_of(agent, "jackin/coder-1")
    into = tmp_path / "collected.git"
    subprocess.run(["git", "init", "-q", "--bare", str(into)], check=True)
    assert land(into, data, "jackin/coder-1", "refs/jackin/demo/h1/coder-1") == head
    assert git(into, "for-each-ref", "--format=%(refname)") == "refs/jackin/demo/h1/coder-1"
    assert subprocess.run(["git", "-C", str(into), "cat-file", "-e", stray]).returncode != 0
    assert sorted(p.name for p in into.glob("jackin-quarantine-*")) == []


# --- the bundle streamed off the host ---------------------------------------------------------


class Channel:
    """A paramiko channel's surface as ``jackin.transport.channel.pump`` reads it: the command's stdout
    from ``answer(command)``'s chunks (made one at a time, as they arrive off the wire), then exit 0."""

    def __init__(self, answer: Callable[[str], Iterable[bytes]]):
        self._answer = answer
        self._chunks: Iterator[bytes] = iter(())
        self._next: bytes | None = None
        self.closed = False

    def settimeout(self, _seconds: float) -> None:
        pass

    def exec_command(self, command: str) -> None:
        self._chunks = iter(self._answer(command))
        self._next = next(self._chunks, None)

    def recv_ready(self) -> bool:
        return self._next is not None

    def recv(self, _size: int) -> bytes:
        data, self._next = self._next, None
        self._next = next(self._chunks, None)
        return data or b""

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return self._next is None

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def connection(answer: Callable[[str], Iterable[bytes]], opened: list[Channel] | None = None) -> SimpleNamespace:
    """A Fabric connection's surface as collect uses it: each session answers its command with ``answer``."""

    def open_session() -> Channel:
        channel = Channel(answer)
        if opened is not None:
            opened.append(channel)
        return channel

    transport = SimpleNamespace(is_active=lambda: True, open_session=open_session)
    return SimpleNamespace(client=SimpleNamespace(get_transport=lambda: transport))


def chunks(count: int) -> Iterator[bytes]:
    for i in range(count):
        yield bytes([i % 251]) * CHUNK


def test_the_bundle_is_streamed_to_its_file_holding_no_more_than_a_chunk_or_two(tmp_path: Path) -> None:
    count = 512  # 32 MiB
    expected = hashlib.sha256(b"".join(bytes([i % 251]) * CHUNK for i in range(count))).hexdigest()
    path = tmp_path / "agent.bundle"
    tracemalloc.start()
    try:
        with path.open("wb") as handle:
            tracemalloc.reset_peak()
            code, out, _ = collect._exec(connection(lambda _: chunks(count)), "bundle", cap=collect.MAX_BUNDLE,
                                         host="h1", into=handle)  # fmt: skip
            streamed = tracemalloc.get_traced_memory()[1]
        # The control: the same read kept in memory, as collect did before, is seen by the same measure.
        tracemalloc.reset_peak()
        _, held, _ = collect._exec(connection(lambda _: chunks(count)), "bundle", cap=collect.MAX_BUNDLE,
                                   host="h1")  # fmt: skip
        kept = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (code, out) == (0, b"")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected == hashlib.sha256(held).hexdigest()
    assert streamed < 4 * CHUNK, streamed
    assert kept > count * CHUNK, kept


def test_the_byte_cap_is_enforced_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "agent.bundle"
    made: list[Channel] = []
    with path.open("wb") as handle, pytest.raises(RemoteCommandError, match="output larger than"):
        collect._exec(connection(lambda _: chunks(100), made), "bundle", cap=10 * CHUNK + 5, host="h1", into=handle)
    assert path.stat().st_size == 10 * CHUNK  # the chunk that went past the cap was never written
    assert made[0].recv_ready() and made[0].closed  # the rest was never read, and the channel is closed


# --- fleet.collect: one agent refused, the others collected -----------------------------------


def host(clones: dict[str, Path], base: str) -> Callable[[str], Iterable[bytes]]:
    """One host's agents as fleet.collect reads them in their containers (``docker exec --user U:G
    CONTAINER ...``): each container's work.json, and its branch bundled by the real ``git bundle
    create`` of a local clone (``clones``: container -> clone). The status file and the handoff are
    read on the host (``collect.read_workspace_file``), stood in for by the test."""

    def answer(command: str) -> Iterable[bytes]:
        argv = shlex.split(command)
        container, what = argv[4], argv[5:]
        if what[:2] == ["sh", "-c"]:  # collect.bundle_script: ... git -C /workspace/repo bundle create ... BRANCH
            return [bundle_of(clones[container], what[2].split()[-1].removeprefix("refs/heads/"))]
        assert what[-1].endswith("work.json"), command
        return [json.dumps({"commit": base}).encode()]

    return answer


def test_fleet_collect_refuses_the_agent_whose_bundle_fails_fsck_and_collects_the_other(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from jackin.cli import work as work_cli

    spec = tmp_path / "fleet.yaml"
    spec.write_text("fleet:\n  name: demo\n  provider: lab\n  agents:\n"
                    "    - {name: coder, count: 2, work: {repo: src, task: go}}\n")  # fmt: skip
    inventory = load_inventory(spec)
    plan = build(inventory.fleet, {"coder-1": 60000, "coder-2": 60001})
    bad, good = tmp_path / "coder-1", tmp_path / "coder-2"
    agent_clone(src, bad, "jackin/coder-1")
    planted, objects = plant(bad, "jackin/coder-1", {"hasDotgit", "gitmodulesUrl"})
    clean_commit = agent_clone(src, good, "jackin/coder-2")
    agents = host({"jk-demo--coder-1": bad, "jk-demo--coder-2": good}, git(src, "rev-parse", "HEAD"))
    recorded: list[tuple] = []

    class Ledger:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def record_collection(self, *args, **kwargs):
            recorded.append((args, kwargs))

    @contextmanager
    def connect(target, timeout):
        yield connection(agents)

    def workspace_file(conn, agent, relative, cap, *, host):  # read on the host by the perl reader (tested apart)
        return b'{"state": "done"}' if relative.endswith("status.json") else b"## What I did\n\nwork\n"

    monkeypatch.setattr(collect, "read_workspace_file", workspace_file)
    monkeypatch.setattr(collect, "Ledger", Ledger)
    monkeypatch.setattr(collect, "make_plan", lambda inventory, ledger, store: plan)
    monkeypatch.setattr(collect, "targets", lambda inventory, bring_up: [SimpleNamespace(name="h1")])
    monkeypatch.setattr(collect, "connect", connect)
    monkeypatch.setattr(work_cli, "fleet_api", SimpleNamespace(load=lambda path: inventory))
    before = state(src)
    code = work_cli.fleet_collect("fleet.yaml", agents=None, into=None, json=True)
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # the exit status of a failed agent collection
    by = {a["instance"]: a for a in report["agents"]}
    assert (by["coder-1"]["result"], by["coder-1"]["checks"]) == ("failed", ["gitmodulesUrl", "hasDotgit"])
    assert "fails git fsck --strict (gitmodulesUrl, hasDotgit): refused" in by["coder-1"]["reason"]
    assert (by["coder-2"]["result"], by["coder-2"]["commit"]) == ("collected", clean_commit)
    refs, _ = state(src)
    assert refs == before[0] + f"\nrefs/jackin/demo/h1/coder-2 {clean_commit}"
    for oid in [planted, *objects]:
        assert subprocess.run(["git", "-C", str(src), "cat-file", "-e", oid]).returncode != 0, oid
    assert leftovers(src) == []
    failed = next(kw for args, kw in recorded if args[2] == "coder-1")
    assert failed["detail"]["checks"] == ["gitmodulesUrl", "hasDotgit"] and failed["ref"] is not None


def run_bundle_script(repo: Path, branch: str) -> subprocess.CompletedProcess:
    """collect.bundle_script as the container runs it, on a local repository in place of /workspace/repo."""
    script = collect.bundle_script(branch).replace(collect.REPO_DIR, str(repo))
    return subprocess.run(["sh", "-c", script], capture_output=True, timeout=60)


def test_the_bundle_script_bundles_a_branch_and_refuses_a_git_dir_holding_a_fifo(src: Path, tmp_path: Path) -> None:
    clone = tmp_path / "agent"
    commit = agent_clone(src, clone, "jackin/coder-1")
    done = run_bundle_script(clone, "jackin/coder-1")  # control: a plain repository is bundled
    assert done.returncode == 0, done.stderr
    (tmp_path / "b.bundle").write_bytes(done.stdout)
    listed = subprocess.run(["git", "bundle", "list-heads", str(tmp_path / "b.bundle")], capture_output=True, text=True)
    assert listed.stdout.split() == [commit, "refs/heads/jackin/coder-1"]
    fifo = clone / ".git" / "refs" / "heads" / "jackin" / "x"
    os.mkfifo(fifo)  # git would block opening it (a ref that is a FIFO)
    started = time.monotonic()
    refused = run_bundle_script(clone, "jackin/coder-1")
    assert refused.returncode == collect.FIFO_FOUND and refused.stdout == b""
    assert refused.stderr.decode() == str(fifo) and time.monotonic() - started < 20
