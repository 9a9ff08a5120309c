"""What a host has of one fleet: the models of the state read (``jackin.facts.state_read``) and its parser.

Pure: no pyinfra here, so the CLI process can read and parse host state (status,
the clean check, plans) without loading pyinfra and gevent. ``jackin.facts.fleet``
wraps the same command and parser as a pyinfra fact for deploys.

The read is a list of ``##<section>`` headers, each followed by its lines. No
line carries a name an agent chose: paths (the only such names) are listed
NUL-terminated and hex-encoded by ``od``, so the output is hex digits whatever
bytes a file name holds (newlines, ``##``, non-UTF-8), and cannot forge a section
or a user. The parser is strict: a section that appears twice is an error, a
malformed line is dropped, never read as something to act on.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin import hostpaths
from jackin.errors import JackinError
from jackin.facts import ttl as ttl_facts
from jackin.facts.capacity import Capacity
from jackin.facts.capacity import parse as parse_capacity
from jackin.facts.cow import CowState
from jackin.facts.cow import parse_state as parse_cow
from jackin.facts.daemon import DaemonState
from jackin.facts.daemon import parse_section as parse_daemon
from jackin.facts.state_read import cow_unit
from jackin.hostpaths import UPLOADED_RESTIC, user_name, user_prefix


class StateError(JackinError, ValueError):
    """The host's state read is malformed (a repeated section): someone forged it, or the host is broken."""


