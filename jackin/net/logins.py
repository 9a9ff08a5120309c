"""One subscription login shared by a fleet's agents (credential kind ``oauth``), refreshed once for all of them.

The operator gives the login once, as the runtime's own login file (Claude Code's ``~/.claude/.credentials.json``)
or its refresh token. Refresh tokens rotate: each refresh returns a new one and the old one stops working, so
two parties refreshing one login race, and the loser (with every agent behind it) is logged out. Hence one
party only refreshes: this machine, which is the only one that reaches every host of the fleet (hosts need
not reach each other). It keeps the refresh token here, never on a host::

    <state dir>/logins/<fleet>/<id>.json    0600 in a 0700 directory: the refresh token, the current access token,
                                            its expiry, how many refreshes this fleet made

and hands each host's credential gateway only the current access token (``logins.json``, root and the
gateway's group, 0440; written by ``fleet.up`` and pushed again on every refresh), which the gateway puts into
its agents' requests. No agent ever holds a token of any kind: its file holds a placeholder, as with a key.

A refresh is made when the access token has less than a third of its lifetime, or REFRESH_MARGIN, left: by
``fleet.up``, ``fleet.status``, and every poll of ``fleet.wait`` and ``fleet.run`` (a lock makes two
operator commands at once refresh once). While none of them runs, nothing refreshes: an access token
that expires then is refused by the gateway (401, "shared login ... has no current access token"), and the
next of those commands refreshes and pushes it. The vendors' terms on sharing a subscription login:
docs/gateway.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, ValidationError

from jackin import hostpaths
from jackin.errors import JackinError
from jackin.paths import private_dir, state_dir
from jackin.spec import Inventory, roles
from jackin.spec.credentials import CredentialError, Secrets, login_id
from jackin.spec.models import AgentSpec, Credential

if TYPE_CHECKING:
    from jackin.transport.target import SshTarget

REFRESH_MARGIN = 300.0  # seconds: refresh when less than this (or a third of the lifetime) is left
TIMEOUT = 20.0  # seconds for the token endpoint to answer
MAX_ANSWER = 64 * 1024


class LoginError(JackinError):
    """A shared login could not be refreshed (the token endpoint refused it, or did not answer)."""


class Held(BaseModel):
    """A fleet's shared login as this machine holds it."""

    model_config = ConfigDict(extra="forbid")
    token_url: str
    client_id: str
    refresh_token: str
    access_token: str | None = None
    expires_at: float = 0.0  # epoch seconds
    lifetime: float = 0.0  # the last access token's, in seconds
    refreshes: int = 0

    def __repr__(self) -> str:  # never a token in a log or a traceback
        return f"Held(token_url={self.token_url!r}, expires_at={self.expires_at}, refreshes={self.refreshes})"

    __str__ = __repr__

    def due(self, now: float) -> bool:
        margin = min(REFRESH_MARGIN, self.lifetime / 3) if self.lifetime else REFRESH_MARGIN
        return self.access_token is None or self.expires_at - now <= margin


def oauth_credentials(agent: AgentSpec) -> list[Credential]:
    return [c for c in agent.credentials if c.kind == "oauth"]


def endpoint(agent: AgentSpec, credential: Credential) -> tuple[str, str]:
    """(token URL, client id): the role's login endpoint, its URL replaced by the credential's ``token_url``."""
    api = roles.load(agent.role).api
    assert api is not None and api.login is not None  # the spec allows kind oauth only where the role has one
    return credential.token_url or api.login.token_url, api.login.client_id


def parse_login(value: bytes, where: str) -> tuple[str, str | None, float]:
    """(refresh token, access token, its expiry) from what the operator gave: the runtime's login file (Claude
    Code's ``{"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt" (ms)}}``) or a refresh token alone."""
    text = value.decode("utf-8", errors="replace").strip()
    if not text.startswith("{"):
        return text, None, 0.0
    try:
        found = json.loads(text)
        login = found.get("claudeAiOauth", found)
        refresh = login["refreshToken"]
        expires = float(login.get("expiresAt") or 0) / 1000
        return str(refresh), login.get("accessToken"), expires
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CredentialError(f"{where}: not a login file this runtime writes (expected claudeAiOauth with a "
                              "refreshToken) nor a refresh token") from None  # fmt: skip


