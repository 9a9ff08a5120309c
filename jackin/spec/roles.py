"""Roles: what an agent runs. One directory per role under ``roles/`` (``JACKIN_ROLES_DIR`` overrides)::

    roles/<name>/role.yaml    the Role below (name, image recipe, command, credentials, egress, state, healthcheck)
    roles/<name>/...          the role's files (a Dockerfile for the runtimes; the demo agent's script)
    roles/common/             runtime-neutral files every image carries (the entrypoint, the health check)

A role file is read with the inventory's YAML loader (safe, YAML 1.2, duplicate keys refused) and
validated by pydantic; every problem comes out as ``FILE:LINE: field: what was expected``.
Image tags are ``jackin/role-<name>:<12 hex>``, a hash over the role's files and ``roles/common``:
editing any of them gives a new image (see jackin/images/build.py for the build and the delivery).
The offline check of a role's image recipe (``role.validate``) is jackin.spec.role_checks.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from jackin.errors import SpecError
from jackin.spec.reader import Problem, format_path, from_validation, parse_yaml
from jackin.spec.values import SLUG, AllowEntry, ApiUrl, Model, api_entry, parse_duration

ROLE_FILE = "role.yaml"
COMMON = "common"
REPOSITORY = "jackin/role-"
DEFAULT_ROLE = "demo"
ENTRYPOINT = "/usr/local/bin/jackin-entrypoint"
BUILDER_VERSION = "3"  # bump when jackin/images/build.py changes what an image holds (it is in every tag)
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a debootstrap image's PATH
# Files of a role a recipe may name: plain relative names, no way out of the role's directory.
FileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", max_length=200)]
# A path of the root a debootstrap recipe removes: relative, no "..", "*" matching one name (usr/lib/*/perl).
DropPath = Annotated[str, Field(pattern=r"^[A-Za-z0-9*][A-Za-z0-9._*+-]*(/[A-Za-z0-9*][A-Za-z0-9._*+-]*)*$",
                                max_length=200)]  # fmt: skip
CredentialName = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$", max_length=64)]  # as the spec's
Package = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]+$", max_length=64)]
Seconds = Annotated[int, Field(gt=0)]


class ImageRecipe(Model):
    """How the role's image is built: ``operator`` (here, then streamed to the hosts over SSH) or ``host``
    (a ``docker build`` on the host, of the role's directory). Exactly one of ``dockerfile`` (a file of the
    role) or ``debootstrap`` (Debian packages of a minbase root, built here only)."""

    build: Literal["operator", "host"]
    dockerfile: FileName | None = None
    debootstrap: list[Package] | None = None
    files: list[FileName] = Field(default_factory=list)  # debootstrap: role files installed in /usr/local/bin
    # debootstrap: parts of the root removed once the packages are in, which the role never runs (a
    # smaller image loads faster on every host that lacks it)
    drop: list[DropPath] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_recipe(self) -> ImageRecipe:
        if (self.dockerfile is None) == (self.debootstrap is None):
            raise ValueError("give exactly one of dockerfile (a file of the role) or debootstrap (a package list)")
        if self.debootstrap is not None and self.build != "operator":
            raise ValueError("a debootstrap recipe is built on the operator's machine: build: operator")
        if self.dockerfile is not None and self.files:
            raise ValueError("files: only with debootstrap (a Dockerfile copies its own files)")
        if self.dockerfile is not None and self.drop:
            raise ValueError("drop: only with debootstrap (a Dockerfile removes what it does not want)")
        return self


class StateDetection(Model):
    """Where the role's entrypoint keeps the agent's state, and when a silent heartbeat means stuck."""

    status_file: str = Field("/workspace/.jackin/status.json", pattern=r"^/workspace/")
    stale_after: Seconds = 60

    _duration = field_validator("stale_after", mode="before")(classmethod(lambda cls, v: parse_duration(v)))


class Healthcheck(Model):
    """The container's Docker HEALTHCHECK (exec form; durations as 30s, 1m or seconds)."""

    test: list[str] = Field(min_length=1)
    interval: Seconds = 30
    timeout: Seconds = 10
    retries: int = Field(3, ge=1, le=100)
    start_period: Seconds = 10

    _durations = field_validator("interval", "timeout", "start_period", mode="before")(
        classmethod(lambda cls, v: parse_duration(v)))  # fmt: skip

    def instruction(self) -> str:
        """The Dockerfile line."""
        return (f"HEALTHCHECK --interval={self.interval}s --timeout={self.timeout}s "
                f"--start-period={self.start_period}s --retries={self.retries} CMD {json.dumps(self.test)}")  # fmt: skip


