"""Roles: what an agent runs. One directory per role under ``roles/`` (``JACKIN_ROLES_DIR`` overrides)::

    roles/<name>/role.yaml    the Role below (name, image recipe, command, credentials, egress, state, healthcheck)
    roles/<name>/...          the role's files (a Dockerfile for the runtimes; the demo agent's script)
    roles/common/             runtime-neutral files every image carries (the entrypoint, the health check)

A role file is read with the inventory's YAML loader (safe, YAML 1.2, duplicate keys refused) and
validated by pydantic; every problem comes out as ``FILE:LINE: field: what was expected``.
Image tags are ``jackin/role-<name>:<12 hex>``, a hash over the role's files and ``roles/common``:
editing any of them gives a new image (see jackin/images.py for the build and the delivery).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from jackin.errors import SpecError
from jackin.spec.models import SLUG, Model, parse_duration

ROLE_FILE = "role.yaml"
COMMON = "common"
REPOSITORY = "jackin/role-"
DEFAULT_ROLE = "demo"
ENTRYPOINT = "/usr/local/bin/jackin-entrypoint"
# Files of a role a recipe may name: plain relative names, no way out of the role's directory.
FileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", max_length=200)]
CredentialName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$", max_length=64)]
Package = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]+$", max_length=64)]
Seconds = Annotated[int, Field(gt=0)]


def _seconds(value: str | int) -> int:
    return parse_duration(value)


class ImageRecipe(Model):
    """How the role's image is built: ``operator`` (here, then streamed to the hosts over SSH) or ``host``
    (a ``docker build`` on the host, of the role's directory). Exactly one of ``dockerfile`` (a file of the
    role) or ``debootstrap`` (Debian packages of a minbase root, built here only)."""

    build: Literal["operator", "host"]
    dockerfile: FileName | None = None
    debootstrap: list[Package] | None = None
    files: list[FileName] = Field(default_factory=list)  # debootstrap: role files installed in /usr/local/bin

    @model_validator(mode="after")
    def _one_recipe(self) -> ImageRecipe:
        if (self.dockerfile is None) == (self.debootstrap is None):
            raise ValueError("give exactly one of dockerfile (a file of the role) or debootstrap (a package list)")
        if self.debootstrap is not None and self.build != "operator":
            raise ValueError("a debootstrap recipe is built on the operator's machine: build: operator")
        if self.dockerfile is not None and self.files:
            raise ValueError("files: only with debootstrap (a Dockerfile copies its own files)")
        return self


class StateDetection(Model):
    """Where the role's entrypoint keeps the agent's state, and when a silent heartbeat means stuck."""

    status_file: str = Field("/workspace/.jackin/status.json", pattern=r"^/workspace/")
    stale_after: Seconds = 60

    _duration = field_validator("stale_after", mode="before")(classmethod(lambda cls, v: _seconds(v)))


class Healthcheck(Model):
    """The container's Docker HEALTHCHECK (exec form; durations as 30s, 1m or seconds)."""

    test: list[str] = Field(min_length=1)
    interval: Seconds = 30
    timeout: Seconds = 10
    retries: int = Field(3, ge=1, le=100)
    start_period: Seconds = 10

    _durations = field_validator("interval", "timeout", "start_period", mode="before")(
        classmethod(lambda cls, v: _seconds(v)))  # fmt: skip

    def instruction(self) -> str:
        """The Dockerfile line."""
        import json

        return (f"HEALTHCHECK --interval={self.interval}s --timeout={self.timeout}s "
                f"--start-period={self.start_period}s --retries={self.retries} CMD {json.dumps(self.test)}")  # fmt: skip


class Role(Model):
    name: Annotated[str, Field(pattern=SLUG, max_length=24)]
    description: str = Field(min_length=1, max_length=500)
    image: ImageRecipe
    command: list[str] = Field(min_length=1)
    credentials: list[CredentialName] = Field(default_factory=list)
    egress: list[Annotated[str, Field(min_length=1, max_length=260)]] = Field(default_factory=list)
    state: StateDetection = StateDetection()
    healthcheck: Healthcheck

    @field_validator("credentials", "egress")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each entry may appear once")
        return value

    @property
    def directory(self) -> Path:
        return roles_dir() / self.name

    @property
    def tag(self) -> str:
        """``jackin/role-<name>:<12 hex of sha256 over the role's files and roles/common>``."""
        return f"{REPOSITORY}{self.name}:{recipe_hash(self.name)}"


