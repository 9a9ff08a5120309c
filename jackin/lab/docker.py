"""A thin wrapper over the local ``docker`` CLI: the lab's only way to the engine."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from jackin.errors import LabError


def docker(
    *args: str, input: bytes | None = None, check: bool = True, timeout: float = 300, raw: bool = False,
    binary: bool = False,
):
    """Run ``docker ARGS`` and return its stdout; raise LabError with stderr on failure.

    With ``raw`` the completed process is returned (text), for callers that read stderr;
    with ``binary`` stdout is returned as bytes (``docker cp ... -`` writes a tar).
    """
    if shutil.which("docker") is None:
        raise LabError(
            "the docker command is not installed",
            hint="install Debian's docker.io package (bash .ci/setup does it)",
        )
    try:
        done = subprocess.run(
            ["docker", *args], input=input, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"docker {args[0]} did not finish within {timeout:.0f}s") from None
    if raw:
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="replace"),
                                           done.stderr.decode(errors="replace"))  # fmt: skip
    if check and done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip() or done.stdout.decode(errors="replace").strip()
        raise LabError(f"docker {' '.join(args[:2])} failed: {err}")
    return done.stdout if binary else done.stdout.decode(errors="replace")


def ensure_engine() -> None:
    """Fail clearly when no Docker engine answers."""
    try:
        docker("version", "--format", "{{.Server.Version}}", timeout=20)
    except LabError as error:
        raise LabError(
            "the local Docker engine does not answer",
            hint="start it (dockerd as root, or `bash .ci/setup`), then try again",
        ) from error


def exists(kind: str, name: str) -> bool:
    return subprocess.run(
        ["docker", kind, "inspect", name], capture_output=True, check=False
    ).returncode == 0


def inspect(kind: str, names: list[str]) -> list[dict[str, Any]]:
    if not names:
        return []
    return json.loads(docker(kind, "inspect", *names) or "[]")


def labelled(kind: str, label: str) -> list[str]:
    """Names (containers, volumes, networks) carrying ``label`` (``key=value``)."""
    if kind == "container":
        out = docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    else:
        out = docker(kind, "ls", "--filter", f"label={label}", "--format", "{{.Name}}")
    return sorted(line for line in out.splitlines() if line)