class ApiEndpoint(Model):
    """Where the runtime reaches its model provider: ``url``, the vendor's base URL, which the spec's
    ``api_url`` may replace (a gateway, a stand-in, a regional endpoint); ``env``, the variable the runtime
    reads it from (``ANTHROPIC_BASE_URL``...). Its ``host:port`` is one of the role's egress entries."""

    env: CredentialName
    url: ApiUrl
    # The runtime takes only an https:// base URL, but for localhost (Gemini CLI 0.40: "Custom base URL must
    # use HTTPS unless it is localhost"): a spec's plain-http api_url elsewhere is refused before any host.
    https: bool = False
    # The runtime trusts an extra certificate authority from the file NODE_EXTRA_CA_CERTS names (a Node
    # runtime): a spec's api_ca is given to it so. False (Codex CLI, a Rust binary): api_ca is refused.
    extra_ca: bool = True
    # The credential that authenticates its API calls, and the header it sends it in: with the credential
    # gateway (jackin/net/gateway.py) the runtime holds a placeholder there, which the gateway replaces.
    credential: CredentialName | None = None
    header: Literal["x-api-key", "authorization", "x-goog-api-key"] = "x-api-key"
    # A subscription login the runtime can use instead of a key (credential kind oauth: jackin/net/logins.py).
    login: LoginEndpoint | None = None
    # The API's paths the gateway forwards, under the base URL's own path (``/v1/messages``: it and below);
    # any other is refused: no endpoint whose usage the gateway cannot count is reached with the key.
    paths: list[Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~/-]*$")]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _paths_for_the_gateway(self) -> ApiEndpoint:
        if self.gateway and not self.paths:
            raise ValueError("api.paths: the API paths the credential gateway may forward (the runtime's inference "
                             "endpoints, e.g. /v1/messages), for a runtime that can go through it")  # fmt: skip
        return self

    @property
    def gateway(self) -> bool:
        """Whether the runtime can reach its API through the gateway: it has a credential to swap, and takes
        a plain-http base URL (the gateway listens on the agent's bridge without TLS; ``https``: it does not)."""
        return self.credential is not None and not self.https


class LoginEndpoint(Model):
    """Where the runtime's subscription login is refreshed (a credential of kind ``oauth``), and how the gateway
    presents its access token: as a bearer, with ``beta`` added to ``anthropic-beta`` when set."""

    token_url: ApiUrl
    client_id: str = Field(min_length=1, max_length=200)
    beta: str | None = Field(None, max_length=100)


class Price(Model):
    """USD per million tokens (a budget's ``usd`` is counted with these; cached input counts as input)."""

    input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)


