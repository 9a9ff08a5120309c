"""Credentials: named by the spec, read on the operator's machine, delivered to each agent as read-only files.

A spec names a credential and where the operator's machine keeps it (``from_env`` or
``from_file``), never its value. ``read`` reads every value before any host is touched: a
missing source fails the whole run (exit 2), naming the credential, the agent and the
source, never the value. Values then travel only as ``Secrets``: to the engine child
process on its stdin (never in the plan, which is request data and may be recorded),
and from there to each host by SFTP. On the host:

    /var/lib/jackin                                     root 0700 (the fleet markers' dir)
    /var/lib/jackin/credentials                         root 0700
    /var/lib/jackin/credentials/<fleet>                 root 0700
    /var/lib/jackin/credentials/<fleet>/<instance>      root:<agent group> 0750, mounted read-only
                                                        at /run/jackin/credentials in that agent's container
    /var/lib/jackin/credentials/<fleet>/<instance>/<NAME>   <agent uid>:<agent gid> 0400, the value's bytes
    /var/lib/jackin/credentials/<fleet>/<instance>.digests  root 0600: ``NAME HMAC`` lines

Outside the agent's home, so a snapshot of the home never holds a credential, and in
directories only root writes, so the agent cannot rename or replace a file (and root never
follows a path the agent controls). Whether a value changed is decided from the digests:
an HMAC-SHA256 of (fleet, instance, name, value) under a key that lives only on the
operator's machine (``state_dir()/credentials/<fleet>/key``, 0600), so what the host keeps
tells nothing about the value, and equal values on two agents give different digests.

Also here, pure: the credential-deny check over every host path a spec mounts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from jackin.errors import SpecError
from jackin.paths import private_dir, state_dir
from jackin.spec.models import API_CA, AgentSpec, Credential, FleetSpec, gateway_credential

FILE_MODE = "0400"
DIR_MODE = "0750"
MAX_VALUE = 64 * 1024  # a credential is a key or a token, not a data set
NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


class CredentialError(SpecError):
    """A credential's source is missing or unusable; says which credential, agent and source, never a value."""


class Secrets:
    """Credential values by agent name then credential name, and the fleet's digest key.

    Its ``repr`` shows names only, so a value never lands in a log, a traceback or a preview by accident.
    """

    def __init__(self, values: Mapping[str, Mapping[str, bytes]], key: bytes):
        self._values = {agent: dict(named) for agent, named in values.items()}
        self._key = key

    def __repr__(self) -> str:
        names = {agent: sorted(named) for agent, named in self._values.items()}
        return f"Secrets({names})"

    __str__ = __repr__

    def agents(self) -> list[str]:
        return sorted(agent for agent, named in self._values.items() if named)

    def names(self, agent: str) -> list[str]:
        return sorted(self._values.get(agent, {}))

    def value(self, agent: str, name: str) -> bytes:
        return self._values[agent][name]

    def digest(self, fleet: str, instance: str, agent: str, name: str, data: bytes | None = None) -> str:
        """HMAC-SHA256 of one delivered value (``data``: what is delivered instead, a placeholder), bound to
        where it goes (fleet, instance, name)."""
        message = f"{fleet}\0{instance}\0{name}\0".encode() + (self._values[agent][name] if data is None else data)
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def has(self, agent: str, name: str) -> bool:
        return name in self._values.get(agent, {})

    def placeholder(self, fleet: str, instance: str, name: str) -> bytes:
        """What an agent holds for a credential in gateway mode: ``jackin-placeholder-<40 hex>``, an HMAC under the
        fleet's key of where it goes (the same on every run, different per agent, and nothing of the value)."""
        message = f"placeholder\0{fleet}\0{instance}\0{name}".encode()
        return b"jackin-placeholder-" + hmac.new(self._key, message, hashlib.sha256).hexdigest()[:40].encode()

    def sealed(self, data: bytes) -> str:
        """HMAC-SHA256 of ``data`` under the fleet's key (the gateway's secrets file's record on its host)."""
        return hmac.new(self._key, b"gateway\0" + data, hashlib.sha256).hexdigest()

    def to_wire(self) -> str:
        """One JSON line for the engine child's stdin (never a file others can read, never argv or env)."""
        return json.dumps({"key": self._key.hex(), "values": {
            agent: {name: base64.b64encode(value).decode() for name, value in named.items()}
            for agent, named in self._values.items()}})  # fmt: skip

    @classmethod
    def from_wire(cls, text: str) -> Secrets:
        data = json.loads(text)
        values = {agent: {name: base64.b64decode(value) for name, value in named.items()}
                  for agent, named in data["values"].items()}  # fmt: skip
        return cls(values, bytes.fromhex(data["key"]))


