"""Shared by our operations: many commands, few round trips; files by SFTP; nothing to do is said so.

Shell commands are joined into one ``set -e`` script per run of consecutive
commands, kept as pyinfra ``StringCommand`` pieces, so a ``MaskString`` (or
``HiddenValue``) inside them stays masked in previews and logs and is raw only
when executed. File bodies never go into a command line (Linux caps argv at
128 KiB, and ``ps`` shows it to every user): ``write_files`` sends them by SFTP
into a root-only staging directory, then installs each with its mode and owner
and renames it into place atomically.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import shlex
from collections.abc import Mapping, Sequence
from io import BytesIO

from pyinfra import host
from pyinfra.api.command import FileUploadCommand, PyinfraCommand, StringCommand

# Where uploads wait, root-only (0700), until installed: tmpfs, so nothing is left on disk after a crash.
UPLOAD_DIR = "/run/jackin-upload"
# Staging names are keyed hashes of the content: the same within one process (pyinfra runs an operation's
# generator twice), different across runs, and no clue to a secret's content when shown in a preview.
_KEY = secrets.token_bytes(16)

Command = str | StringCommand | PyinfraCommand


class Upload(FileUploadCommand):
    """One file's bytes, sent by SFTP to a staging path. Shown by size and target, never by content
    (previews and logs print commands; a file may hold a secret)."""

    def __init__(self, data: bytes, staged: str, *, target: str, mode: str):
        super().__init__(BytesIO(data), staged)
        self.data, self.target, self.mode = data, target, mode

    def __repr__(self) -> str:
        return f"upload {len(self.data)} bytes by SFTP to {self.dest} (for {self.target}, mode {self.mode})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Upload) and (self.data, self.dest, self.target, self.mode) == (
            other.data, other.dest, other.target, other.mode)  # fmt: skip

    __hash__ = None  # type: ignore[assignment]  # mutable command objects, compared by value


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


def script(commands: Sequence[Command], *, noop: str) -> list[PyinfraCommand]:
    """An operation's commands with each run of shell commands joined into one script (one SSH
    round trip, stopping at the first failure) and uploads kept in order between them; or
    pyinfra's "no change" note with ``noop`` when there is nothing to do.

    Shell commands stay ``StringCommand`` pieces: build a secret into a command as
    ``StringCommand("tool", HiddenValue(secret))`` (or pyinfra's deprecated ``MaskString``),
    never by formatting it into a plain string.
    """
    if not commands:
        host.noop(noop)
        return []
    out: list[PyinfraCommand] = []
    shell: list[str | StringCommand] = []
    for command in commands:
        if isinstance(command, (str, StringCommand)):
            shell.append(command)
            continue
        if shell:
            out.append(_joined(shell))
            shell = []
        out.append(command)
    if shell:
        out.append(_joined(shell))
    return out


def _joined(shell: list[str | StringCommand]) -> StringCommand:
    bits: list[str | StringCommand] = ["set -e"]
    for command in shell:
        bits += ["\n", command]
    return StringCommand(*bits, _separator="")
