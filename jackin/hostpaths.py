"""Every path and unit name jackin uses on a host, defined once: constants and name functions, pure.

Nothing here imports jackin: every package may use it. On a host, all of it root's::

    /srv/jackin/<fleet>/<instance>                      ROOT: the agents' homes (jackin/operations/agent_paths.py)
    /var/lib/jackin                                     STATE_DIR: the fleet markers (fleet-<fleet>.json), and
        credentials/<fleet>/<instance>                  delivered credentials (jackin/spec/credentials.py)
        work/<fleet>/<instance>                         delivered work (jackin/work/bundles.py)
        ttl/<fleet>                                     the time-to-live's deadline (jackin/operations/ttl.py)
        cow/<fleet>.img                                 the checkpoint tier's filesystem (jackin/snapshots/cow.py)
        snapshots/<fleet>                               the restic tier (jackin/snapshots/restic.py)
        build/                                          a role image built on the host (jackin/operations/host.py)
    /etc/jackin/nft, /etc/jackin/dns                    the egress policy and the filtering resolvers (jackin/net/)
    /usr/local/lib/jackin                               the guard script; restic when the host has none
    /run/jackin/nft                                     what the guard loaded (runtime state)
    /run/jackin-upload                                  uploads on their way into place
    /etc/systemd/system                                 the units: jackin-nft-*, jackin-dns-*, jackin-ttl-*, the mount

In an agent's container: /run/jackin/credentials and /run/jackin/work, read-only. Every name carries
the fleet's: users ``jk-<fleet>--<instance>``, the nftables table ``jackin-<fleet>``, the units above.
"""

from __future__ import annotations

import hashlib

ROOT = "/srv/jackin"
STATE_DIR = "/var/lib/jackin"
CREDENTIALS_DIR = f"{STATE_DIR}/credentials"  # per agent: <fleet>/<instance>/<NAME> (jackin/spec/credentials.py)
WORK_DIR = f"{STATE_DIR}/work"  # per agent: <fleet>/<instance>/{repo.bundle,task.md,work.json} (jackin/work/bundles.py)
TTL_DIR = f"{STATE_DIR}/ttl"
COW_DIR = f"{STATE_DIR}/cow"
SNAPSHOTS_ROOT = f"{STATE_DIR}/snapshots"
BUILD_DIR = f"{STATE_DIR}/build"  # build: host: the role's files, root-only, while docker build runs
ETC_DIR = "/etc/jackin"
NFT_DIR = f"{ETC_DIR}/nft"
DNS_DIR = f"{ETC_DIR}/dns"
LIB_DIR = "/usr/local/lib/jackin"
GUARD = f"{LIB_DIR}/nft-guard"
WALL_NFT = f"{LIB_DIR}/wall.nft"  # the wall under every fleet's policy (jackin/net/wall.py), shared by the fleets
WALL_UNIT = "jackin-wall.service"  # holds the wall: the table is owned by its nft process
WALL_TABLE = "jackin--wall"  # "--": no fleet's table (jackin-<fleet>) can have this name
RESOLVER = f"{LIB_DIR}/nft-resolve"  # earlier versions' host-side resolver: removed when found
UPLOADED_RESTIC = f"{LIB_DIR}/restic"
RUN_DIR = "/run/jackin"
NFT_RUN_DIR = f"{RUN_DIR}/nft"  # what the guard loaded, and its event flags (runtime state)
CREDENTIALS_TARGET = f"{RUN_DIR}/credentials"  # where the agent's container sees its credentials, read-only
WORK_TARGET = f"{RUN_DIR}/work"  # where the agent's container sees its work, read-only
UPLOAD_DIR = "/run/jackin-upload"  # uploads wait here, root-only, until installed: tmpfs, nothing left after a crash
UNIT_DIR = "/etc/systemd/system"
DROPIN_DIR = f"{UNIT_DIR}/docker.service.d"
DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_SOCKET = "/var/run/docker.sock"
MAX_NAME = 32  # Linux's longest user and group name


# --- the fleet and its agents ----------------------------------------------------------------


def unit_path(name: str) -> str:
    """Where systemd unit ``name`` is written."""
    return f"{UNIT_DIR}/{name}"


def fleet_dir(fleet: str) -> str:
    """The fleet's homes (with the checkpoint tier: the mount point of its btrfs)."""
    return f"{ROOT}/{fleet}"