# --- reading on the operator's machine ------------------------------------------


def source_text(credential: Credential) -> str:
    """How the spec names a credential's source (for messages and the plan): never its value."""
    if credential.from_env is not None:
        return f"environment variable {credential.from_env}"
    return f"file {credential.from_file}"


def _read_one(agent: AgentSpec, credential: Credential, environ: Mapping[str, str]) -> bytes:
    where = f"credential {credential.name} of agent {agent.name}"
    if credential.from_env is not None:
        value = environ.get(credential.from_env)
        if value is None:
            raise CredentialError(f"{where}: environment variable {credential.from_env} is not set",
                                  hint=f"export {credential.from_env} on this machine, then run again")  # fmt: skip
        data = value.encode()
    else:
        assert credential.from_file is not None  # the model requires from_env or from_file
        data = _read_file(where, Path(credential.from_file).expanduser())
    if not data.strip():
        raise CredentialError(f"{where}: {source_text(credential)} is empty",
                              hint="an empty credential is almost always a mistake: set its value")  # fmt: skip
    if len(data) > MAX_VALUE:
        raise CredentialError(f"{where}: {source_text(credential)} is larger than {MAX_VALUE // 1024} KiB",
                              hint="a credential is a key or a token; mount data another way")  # fmt: skip
    return data


def _read_file(where: str, path: Path) -> bytes:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise CredentialError(f"{where}: file {path} is not a regular file")
        with path.open("rb") as handle:
            return handle.read(MAX_VALUE + 1)
    except FileNotFoundError:
        raise CredentialError(f"{where}: file {path} does not exist") from None
    except PermissionError:
        raise CredentialError(f"{where}: file {path} is not readable (permission denied)") from None
    except OSError as error:
        raise CredentialError(
            f"{where}: file {path} cannot be read ({error.strerror or type(error).__name__})"
        ) from None


def read(spec: FleetSpec, *, environ: Mapping[str, str] | None = None, key: bytes | None = None) -> Secrets:
    """Every credential value of the fleet, read on this machine; all problems at once, as one error.

    ``key``: the fleet's digest key (default: ``digest_key(spec.name)``, made on first use). A
    ``from_file`` path is the operator's (``~`` expanded; relative to the working directory).
    """
    environ = os.environ if environ is None else environ
    values: dict[str, dict[str, bytes]] = {}
    problems: list[str] = []
    for agent in spec.agents:
        given = list(agent.credentials)
        if agent.api_ca is not None and gateway_credential(agent) is not None:  # for the gateway, not the agent
            given.append(Credential(name=API_CA, from_file=agent.api_ca))
        for credential in given:
            try:
                values.setdefault(agent.name, {})[credential.name] = _read_one(agent, credential, environ)
            except CredentialError as error:
                problems.append(error.message)
    if problems:
        raise CredentialError(problems[0] if len(problems) == 1 else f"{len(problems)} credentials cannot be read",
                              problems=problems if len(problems) > 1 else [],
                              hint="nothing was changed on any host")  # fmt: skip
    if not values:
        return Secrets({}, b"")
    return Secrets(values, digest_key(spec.name) if key is None else key)


def login_id(fleet: str, credential: Credential) -> str:
    """A shared login's name in the fleet (credential kind ``oauth``): from its source (an environment variable's
    name, or a file's path), so agents given the same source share one login (jackin/net/logins.py)."""
    source = (f"env:{credential.from_env}" if credential.from_env
              else f"file:{Path(str(credential.from_file)).expanduser().resolve()}")  # one file, however spelled  # fmt: skip
    return hashlib.sha256(f"{fleet}\0{source}".encode()).hexdigest()[:12]


def digest_key(fleet: str) -> bytes:
    """The fleet's digest key, kept on this machine only (0600 in a 0700 dir), made once: written to a
    temporary name and linked into place, so two runs at once agree on one key."""
    folder = private_dir(state_dir() / "credentials" / fleet)
    path = folder / "key"
    if not path.exists():
        temp = folder / f".key-{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            os.link(temp, path)
        except FileExistsError:
            pass  # another run made it first: use that one
        finally:
            temp.unlink()
    try:
        return bytes.fromhex(path.read_text().strip())
    except ValueError:
        raise CredentialError(
            f"the credentials key {path} is not a key",
            hint="remove it: the next run makes a new one (and re-delivers every credential once)",
        ) from None


