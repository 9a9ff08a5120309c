"""The credential gateway: the one process on a host that holds a fleet's model API keys.

Runs on the host (``jackin-gateway-<fleet>.service``, its own user, no capabilities), from Debian's
python3 and python3-aiohttp: this file imports nothing of jackin. An agent's container holds only a
placeholder and a base URL that points here, at its own bridge's address; the gateway

- takes a request only on the address of the bridge it listens for (the fleet's input chain lets an
  agent reach the gateway's port only on its own bridge's address) and only from that bridge's subnet;
- finds the placeholder in the header the role declares, and refuses another agent's placeholder;
- forwards only to the upstream the credential is bound to, over verified TLS, with the placeholder
  replaced by the real value (or a shared login's current access token), and refuses any other host;
- passes the response through as it arrives (server-sent events are never buffered), counting the
  tokens it reports (Anthropic ``message_start``/``message_delta``, OpenAI ``response.completed``,
  Gemini ``usageMetadata``);
- refuses, with a 429 that names it, a request past the agent's budget or this host's share of the
  fleet's; a higher budget in its configuration applies at once (it reads its files again when they
  change: no restart, no stream cut).

Its files (written by ``fleet.up``; jackin/net/gateway.py renders them)::

    CONFIG/config.json    root:<gateway group> 0440   agents, bridges, placeholders, upstreams, budgets
    CONFIG/secrets.json   root:<gateway group> 0440   the values: {"<instance>/<NAME>": "..."}
    CONFIG/logins.json    root:<gateway group> 0440   shared logins' access tokens (the operator refreshes)
    STATE/<instance>.json <gateway user> 0600        usage, audit, denials, the budget's state
    STATE/gateway.json    <gateway user> 0600        pid, listeners bound and waiting, the config in force

Usage: gatewayd CONFIG_DIR STATE_DIR
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hmac
import ipaddress
import json
import logging
import os
import signal
import socket
import ssl
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

log = logging.getLogger("jackin-gateway")
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
       "transfer-encoding", "upgrade", "host", "accept-encoding"}  # fmt: skip
AUTH_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
MAX_LINE = 1 << 20  # an SSE line longer than this is passed through but not read for usage
MAX_JSON = 2 << 20  # a JSON body longer than this is passed through but not read for usage
IN_FLIGHT = 8  # requests of one agent forwarded at once (more wait): what a budget can be overrun by
MAX_REQUEST = 64 << 20
MAX_DENIALS = 100
RETRY_AFTER = 10  # seconds: a runtime that honors Retry-After comes back after this, maybe to a raised budget
SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B
TLS_READ = 16 * 1024


def interface_ipv4(name: str) -> ipaddress.IPv4Interface | None:
    """The IPv4 address and prefix of a network interface (no capability needed), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = struct.pack("256s", name.encode()[:15])
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, packed)[20:24])
            mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, packed)[20:24])
        except OSError:
            return None
    return ipaddress.IPv4Interface(f"{addr}/{mask}")


# --- usage, read from the responses ------------------------------------------------------------

INPUT_KEYS = ("input_tokens", "prompt_tokens", "promptTokenCount", "cache_creation_input_tokens",
              "cache_read_input_tokens")  # fmt: skip
OUTPUT_KEYS = ("output_tokens", "completion_tokens", "candidatesTokenCount", "thoughtsTokenCount")


