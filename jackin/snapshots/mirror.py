"""The mirror algorithm of a restic repository (pure: listings in, a plan out; no SSH).

A restic repository is a tree of immutable, content-addressed files: each file under data/, index/,
keys/ and snapshots/ is named by the sha256 of its bytes and written once; ``config`` is written once
when the repository is made; ``locks/`` is transient and never copied. So a copy is file-for-file and
incremental: a file the destination has with the same size is skipped, any other is copied to a
temporary name, checked against its name's sha256, and only then renamed into place. Files go in the
order data, index, keys, snapshots, config: whatever a dropped connection leaves is a consistent
(older) repository, and a first copy cut short has no ``config`` yet, so restic refuses it outright.

Deletion: index/ and snapshots/ files the source no longer has (after a ``restic forget``/``prune``
there) are removed from the destination, after every new file arrived and was verified, so the
copy lists what the source lists. data/ packs are never deleted: a pack the source dropped is kept
(reported as ``kept``; ``restic check`` calls it an additional file, not an error, and a local
``restic prune`` reclaims it). A source without ``config`` or keys is refused, never mirrored as
an empty repository.

Listings (remote ones read NUL-separated, ``find -printf``) must hold only regular files and
directories with plain names (letters, digits, ``._-``); anything else is refused. The SFTP side
that carries a plan out is ``jackin.snapshots.transfer``.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jackin.errors import JackinError
from jackin.snapshots.restic import NAME

TEMP_MARK = ".jk-part-"  # our temporary names: <final name>.jk-part-<pid>-<ns>
_HEX = "[0-9a-f]{64}"
RESTIC_FILE = re.compile(rf"^(config|(?:keys|index|snapshots)/{_HEX}|data/([0-9a-f]{{2}})/{_HEX})$")
RESTIC_DIR = re.compile(r"^(keys|index|snapshots|data|data/[0-9a-f]{2})$")
STAGES = ("data", "index", "keys", "snapshots", "config")  # the order files are copied in
MIRRORED = ("index", "snapshots")  # removed from the destination when the source no longer has them
KINDS = {"f": "regular file", "d": "directory", "l": "symbolic link", "b": "block device",
         "c": "character device", "p": "FIFO", "s": "socket", "D": "door"}  # fmt: skip


class TransferError(JackinError):
    """A repository could not be copied: a listing, a file or a check was not what a restic repository is."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Listing(_Model):
    """One side of a transfer, classified: the repository's files (path -> size) and directories,
    our leftover temporary files, and entries that are not part of a restic repository (locks,
    restic's own temporary files), which are never copied."""

    files: dict[str, int] = Field(default_factory=dict)
    dirs: set[str] = Field(default_factory=set)
    temps: list[str] = Field(default_factory=list)
    ignored: list[str] = Field(default_factory=list)


class TransferPlan(_Model):
    """What a transfer does, decided from the two listings before anything is written."""

    dirs: list[str]  # to create on the destination, parents first
    to_copy: list[str]  # in STAGES order
    skip: list[str]
    delete: list[str]  # index/ and snapshots/ files the source no longer has
    kept: list[str]  # data/ packs the source no longer has: never deleted
    temps: list[str]  # leftovers of an interrupted run, removed first
    sizes: dict[str, int]


class TransferResult(_Model):
    """What one pull or push did: files and bytes copied and skipped, stale files deleted or kept."""

    direction: Literal["pull", "push"]
    host: str
    fleet: str
    source: str
    destination: str
    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    deleted: list[str] = Field(default_factory=list)
    kept: int = 0
    cleaned: int = 0
    ignored: list[str] = Field(default_factory=list)
    moved_aside: str | None = None  # where an older copy of another repository (another config) was moved


def aside_name(name: str, config: bytes) -> str:
    """The name an older copy of another repository is moved to, beside the current one: ``<name>-<12 hex
    of the sha256 of its config>`` (the same repository always gets the same name)."""
    return f"{name}-{hashlib.sha256(config).hexdigest()[:12]}"


# --- listings and the plan (pure) ---------------------------------------------------------------


