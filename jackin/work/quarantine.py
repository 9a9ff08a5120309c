"""An agent's bundle, checked in a quarantine before any of it reaches the operator's repository.

Debian 12's git (2.39) does not check the objects of a bundle it fetches: ``fetch.fsckObjects`` and
``transfer.fsckObjects`` are ignored by ``git fetch <bundle>`` and ``git bundle unbundle`` (git 2.46 was
the first to honour them there), so a tree holding ``.git/hooks/post-checkout`` or a ``.gitmodules``
whose url is ``--upload-pack=...`` landed under ``refs/jackin/...``. So, per agent:

1. ``opened(repo)``: a quarantine, a temporary bare repository inside the destination's git dir (the
   same filesystem, as git's own receive-pack quarantine), into whose ``agent.bundle`` the caller
   streams the agent's bundle (``jackin.work.collect``: never held whole in memory);
2. ``Quarantine.land``: the bundle verified and its branch fetched into the quarantine, then every
   object there checked with ``git fsck --strict`` (what ``transfer.fsckObjects`` would check: its
   warnings, ``hasDotgit`` among them, are errors). Quarantine commands read no git configuration but
   the quarantine's own and no ``GIT_*`` variable of the operator's: an ``fsck.<id> = ignore`` or a
   skip list in ``~/.gitconfig`` cannot turn a check off. A failed check raises ``BundleRefused``
   naming fsck's message ids, and nothing was written to the destination;
3. only then is the branch fetched from the quarantine into the destination under ``ref`` (that ref
   alone changes; objects the branch does not reach stay in the quarantine);
4. the quarantine is removed whatever happened (a killed process can leave a ``jackin-quarantine-*``
   directory in the git dir, which git ignores).

``git index-pack --strict`` was tried as the gate and not taken: it stops at the first bad object,
so it names one check where fsck names them all.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jackin.errors import JackinError
from jackin.work.bundles import WorkError, _tail, git

BUNDLE = "agent.bundle"
BRANCH = "refs/heads/collected"  # the one branch of a quarantine
MAX_CHECKS = 20  # message ids named at most (fsck knows about 80)
_FINDING = re.compile(rb"^(?:error|warning) in [a-z]+ [0-9a-f]{40,64}: ([a-z][A-Za-z]{2,40}):")


class BundleRefused(JackinError):
    """An agent's bundle failed ``git fsck --strict`` in its quarantine; ``checks``: fsck's message ids."""

    def __init__(self, message: str, *, checks: list[str]):
        super().__init__(message, hint="nothing of the bundle was fetched; look at the agent's branch on its host")
        self.checks = checks


@dataclass(frozen=True)
class Quarantine:
    repo: str  # the destination: the operator's repository
    path: Path  # the temporary bare repository

    @property
    def bundle(self) -> Path:
        """Where the agent's bundle is written before it is checked."""
        return self.path / BUNDLE

    def land(self, branch: str, ref: str) -> str:
        """Check the bundle's ``refs/heads/<branch>`` here, then fetch it into the destination as ``ref``
        (only that ref changes); its commit. WorkError: the bundle is unusable; BundleRefused: it failed fsck."""
        where = str(self.path)
        verify = git("-C", where, "bundle", "verify", "--quiet", str(self.bundle), check=False, isolated=True)
        if verify.returncode != 0:
            raise WorkError(f"the agent's bundle does not verify: {_tail(verify.stderr)}")
        fetched = git("-C", where, "-c", "gc.auto=0", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                      "--no-recurse-submodules", str(self.bundle), f"+refs/heads/{branch}:{BRANCH}",
                      check=False, isolated=True)  # fmt: skip
        if fetched.returncode != 0:
            raise WorkError(f"the agent's bundle cannot be read: {_tail(fetched.stderr)}")
        self._fsck()
        moved = git("-C", self.repo, "-c", "gc.auto=0", "-c", "protocol.file.allow=always", "fetch", "--quiet",
                    "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", where, f"+{BRANCH}:{ref}",
                    check=False)  # fmt: skip
        if moved.returncode != 0:
            raise WorkError(f"the agent's branch cannot be fetched into {self.repo}: {_tail(moved.stderr)}")
        return git("-C", self.repo, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.decode().strip()

    def _fsck(self) -> None:
        """``git fsck --strict`` of every object in the quarantine; BundleRefused with its message ids.
        Its output goes to a file read line by line: an agent's bundle can make it as long as it likes."""
        report = self.path / "fsck.out"
        with report.open("wb") as handle:
            done = git("-C", str(self.path), "fsck", "--strict", "--no-dangling", "--no-progress", check=False,
                       isolated=True, output=handle)  # fmt: skip
        if done.returncode == 0:
            return
        checks: list[str] = []
        first = b""
        with report.open("rb") as handle:
            for line in iter(lambda: handle.readline(4096), b""):
                found = _FINDING.match(line)
                if found is None:
                    first = first or (b"" if line.startswith(b"notice:") else line)
                elif found.group(1).decode() not in checks and len(checks) < MAX_CHECKS:
                    checks.append(found.group(1).decode())
        named = ", ".join(sorted(checks)) if checks else _tail(first)
        raise BundleRefused(f"the agent's bundle fails git fsck --strict ({named}): refused, nothing of it was "
                            f"fetched into {self.repo}", checks=sorted(checks))  # fmt: skip


@contextmanager
def opened(repo: str) -> Iterator[Quarantine]:
    """A quarantine for one agent's bundle: a temporary bare repository in ``repo``'s git dir, with
    ``repo``'s object format; removed afterwards whatever happens."""
    shown = git("-C", repo, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-object-format")
    common, object_format = shown.stdout.decode().splitlines()
    try:
        path = Path(tempfile.mkdtemp(prefix="jackin-quarantine-", dir=common))
    except OSError as error:
        raise WorkError(f"no quarantine can be made in {common}: {error.strerror or error}") from None
    try:
        git("init", "--quiet", "--bare", "--template=", f"--object-format={object_format}", "--initial-branch",
            BRANCH.removeprefix("refs/heads/"), str(path), isolated=True)  # fmt: skip
        yield Quarantine(repo=repo, path=path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
