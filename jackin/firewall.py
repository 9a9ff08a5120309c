"""Per-agent egress policy rendered as one nftables table per fleet.

The table ``inet jackin-<fleet>`` is ours alone (as sshuttle names its table
after its owner), so applying is "replace my table" and teardown is "delete my
table"; Docker's rules and other tables are never touched. A file that first
declares, deletes and re-creates the table is applied with ``nft -f`` in one
transaction, after ``nft -c -f`` accepts it: there is never a window with no
policy or with a half-applied one. If applying fails, a lockdown table that
drops all agent traffic takes its place: less access, never more.

Each agent's traffic is matched by its bridge (``iifname``) in the forward and
input hooks, and processes of its Unix user on the host by ``meta skuid``.
Order of an agent's egress chain:

    replies to inbound (published) connections     accept
    always denied (sets always_v4, always_v6)      deny   (whatever the entries say)
    other agents' bridges                          deny   (always)
    CIDR entries inside a private range (:port)    accept
    DNS to the allowed resolvers                   accept
    private and reserved ranges (v4 and v6)        deny   (unless allowed above)
    all other CIDR and address entries (:port)     accept (never private: see below)
    domain entries (addresses resolved on the host) accept (never private: see above)
    mode open: any other IPv4                      accept
    everything else (IPv6 unless allowed)          deny

Always denied: link-local (169.254.0.0/16 with the metadata address 169.254.169.254,
fe80::/10), the other clouds' metadata addresses (168.63.129.16, 100.100.100.200,
fd00:ec2::254), and every address of every host in the fleet (the plan's
``fleet_hosts``), so an agent reaches neither the sshd nor a published port of
another fleet host. The agent's Unix user on the host is also denied loopback
and IPv6 unique-local addresses (fc00::/7).

The private-range rule: a private destination opens only through an entry that
lies inside a private range (``10.1.0.0/16:5432``). An entry that covers private
ranges only by being wider than them (``0.0.0.0/0:443``, ``8.0.0.0/6``) comes
after the private deny, so it opens its public part and nothing private.

A guard on each host keeps the table loaded (``jackin.policy_guard``):
``nft monitor`` wakes it within a moment of any change to the table, a timer
checks every 10 s as the backstop; a missing or altered table is loaded
again, else the lockdown table, else the fleet's agent containers are stopped.

Traffic from an agent to the host itself (sshd, the Docker API, any service)
is dropped in the input hook. Denials are counted per agent and the denied
destinations kept for an hour in a set (``agent.denials``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

from jackin.plan import AgentPlan, FleetPlan
from jackin.policy_guard import GUARD, GUARD_SCRIPT, guard_units, runtime_paths
from jackin.spec.models import NetworkPolicy

PRIORITY = "filter - 5"  # before Docker's own filter chains; a drop anywhere is final
PRIVATE_V4 = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
)  # fmt: skip
PRIVATE_V6 = ("::1/128", "fc00::/7", "fec0::/10", "ff00::/8")
LINK_LOCAL_V4 = "169.254.0.0/16"
LINK_LOCAL_V6 = "fe80::/10"
METADATA_V4 = ("168.63.129.16", "100.100.100.200")  # Azure, Alibaba (169.254.169.254 is link-local)
METADATA_V6 = ("fd00:ec2::254",)  # AWS over IPv6
UNIQUE_LOCAL_V6 = "fc00::/7"
DOMAIN_TIMEOUT = "15m"
RESOLVE_EVERY = "5min"
NFT_DIR = "/etc/jackin/nft"
RESOLVER = "/usr/local/lib/jackin/nft-resolve"
UNIT_DIR = "/etc/systemd/system"


def table_name(fleet: str) -> str:
    return f"jackin-{fleet}"


def ident(instance: str) -> str:
    """An nftables identifier for an agent instance."""
    return re.sub(r"[^A-Za-z0-9_]", "_", instance)


@dataclass(frozen=True)
class Entry:
    """One parsed allow entry."""

    family: str  # "ip", "ip6" or "domain"
    target: str
    port: int | None


def parse_entry(value: str) -> Entry:
    target, port = value, None
    if value.startswith("["):
        end = value.index("]")
        target, rest = value[1:end], value[end + 1 :]
        port = int(rest[1:]) if rest else None
    elif value.count(":") == 1:
        target, raw = value.split(":")
        port = int(raw)
    try:
        network = ipaddress.ip_network(target, strict=True)
    except ValueError:
        return Entry("domain", target.lower(), port)
    return Entry("ip" if network.version == 4 else "ip6", str(network), port)


def enforcement(policy: NetworkPolicy) -> tuple[str, list[str]]:
    """What is enforced for an agent with ``policy``: ("full", []) or ("partial", [reasons])."""
    reasons = []
    entries = [parse_entry(e) for e in policy.allow]
    if any(e.family == "domain" for e in entries):
        reasons.append("domain entries allow the addresses a name resolves to on the host, so other "
                       "services at those addresses are reachable too")  # fmt: skip
    if policy.publish:
        reasons.append("published ports accept inbound connections on their bind address")
    return ("partial", reasons) if reasons else ("full", [])


def _port(port: int | None) -> str:
    return f" meta l4proto {{ tcp, udp }} th dport {port}" if port else ""


def is_private(entry: Entry) -> bool:
    """Is a CIDR entry inside a private range? Only such entries open private destinations."""
    network = ipaddress.ip_network(entry.target)
    ranges = PRIVATE_V4 if network.version == 4 else PRIVATE_V6
    return any(network.subnet_of(ipaddress.ip_network(r)) for r in ranges)  # type: ignore[arg-type]


def _agent_rules(agent: AgentPlan) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(sets, chain body, domain sets) for one agent."""
    name = ident(agent.instance)
    deny = f"goto deny_{name}"
    sets: list[str] = []
    domains: list[tuple[str, str]] = []
    body = [
        "ct direction reply accept",
        f"ip daddr @always_v4 {deny}",
        f"ip6 daddr @always_v6 {deny}",
        f'oifname "jk*" {deny}',
    ]
    domain_rules, wide_rules = [], []
    for i, entry in enumerate(parse_entry(e) for e in agent.policy.allow):
        if entry.family == "domain":
            set_name = f"dom_{name}_{i}"
            sets.append(f"set {set_name} {{ type ipv4_addr; flags timeout; }}")
            domains.append((set_name, entry.target))
            domain_rules.append(f"ip daddr @{set_name}{_port(entry.port)} accept")
        else:
            rule = f"{entry.family} daddr {entry.target}{_port(entry.port)} accept"
            (body if is_private(entry) else wide_rules).append(rule)
    for resolver in agent.policy.dns:
        family = "ip" if ipaddress.ip_address(resolver).version == 4 else "ip6"
        body.append(f"{family} daddr {resolver}{_port(53)} accept")
    body.append(f"ip daddr @private_v4 {deny}")
    body.append(f"ip6 daddr @private_v6 {deny}")
    # After the private-range deny: an entry wider than a private range opens only its public part.
    body += wide_rules
    # After the private-range deny: a name that resolves to a private address (DNS rebinding)
    # must not open an internal network. Only CIDR entries name private ranges.
    body += domain_rules
    if agent.policy.mode == "open":
        body.append("meta nfproto ipv4 accept")
    body.append(deny)
    sets += [
        f"counter drops_{name} {{ }}",
        f"set denied_{name} {{ type ipv4_addr . inet_service; flags dynamic, timeout; timeout 1h; size 4096; }}",
    ]
    return sets, body, domains


