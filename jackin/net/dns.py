"""The filtering resolver: one dnsmasq per agent that has domain entries (allowlist mode).

An agent resolves names only through its own filter, which listens on the agent's
bridge and nowhere else. The filter answers for the agent's allowlisted names only,
exactly those names and not their subdomains (``github.com`` allows ``github.com``,
not ``<data>.github.com``), forwarding them to its query cleaner (``jackin.net.dnsclean``),
which rebuilds each query (lower-cased, a fresh ID, no EDNS option of the agent's, A, AAAA
and CNAME only) before it goes to the spec's ``dns`` servers, or to the host's own resolvers
when the spec names none (the ``nameserver`` lines of ``/etc/resolv.conf``). dnsmasq
never gets default servers (``no-resolv``): with them, it forwarded every name.
Every other query is answered NXDOMAIN on the host and never forwarded, so
nothing an agent writes into a name reaches any upstream.

Every IPv4 address the filter answers (CNAME chains included) goes into that
entry's nftables set (dnsmasq's ``nftset``), so a domain entry allows exactly the
addresses the agent was given, at once. The filter caches nothing, so every
answer passes through the set again (after the table is reloaded, too), and the
TTL it hands out is at most ``MAX_TTL`` seconds so clients come back soon.

Files (all from the plan, pure text here):

    /etc/jackin/dns/<fleet>/<instance>.conf            the agent's dnsmasq configuration
    /etc/jackin/dns/<fleet>/<instance>.clean           its query cleaner's address, upstreams and names
    /usr/local/lib/jackin/dns-clean                    the query cleaner (shared by the fleets)
    /etc/systemd/system/jackin-dns-<fleet>@.service    one filter per agent: @<instance>
    /etc/systemd/system/jackin-dns-<fleet>.target      wants every filter of the fleet; enabled

Queries are logged per agent: ``journalctl -t jackin-dns-<fleet>-<instance>``.
"""

from __future__ import annotations

import shlex

from jackin import hostpaths
from jackin.hostpaths import DNS_DIR, LIB_DIR, NFT_DIR, RESOLVER, UNIT_DIR, dns_dir, dns_paths, dns_target, dns_template
from jackin.net import dnsclean, firewall
from jackin.plan.fleet import AgentPlan, FleetPlan

DNSMASQ = "/usr/sbin/dnsmasq"
MAX_TTL = 60


def conf_path(agent: AgentPlan) -> str:
    return hostpaths.dns_conf(agent.fleet, agent.instance)


def instance_unit(agent: AgentPlan) -> str:
    return hostpaths.dns_unit(agent.fleet, agent.instance)


def filtered(plan: FleetPlan) -> list[AgentPlan]:
    """The agents that resolve through a filter (allowlist mode with at least one domain entry)."""
    return [a for a in plan.agents if a.dns_filter]


def _names(agent: AgentPlan) -> dict[str, list[str]]:
    """Each allowlisted name of the agent, with its sets (a name with several ports has several)."""
    sets: dict[str, list[str]] = {}
    for set_name, name in firewall.domain_sets(agent):
        sets.setdefault(name, []).append(set_name)
    return sets


def config(agent: AgentPlan) -> str:
    """The dnsmasq configuration of one agent's filter."""
    sets = _names(agent)
    table = hostpaths.table_name(agent.fleet)
    lines = [
        f"# jackin fleet {agent.fleet}, agent {agent.instance}: the only resolver this agent can reach.",
        "# Answers the allowlisted names below (exactly these names), puts every address it answers",
        "# into the agent's nftables sets, and answers NXDOMAIN for anything else, never forwarding it.",
        f"interface={agent.bridge}",
        "except-interface=lo",
        "bind-dynamic",
        "no-hosts",
        "no-resolv",  # no default servers: only the names below are ever forwarded
        "cache-size=0",
        f"max-ttl={MAX_TTL}",
        "log-queries",
        "log-facility=-",
    ]
    cleaner = dnsclean.listen_address(agent.uid)  # which forwards to the spec's servers, or the host's
    for name, set_names in sets.items():
        lines.append(f"server=/{name}/{cleaner}")
        lines.append(f"local=/*.{name}/")  # subdomains are not the allowlisted name
        lines.append(f"nftset=/{name}/" + ",".join(f"4#inet#{table}#{s}" for s in set_names))
    lines.append("address=/#/")
    return "\n".join(lines) + "\n"


