"""Shared by our operations: many commands, few round trips; files by SFTP; nothing to do is said so.

The builders return shell lines and ``Upload``s (``jackin.operations.files``, pure). ``script``
joins each run of consecutive shell commands into one ``set -e`` script, kept as pyinfra
``StringCommand`` pieces, so a ``MaskString`` (or ``HiddenValue``) inside them stays masked in
previews and logs and is raw only when executed; each ``Upload`` becomes a pyinfra file upload
that is shown as the ``Upload`` is (by size and target, never by content).
"""

from __future__ import annotations

from collections.abc import Sequence
from io import BytesIO

from pyinfra import host
from pyinfra.api.command import FileUploadCommand, PyinfraCommand, StringCommand

from jackin.hostpaths import UPLOAD_DIR
from jackin.operations.files import Command, Refused, Upload, file_mode, write_files

__all__ = ["UPLOAD_DIR", "Command", "Refused", "Sent", "Upload", "file_mode", "script", "write_files"]


class Sent(FileUploadCommand):
    """pyinfra's upload of an ``Upload``'s bytes; shown as the ``Upload`` (never the content)."""

    def __init__(self, upload: Upload):
        super().__init__(BytesIO(upload.data), upload.dest)
        self.upload = upload

    def __repr__(self) -> str:
        return repr(self.upload)

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sent) and self.upload == other.upload

    __hash__ = None  # type: ignore[assignment]  # compared by value, so unhashable (object declares __hash__ a method)


def script(commands: Sequence[Command | StringCommand], *, noop: str) -> list[PyinfraCommand]:
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
        out.append(Sent(command) if isinstance(command, Upload) else command)
    if shell:
        out.append(_joined(shell))
    return out


def _joined(shell: list[str | StringCommand]) -> StringCommand:
    bits: list[str | StringCommand] = ["set -e"]
    for command in shell:
        bits += ["\n", command]
    return StringCommand(*bits, _separator="")
