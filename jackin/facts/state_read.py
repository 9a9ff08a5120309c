"""The state read: one command, one round trip, of what a host has of one fleet (parsed by ``jackin.facts.state``).

Pure: no pyinfra here. The read is a list of ``##<section>`` headers, each followed by its lines. No
line carries a name an agent chose: paths (the only such names) are listed NUL-terminated and
hex-encoded by ``od``, so the output is hex digits whatever bytes a file name holds (newlines, ``##``,
non-UTF-8), and cannot forge a section or a user.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from jackin import hostpaths
from jackin.facts import capacity, dockerapi
from jackin.facts import ttl as ttl_facts
from jackin.facts.cow import state_section as cow_section
from jackin.facts.daemon import daemon_section
from jackin.hostpaths import NFT_DIR, ROOT, SNAPSHOTS_ROOT, UPLOADED_RESTIC, firewall_paths
from jackin.spec.values import SLUG

# One path record before hex encoding: type (find's %y: d, f, l...), octal mode, uid, gid, path, NUL.
PATH_FORMAT = "%y %m %U %G %p\\0"


def state_command(fleet: str, uid_min: int, uid_max: int, images: Sequence[str] = (), root: str = ROOT, *,
                  bootstrap: bool = False) -> str:  # fmt: skip
    """The state read. ``bootstrap``: also the Docker daemon's settings (``##daemon``), which only an
    up (its plan, ``jackin.lifecycle.hostplan``) decides on, and the host's capacity (``##capacity``, which
    placement weighs: ``jackin.facts.capacity``); ``##host`` always names the tools the bootstrap
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
[ -f /usr/lib/python3/dist-packages/aiohttp/__init__.py ] && [ -x /usr/bin/python3 ] && echo "aiohttp=yes"
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
echo '##wall'; command -v nft >/dev/null 2>&1 && nft list table inet {hostpaths.WALL_TABLE} 2>/dev/null | grep -q '^	flags owner$' && echo held
echo '##files'; for p in {" ".join(shlex.quote(p) for p in firewall_paths(fleet))}; do [ -e "$p" ] && echo "$p"; done
{cow_section(fleet, systemd=False)}
{snapshots_section(fleet)}
{_credentials_command(fleet)}
{APPARMOR_SECTION}
{ttl_facts.state_section(fleet, systemd=False)}
{_work_command(fleet)}
{gateway_section(fleet)}
{daemon_section(live=False, pid="$dp") if bootstrap else ""}
{capacity.SECTION if bootstrap else ""}
true
""".strip()


def cow_unit(fleet: str) -> str | None:
    """The checkpoint tier's mount unit; None for a name that is no fleet's (see ``cow.state_section``)."""
    return hostpaths.cow_unit(fleet) if re.fullmatch(SLUG, fleet) and len(fleet) <= 64 else None


def _units(fleet: str) -> list[str]:
    """The systemd units the read asks about: Docker's, the time-to-live's timer, the checkpoint mount."""
    return [u for u in ("docker.service", hostpaths.ttl_unit(fleet, "timer"), cow_unit(fleet)) if u]


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


def gateway_section(fleet: str) -> str:
    """``##gateway``: the credential gateway's pieces (jackin/net/gateway.py): ``dir``, the sha256 of its config,
    program and unit files (root's, in directories only root writes), its user's uid and gid, its directory's gid."""
    d, unit = shlex.quote(hostpaths.gateway_dir(fleet)), shlex.quote(hostpaths.unit_path(hostpaths.gateway_unit(fleet)))
    files = {"config": f"{d}/config.json", "program": hostpaths.GATEWAY_PROGRAM,
             "unit": shlex.quote(hostpaths.unit_path(hostpaths.gateway_unit(fleet)))}  # fmt: skip
    sums = "; ".join(f'[ -f {p} ] && echo "{k}=$(sha256sum < {p} | cut -d" " -f1)"' for k, p in files.items())
    return (
        f"echo '##gateway'; [ -d {d} ] && echo dir; {sums}; "
        f"[ -d {shlex.quote(hostpaths.gateway_state(fleet))} ] && echo state; "
        f'u=$(id -u {shlex.quote(hostpaths.gateway_user(fleet))} 2>/dev/null) && echo "user=$u"; '
        f'g=$(id -g {shlex.quote(hostpaths.gateway_user(fleet))} 2>/dev/null) && echo "gid=$g"; '
        f'[ -d {d} ] && echo "dirgid=$(stat -c %g {d})"; '
        # its unit's state, asked only where its unit is (a fleet with no gateway costs no systemctl)
        f"[ -f {unit} ] && systemctl show -p ActiveState -p UnitFileState {shlex.quote(hostpaths.gateway_unit(fleet))}"
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
