"""What a host has of one fleet: the state read (one command, one round trip) and its parser.

Pure: no pyinfra here, so the CLI process can read and parse host state (status,
the clean check, plans) without loading pyinfra and gevent. ``jackin.facts.fleet``
wraps the same command and parser as a pyinfra fact for deploys.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jackin.firewall import NFT_DIR, owned_paths
from jackin.plan import ROOT, STATE_DIR


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

    def user_by_uid(self, uid: int) -> User | None:
        return next((u for u in self.users.values() if u.uid == uid), None)

    def fleet_users(self, fleet: str) -> list[User]:
        return [u for u in self.users.values() if u.comment.startswith(f"jackin/{fleet}/")]

    def fleet_groups(self, fleet: str) -> list[str]:
        return sorted(g for g in self.groups if g.startswith(f"jk-{fleet}--"))

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
        }


def state_command(fleet: str, uid_min: int, uid_max: int, images: list[str] = (), root: str = ROOT) -> str:
    f = shlex.quote(fleet)
    label = shlex.quote(f"label=jackin.fleet={fleet}")
    image_list = " ".join(shlex.quote(i) for i in images)
    return f"""
echo '##fleet'; echo {f}
echo '##host'; echo "hostname=$(hostname)"; (. /etc/os-release 2>/dev/null; echo "distro=${{NAME%% GNU/Linux}} $VERSION_ID")
echo "kernel=$(uname -r)"; echo "arch=$(uname -m)"; echo "dockerd=$(command -v dockerd)"; echo "nft=$(command -v nft)"
echo "docker_active=$(systemctl is-active docker 2>/dev/null)"; echo "docker_enabled=$(systemctl is-enabled docker 2>/dev/null)"
echo '##users'; getent passwd | awk -F: -v c={shlex.quote(f"jackin/{fleet}/")} 'index($5, c) == 1 || ($3 >= {int(uid_min)} && $3 <= {int(uid_max)})'
echo '##groups'; getent group | awk -F: '$3 >= {int(uid_min)} && $3 <= {int(uid_max)} {{print $1 ":" $3}}'
echo '##paths'; [ -d {root}/{f} ] && find {root}/{f} -maxdepth 2 -printf '%m %U %G %p\\n'
echo '##docker'; command -v docker >/dev/null 2>&1 && docker version --format ok 2>/dev/null
if command -v docker >/dev/null 2>&1; then
echo '##containers'; c=$(docker ps -aq --filter {label}); [ -z "$c" ] || docker inspect --format '{{{{json .}}}}' $c
echo '##networks'; n=$(docker network ls -q --filter {label}); [ -z "$n" ] || docker network inspect --format '{{{{json .}}}}' $n
echo '##images'; for i in {image_list}; do docker image inspect --format ok "$i" >/dev/null 2>&1 && echo "$i"; done
fi
echo '##marker'; [ -e {STATE_DIR}/fleet-{f}.json ] && echo yes
echo '##nft'; command -v nft >/dev/null 2>&1 && nft list table inet {shlex.quote("jackin-" + fleet)} >/dev/null 2>&1 && echo yes
echo '##nfthash'; cat {NFT_DIR}/{f}.sha 2>/dev/null
echo '##files'; for p in {" ".join(shlex.quote(p) for p in owned_paths(fleet))}; do [ -e "$p" ] && echo "$p"; done
true
""".strip()


def parse_state(lines: list[str]) -> HostState:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("##"):
            current = line[2:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    data: dict[str, Any] = {"users": {}, "groups": {}, "paths": {}, "containers": {}, "networks": {}}
    for line in sections.get("users", []):
        parts = line.split(":")
        if len(parts) >= 7:
            data["users"][parts[0]] = User(name=parts[0], uid=int(parts[2]), gid=int(parts[3]),
                                           comment=parts[4], home=parts[5], shell=parts[6])  # fmt: skip
    for line in sections.get("groups", []):
        name, _, gid = line.rpartition(":")
        data["groups"][name] = int(gid)
    for line in sections.get("paths", []):
        mode, uid, gid, path = line.split(" ", 3)
        data["paths"][path] = PathInfo(mode=mode.zfill(4), uid=int(uid), gid=int(gid))
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
    data["fleet"] = (sections.get("fleet") or [None])[0]
    data["host"] = dict(line.split("=", 1) for line in sections.get("host", []) if "=" in line)
    data["docker"] = bool(sections.get("docker"))
    data["images"] = sections.get("images", [])
    data["marker"] = bool(sections.get("marker"))
    data["nft_table"] = bool(sections.get("nft"))
    data["nft_hash"] = (sections.get("nfthash") or [None])[0]
    data["files"] = sections.get("files", [])
    return HostState(**data)
