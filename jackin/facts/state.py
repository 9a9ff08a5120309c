"""What a host has of one fleet: the state read (one command, one round trip) and its parser.

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
import shlex
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin import hostpaths
from jackin.errors import JackinError
from jackin.facts import dockerapi
from jackin.facts import ttl as ttl_facts
from jackin.facts.cow import CowState
from jackin.facts.cow import parse_state as parse_cow
from jackin.facts.cow import state_section as cow_section
from jackin.facts.daemon import DaemonState, daemon_section
from jackin.facts.daemon import parse_section as parse_daemon
from jackin.hostpaths import NFT_DIR, ROOT, SNAPSHOTS_ROOT, UPLOADED_RESTIC, firewall_paths, user_name, user_prefix
from jackin.spec.values import SLUG

# One path record before hex encoding: type (find's %y: d, f, l...), octal mode, uid, gid, path, NUL.
PATH_FORMAT = "%y %m %U %G %p\\0"


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
        }


def state_command(fleet: str, uid_min: int, uid_max: int, images: Sequence[str] = (), root: str = ROOT, *,
                  bootstrap: bool = False) -> str:  # fmt: skip
    """The state read. ``bootstrap``: also the Docker daemon's settings (``##daemon``), which only an
    up (its plan, ``jackin.lifecycle.hostplan``) decides on; ``##host`` always names the tools the bootstrap
    installs when missing (dockerd, nft, dnsmasq, mkfs.btrfs, /bin/busybox)."""
    f = shlex.quote(fleet)
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    image_list = " ".join(shlex.quote(i) for i in images)
    paths = _paths_command(f"{root}/{f}")
    return f"""
{_systemd_command(fleet)}
echo '##fleet'; echo {f}
echo '##host'; set -- $(uname -n -r -m); echo "hostname=$1"; (. /etc/os-release 2>/dev/null; echo "distro=${{NAME%% GNU/Linux}} $VERSION_ID")
echo "kernel=$2"; echo "arch=$3"; echo "dockerd=$(command -v dockerd)"; echo "nft=$(command -v nft)"
echo "dnsmasq=$(command -v dnsmasq)"; echo "mkfs_btrfs=$(command -v mkfs.btrfs)"; [ -e /bin/busybox ] && echo "busybox=/bin/busybox"
echo '##users'; getent passwd | awk -F: -v c={shlex.quote(f"jackin/{fleet}/")} 'index($5, c) == 1 || ($3 >= {int(uid_min)} && $3 <= {int(uid_max)})'
echo '##groups'; getent group | awk -F: '$3 >= {int(uid_min)} && $3 <= {int(uid_max)} {{print $1 ":" $3}}'
echo '##paths'; {paths}
echo '##docker'
if command -v docker >/dev/null 2>&1; then
if ! {{ {dockerapi.USABLE}; }}; then
docker version --format ok 2>/dev/null
echo '##containers'; c=$(docker ps -aq --filter {label}); [ -z "$c" ] || docker inspect --format '{{{{json .}}}}' $c
echo '##networks'; n=$(docker network ls -q --filter {label}); [ -z "$n" ] || docker network inspect --format '{{{{json .}}}}' $n
echo '##images'; for i in {image_list}; do docker image inspect --format ok "$i" >/dev/null 2>&1 && echo "$i"; done
{"echo '##live'; docker info --format '{{.LiveRestoreEnabled}}' 2>/dev/null" if bootstrap else ":"}
else perl -e {shlex.quote(DOCKER_READ)} {f} {int(bootstrap)} {image_list}
fi
fi
echo '##marker'; [ -e {hostpaths.marker(f)} ] && echo yes
echo '##nft'; command -v nft >/dev/null 2>&1 && nft list table inet {shlex.quote(hostpaths.table_name(fleet))} >/dev/null 2>&1 && echo yes
echo '##nfthash'; cat {NFT_DIR}/{f}.sha 2>/dev/null
echo '##files'; for p in {" ".join(shlex.quote(p) for p in firewall_paths(fleet))}; do [ -e "$p" ] && echo "$p"; done
{cow_section(fleet, systemd=False)}
{snapshots_section(fleet)}
{_credentials_command(fleet)}
{APPARMOR_SECTION}
{ttl_facts.state_section(fleet, systemd=False)}
{_work_command(fleet)}
{daemon_section(live=False, pid="$dp") if bootstrap else ""}
true
""".strip()


def _cow_unit(fleet: str) -> str | None:
    """The checkpoint tier's mount unit; None for a name that is no fleet's (see ``cow.state_section``)."""
    return hostpaths.cow_unit(fleet) if re.fullmatch(SLUG, fleet) and len(fleet) <= 64 else None


def _units(fleet: str) -> list[str]:
    """The systemd units the read asks about: Docker's, the time-to-live's timer, the checkpoint mount."""
    return [u for u in ("docker.service", hostpaths.ttl_unit(fleet, "timer"), _cow_unit(fleet)) if u]


def _systemd_command(fleet: str) -> str:
    """``##systemd``: one ``systemctl show`` of every unit the read asks about (instead of one
    ``systemctl is-active``/``is-enabled``/``show`` each, ~5 ms of CPU apiece); ``$dp`` keeps
    dockerd's main pid for ``##daemon``."""
    units = " ".join(shlex.quote(u) for u in _units(fleet))
    return (
        f"u=$(systemctl show -p Id -p ActiveState -p UnitFileState -p MainPID {units} 2>/dev/null); "
        "echo '##systemd'; printf '%s\\n' \"$u\"; "
        "dp=; for l in $u; do case $l in MainPID=*) dp=${l#MainPID=}; break;; esac; done"
    )


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


