"""A thin wrapper over the local ``docker`` CLI: the lab's way to the engine; and, for the lookup
every ``fleet.status`` and ``fleet.up`` makes (``labelled_containers``), the engine's socket."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Literal, overload
from urllib.parse import quote

from jackin.errors import LabError
from jackin.facts import dockerapi


@overload
def docker(
    *args: str,
    input: bytes | None = ...,
    check: bool = ...,
    timeout: float = ...,
    raw: Literal[False] = ...,
    binary: Literal[False] = ...,
) -> str: ...
@overload
def docker(
    *args: str,
    input: bytes | None = ...,
    check: bool = ...,
    timeout: float = ...,
    raw: Literal[True],
    binary: bool = ...,
) -> subprocess.CompletedProcess[str]: ...
@overload
def docker(
    *args: str,
    input: bytes | None = ...,
    check: bool = ...,
    timeout: float = ...,
    raw: Literal[False] = ...,
    binary: Literal[True],
) -> bytes: ...
def docker(
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    timeout: float = 300,
    raw: bool = False,
    binary: bool = False,
) -> str | bytes | subprocess.CompletedProcess[str]:
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
        done = subprocess.run(["docker", *args], input=input, capture_output=True, timeout=timeout, check=False)
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
    return subprocess.run(["docker", kind, "inspect", name], capture_output=True, check=False).returncode == 0


def inspect(kind: str, names: list[str]) -> list[dict[str, Any]]:
    if not names:
        return []
    return json.loads(docker(kind, "inspect", *names) or "[]")


SOCKET = dockerapi.SOCKET  # the default engine socket, as on the hosts (tests point this elsewhere)


def _cli_decides() -> bool:
    """Whether the docker CLI may ask another engine than the one on ``SOCKET``: ``DOCKER_HOST``,
    ``DOCKER_CONTEXT`` or ``DOCKER_CONFIG`` set, or a current context chosen in ``~/.docker/config.json``
    (``docker context use``: Docker Desktop, a rootless engine), or a config.json that does not parse."""
    if any(os.environ.get(v) for v in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG")):
        return True
    try:
        config = json.loads((Path.home() / ".docker" / "config.json").read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError, RuntimeError):  # RuntimeError: no home directory to look in
        return True
    return not isinstance(config, dict) or config.get("currentContext", "default") not in ("", "default")


def _api(path: str) -> Any:
    """GET ``path`` on the local engine's socket (HTTP/1.0, as the docker CLI asks): its JSON answer;
    None when it cannot be asked that way (``_cli_decides``, no socket, no answer within 10 s, not 200,
    not JSON): the caller then runs the docker CLI, which says why it fails, if it does."""
    if _cli_decides():
        return None
    chunks = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(SOCKET)
            conn.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
    except OSError:
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    if head.split(b" ", 2)[1:2] != [b"200"]:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def labelled_containers(label: str) -> list[dict[str, Any]]:
    """``docker inspect`` of every container carrying ``label``, from the engine's socket (one listing
    and one inspect each, ~1 ms) instead of two docker CLI starts (~20 ms of CPU each); by the CLI when
    the socket cannot answer, or a container went between its listing and its inspect."""
    listed = _api("/containers/json?all=1&filters=" + quote(json.dumps({"label": [label]}), safe=""))
    if isinstance(listed, list):
        docs = [_api(f"/containers/{quote(str(c.get('Id', '')), safe='')}/json") for c in listed]
        if all(isinstance(d, dict) for d in docs):
            return docs
    return inspect("container", labelled("container", label))


def labelled(kind: str, label: str) -> list[str]:
    """Names (containers, volumes, networks) carrying ``label`` (``key=value``)."""
    if kind == "container":
        out = docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    else:
        out = docker(kind, "ls", "--filter", f"label={label}", "--format", "{{.Name}}")
    return sorted(line for line in out.splitlines() if line)
