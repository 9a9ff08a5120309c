"""The lab provider: disposable Debian servers as containers on the local Docker engine.

Each lab host runs systemd, sshd, nftables and a Docker engine of its own, and
publishes SSH on 127.0.0.1 only. Host keys are generated here, injected before
the first boot and pinned in the lab's known_hosts, so nothing is trusted on
first use. Everything the lab creates carries the label ``jackin.lab=<name>``;
its keys live in ``<state>/labs/<name>/``. ``up`` converges: it resumes stopped
hosts, replaces broken or outdated ones, and never clashes with a leftover.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jackin.errors import BusyError, LabError, SpecError
from jackin.lab import docker as dk
from jackin.lab import keys
from jackin.lab.boot import wait_booted
from jackin.lab.image import ensure_image, image_tag
from jackin.lab.limits import ensure_inotify
from jackin.lab.models import LabHost, LabService, LabStatus, Log
from jackin.lab.service import ensure_networks, ensure_service
from jackin.paths import private_dir, state_dir
from jackin.spec.models import LabSize
from jackin.spec.values import SLUG
from jackin.store import locks

LABEL = "jackin.lab"
DEFAULT_HOSTS = 2
RUN_FLAGS = (
    # Facts checked on this kind of machine: --privileged fails (no SYS_RESOURCE),
    # this set runs systemd, sshd and an inner dockerd.
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cgroupns=host",
    "--tmpfs", "/run", "--tmpfs", "/run/lock",
    "--stop-signal", "SIGRTMIN+3",
    # Loop devices for the checkpoint tier's loop-mounted btrfs, without --privileged. Checked on this
    # machine (Docker 20.10, cgroup v1 devices controller): the control node, plus block major 7 allowed
    # in the device cgroup (read, write, mknod); the image's jackin-loop-nodes.service makes /dev/loopN.
    # losetup, mkfs.btrfs and mount -o loop then work inside a lab host (tests/integration/test_checkpoints.py).
    "--device", "/dev/loop-control", "--device-cgroup-rule", "b 7:* rmw",
    # Lab hosts resolve lab names only: a lookup must never leave the machine.
    "--dns", "127.0.0.1",
)  # fmt: skip


class Lab:
    """One named lab: its containers, volumes, network, keys and known_hosts."""

    def __init__(self, name: str = "jackin", *, root: Path | None = None):
        if not re.fullmatch(SLUG, name) or len(name) > 24:
            raise SpecError(f"invalid lab name {name!r}: expected lower-case letters, digits and '-' (at most 24)")
        self.name = name
        self.dir = (root or state_dir()) / "labs" / name
        self.network = f"jackin-lab-{name}"
        # A second network with a non-private address range, standing in for "the internet"
        # in firewall tests, so no test ever needs a real outside address.
        self.public_network = f"jackin-lab-{name}-pub"
        self.label = f"{LABEL}={name}"

    # --- names and files ---------------------------------------------------

    @property
    def key_file(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    def host_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def container(self, host: str) -> str:
        return f"jackin-lab-{host}"

    def volume(self, host: str) -> str:
        return f"jackin-lab-{host}-docker"

    @property
    def service_container(self) -> str:
        return f"jackin-lab-{self.name}-svc"

    def _host_key(self, host: str) -> Path:
        return self.dir / "hosts" / host / "ssh_host_ed25519_key"

    def _fingerprint(self, host: str) -> str | None:
        """The fingerprint of the host key pinned for ``host`` on this machine (None: no key here)."""
        try:
            return keys.fingerprint(self._host_key(host).with_suffix(".pub").read_text())
        except (OSError, ValueError):
            return None

    # --- status --------------------------------------------------------------

    def status(self) -> LabStatus:
        """The lab's hosts and service, from the engine's socket, else two docker calls (the engine is
        asked whether it answers only when they fail: fleet.status looks the lab up on every read)."""
        try:
            containers = dk.labelled_containers(self.label)
        except LabError:
            dk.ensure_engine()  # no engine: say so (with its hint), else the docker call's own error
            raise
        hosts, service = [], None
        for info in containers:
            labels = info["Config"]["Labels"] or {}
            if labels.get("jackin.lab.role") == "service":
                service = LabService(
                    container=info["Name"].lstrip("/"),
                    state=info["State"]["Status"],
                    address=_ip(info, self.network),
                    public_address=_ip(info, self.public_network),
                )
            elif "jackin.lab.host" in labels:
                hosts.append(self._host_from(info))
        hosts.sort(key=lambda h: _index(h.name))
        return LabStatus(
            name=self.name, image=image_tag(), network=self.network, directory=self.dir,
            hosts=hosts, service=service,
        )  # fmt: skip

    def _host_from(self, info: dict[str, Any]) -> LabHost:
        labels = info["Config"]["Labels"]
        pinned = self._fingerprint(labels["jackin.lab.host"])
        bindings = (info["HostConfig"].get("PortBindings") or {}).get("22/tcp") or [{}]
        return LabHost(
            name=labels["jackin.lab.host"],
            container=info["Name"].lstrip("/"),
            state=info["State"]["Status"],
            port=int(bindings[0].get("HostPort") or labels.get("jackin.lab.port", 0)),
            key_file=self.key_file,
            known_hosts=self.known_hosts,
            lab_ip=_ip(info, self.network),
            public_ip=_ip(info, self.public_network),
            pinned=pinned is not None and keys.presents(info, pinned),
        )

    # --- up ------------------------------------------------------------------

    def up(
        self,
        hosts: int | None = None,
        *,
        log: Log = lambda _: None,
        timeout: float = 120,
        used_by: Collection[str] = (),
        sizes: Sequence[LabSize] | None = None,
    ) -> LabStatus:
        """Converge the lab to ``hosts`` running, reachable hosts (default: as many as it has, or 2).

        ``used_by``: other fleets on the lab. Their hosts are never replaced (it would destroy their
        agents and kept data): a host that needs it makes ``up`` fail, saying why and whose it is.
        ``sizes``: host 1's, host 2's... memory and CPUs (``LabSize``; a host beyond them: the machine's); a host
        of another size is replaced. None: the hosts keep the sizes they have (``lab.up`` by hand)."""
        if hosts is not None and not 1 <= hosts <= 64:
            raise SpecError(f"--hosts must be from 1 to 64, got {hosts}")
        dk.ensure_engine()
        with self._lock():
            tag = ensure_image(log)
            self._ensure_keys()
            ensure_networks(self)
            current = {h.name: h for h in self.status().hosts}
            want = hosts or len(current) or DEFAULT_HOSTS
            wanted = [self.host_name(i) for i in range(1, want + 1)]
            starting = sum(1 for n in wanted if n not in current or current[n].state != "running")
            ensure_inotify(starting, log)
            for name in sorted(set(current) - set(wanted), key=_index):
                log(f"{name}: removing (the lab now has {want} hosts)")
                self._remove_host(name)
            with ThreadPoolExecutor(max_workers=min(8, want)) as pool:
                list(pool.map(lambda n: self._converge_host(n, current.get(n), tag, log, used_by, _size(sizes, n)),
                              wanted))  # fmt: skip
            ensure_service(self, tag, log)
            status = self.status()
            self._write_known_hosts(status.hosts)
            wait_booted(status.hosts, timeout, log)
            return self.status()

    def _converge_host(self, name: str, host: LabHost | None, tag: str, log: Log, used_by: Collection[str],
                       size: LabSize | bool = False) -> None:  # fmt: skip
        if host is not None:
            info = dk.inspect("container", [host.container])[0]
            reason = self._replace_reason(name, info, tag)
            if reason is None and isinstance(size, LabSize) and _sized(info) != _limits(size):
                reason = "its size changed"
            if reason is not None and used_by:
                raise LabError(
                    f"lab host {name} would be replaced ({reason}), but fleet(s) {', '.join(sorted(used_by))} "
                    f"use lab {self.name!r}: replacing it would destroy their agents and kept data",
                    hint="bring those fleets down (fleet.down; kept data: fleet.gc --purge-kept) or use another "
                    "lab name; inv lab.up --name " + self.name + " by hand replaces it for everyone",
                )
            if reason is None:
                if host.state != "running":
                    log(f"{name}: resuming stopped host")
                    try:
                        dk.docker("start", host.container)
                        return
                    except LabError as error:
                        reason = f"could not be resumed ({error.message})"
                else:
                    return
            log(f"{name}: replacing ({reason})")
            self._remove_host(name)
        elif dk.exists("container", self.container(name)):
            raise LabError(
                f"a container named {self.container(name)} exists but is not labelled {self.label}",
                hint="it is not ours; remove or rename it, then run lab.up again",
            )
        log(f"{name}: creating")
        self._create_host(name, tag, size if isinstance(size, LabSize) else None)

    def _replace_reason(self, name: str, info: dict[str, Any], tag: str) -> str | None:
        if info["Config"]["Image"] != tag:
            return "its image recipe changed"
        if info["State"]["Status"] == "created":
            return "it was never started"
        if not self._host_key(name).exists():
            return "its host key is missing on this machine"
        pinned = self._fingerprint(name)
        if pinned is None or not keys.presents(info, pinned):
            return "it presents a host key other than the one pinned on this machine (made from another state dir)"
        if self.public_network not in (info.get("NetworkSettings", {}).get("Networks") or {}):
            return "it is not on the lab's public network"
        return None

    def _create_host(self, name: str, tag: str, size: LabSize | None = None) -> None:
        container, volume = self.container(name), self.volume(name)
        port = _free_port()
        key = self._host_key(name)
        private_dir(key.parent)
        keys.write_keypair(key, comment=f"{name} host key")
        labels = ["--label", self.label, "--label", f"jackin.lab.host={name}",
                  "--label", f"jackin.lab.port={port}", "--label", f"{keys.HOSTKEY_LABEL}={self._fingerprint(name)}"]  # fmt: skip
        if not dk.exists("volume", volume):
            dk.docker("volume", "create", *labels[:2], volume)
        dk.docker(
            "create", "--name", container, "--hostname", name, *labels, *RUN_FLAGS, *_size_flags(size),
            "--network", self.network, "-v", f"{volume}:/var/lib/docker",
            "-p", f"127.0.0.1:{port}:22", "--restart", "no", tag,
        )  # fmt: skip
        dk.docker("network", "connect", self.public_network, container)
        dk.docker("cp", "-", f"{container}:/", input=keys.injection(self.key_file.with_suffix(".pub"), key))
        dk.docker("start", container)

    def _remove_host(self, name: str) -> None:
        dk.docker("rm", "-f", "-v", self.container(name), check=False)
        dk.docker("volume", "rm", "-f", self.volume(name), check=False)
        shutil.rmtree(self._host_key(name).parent, ignore_errors=True)

    def _ensure_keys(self) -> None:
        private_dir(self.dir)
        if not self.key_file.exists():
            keys.write_keypair(self.key_file, comment=f"jackin lab {self.name}")

    def _write_known_hosts(self, hosts: list[LabHost]) -> None:
        lines = []
        for host in hosts:
            pub = self._host_key(host.name).with_suffix(".pub").read_text().split()
            lines.append(f"[{host.address}]:{host.port} {pub[0]} {pub[1]}\n")
        tmp = self.known_hosts.with_suffix(".tmp")
        tmp.write_text("".join(lines))
        tmp.chmod(0o600)
        tmp.replace(self.known_hosts)

    # --- down ----------------------------------------------------------------

    def down(self, *, log: Log = lambda _: None, unless: Callable[[], bool] | None = None) -> dict[str, list[str]]:
        """Remove every container, volume, network and key of this lab. Idempotent.

        ``unless``: asked under the lab's lock, the last word before anything goes (a fleet
        claiming the lab takes the same lock): true keeps the lab, and nothing is removed."""
        dk.ensure_engine()
        with self._lock():
            removed: dict[str, list[str]] = {"containers": [], "volumes": [], "networks": [], "files": []}
            if unless is not None and unless():
                return removed
            containers = dk.labelled("container", self.label)
            if containers:
                dk.docker("rm", "-f", "-v", *containers)
                removed["containers"] = containers
            volumes = dk.labelled("volume", self.label)
            if volumes:
                dk.docker("volume", "rm", "-f", *volumes)
                removed["volumes"] = volumes
            networks = dk.labelled("network", self.label)
            if networks:
                dk.docker("network", "rm", *networks)
                removed["networks"] = networks
            if self.dir.exists():
                removed["files"] = [str(self.dir)]
                shutil.rmtree(self.dir)
            for kind, names in removed.items():
                if names:
                    log(f"removed {len(names)} {kind}: {', '.join(names)}")
            return removed

    def leftovers(self) -> dict[str, list[str]]:
        """What of this lab still exists (empty lists when it is fully gone)."""
        return {
            "containers": dk.labelled("container", self.label),
            "volumes": dk.labelled("volume", self.label),
            "networks": dk.labelled("network", self.label),
            "files": [str(self.dir)] if self.dir.exists() else [],
        }

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The lab's lock (BusyError while another run changes the lab): claims and the last
        fleet's teardown decide under it, so a lab is never destroyed under a fleet joining it."""
        return self._lock()

    @contextmanager
    def _lock(self) -> Iterator[None]:
        def busy(_holder: str) -> BusyError:
            return BusyError(
                f"lab {self.name!r} is being changed by another run", hint="wait for it to finish, then try again"
            )

        with locks.held(private_dir(self.dir.parent) / f"{self.name}.lock", busy=busy):
            yield