class Meter:
    """The tokens and model a response reports, read as it passes: every JSON object of an SSE stream
    (``data:`` lines) or of a JSON body. Per field, the largest value seen (Anthropic's message_delta
    and Gemini's chunks carry running totals)."""

    def __init__(self, content_type: str):
        self.sse = "text/event-stream" in content_type
        self.json = "json" in content_type
        self.fields: dict[str, int] = {}
        self.model = ""
        self._buffer = bytearray()
        self._skipping = False
        self._whole = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self.sse:
            self._lines(chunk)
        elif self.json and len(self._whole) + len(chunk) <= MAX_JSON:
            self._whole += chunk
        else:
            self._whole.clear()
            self.json = False

    def _lines(self, chunk: bytes) -> None:
        self._buffer += chunk
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                del self._buffer[:start]  # the lines read, at once
                if len(self._buffer) > MAX_LINE:
                    self._buffer.clear()
                    self._skipping = True
                return
            line, start = bytes(self._buffer[start:end]), end + 1
            if self._skipping:
                self._skipping = False
                continue
            if line.startswith(b"data:"):
                self._read(line[5:].strip())

    def done(self) -> None:
        if self.sse and self._buffer.startswith(b"data:") and not self._skipping:
            self._read(bytes(self._buffer[5:]).strip())
        if self.json and self._whole:
            self._read(bytes(self._whole))

    def _read(self, data: bytes) -> None:
        try:
            value = json.loads(data)
        except ValueError:
            return
        for obj in value if isinstance(value, list) else [value]:
            if isinstance(obj, dict):
                self._object(obj)

    def _object(self, obj: dict[str, Any]) -> None:
        inner = [obj, obj.get("message"), obj.get("response")]
        for where in inner:
            if not isinstance(where, dict):
                continue
            model = where.get("model") or where.get("modelVersion")
            if isinstance(model, str) and model:
                self.model = model[:100]
            for usage in (where.get("usage"), where.get("usageMetadata")):
                if isinstance(usage, dict):
                    for key, count in usage.items():
                        if key in INPUT_KEYS + OUTPUT_KEYS and isinstance(count, int) and count >= 0:
                            self.fields[key] = max(self.fields.get(key, 0), count)

    @property
    def input(self) -> int:
        return sum(self.fields.get(k, 0) for k in INPUT_KEYS)

    @property
    def output(self) -> int:
        return sum(self.fields.get(k, 0) for k in OUTPUT_KEYS)


def price(prices: dict[str, dict[str, float]], model: str) -> dict[str, float] | None:
    """The price per million tokens of ``model``: its own entry, else the longest prefix that names it
    (``claude-sonnet-4`` for ``claude-sonnet-4-5-20250929``), else ``*``; None when none does."""
    if model in prices:
        return prices[model]
    prefixes = [p for p in prices if p != "*" and model.startswith(p)]
    if prefixes:
        return prices[max(prefixes, key=len)]
    return prices.get("*")


def path_allowed(raw: str, prefixes: list[str]) -> bool:
    """Whether a request's path (its query aside) is under one of the API's ``prefixes`` (``/v1/messages`` allows
    ``/v1/messages`` and ``/v1/messages/count_tokens``), with no dot segment nor encoded dot, slash or
    backslash an upstream could resolve elsewhere."""
    path = raw.split("?", 1)[0]
    lowered = path.lower()
    if any(s in lowered for s in ("%2e", "%2f", "%5c", "\\")) or any(seg in (".", "..") for seg in path.split("/")):
        return False
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _verified(url: str) -> bool:
    """Whether the gateway may forward to ``url``: https://, or plain http to a loopback address (tests)."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    if scheme == "https":
        return True
    try:
        return scheme == "http" and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- per agent: usage, audit, budget ------------------------------------------------------------


@dataclass
class Account:
    """One agent's usage and audit trail, kept in STATE/<instance>.json across restarts."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)  # models with no price (usd unknown for them)
    statuses: dict[str, int] = field(default_factory=dict)
    bytes_up: int = 0
    bytes_down: int = 0
    upstreams: dict[str, int] = field(default_factory=dict)
    denials: list[dict[str, Any]] = field(default_factory=list)
    denied: int = 0
    spent: str = ""  # why the last request was refused for a budget ("" when it was not)
    spent_at: float = 0.0
    last: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def deny(self, kind: str, detail: str) -> None:
        self.denied += 1
        self.denials = [*self.denials, {"time": round(time.time(), 3), "kind": kind, "detail": detail[:300]}][
            -MAX_DENIALS:
        ]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()} | {"tokens": self.tokens}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Account:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def over(budget: dict[str, Any] | None, requests: int, tokens: int, usd: float, unpriced: bool) -> str:
    """What of ``budget`` is spent ("" when nothing is), as the refusal says it."""
    if not budget:
        return ""
    if budget.get("requests") is not None and requests >= budget["requests"]:
        return f"requests {requests} of {budget['requests']}"
    if budget.get("tokens") is not None and tokens >= budget["tokens"]:
        return f"tokens {tokens} of {budget['tokens']}"
    if budget.get("usd") is not None:
        if unpriced:
            return f"usd {budget['usd']}: a model with no price in the role's table was used, so spend is unknown"
        if usd >= budget["usd"]:
            return f"usd {usd:.4f} of {budget['usd']}"
    return ""


