"""fleet.collect --into (jackin/work/collect.py, check_into): a destination that cannot be a git repository the
operator writes to is refused (exit 2) before any host, the ledger or the plan is touched. No host."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from jackin.errors import SpecError
from jackin.work import collect


@pytest.fixture
def paths(tmp_path: Path) -> SimpleNamespace:
    (tmp_path / "file").write_text("x")
    (tmp_path / "plain").mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "repo.git")], check=True)
    (tmp_path / "link").symlink_to(tmp_path / "repo.git")
    return SimpleNamespace(root=tmp_path)


@pytest.mark.parametrize("into, message", [
    ("/proc/x", "--into /proc/x: /proc/x is under /proc, a filesystem of the kernel's: no git repository can be made "
                "there"),
    ("/sys/kernel/x", "--into /sys/kernel/x: /sys/kernel/x is under /sys, a filesystem of the kernel's: no git "
                      "repository can be made there"),
    ("{root}/file", "--into {root}/file: {root}/file exists and is not a directory"),
    ("{root}/file/sub", "--into {root}/file/sub: {root}/file/sub cannot be made: {root}/file is not a directory"),
    ("{root}/plain", "--into {root}/plain: {root}/plain is not a git repository"),
])  # fmt: skip
def test_a_destination_that_cannot_be_a_repository_is_refused(paths: SimpleNamespace, into: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        collect.check_into(into.format(root=paths.root))
    assert caught.value.message == message.format(root=paths.root)
    assert caught.value.exit_code == 2 and caught.value.hint == collect.INTO_HINT


def test_a_destination_it_cannot_write_in_is_refused(paths: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(**_: object) -> None:  # what a read-only mount or a directory of another user gives
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(collect.tempfile, "mkstemp", read_only)
    for into, where in ((paths.root / "repo.git", paths.root / "repo.git"), (paths.root / "new" / "r.git", paths.root)):
        with pytest.raises(SpecError) as caught:
            collect.check_into(str(into))
        assert caught.value.message == f"--into {into}: cannot write in {where} (Read-only file system)"


def test_a_repository_or_a_new_path_is_accepted_and_nothing_is_made(paths: SimpleNamespace) -> None:
    root = paths.root
    before = sorted(p.name for p in root.rglob("*"))
    assert collect.check_into(str(root / "repo.git")) == str(root / "repo.git")
    assert collect.check_into(str(root / "link")) == str(root / "repo.git")  # its real path
    assert collect.check_into(str(root / "new" / "deeper" / "r.git")) == str(root / "new" / "deeper" / "r.git")
    assert sorted(p.name for p in root.rglob("*")) == before  # the write check left nothing behind


def test_collect_checks_the_destination_before_the_ledger_or_a_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect, "Ledger", lambda: pytest.fail("the ledger was opened"))
    monkeypatch.setattr(collect, "targets", lambda *a, **k: pytest.fail("a host was looked up"))
    with pytest.raises(SpecError, match="under /proc"):
        collect.collect(SimpleNamespace(), into="/proc/x")