# The Docker reads in one process instead of seven docker CLI starts (~25 ms of CPU each on a host):
# perl-base (Essential on Debian and Ubuntu) asks the daemon's socket the very API requests the CLI
# makes: ``/_ping`` (``docker version``: ``ok``), the fleet's containers and networks by label, each
# one's inspect document (``docker inspect``, one JSON line each; networks by name, as ``docker network
# ls`` lists them, so two reads of an unchanged host are the same text), each image (``docker image
# inspect``) and, with ``bootstrap`` (argument 2), ``/info``'s LiveRestoreEnabled (``##live``). The
# fleet's name and the images are arguments, never code; a request that fails prints nothing, as the
# CLI's would. Unless ``dockerapi.USABLE`` (the CLI could ask another engine, no socket, no perl): the docker CLI.
DOCKER_SOCKET = dockerapi.SOCKET
DOCKER_READ = (
    dockerapi.PRELUDE
    + r"""my ($fleet, $live, @images) = @ARGV;
my $filter = label_filter($fleet);
my ($ok) = get("/_ping"); print "ok\n" if $ok == 200;
print "##containers\n";
for (ids("/containers/json?all=1&filters=$filter")) { my ($c, $b) = get("/containers/$_/json"); print "$b\n" if $c == 200 }
print "##networks\n";
my @n = map { my ($c, $b) = get("/networks/$_"); $c == 200 ? ($b) : () } ids("/networks?filters=$filter");
print "$_\n" for sort @n;
print "##images\n";
for (@images) { my ($c) = get("/images/" . enc($_) . "/json"); print "$_\n" if $c == 200 }
if ($live) { my ($c, $b) = get("/info"); print "##live\n", ($c == 200 && $b =~ /"LiveRestoreEnabled":\s*(true|false)/ ? $1 : ""), "\n" }
"""
)


# ``##apparmor``: ``enabled=Y|N|`` and, when Docker's default profile is loaded, ``docker-default=MODE``.
# Kernel files only (no name an agent chose); a missing file reads as empty: no AppArmor, not loaded.
APPARMOR_SECTION = (
    "echo '##apparmor'; echo \"enabled=$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)\"; "
    "sed -n 's/^docker-default (\\([a-z]*\\))$/docker-default=\\1/p' "
    "/sys/kernel/security/apparmor/profiles 2>/dev/null | head -n 1"
)
_APPARMOR_MODE = re.compile(r"[a-z]{1,16}")