def marker(fleet: str) -> str:
    """The file that says the fleet is on the host."""
    return f"{STATE_DIR}/fleet-{fleet}.json"


def user_prefix(fleet: str) -> str:
    return f"jk-{fleet}--"


def user_name(fleet: str, instance: str) -> str:
    """The agent's user, group, container and network: ``jk-<fleet>--<instance>``, hashed when too long."""
    name = f"{user_prefix(fleet)}{instance}"  # "--" never occurs in a name: fleets cannot clash
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: MAX_NAME - 7]}-{digest}"


def credentials_dir(fleet: str, instance: str | None = None) -> str:
    """The fleet's delivered credentials, or one agent's (mounted at CREDENTIALS_TARGET)."""
    return f"{CREDENTIALS_DIR}/{fleet}" + (f"/{instance}" if instance is not None else "")


def credentials_digests(fleet: str, instance: str) -> str:
    return f"{CREDENTIALS_DIR}/{fleet}/{instance}.digests"


def work_dir(fleet: str, instance: str | None = None) -> str:
    """The fleet's delivered work, or one agent's (mounted at WORK_TARGET)."""
    return f"{WORK_DIR}/{fleet}" + (f"/{instance}" if instance is not None else "")


def work_digests(fleet: str, instance: str) -> str:
    return f"{WORK_DIR}/{fleet}/{instance}.digests"


def snapshots_dir(fleet: str) -> str:
    return f"{SNAPSHOTS_ROOT}/{fleet}"


# --- the egress policy (jackin/net/) -----------------------------------------------------------


def table_name(fleet: str) -> str:
    """The fleet's nftables table (``inet``)."""
    return f"jackin-{fleet}"


def nft_unit(fleet: str) -> str:
    """Loads the table at boot; Docker requires it."""
    return f"jackin-nft-{fleet}.service"


def guard_unit(fleet: str) -> str:
    return f"jackin-nft-guard-{fleet}.service"


def check_timer(fleet: str) -> str:
    return f"jackin-nft-check-{fleet}.timer"


def check_service(fleet: str) -> str:
    return f"jackin-nft-check-{fleet}.service"


def resolve_timer(fleet: str) -> str:
    """Earlier versions' host-side resolver (removed when found), and its service below."""
    return f"jackin-nft-resolve-{fleet}.timer"


def resolve_service(fleet: str) -> str:
    return f"jackin-nft-resolve-{fleet}.service"


def dropin(fleet: str) -> str:
    """Docker's drop-in: Docker requires the fleet's table (``nft_unit``)."""
    return f"{DROPIN_DIR}/jackin-nft-{fleet}.conf"


def nft_runtime(fleet: str) -> list[str]:
    """What the guard keeps under /run: the recorded digest and its event flags."""
    return [f"{NFT_RUN_DIR}/{fleet}.loaded", f"{NFT_RUN_DIR}/{fleet}.pending", f"{NFT_RUN_DIR}/{fleet}.worker"]


def guard_paths(fleet: str) -> list[str]:
    """The guard's units and Docker's drop-in (jackin/net/guard.py), in the order they are written."""
    return [f"{UNIT_DIR}/{guard_unit(fleet)}", f"{UNIT_DIR}/{check_service(fleet)}", f"{UNIT_DIR}/{check_timer(fleet)}",
            dropin(fleet)]  # fmt: skip


def dns_dir(fleet: str) -> str:
    """The fleet's filtering resolvers' configuration: ``<instance>.conf`` and ``<instance>.servers``."""
    return f"{DNS_DIR}/{fleet}"


def dns_template(fleet: str) -> str:
    return f"jackin-dns-{fleet}@.service"


def dns_target(fleet: str) -> str:
    return f"jackin-dns-{fleet}.target"


def dns_unit(fleet: str, instance: str) -> str:
    return f"jackin-dns-{fleet}@{instance}.service"


def dns_units(fleet: str) -> str:
    """A glob of every filter of the fleet (for systemctl)."""
    return f"jackin-dns-{fleet}@*"


def dns_paths(fleet: str) -> list[str]:
    """What the filters leave on a host (the configuration directory as a whole)."""
    return [dns_dir(fleet), f"{UNIT_DIR}/{dns_template(fleet)}", f"{UNIT_DIR}/{dns_target(fleet)}"]


def dns_conf(fleet: str, instance: str) -> str:
    """An agent's filter's dnsmasq configuration (and ``.clean`` beside it: its query cleaner's)."""
    return f"{dns_dir(fleet)}/{instance}.conf"