def _addresses(values: list[str], version: int) -> list[str]:
    """Addresses and networks of one IP version, merged where they overlap (nft refuses overlaps)."""
    networks = [n for n in (ipaddress.ip_network(v, strict=False) for v in values) if n.version == version]
    merged = ipaddress.collapse_addresses(networks)  # type: ignore[type-var]
    return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in merged]


def _static_sets(plan: FleetPlan) -> list[tuple[str, str, list[str]]]:
    """(name, type, elements) of the table's static sets: the always-denied and the private ranges.

    Their names start with always_ or private_: the guard's digest keeps their elements (any
    other set is filled at runtime, and its elements are not part of the digest)."""
    hosts = list(plan.fleet_hosts)
    return [
        ("always_v4", "ipv4_addr", _addresses([LINK_LOCAL_V4, *METADATA_V4, *hosts], 4)),
        ("always_v6", "ipv6_addr", _addresses([LINK_LOCAL_V6, *METADATA_V6, *hosts], 6)),
        ("private_v4", "ipv4_addr", list(PRIVATE_V4)),
        ("private_v6", "ipv6_addr", list(PRIVATE_V6)),
    ]


def host_addresses(addresses: list[str]) -> list[str]:
    """The IP literals among a fleet's host addresses, deduplicated and sorted (names are not
    resolved: the operator's resolver may not see what the hosts see)."""
    found = set()
    for address in addresses:
        try:
            found.add(ipaddress.ip_address(address))
        except ValueError:
            continue
    return [str(a) for a in sorted(found, key=lambda a: (a.version, a))]


