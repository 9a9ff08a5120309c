"""The credential gateway's files on a host, rendered from the plan (pure: text and bytes, no I/O).

An agent whose API credential is in gateway mode (``jackin.spec.models.gateway_credential``) holds only a
placeholder (``Secrets.placeholder``, in its credential file) and a base URL on its own bridge
(``http://<bridge address>:8377<path>``). The host's gateway (``jackin.net.gatewayd``, a unit of its own
per fleet) holds the values and puts them into the requests it forwards, to the credential's upstream
only. On the host, per fleet::

    /etc/jackin/gateway/<fleet>/            root:<gateway group> 0750
        config.json                         root:<gateway group> 0440  agents, bridges, placeholders, budgets
        secrets.json                        root:<gateway group> 0440  the values (SFTP, never a command line)
    /var/lib/jackin-gateway/<fleet>/        the gateway's own (systemd StateDirectory=): usage, audit, denials
    /usr/local/lib/jackin/gatewayd          the program (shared by the host's fleets)
    /etc/systemd/system/jackin-gateway-<fleet>.service

The unit runs as the fleet's gateway user (``jk-gw-<fleet>``, a system user with no login and no home),
with no capabilities and systemd's sandboxing: it reads its own configuration, writes only its state
directory, and cannot see the agents' homes, the delivered credentials or other fleets' gateways.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jackin import hostpaths
from jackin.hostpaths import GATEWAY_PORT, GATEWAY_PROGRAM, gateway_dir, gateway_state, gateway_unit, gateway_user
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.spec.credentials import Secrets
from jackin.spec.models import API_CA  # the spec's api_ca: in the secrets file, for the gateway's upstream


def program() -> str:
    """The gateway's program, as the host runs it (``jackin/net/gatewayd.py``)."""
    return (Path(__file__).parent / "gatewayd.py").read_text()


def share(plan: FleetPlan) -> dict[str, float | int | None] | None:
    """This host's share of the fleet's budget: the total over the fleet's hosts (each runs every agent),
    rounded down, so the hosts together never spend more than the total."""
    if plan.budget is None:
        return None
    hosts = max(1, plan.host_count)
    out: dict[str, float | int | None] = {}
    for key, value in plan.budget.items():
        if value is None:
            out[key] = None
        elif key == "usd":
            out[key] = float(value) / hosts
        else:
            out[key] = int(value) // hosts
    return out


def _credential(agent: AgentPlan, values: Secrets) -> dict[str, object]:
    assert agent.gateway is not None
    g = agent.gateway
    login = {"login": g.login, "inject": "authorization", "beta": g.beta} if g.login else {}
    return {"placeholder": values.placeholder(agent.fleet, agent.instance, g.credential).decode(),
            "header": g.header, "upstream": g.upstream, "prices": g.prices, "paths": g.paths,
            "ca": f"{agent.instance}/{API_CA}" if g.ca else None, **login}  # fmt: skip


def secrets_blob(plan: FleetPlan, values: Secrets) -> bytes:
    """``secrets.json``: each gateway agent's value (and its upstream's CA), by ``<instance>/<NAME>``."""
    found: dict[str, str] = {}
    for agent in plan.gateway_agents:
        assert agent.gateway is not None
        if agent.gateway.login is None:  # a shared login's access token is in logins.json (jackin/net/logins.py)
            name = agent.gateway.credential
            found[f"{agent.instance}/{name}"] = values.value(agent.agent, name).decode()
        if agent.gateway.ca and values.has(agent.agent, API_CA):
            found[f"{agent.instance}/{API_CA}"] = values.value(agent.agent, API_CA).decode()
    return (json.dumps(found, sort_keys=True) + "\n").encode()


def config(plan: FleetPlan, values: Secrets) -> str:
    """``config.json``: the agents (their bridges, placeholders, upstreams, budgets), this host's share of the
    fleet's budget, and a keyed digest of ``secrets.json`` (so a changed value changes this file too)."""
    agents = {a.instance: {"bridge": a.bridge, "budget": a.gateway.budget if a.gateway else None,
                           "credentials": {a.gateway.credential: _credential(a, values)} if a.gateway else {}}
              for a in plan.gateway_agents}  # fmt: skip
    document = {"fleet": plan.fleet, "port": GATEWAY_PORT, "agents": agents, "fleet_budget": share(plan),
                "secrets": values.sealed(secrets_blob(plan, values))}  # fmt: skip
    text = json.dumps(document, sort_keys=True)
    document["digest"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return json.dumps(document, sort_keys=True, indent=1) + "\n"


def unit(fleet: str) -> str:
    """The gateway's systemd unit: its own user, no capabilities, a read-only view of the system but its
    state directory, the agents' homes and every credential directory out of sight."""
    user = gateway_user(fleet)
    hidden = " ".join(f"-{p}" for p in (hostpaths.ROOT, hostpaths.STATE_DIR, hostpaths.NFT_DIR, hostpaths.DNS_DIR))
    return f"""[Unit]
Description=jackin fleet {fleet}: credential gateway (its agents' API keys; jackin/net/gateway.py)
After=network-online.target docker.service
Wants=network-online.target

[Service]
User={user}
Group={user}
# The program's digest: a new program (shared by the host's fleets) changes every fleet's unit, so each restarts.
Environment=JACKIN_GATEWAY_PROGRAM={digest(program())[:16]}
ExecStart=/usr/bin/python3 -I {GATEWAY_PROGRAM} {gateway_dir(fleet)} {gateway_state(fleet)}
StateDirectory={gateway_state(fleet).removeprefix("/var/lib/")}
StateDirectoryMode=0700
Restart=always
RestartSec=1
SyslogIdentifier=jackin-gateway-{fleet}
UMask=0077
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
InaccessiblePaths={hidden}
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
MemoryMax=256M
TasksMax=64
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
"""


def unit_path(fleet: str) -> str:
    return hostpaths.unit_path(gateway_unit(fleet))


def digest(text: str | bytes) -> str:
    """sha256 hex of a file's bytes (what the state read prints for the gateway's files)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()