def classify(kind: str, size: int, path: str, listing: Listing, *, where: str) -> None:
    """Add one entry to ``listing``, or refuse it: only regular files and directories with plain names."""
    parts = path.split("/")
    if kind not in ("f", "d"):
        raise TransferError(f"{where}: {path!r} is a {KINDS.get(kind, repr(kind))}",
                            hint="a restic repository holds only regular files and directories; nothing was copied")  # fmt: skip
    if not all(NAME.match(part) for part in parts):
        raise TransferError(f"{where}: refusing the entry {path!r}: not a plain relative name",
                            hint="expected names of letters, digits, '.', '_' or '-'; nothing was copied")  # fmt: skip
    if kind == "f" and TEMP_MARK in parts[-1]:
        listing.temps.append(path)
    elif parts[0] == "locks":
        listing.ignored.append(path)
    elif match := RESTIC_FILE.match(path):
        if kind != "f" or (match.group(2) and parts[2][:2] != match.group(2)):
            raise TransferError(f"{where}: {path!r} should be a regular file named after its pack's prefix")
        listing.files[path] = size
    elif RESTIC_DIR.match(path):
        if kind != "d":
            raise TransferError(f"{where}: {path!r} should be a directory")
        listing.dirs.add(path)
    else:
        listing.ignored.append(path)


def parse_listing(out: str, *, where: str) -> Listing:
    """Parse ``find DIR -mindepth 1 -printf '%y %s %P\\0'``: NUL-separated ``<type> <size> <path>`` records."""
    listing = Listing()
    for record in out.split("\0"):
        if record == "":
            continue
        kind, _, rest = record.partition(" ")
        size, _, path = rest.partition(" ")
        if not size.isdigit() or not path:
            raise TransferError(f"{where}: unreadable listing record {record[:80]!r}",
                                hint="expected '<type> <size> <path>' records separated by NUL")  # fmt: skip
        classify(kind, int(size), path, listing, where=where)
    return listing


def list_local(root: Path) -> Listing:
    """The local tree under ``root`` (empty when absent), classified like a remote one; links are refused."""
    listing = Listing()
    if not root.exists():
        return listing
    for entry in _walk(root):
        kind = "f" if entry.is_file(follow_symlinks=False) else "d" if entry.is_dir(follow_symlinks=False) else (
            "l" if entry.is_symlink() else "?")  # fmt: skip
        path = Path(entry.path).relative_to(root).as_posix()
        classify(kind, entry.stat(follow_symlinks=False).st_size, path, listing, where=str(root))
    return listing


def _walk(top: Path) -> Iterator[os.DirEntry[str]]:
    """Every entry under ``top``, depth first, never through a symbolic link."""
    with os.scandir(top) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            yield entry
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(Path(entry.path))


def _stage(path: str) -> int:
    return STAGES.index(path.split("/")[0])


def plan_transfer(source: Listing, dest: Listing, *, where: str) -> TransferPlan:
    """What to copy (missing or of another size), skip, delete (MIRRORED only) and keep; refuses a
    source that is not a whole repository (no ``config`` or no key)."""
    if "config" not in source.files or not any(p.startswith("keys/") for p in source.files):
        raise TransferError(f"{where}: not a restic repository (no config or no key file)",
                            hint="take a snapshot there first; nothing was copied or deleted")  # fmt: skip
    copy = sorted((p for p, s in source.files.items() if dest.files.get(p) != s), key=lambda p: (_stage(p), p))
    gone = sorted(set(dest.files) - set(source.files))
    wanted_dirs = source.dirs | {p.rsplit("/", 1)[0] for p in copy if "/" in p}
    return TransferPlan(
        dirs=sorted(wanted_dirs - dest.dirs, key=lambda d: (d.count("/"), d)),
        to_copy=copy,
        skip=sorted(p for p, s in source.files.items() if dest.files.get(p) == s),
        delete=[p for p in gone if p.split("/")[0] in MIRRORED],
        kept=[p for p in gone if p.split("/")[0] not in MIRRORED],
        temps=sorted(dest.temps),
        sizes={p: source.files[p] for p in copy},
    )


def content_ok(path: str, digest: str) -> bool:
    """Every repository file but ``config`` is named by the sha256 of its bytes."""
    name = path.rsplit("/", 1)[-1]
    return name == "config" or name == digest


def temp_name(path: str) -> str:
    return f"{path}{TEMP_MARK}{os.getpid()}-{time.time_ns()}"


def result_of(plan: TransferPlan, listed: Listing, **kwargs: str) -> TransferResult:
    """The result of carrying out ``plan`` from a source listed as ``listed``."""
    return TransferResult(
        copied=len(plan.to_copy), copied_bytes=sum(plan.sizes.values()), skipped=len(plan.skip),
        skipped_bytes=sum(listed.files[p] for p in plan.skip), deleted=plan.delete, kept=len(plan.kept),
        cleaned=len(plan.temps), ignored=listed.ignored, **kwargs,
    )  # fmt: skip
