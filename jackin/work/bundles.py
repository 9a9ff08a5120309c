"""Work: each agent's repository and task, checked and bundled on the operator's machine.

A spec gives an agent ``work:`` (``jackin.spec.models.WorkSpec``): a repository (a local path,
relative to the inventory file's directory, or a git URL), a ref, and a task (text or a file).
Before any host is touched (``fleet.validate``, ``fleet.plan``, ``fleet.up``) ``prepare``:

- checks every agent's work and reports every problem at once (exit 2): a path that does not
  exist or is not a git repository, a ref that does not resolve to a commit, a task file that is
  missing, unreadable, not UTF-8 or larger than ``MAX_TASK``;
- syncs a URL into a mirror under the state dir (``git clone --mirror`` once, ``git fetch`` after),
  so the hosts never need the operator's git server;
- resolves the ref to a commit and bundles that commit under one fixed branch
  (``refs/heads/jackin/source``) from a scratch repository that borrows the source's objects
  (``objects/info/alternates``): the source's refs, index and worktree are never touched. A bundle
  is kept per commit (``state_dir()/work/bundles/<commit>.bundle``), so an unchanged commit keeps
  the same bytes and digest and is not re-delivered;
- keeps the bundle and the task by content (``state_dir()/work/blobs/<sha256>``), where the
  engine's builder (``jackin.operations.work``) reads them back by the digest in the plan.

On each host (``jackin.operations.work``), root-owned, outside the agent's home:

    /var/lib/jackin/work                                  root 0700
    /var/lib/jackin/work/<fleet>                          root 0700
    /var/lib/jackin/work/<fleet>/<instance>               root:<agent gid> 0750, mounted read-only
                                                          at /run/jackin/work in that agent's container
    /var/lib/jackin/work/<fleet>/<instance>/<file>        root:<agent gid> 0440: repo.bundle, task.md, work.json
    /var/lib/jackin/work/<fleet>/<instance>.digests       root 0600: ``FILE SHA256`` lines

The container's entrypoint clones the bundle into /workspace/repo on branch ``jackin/<instance>``
at ``commit`` (from work.json) on its first start; ``jackin.work.collect`` brings that branch back.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

from jackin.errors import SpecError
from jackin.operations.work import digest, store, work_json
from jackin.paths import private_dir, state_dir
from jackin.plan.fleet import FleetPlan
from jackin.spec.models import AgentSpec, FleetSpec, WorkSpec, is_git_url
from jackin.spec.values import decode_utf8

MAX_TASK = 256 * 1024
SOURCE_BRANCH = "refs/heads/jackin/source"  # the one branch a delivered bundle holds
GIT_TIMEOUT = 600


class WorkError(SpecError):
    """An agent's work cannot be used: names the agent, the field and what is wrong (exit 2)."""


class Prepared(BaseModel):
    """One agent's work, ready to deliver: the commit, and the digests of its bundle and task (kept
    by content in the state dir's blob store)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str
    repo: str
    ref: str
    commit: str
    bundle: str  # sha256 of repo.bundle
    task: str | None  # sha256 of task.md (None: no task: the agent waits for the queue's, inv fleet.work)


# --- git on the operator's machine -------------------------------------------------


def git(*args: str, cwd: str | Path | None = None, check: bool = True, input: bytes | None = None,
        timeout: float = GIT_TIMEOUT, isolated: bool = False,
        output: BinaryIO | None = None) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    """Run git on this machine with no terminal prompt and no pager, bounded by ``timeout``; raises
    WorkError with git's own message unless ``check=False``. ``isolated``: no git configuration but the
    repository's own and no ``GIT_*`` variable of this process (the operator's settings cannot turn a
    check off); ``output``: git's stdout and stderr go there (a file), not into memory."""
    env = {k: v for k, v in os.environ.items() if not (isolated and k.startswith("GIT_"))}
    env |= {"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C"}
    if isolated:
        env |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    streams: dict = {"capture_output": True} if output is None else {"stdout": output, "stderr": subprocess.STDOUT}
    try:
        done = subprocess.run(["git", *args], cwd=cwd, input=input, env=env, timeout=timeout, check=False,
                              **streams)  # fmt: skip
    except FileNotFoundError:
        raise WorkError("git is not installed on this machine", hint="install git: work is bundled here") from None
    except subprocess.TimeoutExpired:
        raise WorkError(f"git {args[0]} took longer than {timeout:.0f}s") from None
    if check and done.returncode != 0:
        raise WorkError(f"git {' '.join(args[:2])} failed: {_tail(done.stderr or b'')}")
    return done


def _tail(data: bytes) -> str:
    text = " ".join(data.decode(errors="replace").split())
    return text[-300:] or "(no message)"


