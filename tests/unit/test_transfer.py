"""Repository transfer, pure parts: the NUL-safe listing parser, the local walk and the copy plan."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from jackin.errors import SpecError
from jackin.snapshots import binary, transfer
from jackin.snapshots.transfer import Listing, TransferError, parse_listing, plan_transfer

A, B, C = "a" * 64, "b" * 64, "c" * 64
PACK = f"data/{A[:2]}/{A}"


def records(*entries: str) -> str:
    return "".join(f"{e}\0" for e in entries)


def repo_listing(*extra: str) -> str:
    return records("d 4096 data", f"d 4096 data/{A[:2]}", "d 4096 keys", "d 4096 index", "d 4096 snapshots",
                   "d 4096 locks", "f 155 config", f"f 400 keys/{B}", f"f 1000 {PACK}", f"f 300 index/{C}", *extra)


def test_a_listing_classifies_repository_files_dirs_and_leaves_out_locks_and_foreign_files() -> None:
    listing = parse_listing(repo_listing(f"f 10 locks/{A}", f"f 7 data/{A[:2]}/{A}-tmp-123", "f 3 notes.txt"),
                            where="h:/repo")
    assert listing.files == {"config": 155, f"keys/{B}": 400, PACK: 1000, f"index/{C}": 300}
    assert listing.dirs == {"data", f"data/{A[:2]}", "keys", "index", "snapshots"}
    assert listing.ignored == ["locks", f"locks/{A}", f"data/{A[:2]}/{A}-tmp-123", "notes.txt"]
    assert listing.temps == []


def test_names_with_newlines_and_spaces_are_one_record_each_and_refused_not_split() -> None:
    # a newline is just a character between NULs: the record is read whole, then refused for its name
    with pytest.raises(TransferError, match=r"refusing the entry 'index/x\\nf 1 config'"):
        parse_listing(records("f 1 index/x\nf 1 config"), where="h:/repo")
    with pytest.raises(TransferError, match="not a plain relative name"):
        parse_listing(records("f 1 index/with space"), where="h:/repo")
    # positive control: the same shape with a plain name parses
    assert parse_listing(records(f"f 1 index/{C}"), where="h:/repo").files == {f"index/{C}": 1}


@pytest.mark.parametrize("kind, word", [("l", "symbolic link"), ("b", "block device"), ("c", "character device"),
                                        ("p", "FIFO"), ("s", "socket")])
def test_links_and_devices_are_refused(kind: str, word: str) -> None:
    with pytest.raises(TransferError, match=f"h:/repo: 'keys/{B}' is a {word}"):
        parse_listing(records(f"{kind} 0 keys/{B}"), where="h:/repo")


@pytest.mark.parametrize("path", ["../etc/shadow", "index/../../x", "/etc/shadow", "index//x", ".hidden", "-x", "a/./b"])
def test_traversal_absolute_and_dot_names_are_refused(path: str) -> None:
    with pytest.raises(TransferError, match="not a plain relative name"):
        parse_listing(records(f"f 1 {path}"), where="h:/repo")


def test_unreadable_records_and_misplaced_types_are_refused() -> None:
    with pytest.raises(TransferError, match="unreadable listing record"):
        parse_listing(records("f x config"), where="h:/repo")
    with pytest.raises(TransferError, match="should be a regular file"):
        parse_listing(records("d 4096 config"), where="h:/repo")
    with pytest.raises(TransferError, match="named after its pack's prefix"):
        parse_listing(records(f"f 1 data/00/{A}"), where="h:/repo")
    with pytest.raises(TransferError, match="should be a directory"):
        parse_listing(records("f 1 keys"), where="h:/repo")


def test_our_temporary_files_are_leftovers_to_remove() -> None:
    listing = parse_listing(records(f"f 5 index/{C}.jk-part-12-34"), where="h:/repo")
    assert listing.temps == [f"index/{C}.jk-part-12-34"] and listing.files == {}


def test_the_plan_copies_missing_and_resized_files_in_stage_order_and_skips_the_rest() -> None:
    source = parse_listing(repo_listing(f"f 99 snapshots/{A}"), where="h")
    dest = Listing(files={"config": 155, f"keys/{B}": 400, f"index/{C}": 1}, dirs={"keys", "index"})
    plan = plan_transfer(source, dest, where="h")
    assert plan.to_copy == [PACK, f"index/{C}", f"snapshots/{A}"]
    assert plan.skip == ["config", f"keys/{B}"]
    assert plan.dirs == ["data", "snapshots", f"data/{A[:2]}"]
    assert plan.sizes == {PACK: 1000, f"index/{C}": 300, f"snapshots/{A}": 99}
    assert plan.delete == [] and plan.kept == []


def test_after_a_prune_stale_index_and_snapshots_are_deleted_but_data_packs_kept() -> None:
    source = parse_listing(repo_listing(), where="h")
    old_pack = f"data/{B[:2]}/{B}"
    dest = Listing(files={**source.files, f"index/{A}": 5, f"snapshots/{B}": 5, old_pack: 7}, temps=["x.jk-part-1-2"])
    plan = plan_transfer(source, dest, where="h")
    assert plan.to_copy == []
    assert plan.delete == [f"index/{A}", f"snapshots/{B}"]
    assert plan.kept == [old_pack]
    assert plan.temps == ["x.jk-part-1-2"]


def test_a_source_without_config_or_keys_is_refused_so_nothing_is_deleted() -> None:
    empty = Listing(files={f"index/{C}": 1})
    with pytest.raises(TransferError, match="h: not a restic repository"):
        plan_transfer(empty, Listing(files={f"snapshots/{A}": 1}), where="h")
    with pytest.raises(TransferError):
        plan_transfer(Listing(files={"config": 1}), Listing(), where="h")
    assert plan_transfer(Listing(files={"config": 1, f"keys/{B}": 2}), Listing(), where="h").to_copy == ["keys/" + B,
                                                                                                          "config"]


def test_the_local_walk_matches_the_remote_classification_and_refuses_links(tmp_path: Path) -> None:
    (tmp_path / "data" / A[:2]).mkdir(parents=True)
    (tmp_path / "keys").mkdir()
    (tmp_path / "config").write_bytes(b"c" * 10)
    (tmp_path / "keys" / B).write_bytes(b"k" * 3)
    (tmp_path / PACK).write_bytes(b"p")
    listing = transfer.list_local(tmp_path)
    assert listing.files == {"config": 10, f"keys/{B}": 3, PACK: 1}
    assert listing.dirs == {"data", f"data/{A[:2]}", "keys"}
    (tmp_path / "index").symlink_to("/etc")
    with pytest.raises(TransferError, match="'index' is a symbolic link"):
        transfer.list_local(tmp_path)
    assert transfer.list_local(tmp_path / "absent") == Listing()


def test_content_addressing() -> None:
    assert transfer.content_ok(f"index/{A}", A) and transfer.content_ok("config", B)
    assert not transfer.content_ok(f"index/{A}", B)


def test_names_that_build_paths_are_checked() -> None:
    assert transfer.imported_path("f1", "lab-1") == "/var/lib/jackin/snapshots/f1/imported/lab-1"
    for bad in ("../x", "a/b", "", ".x"):
        with pytest.raises(SpecError, match="cannot name a snapshot directory"):
            transfer.imported_path("f1", bad)


def test_the_fleet_password_is_generated_once_private_and_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    path = transfer.fleet_password_file("f1")
    assert path == tmp_path / "snapshots" / "f1" / "password"
    first = path.read_text()
    assert len(first) >= 43 and "\n" not in first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "snapshots" / "f1").st_mode) == 0o700
    assert transfer.fleet_password_file("f1").read_text() == first  # never regenerated


def test_a_result_counts_what_the_plan_copied_skipped_deleted_and_kept() -> None:
    source = parse_listing(repo_listing(f"f 10 locks/{A}"), where="h")
    dest = Listing(files={"config": 155, f"keys/{B}": 400, f"snapshots/{A}": 9, f"data/{B[:2]}/{B}": 5},
                   temps=["t.jk-part-1-1"])
    plan = plan_transfer(source, dest, where="h")
    result = transfer.result_of(plan, source, direction="pull", host="h", fleet="f", source="h:/r", destination="/d")
    assert (result.copied, result.copied_bytes, result.skipped, result.skipped_bytes) == (2, 1300, 2, 555)
    assert (result.deleted, result.kept, result.cleaned) == ([f"snapshots/{A}"], 1, 1)
    assert result.ignored == ["locks", f"locks/{A}"]


def test_a_copy_of_another_repository_is_moved_aside_keeping_its_files(tmp_path: Path) -> None:
    dest = tmp_path / "pulled" / "h0" / "repo"
    (dest / "keys").mkdir(parents=True)
    (dest / "config").write_bytes(b"old config")
    (dest / "keys" / B).write_bytes(b"k")
    assert transfer._move_aside_local(dest, b"old config") is None  # the same repository: pulled into
    assert dest.is_dir()
    aside = transfer._move_aside_local(dest, b"new config")
    assert aside == str(dest.with_name(transfer.aside_name("repo", b"old config")))
    assert Path(aside).name.startswith("repo-") and len(Path(aside).name) == len("repo-") + 12
    assert not dest.exists() and (Path(aside) / "keys" / B).read_bytes() == b"k"
    (dest / "keys").mkdir(parents=True)  # the same older repository again: a second name, nothing overwritten
    (dest / "config").write_bytes(b"old config")
    again = transfer._move_aside_local(dest, b"new config")
    assert again and again != aside and Path(again).name.startswith(Path(aside).name + "-")
    assert (Path(aside) / "keys" / B).is_file()


def test_a_copy_cut_short_before_its_config_is_pulled_into_not_moved(tmp_path: Path) -> None:
    dest = tmp_path / "repo"
    (dest / "keys").mkdir(parents=True)
    assert transfer._move_aside_local(dest, b"config") is None
    assert (dest / "keys").is_dir()


class _Result:
    def __init__(self, stdout: str) -> None:
        self.stdout, self.stderr, self.exited = stdout, "", 0


class _Handle:
    def __init__(self, path: Path) -> None:
        self.file = path.open("rb")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.file.close()

    def prefetch(self, _size: int) -> None:
        pass

    def read(self, size: int = -1) -> bytes:
        return self.file.read(size)


class FakeHost:
    """A host whose repository is the local directory ``root`` (listing and SFTP reads only)."""

    def __init__(self, root: Path, remote: str) -> None:
        self.root, self.remote = root, remote

    def _local(self, path: str) -> Path:
        return self.root / path[len(self.remote):].lstrip("/")

    def run(self, command: str, **_):
        entries = sorted(self.root.rglob("*"))
        body = "".join(f"{'d' if p.is_dir() else 'f'} {0 if p.is_dir() else p.stat().st_size} "
                       f"{p.relative_to(self.root).as_posix()}\0" for p in entries)  # fmt: skip
        return _Result("yes\n" + body)

    def sftp(self):
        return self

    def open(self, path: str, _mode: str) -> _Handle:
        return _Handle(self._local(path))


def fake_repo(root: Path, config: bytes, extra: bytes) -> None:
    import hashlib

    (root / "keys").mkdir(parents=True)
    (root / "config").write_bytes(config)
    for directory, data in (("keys", b"key" + extra), ("index", b"index" + extra), ("snapshots", b"snap" + extra)):
        (root / directory).mkdir(exist_ok=True)
        (root / directory / hashlib.sha256(data).hexdigest()).write_bytes(data)
    digest = hashlib.sha256(b"pack" + extra).hexdigest()
    (root / "data" / digest[:2]).mkdir(parents=True)
    (root / "data" / digest[:2] / digest).write_bytes(b"pack" + extra)


def test_a_pull_from_a_repository_made_anew_moves_the_old_copy_aside_and_pulls_whole(tmp_path: Path) -> None:
    first, second, dest = tmp_path / "first", tmp_path / "second", tmp_path / "pulled" / "h0" / "repo"
    fake_repo(first, b"config one", b"1")
    fake_repo(second, b"config two", b"2")
    remote = transfer.repo_path("f")
    done = transfer.pull_with(FakeHost(first, remote), "h0", "f", dest)  # type: ignore[arg-type]
    assert done.moved_aside is None and transfer.list_local(dest).files == transfer.list_local(first).files
    again = transfer.pull_with(FakeHost(second, remote), "h0", "f", dest)  # type: ignore[arg-type]
    aside = Path(again.moved_aside or "")
    assert aside == dest.with_name(transfer.aside_name("repo", b"config one"))
    assert transfer.list_local(aside).files == transfer.list_local(first).files  # the older copy, whole
    assert transfer.list_local(dest).files == transfer.list_local(second).files  # the new one, not mixed
    assert (dest / "config").read_bytes() == b"config two" and stat.S_IMODE(dest.stat().st_mode) == 0o700


def _probe(tmp_path: Path) -> list[str]:
    """``restic_probe`` run here with sh, on a PATH without restic (links to the few tools it uses)."""
    import subprocess

    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for tool in ("stat", "tr", "uname", "sha256sum", "cut", "cat", "mv"):
        link = bin_ / tool
        if not link.exists():
            link.symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True,
                                           check=True).stdout.strip())  # fmt: skip
    script = binary.restic_probe(str(tmp_path / "restic"))
    done = subprocess.run(["/bin/sh", "-c", script], env={"PATH": str(bin_)}, capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_the_restic_probe_hashes_an_uploaded_restic_once_and_again_only_when_the_file_changed(tmp_path: Path) -> None:
    import hashlib

    machine = os.uname().machine
    assert _probe(tmp_path) == ["upload", machine]  # nothing uploaded yet: no sha256, no stamp
    assert not (tmp_path / "restic.sha256").exists()
    exe = tmp_path / "restic"
    exe.write_bytes(b"one")
    assert _probe(tmp_path) == ["upload", machine, hashlib.sha256(b"one").hexdigest()]
    stamp = (tmp_path / "restic.sha256").read_text().split()
    assert stamp[0] == hashlib.sha256(b"one").hexdigest()
    (tmp_path / "restic.sha256").write_text(f"{'f' * 64} {stamp[1]}\n")  # the stamp is what is read now
    assert _probe(tmp_path)[2] == "f" * 64
    exe.write_bytes(b"two")  # a changed file (its size, its ctime): hashed again
    assert _probe(tmp_path)[2] == hashlib.sha256(b"two").hexdigest()
    assert (tmp_path / "restic.sha256").read_text().split()[0] == hashlib.sha256(b"two").hexdigest()
    # A link there is not trusted, even with a stamp matching the link itself: no sha256, so it is uploaded anew.
    exe.rename(tmp_path / "target")
    exe.symlink_to(tmp_path / "target")
    assert _probe(tmp_path) == ["upload", machine]


def test_this_machines_restic_is_hashed_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / "state"))
    exe = tmp_path / "restic"
    exe.write_bytes(b"one")
    assert binary.local_sha256(exe) == hashlib.sha256(b"one").hexdigest()
    cache = tmp_path / "state" / "restic.sha256"
    cache.write_text(cache.read_text().rsplit(" ", 1)[0] + " " + "f" * 64 + "\n")
    assert binary.local_sha256(exe) == "f" * 64  # remembered
    exe.write_bytes(b"three")
    assert binary.local_sha256(exe) == hashlib.sha256(b"three").hexdigest()