def _path(fleet: str, ident: str) -> Path:
    return private_dir(state_dir() / "logins" / fleet) / f"{ident}.json"


def _load(path: Path) -> Held | None:
    try:
        return Held.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (ValidationError, OSError) as error:
        raise LoginError(f"the shared login {path} does not read ({type(error).__name__})",
                         hint="remove it: the next fleet.up takes the login from the spec's source again") from None  # fmt: skip


def _save(path: Path, held: Held) -> None:
    temp = path.with_suffix(".tmp")
    temp.write_text(held.model_dump_json())
    temp.chmod(0o600)
    temp.replace(path)


def refreshed(held: Held, *, opener: Callable[..., Any] = urllib.request.urlopen) -> Held:
    """The login after one refresh grant at its token endpoint (JSON, as Claude Code sends it)."""
    body = json.dumps({"grant_type": "refresh_token", "refresh_token": held.refresh_token,
                       "client_id": held.client_id}).encode()  # fmt: skip
    request = urllib.request.Request(held.token_url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})  # fmt: skip
    try:
        with opener(request, timeout=TIMEOUT) as answer:
            found = json.loads(answer.read(MAX_ANSWER))
    except urllib.error.HTTPError as error:
        said = error.read(2000).decode(errors="replace")
        raise LoginError(f"the shared login's refresh was refused by {held.token_url}: HTTP {error.code} {said[:300]}",
                         hint="the refresh token was used elsewhere or revoked: log in again and give the new login "
                              "file (the spec's source), then remove the held copy (docs/gateway.md)") from None  # fmt: skip
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise LoginError(f"the shared login's token endpoint {held.token_url} did not answer: {error}") from None
    try:
        lifetime = float(found["expires_in"])
        access = str(found["access_token"])
    except (KeyError, TypeError, ValueError):
        raise LoginError(f"{held.token_url} answered the refresh without an access token and its lifetime") from None
    return held.model_copy(update={"access_token": access, "refresh_token": str(found.get("refresh_token") or
                                   held.refresh_token), "lifetime": lifetime, "expires_at": time.time() + lifetime,
                                   "refreshes": held.refreshes + 1})  # fmt: skip


def _fleet_lock(fleet: str) -> FileLock:
    """One lock per fleet's logins: refreshes and pushes are made one at a time, so two operator commands
    refresh once, and the last push to a host is always the newest token."""
    return FileLock(str(private_dir(state_dir() / "logins" / fleet) / ".lock"), timeout=60)


def current(inventory: Inventory, values: Secrets | None = None, *, now: float | None = None) -> dict[str, Held]:
    """Every shared login of the fleet, refreshed when due: held here from its first use (taken then from the
    spec's source, ``values``: fleet.up). Nothing (no lock, no file) for a fleet with none."""
    if not any(oauth_credentials(a) for a in inventory.fleet.agents):
        return {}
    try:
        with _fleet_lock(inventory.fleet.name):
            return _current(inventory, values, now=now)
    except Timeout:
        raise LoginError("another operator command has held the shared logins' lock for a minute",
                         hint="let it finish, or find it (ps): nothing was refreshed") from None  # fmt: skip


def _current(inventory: Inventory, values: Secrets | None, *, now: float | None) -> dict[str, Held]:
    fleet = inventory.fleet.name
    found: dict[str, Held] = {}
    for agent in inventory.fleet.agents:
        for credential in oauth_credentials(agent):
            ident = login_id(fleet, credential)
            if ident in found:
                continue
            path = _path(fleet, ident)
            held = _load(path)
            if held is None:
                if values is None or not values.has(agent.name, credential.name):
                    continue  # not held yet, and not read: fleet.up takes it first
                token_url, client_id = endpoint(agent, credential)
                refresh_token, access, expires = parse_login(values.value(agent.name, credential.name),
                                                             f"credential {credential.name} of agent {agent.name}")  # fmt: skip
                held = Held(token_url=token_url, client_id=client_id, refresh_token=refresh_token,
                            access_token=access, expires_at=expires)  # fmt: skip
                _save(path, held)
            if held.due(time.time() if now is None else now):
                held = refreshed(held)
                _save(path, held)
            found[ident] = held
    return found


def blob(held: Mapping[str, Held]) -> bytes:
    """``logins.json`` for the hosts' gateways: each login's current access token and its expiry, nothing else."""
    return (json.dumps({i: {"access_token": h.access_token, "expires_at": h.expires_at} for i, h in sorted(held.items())},
                       sort_keys=True) + "\n").encode()  # fmt: skip


