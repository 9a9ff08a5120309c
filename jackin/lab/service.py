"""The lab's stand-in for the internet: its networks (the private one the hosts share, and a public
one in a non-private range, so no firewall test needs a real outside address) and the test service on
both, HTTP on two ports, for proving firewalls."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable
from typing import Protocol

from jackin.errors import LabError
from jackin.lab import docker as dk


class LabNames(Protocol):
    """What the networks and the service need of a ``jackin.lab.lab.Lab``: its names (no import of it,
    which imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def network(self) -> str: ...
    @property
    def public_network(self) -> str: ...
    @property
    def service_container(self) -> str: ...


SERVICE_PORTS = (8080, 8081)
SERVICE_PUBLIC_HOST = 200  # the service's host number on the public network, outside the hosts' range
PUBLIC_RANGE = ipaddress.ip_network("198.18.0.0/15")  # benchmarking range (RFC 2544): not private
PUBLIC_SUBNETS = 512


_SERVICE_SCRIPT = """
import http.server, socketserver, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("jackin-lab-service port " + str(self.server.server_address[1]) + "\\n").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
servers = [S(("0.0.0.0", p), H) for p in PORTS]
for s in servers[1:]: threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
""".replace("PORTS", repr(SERVICE_PORTS))


def ensure_networks(lab: LabNames) -> None:
    """The lab's network, and its public one on the first free /24 of ``PUBLIC_RANGE``, searched from a
    start drawn from the lab's name."""
    if not dk.exists("network", lab.network):
        dk.docker("network", "create", "--label", lab.label, lab.network)
    if dk.exists("network", lab.public_network):
        return
    start = int(hashlib.sha256(lab.name.encode()).hexdigest(), 16) % PUBLIC_SUBNETS
    for offset in range(PUBLIC_SUBNETS):
        subnet = _public_subnet((start + offset) % PUBLIC_SUBNETS)
        hosts_range = subnet.replace(".0/24", ".0/25")  # hosts get .2-.127; the service .200
        done = dk.docker("network", "create", "--label", lab.label, "--subnet", subnet,
                         "--ip-range", hosts_range, lab.public_network, check=False, raw=True)  # fmt: skip
        if done.returncode == 0:
            return
        if "overlap" not in done.stderr.lower():
            raise LabError(f"docker network create {lab.public_network} failed: {done.stderr.strip()}")
    raise LabError(f"no free /24 left in {PUBLIC_RANGE} for lab {lab.name!r}", hint="remove old labs (inv lab.down)")


def public_ip(network: str, last: int) -> str:
    """The address ``last`` on the public network ``network`` (its subnet, as the engine has it)."""
    info = dk.inspect("network", [network])[0]
    subnet = ipaddress.ip_network(info["IPAM"]["Config"][0]["Subnet"])
    return str(subnet.network_address + last)


def ensure_service(lab: LabNames, tag: str, log: Callable[[str], None]) -> None:
    """The test service, running on the lab's image and both networks; made anew when outdated."""
    name = lab.service_container
    if dk.exists("container", name):
        info = dk.inspect("container", [name])[0]
        networks = info.get("NetworkSettings", {}).get("Networks") or {}
        current = info["Config"]["Image"] == tag and lab.public_network in networks
        if current and info["State"]["Status"] == "running":
            return
        if current:
            dk.docker("start", name)
            return
        dk.docker("rm", "-f", name)
    log("test service: starting (HTTP on ports " + ", ".join(map(str, SERVICE_PORTS)) + ")")
    dk.docker(
        "create", "--name", name, "--label", lab.label, "--label", "jackin.lab.role=service",
        "--network", lab.network, "--read-only", "--cap-drop", "ALL", "--user", "65534:65534",
        "--entrypoint", "python3", tag, "-c", _SERVICE_SCRIPT,
    )  # fmt: skip
    dk.docker(
        "network", "connect", "--ip", public_ip(lab.public_network, SERVICE_PUBLIC_HOST), lab.public_network, name
    )
    dk.docker("start", name)


def _public_subnet(index: int) -> str:
    return str(list(PUBLIC_RANGE.subnets(new_prefix=24))[index])