class User(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    uid: int
    gid: int
    comment: str
    home: str
    shell: str


class PathInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    mode: str
    uid: int
    gid: int
    kind: str = "d"  # find's %y: d directory, l symlink, f file...


class Container(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    status: str
    running: bool
    restarts: int = 0
    started: str | None = None
    error: str | None = None
    networks: list[str] | None = None  # the networks it is attached to (None: not read)

    @property
    def instance(self) -> str | None:
        return self.labels.get("jackin.agent")


class Network(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    bridge: str | None = None
    subnets: list[str] = Field(default_factory=list)


class SnapshotDirs(BaseModel):
    """The restic tier on a host (root-only paths, no agent-chosen name): whether the fleet's snapshot
    dir and its repository exist, whether jackin's uploaded restic is there, and whether another
    fleet's snapshot dir is (then that restic is still in use and stays)."""

    model_config = ConfigDict(frozen=True)
    fleet: bool = False  # /var/lib/jackin/snapshots/<fleet>
    repo: bool = False  # ... and a restic repository in it (repo/config)
    restic: bool = False  # /usr/local/lib/jackin/restic
    others: bool = False  # anything else under /var/lib/jackin/snapshots

    def leftovers(self, fleet: str | None) -> list[str]:
        """What of the restic tier a torn-down fleet left: its dir, and the uploaded restic when no
        other fleet's dir remains to need it."""
        left = [hostpaths.snapshots_dir(fleet)] if self.fleet and fleet else []
        return left + ([UPLOADED_RESTIC] if self.restic and not self.others and not self.fleet else [])


class AppArmor(BaseModel):
    """The host's AppArmor, as the launch contract states it: whether the kernel's AppArmor is enabled
    (``/sys/module/apparmor/parameters/enabled`` is ``Y``; no such file: a kernel without it), and the
    mode of Docker's default profile when it is loaded (``docker-default (enforce)`` in
    ``/sys/kernel/security/apparmor/profiles``; Docker loads it when its daemon starts)."""

    model_config = ConfigDict(frozen=True)
    enabled: bool
    docker_default: str | None = None  # "enforce", "complain"...; None: not loaded (or unreadable)


class GatewayState(BaseModel):
    """The fleet's credential gateway on the host (jackin/net/gateway.py): what of it is there."""

    model_config = ConfigDict(frozen=True)
    dir: bool = False
    state: bool = False  # its state directory
    config: str | None = None  # sha256 of each file, None: missing
    program: str | None = None
    unit: str | None = None
    user: int | None = None  # its user's uid
    gid: int | None = None  # its group's gid, and its configuration directory's group
    dirgid: int | None = None
    active: str = ""
    enabled: str = ""

    @property
    def present(self) -> bool:
        return self.dir or self.state or self.unit is not None or self.user is not None

    def leftovers(self) -> list[str]:
        found = [k for k in ("dir", "state") if getattr(self, k)]
        return found + (["unit"] if self.unit else []) + (["user"] if self.user is not None else [])


def parse_gateway(lines: list[str]) -> GatewayState:
    words = {line.strip() for line in lines}
    pairs = dict(line.strip().split("=", 1) for line in lines if "=" in line)
    sha = re.compile(r"^[0-9a-f]{64}$")
    return GatewayState(dir="dir" in words, state="state" in words,
                        **{k: pairs[k] for k in ("config", "program", "unit") if sha.match(pairs.get(k, ""))},
                        user=int(pairs["user"]) if pairs.get("user", "").isdigit() else None,
                        gid=int(pairs["gid"]) if pairs.get("gid", "").isdigit() else None,
                        dirgid=int(pairs["dirgid"]) if pairs.get("dirgid", "").isdigit() else None,
                        active=pairs.get("ActiveState", ""), enabled=pairs.get("UnitFileState", ""))  # fmt: skip


class HostState(BaseModel):
    """What a host has of one fleet."""

    model_config = ConfigDict(frozen=True)
    fleet: str | None = None
    host: dict[str, str] = Field(default_factory=dict)  # hostname, distro, kernel, arch, dockerd, nft, docker_*
    users: dict[str, User] = Field(default_factory=dict)  # by name, every user in the uid range
    groups: dict[str, int] = Field(default_factory=dict)  # name -> gid, in the uid range
    paths: dict[str, PathInfo] = Field(default_factory=dict)
    docker: bool = False
    containers: dict[str, Container] = Field(default_factory=dict)
    networks: dict[str, Network] = Field(default_factory=dict)
    images: list[str] = Field(default_factory=list)
    marker: bool = False
    nft_table: bool = False
    nft_hash: str | None = None
    wall_held: bool = False  # the wall under every fleet's table (jackin/net/wall.py) is loaded, owned
    files: list[str] = Field(default_factory=list)  # the firewall's files that exist
    cow: CowState = Field(default_factory=CowState)  # the checkpoint tier's filesystem (jackin.snapshots.cow)
    snapshots: SnapshotDirs = Field(default_factory=SnapshotDirs)  # the restic tier's root-only paths
    # Delivered credentials (jackin/spec/credentials.py): the fleet's credentials dir, each agent's dir and
    # files (path -> info), and per instance the keyed digest of each delivered value (name -> HMAC).
    credentials: dict[str, PathInfo] = Field(default_factory=dict)
    credential_digests: dict[str, dict[str, str]] = Field(default_factory=dict)
    daemon: DaemonState | None = (
        None  # the Docker daemon's settings (read only with ``bootstrap``; see jackin.facts.daemon)
    )
    apparmor: AppArmor | None = None  # None: not in the read
    ttl: ttl_facts.TtlState = Field(default_factory=ttl_facts.TtlState)  # the time-to-live's file and units
    # Delivered work (jackin/work/bundles.py): the fleet's work dir, each agent's dir and files, and per
    # instance the sha256 of each delivered file (name -> digest), from its root-only record.
    work: dict[str, PathInfo] = Field(default_factory=dict)
    work_digests: dict[str, dict[str, str]] = Field(default_factory=dict)
    gateway: GatewayState = Field(default_factory=GatewayState)  # the fleet's credential gateway
    capacity: Capacity | None = None  # CPUs, memory, free disk (read with ``bootstrap`` only: placement weighs it)

    def user_by_uid(self, uid: int) -> User | None:
        return next((u for u in self.users.values() if u.uid == uid), None)

    def fleet_users(self, fleet: str) -> list[User]:
        """Users of ``fleet``: the comment ``jackin/<fleet>/<instance>`` and the name jackin gives that
        instance, both. (Teardown also checks the uid range, which only the plan knows.)"""
        prefix = f"jackin/{fleet}/"
        return [u for u in self.users.values() if u.comment.startswith(prefix) and
                u.name == user_name(fleet, u.comment[len(prefix):])]  # fmt: skip

    def fleet_groups(self, fleet: str) -> list[str]:
        return sorted(g for g in self.groups if g.startswith(user_prefix(fleet)))

    @property
    def leftovers(self) -> dict[str, list[str]]:
        """Everything of the fleet still on the host (for the clean check); other fleets' users
        in the same uid range are not ours."""
        users = sorted(self.users) if self.fleet is None else sorted(u.name for u in self.fleet_users(self.fleet))
        return {
            "users": users,
            "groups": [] if self.fleet is None else self.fleet_groups(self.fleet),
            "containers": sorted(self.containers),
            "networks": sorted(self.networks),
            "paths": sorted(self.paths),
            "files": (["marker"] if self.marker else []) + self.files,
            "nft": ["table"] if self.nft_table else [],
            "cow": list(self.cow.leftovers),
            "snapshots": self.snapshots.leftovers(self.fleet),
            "credentials": sorted(self.credentials),
            "ttl": [] if self.fleet is None else self.ttl.leftovers(self.fleet),
            "work": sorted(self.work),
            "gateway": self.gateway.leftovers(),
        }


def _systemd(lines: list[str]) -> dict[str, dict[str, str]]:
    """``##systemd``'s ``KEY=value`` lines (blank lines between units are gone) as unit Id -> properties:
    a key seen again starts the next unit. A unit not listed reads as systemctl reports an unknown one."""
    blocks: list[dict[str, str]] = [{}]
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep:
            continue
        if key in blocks[-1]:
            blocks.append({})
        blocks[-1][key] = value
    return {b["Id"]: b for b in blocks if b.get("Id")}


_APPARMOR_MODE = re.compile(r"[a-z]{1,16}")


def parse_apparmor(lines: list[str]) -> AppArmor:
    """``##apparmor``'s lines: enabled only when the kernel says ``Y``; a mode that is not a short
    lowercase word is dropped (not loaded), never shown as read."""
    values = dict(line.strip().split("=", 1) for line in lines if "=" in line)
    mode = values.get("docker-default")
    return AppArmor(enabled=values.get("enabled") == "Y",
                    docker_default=mode if mode and _APPARMOR_MODE.fullmatch(mode) else None)  # fmt: skip


# ``queue ATTEMPT``: the work was delivered by fleet.work for that attempt of the queue (fleet.up leaves it alone).
_WORK_DIGEST = re.compile(r"^.*/([a-z][a-z0-9-]*)\.digests:([a-z][a-z.]*) ([0-9a-f]{64}|[0-9]{1,18})$")


_DIGEST_LINE = re.compile(r"^.*/([a-z][a-z0-9-]*)\.digests:([A-Z][A-Z0-9_]*) ([0-9a-f]{64})$")


def work_records(lines: list[str]) -> dict[str, dict[str, str]]:
    """The ``##workdigests`` lines (``<dir>/<instance>.digests:NAME DIGEST``, ``queue ATTEMPT`` too) by instance."""
    return _digests(lines, _WORK_DIGEST)


def _digests(lines: list[str], pattern: re.Pattern[str] | None = None) -> dict[str, dict[str, str]]:
    """``<dir>/<instance>.digests:NAME HMAC`` lines -> instance -> name -> HMAC; other lines dropped."""
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        match = (pattern or _DIGEST_LINE).match(line.strip())
        if match:
            found.setdefault(match.group(1), {})[match.group(2)] = match.group(3)
    return found


def _sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("##"):
            current = line[2:].strip()
            if current in sections:
                raise StateError(
                    f"the host's state read has section {current!r} twice",
                    hint="something on the host forged it, or its shell printed it; nothing was changed",
                )
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    return sections


def _number(text: str) -> bool:
    return re.fullmatch(r"[0-9]{1,10}", text) is not None


def _users(lines: list[str]) -> dict[str, User]:
    """``getent passwd`` lines; anything but seven fields with numeric ids is dropped."""
    users = {}
    for line in lines:
        parts = line.split(":")
        if len(parts) == 7 and parts[0] and _number(parts[2]) and _number(parts[3]):
            users[parts[0]] = User(name=parts[0], uid=int(parts[2]), gid=int(parts[3]),
                                   comment=parts[4], home=parts[5], shell=parts[6])  # fmt: skip
    return users


def _groups(lines: list[str]) -> dict[str, int]:
    groups = {}
    for line in lines:
        name, _, gid = line.partition(":")
        if name and _number(gid):
            groups[name] = int(gid)
    return groups


def _paths(lines: list[str]) -> dict[str, PathInfo]:
    """``od -An -tx1`` of NUL-terminated records: hex digits only, else the section is ignored."""
    try:
        raw = bytes.fromhex("".join(lines))
    except ValueError:
        return {}
    paths = {}
    for record in raw.split(b"\0")[:-1]:
        fields = record.split(b" ", 4)
        if len(fields) != 5 or not all(f.isdigit() for f in fields[1:4]) or len(fields[0]) != 1:
            continue
        kind, mode, uid, gid = (f.decode("ascii") for f in fields[:4])
        paths[fields[4].decode("utf-8", "backslashreplace")] = PathInfo(
            kind=kind, mode=mode.zfill(4), uid=int(uid), gid=int(gid))  # fmt: skip
    return paths


def _with_live(daemon: DaemonState | None, live: list[str] | None) -> DaemonState | None:
    """The daemon's settings with the running daemon's live-restore from ``##live`` (when read)."""
    if daemon is None or live is None:
        return daemon
    answer = "".join(live).strip()
    return daemon.model_copy(update={"live_restore": {"true": True, "false": False}.get(answer)})


def parse_state(lines: list[str]) -> HostState:
    """The state read's output lines (as pyinfra gives them, or a string split on newlines) as a HostState.

    Output that does not parse raises StateError (that host fails; the others go on)."""
    try:
        return _parse_state(lines)
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # json, pydantic and shape errors
        raise StateError(f"the host's state read does not parse ({type(error).__name__}: {str(error)[:200]})") from None


def _parse_state(lines: list[str]) -> HostState:
    sections = _sections(lines)
    data: dict[str, Any] = {"containers": {}, "networks": {}}
    data["users"] = _users(sections.get("users", []))
    data["groups"] = _groups(sections.get("groups", []))
    data["paths"] = _paths(sections.get("paths", []))
    for line in sections.get("containers", []):
        info = json.loads(line)
        name = info["Name"].lstrip("/")
        state = info["State"]
        data["containers"][name] = Container(
            name=name, labels=info["Config"].get("Labels") or {}, status=state["Status"],
            running=state["Running"], restarts=info.get("RestartCount", 0),
            started=state.get("StartedAt"), error=state.get("Error") or None,
            networks=sorted(info["NetworkSettings"].get("Networks") or {}) if "NetworkSettings" in info else None,
        )  # fmt: skip
    for line in sections.get("networks", []):
        info = json.loads(line)
        subnets = [c.get("Subnet") for c in (info.get("IPAM") or {}).get("Config") or [] if c.get("Subnet")]
        data["networks"][info["Name"]] = Network(
            name=info["Name"], labels=info.get("Labels") or {}, subnets=subnets,
            bridge=(info.get("Options") or {}).get("com.docker.network.bridge.name"),
        )  # fmt: skip
    data["fleet"] = next(iter(sections.get("fleet", [])), None)
    units = _systemd(sections.get("systemd", []))
    docker = units.get("docker.service", {})
    data["host"] = dict(line.split("=", 1) for line in sections.get("host", []) if "=" in line)
    if "systemd" in sections:
        data["host"].update(docker_active=docker.get("ActiveState", ""), docker_enabled=docker.get("UnitFileState", ""))
    data["docker"] = bool(sections.get("docker"))
    data["images"] = sections.get("images", [])
    data["marker"] = bool(sections.get("marker"))
    data["nft_table"] = bool(sections.get("nft"))
    data["nft_hash"] = next(iter(sections.get("nfthash", [])), None)
    data["wall_held"] = bool(sections.get("wall"))
    data["files"] = sections.get("files", [])
    data["cow"] = parse_cow(sections.get("cow", []), sections.get("cowsubvols", []), sections.get("cowquota", []))
    if "systemd" in sections and data["cow"] is not None:
        mount = units.get(cow_unit(data["fleet"] or "") or "", {})
        data["cow"] = data["cow"].model_copy(update={"enabled": mount.get("UnitFileState") == "enabled"})
    words = {line.strip() for line in sections.get("snapshots", [])}
    data["snapshots"] = SnapshotDirs(**{k: k in words for k in ("fleet", "repo", "restic", "others")})
    data["credentials"] = _paths(sections.get("creds", []))
    data["credential_digests"] = _digests(sections.get("creddigests", []))
    data["daemon"] = _with_live(parse_daemon(sections.get("daemon", [])), sections.get("live"))
    data["apparmor"] = parse_apparmor(sections["apparmor"]) if "apparmor" in sections else None
    data["ttl"] = ttl_facts.parse_section(sections.get("ttl", []))
    if "systemd" in sections:
        timer = units.get(hostpaths.ttl_unit(data["fleet"] or "", "timer"), {})
        data["ttl"] = data["ttl"].model_copy(update={"enabled": timer.get("UnitFileState", ""),
                                                     "active": timer.get("ActiveState", "")})  # fmt: skip
    data["work"] = _paths(sections.get("work", []))
    data["work_digests"] = work_records(sections.get("workdigests", []))
    data["gateway"] = parse_gateway(sections.get("gateway", []))
    data["capacity"] = parse_capacity(sections["capacity"]) if "capacity" in sections else None
    return HostState(**data)
