"""Pure pieces of every operation's commands: file uploads, ``write_files`` and a refusal.

No pyinfra here: the command builders (``jackin.operations.{fleet,firewall,credentials,cow,host}``)
are plain functions of (plan, state) returning shell strings and ``Upload``s, so the CLI process can
compute what ``fleet.up`` would do (``jackin.lifecycle.hostplan``) without loading pyinfra and gevent. The
deploys hand the same lists to ``jackin.operations.script.script``, which turns them into pyinfra
commands. File bodies never go into a command line (Linux caps argv at 128 KiB, and ``ps`` shows
it to every user): ``write_files`` sends them by SFTP into a root-only staging directory, then
installs each with its mode and owner and renames it into place atomically.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from jackin.errors import JackinError
from jackin.hostpaths import UPLOAD_DIR

# Staging names are keyed hashes of the content: the same within one process (pyinfra runs an operation's
# generator twice), different across runs, and no clue to a secret's content when shown in a preview.
_KEY = secrets.token_bytes(16)


def _new_key() -> None:  # a forked process is another run: its own key
    global _KEY
    _KEY = secrets.token_bytes(16)


os.register_at_fork(after_in_child=_new_key)


class Refused(JackinError, ValueError):
    """A builder will not act on this host as it is (e.g. a uid taken by another user): the host fails,
    nothing of the run is applied there. In a deploy it fails the host while preparing; in ``fleet.plan``
    it is shown as the host's refusal."""


class Upload:
    """One file's bytes, sent by SFTP to a staging path. Shown by size and target, never by content
    (previews and logs print commands; a file may hold a secret)."""

    def __init__(self, data: bytes, staged: str, *, target: str, mode: str):
        self.data, self.dest, self.target, self.mode = data, staged, target, mode

    def __repr__(self) -> str:
        return f"upload {len(self.data)} bytes by SFTP to {self.dest} (for {self.target}, mode {self.mode})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (self.data, self.dest, self.target, self.mode) == (
            other.data, other.dest, other.target, other.mode)  # fmt: skip

    __hash__ = None  # type: ignore[assignment]  # compared by value, so unhashable (object declares __hash__ a method)


# What a builder returns: shell lines, and uploads in their place between them.
Command = str | Upload


def file_mode(data: bytes) -> str:
    """An executable script (``#!``) is 0755, anything else 0644: bundles stay plain path -> text maps."""
    return "0755" if data.startswith(b"#!") else "0644"


def write_files(
    files: Mapping[str, str | bytes], *, modes: Mapping[str, str] | None = None, upload_dir: str = UPLOAD_DIR
) -> list[Command]:
    """Commands that put ``files`` (absolute path -> content) on the host, root-owned, byte-exact.

    A fresh root-only staging directory (named by a keyed hash of the content, so the two
    runs of an operation's generator agree), one SFTP upload per file, then per file: ``install`` (copies
    with 0600 first, then owner and mode) next to the target and ``mv -T`` over it, an atomic
    rename in the target's own directory. Missing parent directories are made 0755; existing
    ones are left as they are. The staging directory is removed at the end.
    """
    if not files:
        return []
    blobs = {path: data.encode() if isinstance(data, str) else data for path, data in sorted(files.items())}
    digest = hmac.new(_KEY, digestmod=hashlib.sha256)
    for path, data in blobs.items():
        digest.update(f"{path}\0{len(data)}\0".encode() + data)
    staging = f"{upload_dir}/{digest.hexdigest()[:16]}"
    quoted = shlex.quote(staging)
    commands: list[Command] = [f"rm -rf {quoted}", f"install -d -m 0700 {shlex.quote(upload_dir)} {quoted}"]
    install: list[Command] = []
    made: set[str] = set()
    for n, (path, data) in enumerate(blobs.items()):
        mode = (modes or {}).get(path) or file_mode(data)
        commands.append(Upload(data, f"{staging}/{n}", target=path, mode=mode))
        directory = path.rsplit("/", 1)[0] or "/"
        if directory not in made:
            made.add(directory)
            install.append(f"test -d {shlex.quote(directory)} || install -d -m 0755 {shlex.quote(directory)}")
        new = shlex.quote(f"{path}.jackin-new")
        # One command a line: under ``set -e`` a failure inside an ``a && b`` list would not stop the script.
        install.append(f"install -m {mode} -o root -g root -T {shlex.quote(f'{staging}/{n}')} {new}")
        install.append(f"mv -f -T {new} {shlex.quote(path)}")
    return commands + install + [f"rm -rf {quoted}", f"rmdir {shlex.quote(upload_dir)} 2>/dev/null || true"]


@dataclass
class Step:
    """One operation of the deploy: a pyinfra ``apt.packages`` (``packages``), ``systemd.service``
    (``service``: Docker running and enabled) or our script of ``commands``; ``refused``: the
    builder's refusal (the deploy fails the host on it). ``docker_from``: an agent's step, whose
    commands from that index on (its network and container) may run beside other agents'."""

    category: str
    name: str
    commands: list[Command] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    service: bool = False
    noop: str = ""
    refused: str | None = None
    docker_from: int | None = None

    @property
    def changes(self) -> bool:
        return bool(self.commands or self.packages or self.service or self.refused)