def _size(sizes: Sequence[LabSize] | None, host: str) -> LabSize | bool:
    """The size ``sizes`` gives the host (the machine's: ``LabSize()``); False: keep whatever it has."""
    if sizes is None:
        return False
    index = _index(host)
    return sizes[index - 1] if 0 < index <= len(sizes) else LabSize()


def _limits(size: LabSize) -> tuple[int, int]:
    """(memory bytes, nano CPUs) as Docker records them in HostConfig (0: no limit)."""
    return size.memory or 0, round((size.cpus or 0) * 1e9)


def _sized(info: dict[str, Any]) -> tuple[int, int]:
    config = info.get("HostConfig") or {}
    return int(config.get("Memory") or 0), int(config.get("NanoCpus") or 0)


def _size_flags(size: LabSize | None) -> list[str]:
    flags = []
    if size is not None and size.memory:
        flags += ["--memory", str(size.memory), "--memory-swap", str(size.memory)]
    if size is not None and size.cpus:
        flags += ["--cpus", f"{size.cpus:g}"]
    return flags


def _index(host: str) -> int:
    tail = host.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _ip(info: dict[str, Any], network: str) -> str | None:
    net = (info.get("NetworkSettings", {}).get("Networks") or {}).get(network) or {}
    return net.get("IPAddress") or None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