def render(plan: FleetPlan) -> str:
    """The whole table, as an atomic replace: declare, delete, re-create."""
    table = table_name(plan.fleet)
    lines = [f"table inet {table}", f"delete table inet {table}", f"table inet {table} {{"]
    for name, kind, elements in _static_sets(plan):
        lines.append(f"\tset {name} {{ type {kind}; flags interval; elements = {{ {', '.join(elements)} }} }}")
    forward, inp, output, chains = [], [], [], []
    for agent in plan.agents:
        name = ident(agent.instance)
        sets, body, _ = _agent_rules(agent)
        lines += [f"\t{s}" for s in sets]
        forward.append(f'iifname "{agent.bridge}" jump egress_{name}')
        inp.append(f'iifname "{agent.bridge}" ct direction reply accept')
        inp.append(f'iifname "{agent.bridge}" goto deny_{name}')
        output.append(f"meta skuid {agent.uid} jump user_{name}")
        chains.append((f"egress_{name}", body))
        chains.append((f"user_{name}", [f'oifname "lo" goto deny_{name}', f"ip6 daddr {UNIQUE_LOCAL_V6} goto deny_{name}",
                                        f"jump egress_{name}"]))  # fmt: skip
        chains.append((f"deny_{name}", [
            f"meta nfproto ipv4 meta l4proto {{ tcp, udp }} update @denied_{name} {{ ip daddr . th dport }}",
            f'counter name "drops_{name}" drop',
        ]))  # fmt: skip
    for hook, rules in (("forward", forward), ("input", inp), ("output", output)):
        lines.append(f"\tchain {hook} {{")
        lines.append(f"\t\ttype filter hook {hook} priority {PRIORITY}; policy accept;")
        lines += [f"\t\t{r}" for r in rules]
        lines.append("\t}")
    for chain, rules in chains:
        lines.append(f"\tchain {chain} {{")
        lines += [f"\t\t{r}" for r in rules]
        lines.append("\t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_lockdown(plan: FleetPlan) -> str:
    """A table that drops all of the fleet's agent traffic: the fail-closed fallback."""
    table = table_name(plan.fleet)
    bridges = ", ".join(f'"{a.bridge}"' for a in plan.agents) or '"jk-none"'
    uids = ", ".join(str(a.uid) for a in plan.agents) or "0"
    body = [
        f"\tchain forward {{ type filter hook forward priority {PRIORITY}; policy accept; iifname {{ {bridges} }} drop; }}",
        f"\tchain input {{ type filter hook input priority {PRIORITY}; policy accept; iifname {{ {bridges} }} drop; }}",
        f"\tchain output {{ type filter hook output priority {PRIORITY}; policy accept; meta skuid {{ {uids} }} drop; }}",
    ]
    if not plan.agents:
        body = body[:0]
    return "\n".join([f"table inet {table}", f"delete table inet {table}", f"table inet {table} {{", *body, "}"]) + "\n"


def domains(plan: FleetPlan) -> list[tuple[str, str]]:
    """(set, domain) for every domain entry of every agent."""
    return [d for agent in plan.agents for d in _agent_rules(agent)[2]]


RESOLVE_SCRIPT = """#!/bin/sh
# Resolve a fleet's domain entries into its nftables sets (jackin). Usage: nft-resolve FLEET
# A name that does not resolve is logged and skipped: the rest of the policy holds.
fleet=$1
list=/etc/jackin/nft/$fleet.domains
[ -r "$list" ] || exit 0
status=0
while read -r set name; do
    [ -n "$set" ] || continue
    addrs=$(getent ahostsv4 "$name" 2>/dev/null | awk '{print $1}' | sort -u)
    if [ -z "$addrs" ]; then
        logger -t jackin-nft "fleet $fleet: cannot resolve $name; its entry allows nothing until it does"
        status=1
        continue
    fi
    elements=$(printf '%s timeout {timeout}, ' $addrs)
    # Flush and refill in one transaction: no window, stale addresses go, timeouts restart.
    printf 'flush set inet jackin-%s %s\nadd element inet jackin-%s %s { %s }\n' \\
        "$fleet" "$set" "$fleet" "$set" "${elements%, }" | nft -f - \\
        || logger -t jackin-nft "fleet $fleet: cannot update set $set for $name"
done < "$list"
exit $status
""".replace("{timeout}", DOMAIN_TIMEOUT)


def units(plan: FleetPlan) -> dict[str, str]:
    """systemd units: load the table before Docker starts containers; refresh domain sets."""
    fleet = plan.fleet
    load = f"""[Unit]
Description=jackin fleet {fleet}: agent egress policy (nftables table {table_name(fleet)})
DefaultDependencies=no
After=nftables.service local-fs.target
Before=docker.service network-pre.target
# Docker requires this unit (docker.service.d/jackin-nft-{fleet}.conf). Not PartOf=nftables.service:
# stopping nftables would then stop Docker; the guard (jackin-nft-guard-{fleet}) restores the table.
ReloadPropagatedFrom=nftables.service
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={GUARD} load {fleet}
ExecStartPost=-{RESOLVER} {fleet}
ExecReload=/bin/sh -c '{GUARD} load {fleet}; {RESOLVER} {fleet} || true'

[Install]
WantedBy=multi-user.target
"""
    resolve = f"""[Unit]
Description=jackin fleet {fleet}: resolve domain entries into the egress policy
After=jackin-nft-{fleet}.service

[Service]
Type=oneshot
ExecStart={RESOLVER} {fleet}
"""
    timer = f"""[Unit]
Description=jackin fleet {fleet}: refresh domain entries every {RESOLVE_EVERY}

[Timer]
OnBootSec=1min
OnUnitActiveSec={RESOLVE_EVERY}

[Install]
WantedBy=timers.target
"""
    return {
        f"jackin-nft-{fleet}.service": load,
        f"jackin-nft-resolve-{fleet}.service": resolve,
        f"jackin-nft-resolve-{fleet}.timer": timer,
    }


def bundle(plan: FleetPlan) -> dict[str, str]:
    """Every file the firewall needs on a host, by path."""
    files = {
        f"{NFT_DIR}/{plan.fleet}.nft": render(plan),
        f"{NFT_DIR}/{plan.fleet}.lockdown.nft": render_lockdown(plan),
        f"{NFT_DIR}/{plan.fleet}.domains": "".join(f"{s} {d}\n" for s, d in domains(plan)),
        RESOLVER: RESOLVE_SCRIPT,
    }
    files.update({f"{UNIT_DIR}/{name}": text for name, text in units(plan).items()})
    files[GUARD] = GUARD_SCRIPT
    files.update(guard_units(plan.fleet))
    return files


def bundle_hash(plan: FleetPlan) -> str:
    digest = hashlib.sha256()
    for path, text in sorted(bundle(plan).items()):
        digest.update(path.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:16]


def owned_paths(fleet: str) -> list[str]:
    """Files a fleet's firewall writes (the shared resolver and guard scripts go with the last fleet)."""
    return [
        f"{NFT_DIR}/{fleet}.nft", f"{NFT_DIR}/{fleet}.lockdown.nft", f"{NFT_DIR}/{fleet}.domains",
        f"{NFT_DIR}/{fleet}.sha", *(f"{UNIT_DIR}/{name}" for name in (
            f"jackin-nft-{fleet}.service", f"jackin-nft-resolve-{fleet}.service", f"jackin-nft-resolve-{fleet}.timer")),
        *guard_units(fleet), *runtime_paths(fleet),
    ]  # fmt: skip