# --- discovery and loading ------------------------------------------------------------------


def roles_dir() -> Path:
    """Where roles live: ``$JACKIN_ROLES_DIR``, else the repository's ``roles/``."""
    override = os.environ.get("JACKIN_ROLES_DIR")
    return Path(override).expanduser() if override else Path(__file__).resolve().parent.parent / "roles"


def names() -> list[str]:
    """Every role found (a directory holding ``role.yaml``), sorted."""
    root = roles_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.name != COMMON and (p / ROLE_FILE).is_file())


def load(name: str) -> Role:
    """The role ``name``, validated; SpecError listing every problem as FILE:LINE: field: message."""
    if name not in names():
        known = ", ".join(names()) or "none"
        raise SpecError(f"unknown role {name!r} (known roles: {known})", hint=f"roles live in {roles_dir()}")
    return _load_cached(str(roles_dir() / name / ROLE_FILE), _mtime(roles_dir() / name / ROLE_FILE))


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


@lru_cache(maxsize=64)
def _load_cached(path: str, _mtime: float) -> Role:
    return load_file(Path(path))


def load_file(path: Path) -> Role:
    """Read and validate one role file (its directory name must be the role's name)."""
    from jackin.spec.loader import Problem, _from_validation, _parse_yaml, format_path

    filename = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{filename}: cannot read role file: {error}") from None
    data, tree = _parse_yaml(text, filename)
    problems = list(tree.problems)
    role: Role | None = None
    if not isinstance(data, dict):
        problems.append(Problem(1, (), "expected a mapping with name, description, image, command, healthcheck"))
    else:
        try:
            role = Role.model_validate(data)
        except ValidationError as error:
            problems.extend(_from_validation(error, tree.lines, Role))
        if role is not None:
            problems.extend(_check_files(role, path.parent, tree.lines))
    if problems:
        problems.sort(key=lambda p: (p.line or 0, format_path(p.path)))
        lines = [p.render(filename) for p in problems]
        count = f"{len(lines)} problem{'s' if len(lines) > 1 else ''}"
        raise SpecError(f"{filename}: invalid role ({count})", problems=lines)
    assert role is not None
    return role


def _check_files(role: Role, directory: Path, lines: dict) -> list:
    """The role's name is its directory's; every file its recipe names exists there."""
    from jackin.spec.loader import Problem

    out = []
    if role.name != directory.name:
        out.append(Problem(lines.get(("name",)), ("name",),
                           f"{role.name!r} is not the role's directory name {directory.name!r}"))  # fmt: skip
    named = [("dockerfile",), *(("files", n) for n in range(len(role.image.files)))]
    for path in named:
        value = role.image.dockerfile if path == ("dockerfile",) else role.image.files[path[1]]  # type: ignore[index]
        if value is not None and not (directory / value).is_file():
            where = ("image", *path)
            out.append(Problem(lines.get(where) or lines.get(("image",)), where,
                               f"{value!r} is not a file in {directory}"))  # fmt: skip
    return out


def load_all() -> tuple[list[Role], list[SpecError]]:
    """Every role, and the errors of those that do not validate."""
    found, errors = [], []
    for name in names():
        try:
            found.append(load(name))
        except SpecError as error:
            errors.append(error)
    return found, errors


# --- the image's identity ---------------------------------------------------------------------


def recipe_files(name: str) -> list[tuple[str, Path]]:
    """(path relative to the roles dir, file) for the role's files and roles/common, sorted."""
    root = roles_dir()
    out = []
    for top in (root / name, root / COMMON):
        if top.is_dir():
            out += [(p.relative_to(root).as_posix(), p) for p in top.rglob("*") if p.is_file()]
    return sorted(out)


def recipe_hash(name: str) -> str:
    """12 hex of sha256 over the role's files and roles/common (names, modes and bytes)."""
    from jackin.images import BUILDER_VERSION
    from jackin.lab.image import suite

    digest = hashlib.sha256(f"{BUILDER_VERSION}\0{suite()}".encode())
    for relative, path in recipe_files(name):
        digest.update(f"{relative}\0{path.stat().st_mode & 0o111}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]