def git_dir(path: str) -> str | None:
    """The repository's git dir when ``path`` is the top of a work tree or a bare repository; None otherwise
    (a plain directory, or a directory inside some other repository)."""
    found = git("-C", path, "rev-parse", "--path-format=absolute", "--git-common-dir", "--is-bare-repository",
                check=False)  # fmt: skip
    lines = found.stdout.decode(errors="replace").splitlines()
    if found.returncode != 0 or len(lines) != 2:
        return None
    if lines[1] == "true":
        top = lines[0]
    else:
        shown = git("-C", path, "rev-parse", "--show-toplevel", check=False)
        top = shown.stdout.decode(errors="replace").strip()
    return lines[0] if os.path.realpath(top) == os.path.realpath(path) else None


def resolve(directory: str, ref: str) -> str | None:
    """The commit ``ref`` names in the repository at ``directory`` (a git dir or work tree), or None."""
    found = git("-C", directory, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                check=False)  # fmt: skip
    commit = found.stdout.decode().strip()
    return commit if found.returncode == 0 and len(commit) in (40, 64) else None


def mirror(url: str) -> str:
    """The local mirror of ``url`` under the state dir: cloned (``--mirror``) the first time, fetched after."""
    folder = private_dir(state_dir() / "work" / "mirrors")
    path = folder / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".git")
    if (path / "HEAD").exists():
        git("-C", str(path), "fetch", "--prune", "--quiet", "--", "origin")
    else:
        temp = Path(tempfile.mkdtemp(prefix=".clone-", dir=folder))
        try:
            git("clone", "--mirror", "--quiet", "--", url, str(temp / "repo.git"))
            (temp / "repo.git").rename(path)
        finally:
            subprocess.run(["rm", "-rf", "--", str(temp)], check=False)
    return str(path)


# --- checks ---------------------------------------------------------------------------


def read_task(agent: str, work: WorkSpec) -> bytes:
    """The task's bytes: ``task`` as given, or ``task_file`` read (capped, regular, UTF-8)."""
    if work.task is not None:
        data = work.task.encode()
    else:
        data = _read_task_file(agent, Path(str(work.task_file)))
    if len(data) > MAX_TASK:
        raise WorkError(f"agent {agent}: work.task_file {work.task_file} is larger than {MAX_TASK // 1024} KiB",
                        hint="a task is instructions; put data in the repository")  # fmt: skip
    try:
        decode_utf8(data)
    except ValueError as error:
        raise WorkError(f"agent {agent}: work.task_file {work.task_file} is not UTF-8 text: {error}") from None
    return data


def _read_task_file(agent: str, path: Path) -> bytes:
    where = f"agent {agent}: work.task_file {path}"
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise WorkError(f"{where} is not a regular file")
        with path.open("rb") as handle:
            return handle.read(MAX_TASK + 1)
    except FileNotFoundError:
        raise WorkError(
            f"{where} does not exist", hint="paths are relative to the inventory file's directory"
        ) from None
    except PermissionError:
        raise WorkError(f"{where} is not readable (permission denied)") from None
    except OSError as error:
        raise WorkError(f"{where} cannot be read ({error.strerror or type(error).__name__})") from None


def source_dir(agent: str, work: WorkSpec) -> str:
    """The local git dir holding ``work.repo``: the repository itself, or (a URL) its mirror."""
    if is_git_url(work.repo):
        try:
            return mirror(work.repo)
        except WorkError as error:
            raise WorkError(f"agent {agent}: work.repo {work.repo} cannot be fetched: {error.message}") from None
    path = Path(work.repo)
    if not path.exists():
        raise WorkError(f"agent {agent}: work.repo {work.repo} does not exist",
                        hint="paths are relative to the inventory file's directory")  # fmt: skip
    if not path.is_dir():
        raise WorkError(f"agent {agent}: work.repo {work.repo} is not a directory")
    found = git_dir(str(path))
    if found is None:
        raise WorkError(f"agent {agent}: work.repo {work.repo} is not a git repository (or not its top directory)",
                        hint="give the repository's top directory, or a git URL")  # fmt: skip
    return found


def _check_agent(agent: AgentSpec) -> tuple[str, str, bytes | None]:
    """(git dir, commit, task bytes or None: no task) of one agent's work; WorkError on the first problem found."""
    work = agent.work
    assert work is not None
    problems: list[str] = []
    task = None
    try:
        task = read_task(agent.name, work) if work.task is not None or work.task_file is not None else None
    except WorkError as error:
        problems.append(error.message)
    directory, commit = "", None
    try:
        directory = source_dir(agent.name, work)
        commit = resolve(directory, work.ref)
        if commit is None:
            problems.append(f"agent {agent.name}: work.ref {work.ref!r} does not resolve to a commit in {work.repo}")
    except WorkError as error:
        problems.append(error.message)
    if problems:
        raise WorkError(problems[0], problems=problems[1:])
    return directory, str(commit), task