# --- the gateway ---------------------------------------------------------------------------------


class Gateway:
    def __init__(self, config_dir: str, state_dir: str):
        self.config_dir, self.state_dir = config_dir, state_dir
        self.config: dict[str, Any] = {"agents": {}}
        self.secrets: dict[str, str] = {}
        self.logins: dict[str, dict[str, Any]] = {}
        self.stamps: tuple[Any, ...] = ()
        self.accounts: dict[str, Account] = {}
        self.dirty: set[str] = set()
        # by instance: its bridge's address and the listener on it (asyncio's own server: closing one listener
        # leaves every connection open, where aiohttp 3.8's site.stop() shut down every agent's requests)
        self.sites: dict[str, tuple[ipaddress.IPv4Interface, asyncio.AbstractServer]] = {}
        self.in_flight: dict[str, asyncio.Semaphore] = {}  # per agent: at most IN_FLIGHT requests at once
        self.problem: tuple[Any, ...] = ()  # the files' stamp whose configuration was refused (logged once)
        self.said: dict[str, Any] = {}  # what gateway.json says now
        self.by_address: dict[str, str] = {}  # listening address -> instance
        self.sessions: dict[str, ClientSession] = {}
        self.runner: web.AppRunner | None = None

    # files ---------------------------------------------------------------------------------------

    def _stamp(self) -> tuple[Any, ...]:
        out: list[tuple[int, int, int] | None] = []
        for name in ("config.json", "secrets.json", "logins.json"):
            try:
                st = os.stat(os.path.join(self.config_dir, name))
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def load(self) -> bool:
        """Read the files again when they changed; keep what is in force when they do not parse."""
        stamp = self._stamp()
        if stamp == self.stamps:
            return False
        try:
            config = self._read("config.json", required=True)
            secrets, logins = self._read("secrets.json"), self._read("logins.json")
            if not isinstance(config.get("agents"), dict):
                raise ValueError("config.json: no agents")
        except (OSError, ValueError) as error:
            if self.problem != stamp:  # once per change of the files, not at every look
                log.error("configuration not loaded, the one in force stays: %s", error)
                self.problem = stamp
            return False
        self.config, self.secrets, self.logins, self.stamps = config, secrets, logins, stamp
        for instance, agent in config["agents"].items():
            if instance not in self.accounts:
                self.accounts[instance] = self._restore(instance)
            account = self.accounts[instance]
            prices = [c.get("prices") or {} for c in agent.get("credentials", {}).values()]
            still = [m for m in account.unpriced if not any(price(p, m) for p in prices)]
            if still != account.unpriced:  # a price added since: its model no longer makes spend unknown
                account.unpriced = still
                self.dirty.add(instance)
            self._recheck(instance)
        log.info("configuration loaded: %d agents", len(config["agents"]))
        return True

    def _read(self, name: str, *, required: bool = False) -> dict[str, Any]:
        try:
            with open(os.path.join(self.config_dir, name), "rb") as f:
                data = json.loads(f.read(MAX_JSON))
        except FileNotFoundError:
            if required:
                raise
            return {}
        if not isinstance(data, dict):
            raise ValueError(f"{name}: not an object")
        return data

    def _restore(self, instance: str) -> Account:
        try:
            with open(os.path.join(self.state_dir, f"{instance}.json"), "rb") as f:
                data = json.loads(f.read(MAX_JSON))
            return Account.from_json(data) if isinstance(data, dict) else Account()
        except (OSError, ValueError, TypeError):
            return Account()

    def save(self) -> None:
        for instance in sorted(self.dirty):
            account = self.accounts.get(instance)
            if account is not None:
                self._write(f"{instance}.json", account.to_json())
        self.dirty.clear()
        bound = sorted(i for i in self.sites)
        waiting = sorted(i for i in self.config["agents"] if i not in self.sites)
        state = {"pid": os.getpid(), "bound": bound, "waiting": waiting, "config": self.config.get("digest", "")}
        if state != self.said:  # written when it changes, not at every look
            self._write("gateway.json", state)
            self.said = state

    def _write(self, name: str, data: dict[str, Any]) -> None:
        path = os.path.join(self.state_dir, name)
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(path + ".tmp", path)

    # budgets -------------------------------------------------------------------------------------

    def _spent(self, instance: str) -> str:
        agent, account = self.config["agents"][instance], self.accounts[instance]
        why = over(agent.get("budget"), account.requests, account.tokens, account.usd, bool(account.unpriced))
        if why:
            return why
        share = self.config.get("fleet_budget")
        if share:
            mine = [self.accounts[i] for i in self.config["agents"] if i in self.accounts]
            why = over(share, sum(a.requests for a in mine), sum(a.tokens for a in mine),
                       sum(a.usd for a in mine), any(a.unpriced for a in mine))  # fmt: skip
            return f"the fleet's (this host's share): {why}" if why else ""
        return ""

    def _recheck(self, instance: str) -> None:
        """A raised budget clears the spent mark at once (fleet.status stops showing the agent blocked)."""
        account = self.accounts[instance]
        if account.spent and not self._spent(instance):
            account.spent, account.spent_at = "", 0.0
            self.dirty.add(instance)

    # listeners -----------------------------------------------------------------------------------

    async def bind(self) -> None:
        """Listen on each agent's bridge address once its bridge has one; stop for agents gone."""
        assert self.runner is not None
        port = int(self.config.get("port", 8377))
        for instance in list(self.sites):
            address, site = self.sites[instance]
            agent = self.config["agents"].get(instance)
            now = interface_ipv4(agent["bridge"]) if agent else None
            if now != address:
                site.close()  # the listener only: requests in flight, this agent's and others', go on
                del self.sites[instance]
                self.by_address.pop(str(address.ip), None)
        for instance, agent in self.config["agents"].items():
            if instance in self.sites:
                continue
            found = interface_ipv4(agent["bridge"])
            if found is None:
                continue
            address = found
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((str(address.ip), port))
                sock.listen(256)
                sock.setblocking(False)
            except OSError as error:
                sock.close()
                log.error("agent %s: cannot listen on %s:%d: %s", instance, address.ip, port, error)
                continue
            assert self.runner.server is not None  # set up in run()
            server = await asyncio.get_running_loop().create_server(self.runner.server, sock=sock)
            self.sites[instance] = (address, server)
            self.by_address[str(address.ip)] = instance
            log.info("agent %s: listening on %s:%d (%s)", instance, address.ip, port, agent["bridge"])

    # requests ------------------------------------------------------------------------------------

    def _refuse(self, status: int, message: str, **headers: str) -> web.Response:
        body = {"type": "error", "error": {"type": "jackin_gateway", "message": f"jackin gateway: {message}"}}
        return web.json_response(body, status=status, headers=headers)

    def _deny(self, instance: str, kind: str, detail: str, status: int = 403) -> web.Response:
        self.accounts[instance].deny(kind, detail)
        self.dirty.add(instance)
        log.warning("agent %s: refused (%s): %s", instance, kind, detail)
        return self._refuse(status, detail)

    def _credential(self, instance: str, request: web.Request) -> tuple[str, dict[str, Any]] | None:
        for name, cred in self.config["agents"][instance].get("credentials", {}).items():
            given = request.headers.get(cred["header"], "")
            if cred["header"].lower() == "authorization" and given.lower().startswith("bearer "):
                given = given[7:]
            if given and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), cred["placeholder"].encode()):
                return name, cred
        return None

    def _owner(self, request: web.Request) -> str:
        """The agent whose placeholder the request carries, whatever header it is in ("" if none)."""
        values = {request.headers.get(h, "").removeprefix("Bearer ").strip() for h in AUTH_HEADERS} - {""}
        for instance, agent in self.config["agents"].items():
            for cred in agent.get("credentials", {}).values():
                if any(hmac.compare_digest(v.encode("utf-8", "surrogateescape"), cred["placeholder"].encode())
                       for v in values):  # fmt: skip
                    return instance
        return ""

    def _value(self, instance: str, name: str, cred: dict[str, Any]) -> str | None:
        login = cred.get("login")
        if login:
            token = self.logins.get(login)
            try:
                if (
                    not isinstance(token, dict)
                    or not token.get("access_token")
                    or float(token["expires_at"]) <= time.time()
                ):
                    return None
            except (KeyError, TypeError, ValueError):
                return None
            return str(token["access_token"])
        return self.secrets.get(f"{instance}/{name}")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        peer = request.transport.get_extra_info("peername") if request.transport else None
        instance = self.by_address.get(sockname[0]) if sockname else None
        if instance is None or instance not in self.config["agents"]:
            return self._refuse(403, "this address serves no agent")
        address, _ = self.sites[instance]
        if not peer or ipaddress.ip_address(peer[0]) not in address.network:
            return self._deny(
                instance, "network", f"a request from {peer[0] if peer else '?'}, outside the agent's network"
            )
        host = (request.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        if request.method == "CONNECT" or not request.raw_path.startswith("/") or host not in ("", str(address.ip)):
            wanted = request.raw_path if not request.raw_path.startswith("/") else host
            return self._deny(instance, "upstream", f"upstream {wanted[:200]} is not bound to this agent's credential")
        found = self._credential(instance, request)
        if found is None:
            owner = self._owner(request)
            if owner and owner != instance:
                return self._deny(
                    instance, "placeholder", f"agent {owner}'s placeholder, sent from agent {instance}'s network"
                )
            return self._deny(instance, "placeholder", "no placeholder of this agent in the request", status=401)
        name, cred = found
        if not path_allowed(request.raw_path, cred.get("paths") or []):
            return self._deny(instance, "path", f"path {request.raw_path[:200]} is not one of this API's "
                              f"({', '.join(cred.get('paths') or []) or 'none'})")  # fmt: skip
        gate = self.in_flight.setdefault(instance, asyncio.Semaphore(IN_FLIGHT))
        async with gate:  # the budget is checked with at most IN_FLIGHT of the agent's requests uncounted
            return await self._budgeted(request, instance, name, cred)

    async def _budgeted(
        self, request: web.Request, instance: str, name: str, cred: dict[str, Any]
    ) -> web.StreamResponse:
        spent = self._spent(instance)
        account = self.accounts[instance]
        if spent:
            account.spent, account.spent_at = f"budget spent: {spent}", time.time()
            account.statuses["429"] = account.statuses.get("429", 0) + 1
            self.dirty.add(instance)
            return self._refuse(429, f"budget spent: {spent} (agent {instance}); raise it in the spec and run fleet.up",
                                **{"Retry-After": str(RETRY_AFTER), "x-should-retry": "true"})  # fmt: skip
        value = self._value(instance, name, cred)
        if value is None:
            what = f"shared login {cred['login']} has no current access token" if cred.get("login") else "no value"
            return self._deny(instance, "credential", f"credential {name}: {what}", status=401)
        return await self._forward(request, instance, cred, value)

    async def _forward(
        self, request: web.Request, instance: str, cred: dict[str, Any], value: str
    ) -> web.StreamResponse:
        account = self.accounts[instance]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP and k.lower() not in AUTH_HEADERS}
        inject = cred.get("inject") or cred["header"]  # a shared login's token goes as a bearer, whatever held it
        headers[inject] = f"Bearer {value}" if inject.lower() == "authorization" else value
        if cred.get("beta"):  # the login's beta flag, beside the runtime's own
            given = [b for k, v in headers.items() if k.lower() == "anthropic-beta" for b in v.split(",") if b.strip()]
            headers = {k: v for k, v in headers.items() if k.lower() != "anthropic-beta"}
            headers["anthropic-beta"] = ",".join(dict.fromkeys([*(b.strip() for b in given), cred["beta"]]))
        headers.update(cred.get("add_headers") or {})
        headers["Accept-Encoding"] = "identity"  # usage is read from the bytes as they pass
        upstream = cred["upstream"].rstrip("/")
        if not _verified(upstream):
            return self._deny(
                instance, "upstream", f"upstream {upstream} is not https:// (only loopback may be plain)", 502
            )
        account.requests += 1
        account.last = time.time()
        account.upstreams[upstream] = account.upstreams.get(upstream, 0) + 1
        self.dirty.add(instance)
        counted = {"up": 0}

        async def body() -> Any:
            async for chunk in request.content.iter_any():
                counted["up"] += len(chunk)
                if counted["up"] > MAX_REQUEST:
                    raise ValueError("request body too large")
                yield chunk

        session = self._session(self.secrets.get(cred["ca"]) if cred.get("ca") else None)
        response: web.StreamResponse | None = None
        meter: Meter | None = None
        status = 502
        try:
            async with session.request(request.method, upstream + request.raw_path, headers=headers,
                                       data=body() if request.body_exists else None,
                                       allow_redirects=False) as upstream_response:  # fmt: skip
                status = upstream_response.status
                response = web.StreamResponse(status=status)
                for key, val in upstream_response.headers.items():
                    if key.lower() not in HOP and key.lower() != "content-length":
                        response.headers.add(key, val)
                meter = Meter(upstream_response.headers.get("Content-Type", ""))
                await response.prepare(request)
                async for chunk in upstream_response.content.iter_any():
                    account.bytes_down += len(chunk)
                    meter.feed(chunk)
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (TimeoutError, ClientError, ValueError, ssl.SSLError, OSError) as error:
            if response is not None:  # the stream had begun: end it where it broke
                log.warning("agent %s: stream from %s broke: %s", instance, upstream, error)
                return response
            log.warning("agent %s: upstream %s: %s", instance, upstream, error)
            return self._refuse(502, f"upstream {upstream} failed: {type(error).__name__}: {error}"[:500])
        finally:
            account.statuses[str(status)] = account.statuses.get(str(status), 0) + 1
            account.bytes_up += counted["up"]
            if meter is not None:
                meter.done()
                self._account(instance, cred, meter)

    def _account(self, instance: str, cred: dict[str, Any], meter: Meter) -> None:
        account = self.accounts[instance]
        account.input_tokens += meter.input
        account.output_tokens += meter.output
        if meter.input or meter.output:
            cost = price(cred.get("prices") or {}, meter.model)
            if cost is None:
                model = meter.model or "(unnamed)"
                if model not in account.unpriced:
                    account.unpriced = [*account.unpriced, model][-20:]
            else:
                account.usd += (meter.input * cost.get("input", 0.0) + meter.output * cost.get("output", 0.0)) / 1e6
        self.dirty.add(instance)

    def _session(self, ca: str | None) -> ClientSession:
        """One pool per authority: the system's, or the system's and a spec's ``api_ca`` (PEM, from secrets.json)."""
        key = ca or ""
        if key not in self.sessions:
            context = ssl.create_default_context()
            if ca:
                context.load_verify_locations(cadata=ca)
            self.sessions[key] = ClientSession(connector=TCPConnector(ssl=context, limit=0), auto_decompress=False,
                                               timeout=ClientTimeout(sock_connect=10, sock_read=600), trust_env=False)  # fmt: skip
        return self.sessions[key]

    # the loop ------------------------------------------------------------------------------------

    async def run(self) -> None:
        if not self.load():
            raise SystemExit(f"jackin-gateway: no configuration in {self.config_dir}")
        app = web.Application(client_max_size=MAX_REQUEST)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            while not stop.is_set():
                self.load()
                await self.bind()
                for instance in self.config["agents"]:
                    self._recheck(instance)
                self.save()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.25 if len(self.sites) < len(self.config["agents"]) else 1.0)
        finally:
            self.save()
            await self.runner.cleanup()
            for session in self.sessions.values():
                await session.close()


def small_tls_buffers() -> None:
    """Read each upstream TLS connection 16 KiB at a time (a TLS record's most), not asyncio's 256 KiB: the
    gateway holds one connection per stream in flight, and that buffer was most of its memory with many agents
    streaming at once (bench/gateway.py). ``SSLProtocol.max_size`` is asyncio's own class attribute (3.11+);
    left alone where it is missing."""
    import asyncio.sslproto as sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ:
        sslproto.SSLProtocol.max_size = TLS_READ


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    small_tls_buffers()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    os.umask(0o077)
    asyncio.run(Gateway(argv[1], argv[2]).run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