DNS_CLEANER = f"{LIB_DIR}/dns-clean"  # the filters' query cleaner (jackin/net/dnsclean.py), shared by the fleets


def policy_files(fleet: str, filtered: list[str]) -> list[str]:
    """Every file of the fleet's egress policy as jackin/net/policy.py writes it, ``filtered``: the
    instances with a filtering resolver: the tables, the load unit, the filters and their cleaners,
    the guard, and the files the host's fleets share (the guard's and the cleaner's scripts, the wall)."""
    return [f"{NFT_DIR}/{fleet}.nft", f"{NFT_DIR}/{fleet}.lockdown.nft", unit_path(nft_unit(fleet)),
            *(dns_conf(fleet, i) for i in filtered), *(f"{dns_dir(fleet)}/{i}.clean" for i in filtered),
            unit_path(dns_template(fleet)), unit_path(dns_target(fleet)), GUARD, DNS_CLEANER, WALL_NFT,
            unit_path(WALL_UNIT), *guard_paths(fleet)]  # fmt: skip


def firewall_paths(fleet: str) -> list[str]:
    """Files a fleet's firewall writes, and those earlier versions wrote (the resolver service and
    timer, the domains list); the shared guard script (and an earlier version's resolver script)
    go with the last fleet."""
    return [
        f"{NFT_DIR}/{fleet}.nft", f"{NFT_DIR}/{fleet}.lockdown.nft", f"{NFT_DIR}/{fleet}.domains",
        f"{NFT_DIR}/{fleet}.sha", *(f"{UNIT_DIR}/{name}" for name in (
            nft_unit(fleet), resolve_service(fleet), resolve_timer(fleet))),
        *dns_paths(fleet), *guard_paths(fleet), *nft_runtime(fleet),
    ]  # fmt: skip


# --- the time-to-live and the checkpoint tier ----------------------------------------------------


def ttl_file(fleet: str) -> str:
    return f"{TTL_DIR}/{fleet}"


def ttl_unit(fleet: str, kind: str) -> str:
    """``kind``: ``timer`` or ``service``."""
    return f"jackin-ttl-{fleet}.{kind}"


def cow_image(fleet: str) -> str:
    return f"{COW_DIR}/{fleet}.img"


def systemd_escape_path(path: str) -> str:
    """``systemd-escape -p``: the unit name stem of a path ("/srv/jackin/a-b" -> "srv-jackin-a\\x2db")."""
    text = "/".join(p for p in path.split("/") if p)
    if not text:
        return "-"
    out = []
    for n, ch in enumerate(text):  # only a leading dot of the whole name is escaped
        keep = ch == "/" or (ch.isascii() and (ch.isalnum() or ch in ":_.") and not (n == 0 and ch == "."))
        out.append("-" if ch == "/" else ch if keep else "".join(f"\\x{b:02x}" for b in ch.encode()))
    return "".join(out)


def cow_unit(fleet: str) -> str:
    """The systemd mount unit of the fleet's checkpoint filesystem (``systemd-escape -p --suffix=mount``)."""
    return systemd_escape_path(fleet_dir(fleet)) + ".mount"


# --- the credential gateway (jackin/net/gateway.py) ---------------------------------------------

GATEWAY_ETC = f"{ETC_DIR}/gateway"  # per fleet: <fleet>/{config,secrets,logins}.json, root:<its group> 0440
GATEWAY_STATE = "/var/lib/jackin-gateway"  # per fleet: <fleet>/, the gateway's own (systemd StateDirectory=)
GATEWAY_PROGRAM = f"{LIB_DIR}/gatewayd"  # jackin/net/gatewayd.py, shared by the host's fleets
GATEWAY_PORT = 8377  # on each agent's bridge address


def gateway_dir(fleet: str) -> str:
    return f"{GATEWAY_ETC}/{fleet}"


def gateway_state(fleet: str) -> str:
    return f"{GATEWAY_STATE}/{fleet}"


def gateway_unit(fleet: str) -> str:
    return f"jackin-gateway-{fleet}.service"


def gateway_user(fleet: str) -> str:
    """The gateway's system user and group: ``jk-gw-<fleet>``, hashed when too long. No agent's name can
    be it: theirs have ``--`` after the fleet's (``user_prefix``)."""
    name = f"jk-gw-{fleet}"
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 7]}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