def check(spec: FleetSpec) -> dict[str, tuple[str, str, bytes | None]]:
    """Every agent's work checked (URLs synced to their mirrors); all problems at once, as one error
    (exit 2). Per agent name: (git dir, commit, task bytes)."""
    found: dict[str, tuple[str, str, bytes | None]] = {}
    problems: list[str] = []
    for agent in spec.agents:
        if agent.work is None:
            continue
        try:
            found[agent.name] = _check_agent(agent)
        except WorkError as error:
            problems += [error.message, *error.problems]
    if problems:
        raise WorkError(problems[0] if len(problems) == 1 else f"{len(problems)} problems with the fleet's work",
                        problems=problems if len(problems) > 1 else [],
                        hint="nothing was changed on any host")  # fmt: skip
    return found


# --- bundles and the blob store ------------------------------------------------------------


def put_blob(data: bytes) -> str:
    """Keep ``data`` by its sha256 in the state dir (written aside, then renamed); its digest."""
    folder = store() / "blobs"
    folder.mkdir(mode=0o700, exist_ok=True)
    name = digest(data)
    path = folder / name
    if not path.exists():
        fd, temp = tempfile.mkstemp(prefix=".blob-", dir=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    return name


def bundle(directory: str, commit: str, branches: Mapping[str, str] | None = None) -> bytes:
    """A git bundle of ``commit`` (and its history) as branch ``jackin/source`` (also HEAD), made in a
    scratch repository that borrows ``directory``'s objects: nothing of the source changes. Kept per
    commit, so the same commit gives the same bytes on every run. ``branches`` (name -> commit: a review's
    attempts, ``jackin.work.loop``) are bundled beside it as ``refs/heads/<name>``; such a bundle is not kept."""
    folder = store() / "bundles"
    folder.mkdir(mode=0o700, exist_ok=True)
    kept = folder / f"{commit}.bundle"
    if not branches and kept.exists():
        data = kept.read_bytes()
        if git("bundle", "list-heads", str(kept), check=False).returncode == 0:
            return data
    scratch = Path(tempfile.mkdtemp(prefix=".scratch-", dir=folder))
    try:
        git("init", "--quiet", "--bare", str(scratch))
        objects = Path(directory) / "objects"
        (scratch / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
        git("-C", str(scratch), "update-ref", SOURCE_BRANCH, commit)
        git("-C", str(scratch), "symbolic-ref", "HEAD", SOURCE_BRANCH)
        refs = [SOURCE_BRANCH]
        for name, at in sorted((branches or {}).items()):
            git("-C", str(scratch), "update-ref", f"refs/heads/{name}", at)
            refs.append(f"refs/heads/{name}")
        out = scratch / "out.bundle"
        git("-C", str(scratch), "-c", "pack.threads=1", "bundle", "create", "--quiet", str(out), "HEAD", *refs)
        if branches:
            return out.read_bytes()
        os.replace(out, kept)
    finally:
        subprocess.run(["rm", "-rf", "--", str(scratch)], check=False)
    return kept.read_bytes()


def fleet_repo(fleet: str) -> str:
    """The fleet's own bare repository under the state dir (made on first use): where collected branches land
    when their source is not a local repository."""
    path = private_dir(state_dir() / "work" / fleet) / "collected.git"
    if not (path / "HEAD").exists():
        git("init", "--quiet", "--bare", str(path))
    return str(path)


def prepare(spec: FleetSpec) -> dict[str, Prepared]:
    """Check every agent's work (``check``) and bundle it here; per agent name what to deliver."""
    out = {}
    for name, (directory, commit, task) in check(spec).items():
        work = next(a for a in spec.agents if a.name == name).work
        assert work is not None
        out[name] = Prepared(agent=name, repo=work.repo, ref=work.ref, commit=commit,
                             bundle=put_blob(bundle(directory, commit)),
                             task=put_blob(task) if task is not None else None)  # fmt: skip
    return out


def attach(plan: FleetPlan, prepared: Mapping[str, Prepared]) -> FleetPlan:
    """``plan`` with each agent's work completed from ``prepared``: the commit and the three files'
    digests (what the host's record is compared with)."""
    agents = []
    for agent in plan.agents:
        ready = prepared.get(agent.agent)
        if agent.work is not None and ready is not None:
            work = agent.work.model_copy(update={"commit": ready.commit})
            files = {"repo.bundle": ready.bundle, "work.json": digest(work_json(work))}
            if ready.task is not None:  # none: the agent waits for the queue's (inv fleet.work)
                files["task.md"] = ready.task
            agent = agent.model_copy(update={"work": work.model_copy(update={"files": files})})
        agents.append(agent)
    return plan.model_copy(update={"agents": agents})