def duplicate_names(spec: FleetSpec) -> list[str]:
    """Problems: an agent naming the same credential twice (one file per name)."""
    problems = []
    for agent in spec.agents:
        names = [c.name for c in agent.credentials]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"agent {agent.name}: credential {name} is named more than once")
    return problems


# --- the credential-deny check ---------------------------------------------------

# Path pieces that hold credentials: a mount whose source contains one (as whole path
# components) or lies above one (a home, ``/``) hands the agent credentials.
CREDENTIAL_PATHS: tuple[tuple[str, ...], ...] = (
    (".ssh",), (".aws",), (".config", "gh"), (".config", "hub"), (".config", "gcloud"), (".azure",),
    (".docker",), (".kube",), (".gnupg",), (".password-store",), (".terraform.d",), (".vault-token",),
    (".netrc",), (".git-credentials",), (".npmrc",), (".pypirc",), (".pgpass",), (".my.cnf",),
    (".config", "git", "credentials"), (".local", "share", "keyrings"),
    ("etc", "ssh"), ("etc", "shadow"), ("etc", "gshadow"), ("etc", "sudoers"), ("etc", "sudoers.d"),
    ("var", "run", "docker.sock"), ("run", "docker.sock"), ("var", "lib", "jackin"), ("root",),
)  # fmt: skip
HOME_ROOTS = ("home", "Users")


def credential_like(path: str) -> str | None:
    """Why a mounted host path looks like credentials (None: it does not).

    Matches whole path components, so ``~/.sshd_notes`` or ``/srv/.dockerignore`` do not match:
    ``.ssh`` anywhere in the path (``/home/me/.ssh``, ``/srv/x/.ssh/id_ed25519``), ``.config/gh``,
    ``/etc/ssh``, ``/root``..., and any path above such places: ``/``, ``/home``, a home
    (``/home/<user>``, ``~``), ``/etc``, ``/var/run``.
    """
    parts = tuple(p for p in PurePosixPath(path).parts if p != "/")
    if path.startswith("~"):
        parts = ("home", "~", *parts[1:])
    for pattern in CREDENTIAL_PATHS:
        if _system(pattern):  # from the root only: /etc/ssh, /root
            found = parts[: len(pattern)] == pattern
        else:  # dotted names, anywhere in the path
            found = any(parts[i : i + len(pattern)] == pattern for i in range(len(parts) - len(pattern) + 1))
        if found:
            return f"it holds {'/'.join(pattern)}"
    if not parts:
        return "it is the whole filesystem"
    if parts[0] in HOME_ROOTS and len(parts) <= 2:
        return "it is a home directory (or all of them), which holds ~/.ssh, ~/.aws and the like"
    below = [p for p in CREDENTIAL_PATHS if _system(p) and p[: len(parts)] == parts]  # /etc, /var, /run
    if below:
        return f"it holds {'/'.join(below[0])}"
    return None


def _system(pattern: tuple[str, ...]) -> bool:
    return not pattern[0].startswith(".")


def denied_mounts(spec: FleetSpec) -> list[str]:
    """Problems: each mount of a credential-like host path that the spec does not acknowledge
    (``acknowledge_credentials: true`` on that mount). Credential ``from_file`` sources are not
    mounts: only that one file's value is delivered, as one named credential, so they are allowed."""
    problems = []
    for agent in spec.agents:
        for mount in getattr(agent, "mounts", []):
            reason = credential_like(str(mount.source))
            if reason and not mount.acknowledge_credentials:
                problems.append(f"agent {agent.name}: mount of {mount.source} is refused: {reason}; "
                                "set acknowledge_credentials: true on that mount if the agent must have it")  # fmt: skip
    return problems


def check(spec: FleetSpec) -> None:
    """Refuse a spec (exit 2, nothing touched) that mounts credential-like paths unacknowledged
    or names one credential twice in an agent."""
    problems = duplicate_names(spec) + denied_mounts(spec)
    if problems:
        raise SpecError(problems[0] if len(problems) == 1 else f"{len(problems)} problems in the spec's credentials "
                        "and mounts", problems=problems if len(problems) > 1 else [])  # fmt: skip