def units(plan: FleetPlan) -> dict[str, str]:
    """The per-agent filter template and the fleet's target that wants every filter."""
    fleet = plan.fleet
    service = f"""[Unit]
Description=jackin fleet {fleet}: filtering resolver of agent %i
After={hostpaths.nft_unit(fleet)} network.target
Before=docker.service
PartOf={dns_target(fleet)}

[Service]
# The query cleaner binds its address, then runs dnsmasq as its child; either ending ends both.
ExecStart={hostpaths.DNS_CLEANER} {dns_dir(fleet)}/%i.clean {DNSMASQ} --keep-in-foreground --conf-file={dns_dir(fleet)}/%i.conf --pid-file
Restart=on-failure
RestartSec=2
SyslogIdentifier=jackin-dns-{fleet}-%i
"""
    wants = " ".join(instance_unit(a) for a in filtered(plan))
    fleet_target = f"""[Unit]
Description=jackin fleet {fleet}: filtering resolvers of its agents
{f"Wants={wants}" if wants else "# no agent of this fleet resolves names"}

[Install]
WantedBy=multi-user.target
"""
    return {f"{UNIT_DIR}/{dns_template(fleet)}": service, f"{UNIT_DIR}/{dns_target(fleet)}": fleet_target}


def files(plan: FleetPlan) -> dict[str, str]:
    """Every file of the fleet's filters, by path (part of the firewall bundle)."""
    cleaners = {dnsclean.conf_path(a): dnsclean.config(a, list(_names(a))) for a in filtered(plan)}
    return {**{conf_path(a): config(a) for a in filtered(plan)}, **cleaners, **units(plan)}


def legacy_units(fleet: str) -> list[str]:
    """The host-side resolver of earlier versions: its timer and service."""
    return [hostpaths.resolve_timer(fleet), hostpaths.resolve_service(fleet)]


def legacy_paths(fleet: str) -> set[str]:
    """What the host-side resolver of earlier versions left: its units and its domain list."""
    return {f"{UNIT_DIR}/{u}" for u in legacy_units(fleet)} | {f"{NFT_DIR}/{fleet}.domains"}


def apply_commands(plan: FleetPlan, present: list[str]) -> list[str]:
    """After the table is loaded and the units reloaded (the target already enabled, with the
    policy's units: ``jackin.operations.firewall``): (re)start the plan's filters, stop the rest,
    and retire the host-side resolver of earlier versions (``present``: the fleet's files on the host)."""
    fleet = plan.fleet
    keep = [a.instance for a in filtered(plan)]
    pattern = shlex.quote(hostpaths.dns_units(fleet))
    commands = []
    # Exact names: the guard's own check timer also ends in .timer, and it must survive a re-apply.
    legacy = [p for p in present if p in legacy_paths(fleet)]
    if legacy:
        units_ = " ".join(legacy_units(fleet))
        commands += [
            f"systemctl disable --now --quiet {units_} 2>/dev/null || true",
            "rm -f " + " ".join(shlex.quote(p) for p in legacy),
            f"ls {NFT_DIR}/*.domains >/dev/null 2>&1 || rm -f {RESOLVER}",
            f"rmdir {LIB_DIR} 2>/dev/null || true",
            "systemctl daemon-reload",
        ]
    # Earlier versions' <instance>.servers files go too: the cleaner reads the host's resolvers itself.
    stale = "".join(f" ! -name {shlex.quote(i + '.conf')} ! -name {shlex.quote(i + '.clean')}" for i in keep)
    running = "|".join(instance_unit(a) for a in filtered(plan))
    commands += [
        f"[ ! -d {dns_dir(fleet)} ] || find {dns_dir(fleet)} -maxdepth 1 -type f{stale} -delete",
        f"for u in $(systemctl list-units --all --plain --no-legend {pattern} | awk '{{print $1}}'); do "
        f'case "$u" in {running + ") ;; " if running else ""}*) systemctl stop "$u" ;; esac; done',
    ]
    if keep:
        commands.append("systemctl restart " + " ".join(instance_unit(a) for a in filtered(plan)))
    commands.append(f"systemctl start {dns_target(fleet)}")
    return commands


def remove_commands(fleet: str, present: list[str], *, disabled: bool = False) -> list[str]:
    """Stop and remove the fleet's filters (before the generic removal of the fleet's files).
    ``disabled``: the caller's own ``systemctl disable --now`` named the target already (one call)."""
    if not any(p in present for p in dns_paths(fleet)):
        return []
    disable = [] if disabled else [f"systemctl disable --now --quiet {dns_target(fleet)} 2>/dev/null || true"]
    return [
        *disable,
        f"systemctl stop {shlex.quote(hostpaths.dns_units(fleet))} 2>/dev/null || true",
        f"rm -rf --one-file-system {dns_dir(fleet)}",
        f"rmdir {DNS_DIR} 2>/dev/null || true",
    ]