def install_command(fleet: str) -> str:
    """Shell (as root): stdin into the fleet's gateway's ``logins.json``, root and its group, 0440, atomically;
    nothing when the fleet has no gateway there."""
    d, user = hostpaths.gateway_dir(fleet), hostpaths.gateway_user(fleet)
    new = f"{d}/.logins.json.jackin-new"
    return (f"[ -d {d} ] || {{ cat >/dev/null; exit 0; }}; umask 077; cat > {new} && chown root:{user} {new} && "
            f"chmod 0440 {new} && mv -f -T {new} {d}/logins.json")  # fmt: skip


def push(targets: Sequence[SshTarget], fleet: str, data: bytes) -> dict[str, str]:
    """``data`` to every host's gateway (on stdin, never a command line); per host that failed, why."""
    from jackin.transport import fanout  # only when a login is pushed: fleet.status and the up path load no SSH
    from jackin.transport.ssh import connect  # library for nothing (tests/unit/test_cli_imports.py)

    def one(target: SshTarget) -> None:
        try:
            with connect(target, timeout=10) as conn:
                result = conn.run(install_command(fleet), hide=True, warn=True, timeout=30,
                                  in_stream=io.StringIO(data.decode()))  # fmt: skip
        except JackinError:
            raise
        except Exception as error:  # noqa: BLE001 - any SSH or invoke fault: this host's, as a message
            raise JackinError(f"logins.json not written: {type(error).__name__}: {error}", host=target.name) from None
        if result.exited != 0:
            raise JackinError(f"logins.json not written: {result.stderr.strip()[-200:]}", host=target.name)

    done = fanout.each_host(list(targets), one, workers=8)
    return {name: getattr(error, "message", str(error)) for name, error in done.failed.items()}


def keep(inventory: Inventory, targets: Sequence[SshTarget], *, force: bool = False) -> list[str]:
    """Refresh every shared login that is due, and push the current access tokens to each host that does not
    have them yet (``force``: to every host); the logins refreshed. One lock for the fleet around both, so the
    last push to a host is the newest token. A host that could not be given them is tried again at the next
    call, and named in the LoginError raised. Nothing (not even a file read) for a fleet with no login."""
    fleet = inventory.fleet.name
    if not any(oauth_credentials(a) for a in inventory.fleet.agents):
        return []
    try:
        with _fleet_lock(fleet):
            before = {i: h.refreshes for i, h in _held_now(inventory).items()}
            after = _current(inventory, None, now=None)
            refreshed_ids = [i for i, h in after.items() if h.refreshes != before.get(i)]
            if not after:
                return []
            data = blob(after)
            digest = hashlib.sha256(data).hexdigest()
            record = _pushed(fleet)
            stale = [t for t in targets if force or record.get(t.name) != digest]
            failed = push(stale, fleet, data) if stale else {}
            record.update({t.name: digest for t in stale if t.name not in failed})
            _save_pushed(fleet, record)
    except Timeout:
        raise LoginError("another operator command has held the shared logins' lock for a minute",
                         hint="let it finish, or find it (ps): nothing was refreshed") from None  # fmt: skip
    if failed:
        raise LoginError("the shared login's access token did not reach " +
                         "; ".join(f"{h}: {why}" for h, why in sorted(failed.items())),
                         hint="the next fleet.status, fleet.wait or fleet.up tries again")  # fmt: skip
    return refreshed_ids


def _pushed(fleet: str) -> dict[str, str]:
    """Per host, the digest of the logins.json last pushed there."""
    try:
        found = json.loads((private_dir(state_dir() / "logins" / fleet) / "pushed.json").read_text())
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(found, dict) else {}
    )


def _save_pushed(fleet: str, record: dict[str, str]) -> None:
    path = private_dir(state_dir() / "logins" / fleet) / "pushed.json"
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(record, sort_keys=True))
    temp.replace(path)


def _held_now(inventory: Inventory) -> dict[str, Held]:
    fleet = inventory.fleet.name
    found = {}
    for agent in inventory.fleet.agents:
        for credential in oauth_credentials(agent):
            held = _load(_path(fleet, login_id(fleet, credential)))
            if held is not None:
                found[login_id(fleet, credential)] = held
    return found