class Role(Model):
    name: Annotated[str, Field(pattern=SLUG, max_length=24)]
    description: str = Field(min_length=1, max_length=500)
    image: ImageRecipe
    command: list[str] = Field(min_length=1)
    credentials: list[CredentialName] = Field(default_factory=list)
    egress: list[AllowEntry] = Field(default_factory=list)  # joins an allowlist agent's allowlist
    api: ApiEndpoint | None = None  # the model provider's base URL, which the spec may replace
    # USD per million tokens by model name (a prefix names every model it begins; ``*``: any other), for the
    # gateway's ``usd`` budgets. From the vendors' price pages: check them before relying on a usd budget.
    prices: dict[str, Price] = Field(default_factory=dict)
    # The runtime's own conversation resumed interactively (inv agent.attach): an argv run through
    # jackin-attach in the repository, as the agent, on the operator's terminal, with the credentials in its
    # environment and JACKIN_SESSION the session the runtime's output named (None: it cannot be attached).
    attach: list[str] | None = Field(None, min_length=1)
    state: StateDetection = StateDetection()
    healthcheck: Healthcheck
    # What has proven the role here, naming the test (None: nothing has: role.list says unverified, with the
    # ``unverified`` reason when the role gives one).
    verified: str | None = Field(None, min_length=1, max_length=300)
    unverified: str | None = Field(None, min_length=1, max_length=300)

    @field_validator("credentials", "egress")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each entry may appear once")
        return value

    @model_validator(mode="after")
    def _api_in_egress(self) -> Role:
        if self.api is not None and self.api.credential is not None and self.api.credential not in self.credentials:
            raise ValueError(f"api.credential {self.api.credential} is not one of the role's credentials")
        if self.api is not None and api_entry(self.api.url) not in self.egress:
            raise ValueError(f"api.url {self.api.url} needs egress entry {api_entry(self.api.url)} (the allowlist "
                             "follows the URL in force: a spec's api_url replaces that entry)")  # fmt: skip
        return self

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
    return Path(override).expanduser() if override else Path(__file__).resolve().parents[2] / "roles"


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
    filename = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{filename}: cannot read role file: {error}") from None
    data, tree = parse_yaml(text, filename)
    problems = list(tree.problems)
    role: Role | None = None
    if not isinstance(data, dict):
        problems.append(Problem(1, (), "expected a mapping with name, description, image, command, healthcheck"))
    else:
        try:
            role = Role.model_validate(data)
        except ValidationError as error:
            problems.extend(from_validation(error, tree.lines, Role))
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
    out = []
    if role.name != directory.name:
        out.append(Problem(lines.get(("name",)), ("name",),
                           f"{role.name!r} is not the role's directory name {directory.name!r}"))  # fmt: skip
    named = [("dockerfile",), *(("files", n) for n in range(len(role.image.files)))]
    for path in named:
        value = role.image.dockerfile if path == ("dockerfile",) else role.image.files[int(path[1])]
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
    """12 hex of sha256 over the role's files and roles/common (names, modes and bytes), and the
    image builder's version and Debian suite."""
    files = recipe_files(name)
    stats = tuple((relative, p.stat().st_mtime_ns, p.stat().st_ctime_ns, p.stat().st_size) for relative, p in files)
    return _hash(f"{BUILDER_VERSION}\0{suite()}", tuple(files), stats)


@lru_cache(maxsize=64)
def _hash(salt: str, files: tuple[tuple[str, Path], ...], _stats: tuple) -> str:
    digest = hashlib.sha256(salt.encode())
    for relative, path in files:
        digest.update(f"{relative}\0{path.stat().st_mode & 0o111}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def suite() -> str:
    """The Debian suite of the lab's hosts and of the debootstrap role images: ``$JACKIN_LAB_SUITE``, else bookworm."""
    return os.environ.get("JACKIN_LAB_SUITE", "bookworm")


def dockerfile(role: Role, base: str) -> str:
    """The Dockerfile of a debootstrap role: its base, roles/common, its files, HEALTHCHECK, ENTRYPOINT, CMD."""
    files = " ".join(role.image.files)
    lines = [
        f"FROM {base}",
        "COPY common/ /usr/local/bin/",  # the entrypoint, the health check, jackin-status
        *([f"COPY {files} /usr/local/bin/"] if files else []),
        f"ENV PATH={IMAGE_PATH}",
        "WORKDIR /workspace",
        "USER 65534:65534",
        role.healthcheck.instruction(),
        f"ENTRYPOINT {json.dumps([ENTRYPOINT])}",
        f"CMD {json.dumps(role.command)}",
        f"LABEL jackin.role={role.name} jackin.recipe={role.tag.split(':')[1]}",
    ]
    return "\n".join(lines) + "\n"


class RoleRow(Model):
    name: str
    description: str
    image: str  # how it is built
    tag: str
    command: list[str]
    credentials: list[str]
    egress: list[str]
    verified: str  # "verified: <what proves it>" or "unverified: <why>"


def verification(role: Role) -> str:
    """What ``role.list`` says of the role: verified, by what, or unverified, and why."""
    if role.verified is not None:
        return f"verified: {role.verified}"
    return f"unverified: {role.unverified or 'no test of jackin runs it'}"


def rows() -> tuple[list[RoleRow], list[SpecError]]:
    """``role.list``: every role that loads, and the errors of those that do not."""
    found, errors = load_all()
    out = []
    for role in found:
        recipe = (f"Dockerfile {role.image.dockerfile}" if role.image.dockerfile
                  else f"debootstrap {' '.join(role.image.debootstrap or [])}")  # fmt: skip
        out.append(RoleRow(name=role.name, description=role.description, image=f"{role.image.build}: {recipe}",
                           tag=role.tag, command=role.command, credentials=role.credentials,
                           egress=role.egress, verified=verification(role)))  # fmt: skip
    return out, errors