def parse_apparmor(lines: list[str]) -> AppArmor:
    """``##apparmor``'s lines: enabled only when the kernel says ``Y``; a mode that is not a short
    lowercase word is dropped (not loaded), never shown as read."""
    values = dict(line.strip().split("=", 1) for line in lines if "=" in line)
    mode = values.get("docker-default")
    return AppArmor(enabled=values.get("enabled") == "Y",
                    docker_default=mode if mode and _APPARMOR_MODE.fullmatch(mode) else None)  # fmt: skip


def snapshots_section(fleet: str) -> str:
    """``##snapshots``: words ``fleet``, ``repo``, ``restic``, ``others`` (see ``SnapshotDirs``).
    Root-only paths that jackin names; another fleet's dir is only counted, never named."""
    mine, root = shlex.quote(hostpaths.snapshots_dir(fleet)), shlex.quote(SNAPSHOTS_ROOT)  # quoted, any name
    return (
        f"echo '##snapshots'; [ -d {mine} ] && echo fleet; [ -f {mine}/repo/config ] && echo repo; "
        f"[ -e {shlex.quote(UPLOADED_RESTIC)} ] && echo restic; "
        f"[ -d {root} ] && find {root} -mindepth 1 -maxdepth 1 ! -name {shlex.quote(fleet)} -print 2>/dev/null "
        f"| grep -q . && echo others"
    )


def _paths_command(fleet_dir: str) -> str:
    """The fleet dir, its entries (homes: names root made, in a dir only root writes) and each
    home's ``workspace``; nothing else of what agents own. Hex, so no name can forge a line."""
    fmt = shlex.quote(PATH_FORMAT)
    return (
        f"[ -d {fleet_dir} ] && {{ find {fleet_dir} -maxdepth 1 -printf {fmt}; "
        f"find {fleet_dir} -mindepth 2 -maxdepth 2 -name workspace -printf {fmt}; }} | od -An -v -tx1"
    )


def _credentials_command(fleet: str) -> str:
    """The fleet's credentials dir, each agent's dir and its files (hex, like ``_paths_command``), then
    the digest files' ``NAME HMAC`` lines prefixed by their path (``grep -H``). Only root writes there."""
    fmt, d = shlex.quote(PATH_FORMAT), shlex.quote(hostpaths.credentials_dir(fleet))
    return "\n".join(
        [
            f"echo '##creds'; [ -d {d} ] && find {d} -maxdepth 2 -printf {fmt} | od -An -v -tx1",
            f"echo '##creddigests'; [ -d {d} ] && grep -H '' {d}/*.digests 2>/dev/null",
        ]
    )


def _work_command(fleet: str) -> str:
    """The fleet's work dir, each agent's dir and files (hex), then the digest records' lines (``grep -H``)."""
    fmt, d = shlex.quote(PATH_FORMAT), shlex.quote(hostpaths.work_dir(fleet))
    return "\n".join(
        [
            f"echo '##work'; [ -d {d} ] && find {d} -maxdepth 2 -printf {fmt} | od -An -v -tx1",
            f"echo '##workdigests'; [ -d {d} ] && grep -H '' {d}/*.digests 2>/dev/null",
        ]
    )


_WORK_DIGEST = re.compile(r"^.*/([a-z][a-z0-9-]*)\.digests:([a-z][a-z.]*) ([0-9a-f]{64})$")


_DIGEST_LINE = re.compile(r"^.*/([a-z][a-z0-9-]*)\.digests:([A-Z][A-Z0-9_]*) ([0-9a-f]{64})$")


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
    data["files"] = sections.get("files", [])
    data["cow"] = parse_cow(sections.get("cow", []), sections.get("cowsubvols", []))
    if "systemd" in sections and data["cow"] is not None:
        mount = units.get(_cow_unit(data["fleet"] or "") or "", {})
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
    data["work_digests"] = _digests(sections.get("workdigests", []), _WORK_DIGEST)
    return HostState(**data)
