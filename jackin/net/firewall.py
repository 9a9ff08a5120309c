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
    allowlist: the spec's dns servers              deny   (the filter's upstreams only)
    CIDR entries inside a private range (:port)    accept
    open: DNS to the spec's dns servers            accept
    private and reserved ranges (v4 and v6)        deny   (unless allowed above)
    all other CIDR and address entries (:port)     accept (never private: see below)
    allowlist: domain entries (addresses the agent's accept (never private: see above)
      filtering resolver answered it, jackin/net/dns.py)
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

Both base chains that see an agent's packets (forward, input) first mark them (``wall.MARK``): the
wall under every fleet's table (``jackin.net.wall``), which no flush of the ruleset removes, drops
any agent packet without the mark. While this table is missing, its agents have no network at all.

A guard on each host keeps the table loaded (``jackin.net.guard``; ``jackin.net.policy`` bundles
the table with the filters' and the guard's files):
``nft monitor`` wakes it within a moment of any change to the table, a timer
checks every 10 s as the backstop; a missing or altered table is loaded
again, else the lockdown table, else the fleet's agent containers are stopped.

Traffic from an agent to the host itself (sshd, the Docker API, any service)
is denied in the input hook, except DNS to its own filtering resolver: port 53
on an address of the agent's own bridge (``fib daddr . iif type local``), and, for an agent whose API
credential is in gateway mode (and whose mode is not ``none``), TCP to the credential gateway's port on
that same address (``jackin.net.gateway``): never another agent's bridge address.
Denials are counted per agent and the denied destinations kept for an hour in
a set (``agent.denials``). A denied packet is rejected, not silently dropped: the agent's connect fails
at once (ICMP administratively prohibited: "No route to host" over IPv4, "Permission denied" over IPv6)
instead of waiting out a TCP timeout, so a
runtime whose API the policy does not allow fails fast and says why. Nothing is forwarded either way; the
wall and the lockdown table still drop.
"""

from __future__ import annotations

import ipaddress
import re

from jackin.hostpaths import GATEWAY_PORT, GUARD, nft_unit, table_name
from jackin.net import wall
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.spec.values import Entry, parse_entry

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


def ident(instance: str) -> str:
    """An nftables identifier for an agent instance."""
    return re.sub(r"[^A-Za-z0-9_]", "_", instance)


def _port(port: int | None) -> str:
    return f" meta l4proto {{ tcp, udp }} th dport {port}" if port else ""


def _family(address: str) -> str:
    return "ip" if ipaddress.ip_address(address).version == 4 else "ip6"


def is_private(entry: Entry) -> bool:
    """Is a CIDR entry inside a private range? Only such entries open private destinations."""
    network = ipaddress.ip_network(entry.target)
    ranges = PRIVATE_V4 if network.version == 4 else PRIVATE_V6
    return any(network.subnet_of(ipaddress.ip_network(r)) for r in ranges)  # type: ignore[arg-type]  # ranges of the network's version


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
    domain_rules: list[str] = []
    wide_rules: list[str] = []
    open_mode = agent.policy.mode == "open"
    if agent.policy.mode == "allowlist":  # the spec's resolvers are the filter's upstreams, never the agent's
        body += [f"{_family(resolver)} daddr {resolver} {deny}" for resolver in agent.policy.dns]
    for i, entry in enumerate(parse_entry(e) for e in agent.policy.allow):
        if entry.family == "domain":
            if open_mode:
                continue  # open already allows every public address; the filter runs in allowlist mode
            set_name = f"dom_{name}_{i}"
            # Filled by the agent's filtering resolver with every address it answers (jackin/net/dns.py).
            sets.append(f"set {set_name} {{ type ipv4_addr; }}")
            domains.append((set_name, entry.target))
            domain_rules.append(f"ip daddr @{set_name}{_port(entry.port)} accept")
        else:
            rule = f"{entry.family} daddr {entry.target}{_port(entry.port)} accept"
            (body if is_private(entry) else wide_rules).append(rule)
    if open_mode:
        body += [f"{_family(resolver)} daddr {resolver}{_port(53)} accept" for resolver in agent.policy.dns]
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
    merged = ipaddress.collapse_addresses(networks)  # type: ignore[type-var]  # of one version (filtered above)
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
        if agent.dns_filter:  # its filtering resolver, on its own bridge's address and nowhere else
            inp.append(
                f'iifname "{agent.bridge}" meta l4proto {{ tcp, udp }} th dport 53 fib daddr . iif type local accept'
            )
        if agent.gateway is not None and agent.policy.mode != "none":  # its credential gateway, on its own bridge
            inp.append(f'iifname "{agent.bridge}" tcp dport {GATEWAY_PORT} fib daddr . iif type local accept')
        inp.append(f'iifname "{agent.bridge}" goto deny_{name}')
        output.append(f"meta skuid {agent.uid} jump user_{name}")
        chains.append((f"egress_{name}", body))
        chains.append((f"user_{name}", [f'oifname "lo" goto deny_{name}', f"ip6 daddr {UNIQUE_LOCAL_V6} goto deny_{name}",
                                        f"jump egress_{name}"]))  # fmt: skip
        chains.append((f"deny_{name}", [
            f"meta nfproto ipv4 meta l4proto {{ tcp, udp }} update @denied_{name} {{ ip daddr . th dport }}",
            f'counter name "drops_{name}" reject with icmpx type admin-prohibited',
        ]))  # fmt: skip
    if plan.agents:  # first: the wall (jackin/net/wall.py) drops agent packets that no fleet's table marked
        marks = wall.mark_rule([agent.bridge for agent in plan.agents])
        forward.insert(0, marks)
        inp.insert(0, marks)
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


def domain_sets(agent: AgentPlan) -> list[tuple[str, str]]:
    """(set, domain) for each domain entry of an agent, in spec order (its filter fills the sets)."""
    return _agent_rules(agent)[2]


def units(plan: FleetPlan) -> dict[str, str]:
    """The systemd unit that loads the table at boot, before Docker (which requires it) starts containers."""
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
ExecReload={GUARD} load {fleet}

[Install]
WantedBy=multi-user.target
"""
    return {nft_unit(fleet): load}
