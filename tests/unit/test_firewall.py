"""The egress firewall: the exact nftables ruleset (sshuttle's style: the whole text, in order),
its structural guarantees across several fleets, ``nft -c`` acceptance when this machine can check,
the host bundle and its hash, and the apply/remove commands as facts-to-commands tables."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
from pathlib import Path

import pytest

from jackin import hostpaths
from jackin.facts.state import HostState
from jackin.net import dns, firewall, policy, wall
from jackin.net.firewall import render, render_lockdown
from jackin.operations.firewall import apply_commands, remove_commands, unmarked_check
from jackin.operations.script import Upload, write_files
from jackin.plan import fleet as planning
from jackin.plan.fleet import FleetPlan, build, instances
from jackin.spec import NetworkPolicy, parse_inventory
from jackin.spec.models import enforcement
from jackin.spec.values import Entry, parse_entry

NFT = "/usr/sbin/nft"

SMALL = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: quiet
    - name: picky
      network:
        mode: allowlist
        allow: ["10.1.0.0/16:5432", "1.2.3.4", "[2001:db8::1]:443", "GitHub.com:443"]
        dns: ["9.9.9.9"]
    - name: roam
      network:
        mode: open
        allow: ["192.168.5.0/24"]
"""
MIXED = """\
fleet:
  name: mixed
  provider: lab
  network: {mode: allowlist, allow: ["api.example.com:443"], dns: ["1.1.1.1"]}
  agents:
    - name: quiet
      network: {mode: none}
    - name: picky
      network:
        mode: allowlist
        allow: ["2001:db8::/32", "[2001:db8::53]", "172.16.4.0/22:8443", "Registry.npmjs.org", "8.8.8.8:853"]
        dns: ["9.9.9.9", "2620:fe::fe"]
        publish: [{port: 8080, host_port: 18080}, {port: 53, protocol: udp, bind: 0.0.0.0}]
    - name: roam
      network: {mode: open, allow: ["10.20.0.0/16", "pypi.org:443"]}
    - name: a-very-long-agent-name-x
      count: 2
"""
MANY = """\
fleet:
  name: many
  provider: lab
  agents:
    - name: busy
      network:
        mode: allowlist
        allow: [{allow}]
        dns: ["9.9.9.9", "149.112.112.112", "2620:fe::9"]
""".replace("{allow}", ", ".join(
    [f'"203.0.{i}.0/24:{1000 + i}"' for i in range(100)]
    + [f'"svc{i}.example.com:443"' for i in range(20)]
    + [f'"[2001:db8::{i:x}]:22"' for i in range(10)]
))  # fmt: skip


HOSTS = ["192.0.2.10", "198.51.100.7", "2001:db8::10"]  # the fleet's hosts: always denied


def make_plan(text: str, uid_base: int = 60000, hosts: list[str] = HOSTS) -> FleetPlan:
    spec = parse_inventory(text, "f.yaml").fleet
    return build(spec, {instance: uid_base + n for n, (_, instance) in enumerate(instances(spec))}, hosts)


def empty_plan(fleet: str = "demo") -> FleetPlan:
    return FleetPlan(fleet=fleet, uid_min=60000, uid_max=60999, agents=[])


WIDE = """\
fleet:
  name: wide
  provider: lab
  agents:
    - name: wide
      network:
        mode: allowlist
        allow: ["0.0.0.0/0:443", "8.0.0.0/6", "10.0.0.0/8:5432", "[::/0]:443", "[fd00::/8]:22", "100.64.0.0/10"]
"""

PLAN = make_plan(SMALL)
PLANS = {"one": make_plan(SMALL.split("    - name: picky")[0]), "small": PLAN, "mixed": make_plan(MIXED),
         "many": make_plan(MANY), "wide": make_plan(WIDE, hosts=[]), "empty": empty_plan()}  # fmt: skip

# --- render: the exact ruleset ----------------------------------------------------

EXPECTED = """\
table inet jackin-demo
delete table inet jackin-demo
table inet jackin-demo {
\tset always_v4 { type ipv4_addr; flags interval; elements = { 100.100.100.200, 168.63.129.16, 169.254.0.0/16, 192.0.2.10, 198.51.100.7 } }
\tset always_v6 { type ipv6_addr; flags interval; elements = { 2001:db8::10, fd00:ec2::254, fe80::/10 } }
\tset private_v4 { type ipv4_addr; flags interval; elements = { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 172.16.0.0/12, 192.0.0.0/24, 192.168.0.0/16, 224.0.0.0/4, 240.0.0.0/4 } }
\tset private_v6 { type ipv6_addr; flags interval; elements = { ::1/128, fc00::/7, fec0::/10, ff00::/8 } }
\tcounter drops_quiet_1 { }
\tset denied_quiet_1 { type ipv4_addr . inet_service; flags dynamic, timeout; timeout 1h; size 4096; }
\tset dom_picky_1_3 { type ipv4_addr; }
\tcounter drops_picky_1 { }
\tset denied_picky_1 { type ipv4_addr . inet_service; flags dynamic, timeout; timeout 1h; size 4096; }
\tcounter drops_roam_1 { }
\tset denied_roam_1 { type ipv4_addr . inet_service; flags dynamic, timeout; timeout 1h; size 4096; }
\tchain forward {
\t\ttype filter hook forward priority filter - 5; policy accept;
\t\tiifname { "jkd03d2047", "jkd3945584", "jkcbcfd268" } meta mark set meta mark | 0x40000000
\t\tiifname "jkd03d2047" jump egress_quiet_1
\t\tiifname "jkd3945584" jump egress_picky_1
\t\tiifname "jkcbcfd268" jump egress_roam_1
\t}
\tchain input {
\t\ttype filter hook input priority filter - 5; policy accept;
\t\tiifname { "jkd03d2047", "jkd3945584", "jkcbcfd268" } meta mark set meta mark | 0x40000000
\t\tiifname "jkd03d2047" ct direction reply accept
\t\tiifname "jkd03d2047" goto deny_quiet_1
\t\tiifname "jkd3945584" ct direction reply accept
\t\tiifname "jkd3945584" meta l4proto { tcp, udp } th dport 53 fib daddr . iif type local accept
\t\tiifname "jkd3945584" goto deny_picky_1
\t\tiifname "jkcbcfd268" ct direction reply accept
\t\tiifname "jkcbcfd268" goto deny_roam_1
\t}
\tchain output {
\t\ttype filter hook output priority filter - 5; policy accept;
\t\tmeta skuid 60000 jump user_quiet_1
\t\tmeta skuid 60001 jump user_picky_1
\t\tmeta skuid 60002 jump user_roam_1
\t}
\tchain egress_quiet_1 {
\t\tct direction reply accept
\t\tip daddr @always_v4 goto deny_quiet_1
\t\tip6 daddr @always_v6 goto deny_quiet_1
\t\toifname "jk*" goto deny_quiet_1
\t\tip daddr @private_v4 goto deny_quiet_1
\t\tip6 daddr @private_v6 goto deny_quiet_1
\t\tgoto deny_quiet_1
\t}
\tchain user_quiet_1 {
\t\toifname "lo" goto deny_quiet_1
\t\tip6 daddr fc00::/7 goto deny_quiet_1
\t\tjump egress_quiet_1
\t}
\tchain deny_quiet_1 {
\t\tmeta nfproto ipv4 meta l4proto { tcp, udp } update @denied_quiet_1 { ip daddr . th dport }
\t\tcounter name "drops_quiet_1" reject with icmpx type admin-prohibited
\t}
\tchain egress_picky_1 {
\t\tct direction reply accept
\t\tip daddr @always_v4 goto deny_picky_1
\t\tip6 daddr @always_v6 goto deny_picky_1
\t\toifname "jk*" goto deny_picky_1
\t\tip daddr 9.9.9.9 goto deny_picky_1
\t\tip daddr 10.1.0.0/16 meta l4proto { tcp, udp } th dport 5432 accept
\t\tip daddr @private_v4 goto deny_picky_1
\t\tip6 daddr @private_v6 goto deny_picky_1
\t\tip daddr 1.2.3.4/32 accept
\t\tip6 daddr 2001:db8::1/128 meta l4proto { tcp, udp } th dport 443 accept
\t\tip daddr @dom_picky_1_3 meta l4proto { tcp, udp } th dport 443 accept
\t\tgoto deny_picky_1
\t}
\tchain user_picky_1 {
\t\toifname "lo" goto deny_picky_1
\t\tip6 daddr fc00::/7 goto deny_picky_1
\t\tjump egress_picky_1
\t}
\tchain deny_picky_1 {
\t\tmeta nfproto ipv4 meta l4proto { tcp, udp } update @denied_picky_1 { ip daddr . th dport }
\t\tcounter name "drops_picky_1" reject with icmpx type admin-prohibited
\t}
\tchain egress_roam_1 {
\t\tct direction reply accept
\t\tip daddr @always_v4 goto deny_roam_1
\t\tip6 daddr @always_v6 goto deny_roam_1
\t\toifname "jk*" goto deny_roam_1
\t\tip daddr 192.168.5.0/24 accept
\t\tip daddr @private_v4 goto deny_roam_1
\t\tip6 daddr @private_v6 goto deny_roam_1
\t\tmeta nfproto ipv4 accept
\t\tgoto deny_roam_1
\t}
\tchain user_roam_1 {
\t\toifname "lo" goto deny_roam_1
\t\tip6 daddr fc00::/7 goto deny_roam_1
\t\tjump egress_roam_1
\t}
\tchain deny_roam_1 {
\t\tmeta nfproto ipv4 meta l4proto { tcp, udp } update @denied_roam_1 { ip daddr . th dport }
\t\tcounter name "drops_roam_1" reject with icmpx type admin-prohibited
\t}
}
"""

EXPECTED_LOCKDOWN = """\
table inet jackin-demo
delete table inet jackin-demo
table inet jackin-demo {
\tchain forward { type filter hook forward priority filter - 5; policy accept; iifname { "jkd03d2047", "jkd3945584", "jkcbcfd268" } drop; }
\tchain input { type filter hook input priority filter - 5; policy accept; iifname { "jkd03d2047", "jkd3945584", "jkcbcfd268" } drop; }
\tchain output { type filter hook output priority filter - 5; policy accept; meta skuid { 60000, 60001, 60002 } drop; }
}
"""


def test_render_small_fleet_is_the_exact_ruleset() -> None:
    assert [a.bridge for a in PLAN.agents] == ["jkd03d2047", "jkd3945584", "jkcbcfd268"]
    assert render(PLAN) == EXPECTED


def test_render_lockdown_small_fleet_is_the_exact_ruleset() -> None:
    assert render_lockdown(PLAN) == EXPECTED_LOCKDOWN


def test_entries_wider_than_a_private_range_come_after_the_private_deny() -> None:
    """Private destinations open only through an entry inside a private range: 0.0.0.0/0:443 and
    8.0.0.0/6 open their public part, never 10.0.0.0/8; the metadata and fleet hosts never open."""
    assert chains(render(PLANS["wide"]))["egress_wide_1"] == [
        "ct direction reply accept",
        "ip daddr @always_v4 goto deny_wide_1",
        "ip6 daddr @always_v6 goto deny_wide_1",
        'oifname "jk*" goto deny_wide_1',
        "ip daddr 10.0.0.0/8 meta l4proto { tcp, udp } th dport 5432 accept",
        "ip6 daddr fd00::/8 meta l4proto { tcp, udp } th dport 22 accept",
        "ip daddr 100.64.0.0/10 accept",  # but not 100.100.100.200 (always denied above)
        "ip daddr @private_v4 goto deny_wide_1",
        "ip6 daddr @private_v6 goto deny_wide_1",
        "ip daddr 0.0.0.0/0 meta l4proto { tcp, udp } th dport 443 accept",
        "ip daddr 8.0.0.0/6 accept",
        "ip6 daddr ::/0 meta l4proto { tcp, udp } th dport 443 accept",
        "goto deny_wide_1",
    ]


@pytest.mark.parametrize(
    ("value", "private"),
    [("10.0.0.0/8", True), ("10.1.2.3", True), ("192.168.5.0/24", True), ("100.64.0.0/10", True),
     ("0.0.0.0/0", False), ("8.0.0.0/6", False), ("10.0.0.0/7", False), ("1.2.3.4", False),
     ("[fd00::1]", True), ("fc00::/7", True), ("::/0", False), ("2001:db8::/32", False), ("[::1]", True)],
)  # fmt: skip
def test_is_private(value: str, private: bool) -> None:
    assert firewall.is_private(parse_entry(value)) is private


def test_always_denied_sets_merge_the_fleet_hosts() -> None:
    hosts = ["10.9.0.5", "169.254.7.7", "100.100.100.200", "fd00:ec2::254", "2001:db8::1", "10.9.0.5"]
    sets = {name: elements for name, _, elements in firewall._static_sets(make_plan(SMALL, hosts=hosts))}
    # Overlaps are merged (nft refuses overlapping intervals): 169.254.7.7 lies in 169.254.0.0/16.
    assert sets["always_v4"] == ["10.9.0.5", "100.100.100.200", "168.63.129.16", "169.254.0.0/16"]
    assert sets["always_v6"] == ["2001:db8::1", "fd00:ec2::254", "fe80::/10"]


def test_host_addresses_keeps_ip_literals_only() -> None:
    given = ["web-1.example.com", "198.51.100.7", "2001:DB8::10", "192.0.2.10", "198.51.100.7", "localhost"]
    assert planning.host_addresses(given) == ["192.0.2.10", "198.51.100.7", "2001:db8::10"]


def test_render_is_deterministic() -> None:
    assert render(make_plan(SMALL)) == render(make_plan(SMALL)) == EXPECTED


# --- render: structure, over several fleets ---------------------------------------


def chains(text: str) -> dict[str, list[str]]:
    """Multi-line chains of a rendered table: name -> rules, in order (hook headers included)."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if m := re.fullmatch(r"\tchain (\S+) \{", line):
            current = found.setdefault(m.group(1), [])
        elif line == "\t}":
            current = None
        elif current is not None:
            assert line.startswith("\t\t"), line
            current.append(line[2:])
    return found


def egress_kinds(rules: list[str], name: str, policy: NetworkPolicy) -> list[int]:
    """Each rule of an egress chain as its rank in the required order (fails on an unknown rule)."""
    deny = f"goto deny_{name}"
    port53 = "meta l4proto { tcp, udp } th dport 53 accept"
    dns = {f"{'ip6' if ':' in r else 'ip'} daddr {r} {port53}" for r in policy.dns}
    upstreams = {f"{'ip6' if ':' in r else 'ip'} daddr {r} {deny}" for r in policy.dns}
    cidr = r"(ip6? daddr ([0-9a-f.:]+/\d+))( meta l4proto \{ tcp, udp \} th dport \d+)? accept"
    kinds = []
    for rule in rules:
        if rule == "ct direction reply accept":
            kinds.append(0)
        elif rule == f"ip daddr @always_v4 {deny}":
            kinds.append(1)
        elif rule == f"ip6 daddr @always_v6 {deny}":
            kinds.append(2)
        elif rule == f'oifname "jk*" {deny}':
            kinds.append(3)
        elif rule in upstreams and policy.mode == "allowlist":
            kinds.append(3.5)  # the filter's upstreams, never the agent's
        elif rule in dns and policy.mode == "open":
            kinds.append(5)
        elif (m := re.fullmatch(cidr, rule)) and firewall.is_private(Entry("ip", m.group(2), None)):
            kinds.append(4)  # inside a private range: before the private deny
        elif rule == f"ip daddr @private_v4 {deny}":
            kinds.append(6)
        elif rule == f"ip6 daddr @private_v6 {deny}":
            kinds.append(7)
        elif re.fullmatch(cidr, rule):
            kinds.append(8)  # public, or wider than a private range: after the private deny
        elif re.fullmatch(rf"ip daddr @dom_{name}_\d+( meta l4proto \{{ tcp, udp \}} th dport \d+)? accept", rule):
            kinds.append(9)
        elif rule == "meta nfproto ipv4 accept":
            kinds.append(10)
        elif rule == deny:
            kinds.append(11)
        else:
            pytest.fail(f"unexpected rule in egress_{name}: {rule}")
    return kinds


@pytest.mark.parametrize("key", list(PLANS))
def test_render_is_an_atomic_replace_of_our_table_only(key: str) -> None:
    plan = PLANS[key]
    text = render(plan)
    table = f"jackin-{plan.fleet}"
    assert text.splitlines()[:3] == [f"table inet {table}", f"delete table inet {table}", f"table inet {table} {{"]
    # Nothing outside our own table: Docker's rules and other tables are never touched.
    assert [line for line in text.splitlines() if not line.startswith("\t")] == text.splitlines()[:3] + ["}"]
    assert "flush" not in text and text.endswith("}\n")


@pytest.mark.parametrize("key", list(PLANS))
def test_egress_chain_order(key: str) -> None:
    plan = PLANS[key]
    found = chains(render(plan))
    for agent in plan.agents:
        name = firewall.ident(agent.instance)
        kinds = egress_kinds(found[f"egress_{name}"], name, agent.policy)
        entries = [parse_entry(e) for e in agent.policy.allow]
        assert kinds == sorted(kinds), f"egress_{name} out of order: {kinds}"
        assert kinds[:4] == [0, 1, 2, 3] and kinds[-1] == 11
        allowlist, open_mode = agent.policy.mode == "allowlist", agent.policy.mode == "open"
        assert kinds.count(3.5) == len(agent.policy.dns) * allowlist
        assert kinds.count(4) == sum(e.family != "domain" and firewall.is_private(e) for e in entries)
        assert kinds.count(5) == len(agent.policy.dns) * open_mode
        assert kinds.count(6) == kinds.count(7) == 1
        assert kinds.count(8) == sum(e.family != "domain" and not firewall.is_private(e) for e in entries)
        assert kinds.count(9) == sum(e.family == "domain" for e in entries) * allowlist  # after the private deny
        assert kinds.count(10) == open_mode
        assert kinds.count(11) == 1


@pytest.mark.parametrize("key", list(PLANS))
def test_hooks_input_output_and_user_chains(key: str) -> None:
    plan = PLANS[key]
    found = chains(render(plan))
    for hook in ("forward", "input", "output"):
        assert found[hook][0] == f"type filter hook {hook} priority filter - 5; policy accept;"
    if plan.agents:
        marks = wall.mark_rule([a.bridge for a in plan.agents])  # first in both: what the wall lets through
        assert found["forward"][1] == found["input"][1] == marks
        del found["forward"][1], found["input"][1]
    names = [firewall.ident(a.instance) for a in plan.agents]
    assert found["forward"][1:] == [f'iifname "{a.bridge}" jump egress_{n}' for a, n in zip(plan.agents, names)]
    assert found["output"][1:] == [f"meta skuid {a.uid} jump user_{firewall.ident(a.instance)}" for a in plan.agents]
    for agent in plan.agents:
        name = firewall.ident(agent.instance)
        # From the agent's bridge to the host itself: replies and DNS to its own filter (on its own
        # bridge's address only), everything else denied.
        from_bridge = [r for r in found["input"] if r.startswith(f'iifname "{agent.bridge}" ')]
        dns = [f'iifname "{agent.bridge}" meta l4proto {{ tcp, udp }} th dport 53 fib daddr . iif type local accept']
        assert from_bridge == [f'iifname "{agent.bridge}" ct direction reply accept',
                               *(dns if agent.dns_filter else []),
                               f'iifname "{agent.bridge}" goto deny_{name}']  # fmt: skip
        # The agent's Unix user on the host: no loopback, no IPv6 unique-local, then its egress policy.
        assert found[f"user_{name}"] == [f'oifname "lo" goto deny_{name}', f"ip6 daddr fc00::/7 goto deny_{name}",
                                         f"jump egress_{name}"]  # fmt: skip
        assert found[f"deny_{name}"][-1] == f'counter name "drops_{name}" reject with icmpx type admin-prohibited'
    assert len(found["input"]) == 1 + 2 * len(plan.agents) + sum(a.dns_filter for a in plan.agents)


def test_domain_sets_are_the_allowlist_agents_domain_entries() -> None:
    plan = PLANS["mixed"]
    sets = re.findall(r"^\tset (dom_\S+) \{ type ipv4_addr; \}$", render(plan), re.MULTILINE)
    assert [s for a in plan.agents for s, _ in firewall.domain_sets(a)] == sets
    assert [firewall.domain_sets(a) for a in PLAN.agents] == [[], [("dom_picky_1_3", "github.com")], []]
    # open mode allows every public address already: its domain entries need no set and no filter.
    roam = next(a for a in plan.agents if a.agent == "roam")
    assert roam.policy.allow[-1] == "pypi.org:443" and firewall.domain_sets(roam) == []


# --- render_lockdown ---------------------------------------------------------------


@pytest.mark.parametrize("key", ["one", "small", "mixed", "many"])
def test_lockdown_drops_every_bridge_and_uid(key: str) -> None:
    plan = PLANS[key]
    lines = render_lockdown(plan).splitlines()
    bridges = ", ".join(f'"{a.bridge}"' for a in plan.agents)
    uids = ", ".join(str(a.uid) for a in plan.agents)
    assert lines[:3] == [f"table inet jackin-{plan.fleet}", f"delete table inet jackin-{plan.fleet}",
                         f"table inet jackin-{plan.fleet} {{"]  # fmt: skip
    assert f"iifname {{ {bridges} }} drop;" in lines[3] and "hook forward" in lines[3]
    assert f"iifname {{ {bridges} }} drop;" in lines[4] and "hook input" in lines[4]
    assert f"meta skuid {{ {uids} }} drop;" in lines[5] and "hook output" in lines[5]
    assert lines[6:] == ["}"]


def test_lockdown_of_an_empty_plan_is_still_an_atomic_replace() -> None:
    assert render_lockdown(empty_plan()) == (
        "table inet jackin-demo\ndelete table inet jackin-demo\ntable inet jackin-demo {\n}\n"
    )


# --- nft -c: check only, never applied ---------------------------------------------


@pytest.fixture(scope="module")
def nft_check() -> str:
    if not os.path.exists(NFT):
        pytest.skip(f"{NFT} is not installed")
    if os.geteuid() != 0:
        pytest.skip("nft -c needs root")
    return NFT


@pytest.mark.parametrize("renderer", [render, render_lockdown], ids=["table", "lockdown"])
@pytest.mark.parametrize("key", list(PLANS))
def test_nft_accepts_the_rendered_file(nft_check: str, tmp_path: Path, key: str, renderer) -> None:
    path = tmp_path / "fleet.nft"
    path.write_text(renderer(PLANS[key]))
    done = subprocess.run([nft_check, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    if done.returncode and "Operation not permitted" in done.stderr:
        pytest.skip(f"nft -c is not permitted here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr


# --- enforcement ---------------------------------------------------------------------

DOMAIN_REASON = ("domain entries allow the addresses the agent's filtering resolver gave it for those names, "
                 "so other services at those addresses (shared CDNs) are reachable too")  # fmt: skip
PUBLISH_REASON = "published ports accept inbound connections on their bind address"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (NetworkPolicy(), ("full", [])),
        (NetworkPolicy(mode="allowlist", allow=["10.0.0.0/8", "1.2.3.4:443", "[2001:db8::1]:443"], dns=["9.9.9.9"]),
         ("full", [])),
        (NetworkPolicy(mode="open"), ("full", [])),
        (NetworkPolicy(mode="allowlist", allow=["1.2.3.4", "github.com:443"]), ("partial", [DOMAIN_REASON])),
        (NetworkPolicy(mode="open", allow=["pypi.org"]), ("full", [])),  # open allows every public address
        (NetworkPolicy(publish=[{"port": 8080}]), ("partial", [PUBLISH_REASON])),
        (NetworkPolicy(mode="allowlist", allow=["github.com"], publish=[{"port": 80}]),
         ("partial", [DOMAIN_REASON, PUBLISH_REASON])),
    ],
)  # fmt: skip
def test_enforcement(policy: NetworkPolicy, expected: tuple[str, list[str]]) -> None:
    assert enforcement(policy) == expected


# --- parse_entry -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "entry"),
    [
        ("10.0.0.0/8", Entry("ip", "10.0.0.0/8", None)),
        ("1.2.3.4", Entry("ip", "1.2.3.4/32", None)),
        ("1.2.3.4:443", Entry("ip", "1.2.3.4/32", 443)),
        ("10.1.0.0/16:5432", Entry("ip", "10.1.0.0/16", 5432)),
        ("[2001:db8::1]:443", Entry("ip6", "2001:db8::1/128", 443)),
        ("[2001:db8::1]", Entry("ip6", "2001:db8::1/128", None)),
        ("2001:db8::/32", Entry("ip6", "2001:db8::/32", None)),
        ("2001:DB8::/32", Entry("ip6", "2001:db8::/32", None)),
        ("github.com:443", Entry("domain", "github.com", 443)),
        ("GitHub.com", Entry("domain", "github.com", None)),
    ],
)
def test_parse_entry(value: str, entry: Entry) -> None:
    NetworkPolicy(mode="allowlist", allow=[value])  # the spec accepts what the firewall parses
    assert parse_entry(value) == entry


# --- bundle, hash and units ----------------------------------------------------------------


def test_bundle_paths() -> None:
    assert sorted(policy.bundle(PLAN)) == [
        "/etc/jackin/dns/demo/picky-1.clean",
        "/etc/jackin/dns/demo/picky-1.conf",
        "/etc/jackin/nft/demo.lockdown.nft",
        "/etc/jackin/nft/demo.nft",
        "/etc/systemd/system/docker.service.d/jackin-nft-demo.conf",
        "/etc/systemd/system/jackin-dns-demo.target",
        "/etc/systemd/system/jackin-dns-demo@.service",
        "/etc/systemd/system/jackin-nft-check-demo.service",
        "/etc/systemd/system/jackin-nft-check-demo.timer",
        "/etc/systemd/system/jackin-nft-demo.service",
        "/etc/systemd/system/jackin-nft-guard-demo.service",
        "/etc/systemd/system/jackin-wall.service",
        "/usr/local/lib/jackin/dns-clean",
        "/usr/local/lib/jackin/nft-guard",
        "/usr/local/lib/jackin/wall.nft",
    ]
    bundle = policy.bundle(PLAN)
    assert bundle["/etc/jackin/nft/demo.nft"] == EXPECTED
    assert bundle["/etc/jackin/nft/demo.lockdown.nft"] == EXPECTED_LOCKDOWN
    assert bundle["/usr/local/lib/jackin/nft-guard"] == policy.GUARD_SCRIPT
    # Everything a fleet writes is known to teardown (the filters' configurations as their directory;
    # the shared guard script goes with the last fleet), and so is what its guard keeps under /run.
    owned = hostpaths.firewall_paths("demo")
    shared = {firewall.GUARD, hostpaths.DNS_CLEANER, *wall.files()}  # these go with the last fleet
    assert all(path in owned or path.rsplit("/", 1)[0] in owned for path in set(bundle) - shared)
    assert {"/run/jackin/nft/demo.loaded", "/run/jackin/nft/demo.pending",
            "/run/jackin/nft/demo.worker"} <= set(owned)  # fmt: skip


def with_picky(policy: str) -> FleetPlan:
    return make_plan(SMALL.replace('dns: ["9.9.9.9"]', policy))


def test_bundle_hash_is_stable_and_follows_the_policy() -> None:
    digest = policy.bundle_hash(PLAN)
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    assert policy.bundle_hash(make_plan(SMALL)) == digest
    changed = {
        "dns": with_picky('dns: ["9.9.9.10"]'),
        "allow": make_plan(SMALL.replace("1.2.3.4", "1.2.3.5")),
        "mode": make_plan(SMALL.replace("mode: open", "mode: allowlist")),
        "uid": make_plan(SMALL, uid_base=61000),
        "fleet": make_plan(SMALL.replace("name: demo", "name: demo2")),
        "fleet hosts": make_plan(SMALL, hosts=HOSTS[:1]),
    }
    for what, plan in changed.items():
        assert policy.bundle_hash(plan) != digest, what
    # What the firewall does not depend on does not reload it.
    other_image = SMALL.replace("    - name: quiet\n", "    - name: quiet\n      image: x/y:2\n")
    assert policy.bundle_hash(make_plan(other_image)) == digest


def unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def test_load_unit_before_docker_not_part_of_nftables_loads_through_the_guard() -> None:
    load = unit(firewall.units(PLAN)["jackin-nft-demo.service"])
    # Not PartOf=nftables.service: Docker requires this unit, so stopping nftables would stop Docker.
    assert "PartOf" not in load["Unit"]
    assert load["Unit"]["ReloadPropagatedFrom"] == "nftables.service"
    assert "docker.service" in load["Unit"]["Before"].split()
    assert "nftables.service" in load["Unit"]["After"].split()  # nftables.conf flushes the ruleset first
    assert load["Service"]["Type"] == "oneshot" and load["Service"]["RemainAfterExit"] == "yes"
    assert load["Service"]["ExecStart"] == "/usr/local/lib/jackin/nft-guard load demo"  # policy, else lockdown
    assert load["Install"]["WantedBy"] == "multi-user.target"


def test_docker_requires_the_load_unit() -> None:
    dropin = unit(policy.bundle(PLAN)["/etc/systemd/system/docker.service.d/jackin-nft-demo.conf"])
    both = "jackin-wall.service jackin-nft-demo.service"  # the wall under every fleet, and the fleet's table
    assert dict(dropin["Unit"]) == {"Requires": both, "After": both}
    held = unit(policy.bundle(PLAN)["/etc/systemd/system/jackin-wall.service"])
    assert held["Unit"]["Before"].split()[0] == "docker.service" and held["Unit"]["Conflicts"] == "shutdown.target"
    assert (held["Service"]["ExecStart"], held["Service"]["ExecStartPost"], held["Service"]["ExecStop"]) == (
        "/usr/local/lib/jackin/nft-guard wall hold", "/usr/local/lib/jackin/nft-guard wall ready",
        "/usr/local/lib/jackin/nft-guard wall stop")  # fmt: skip
    assert "Restart" not in held["Service"]  # an automatic restart would restart Docker, which requires it


def test_guard_service_and_its_backstop_timer() -> None:
    bundle = policy.bundle(PLAN)
    guard = unit(bundle["/etc/systemd/system/jackin-nft-guard-demo.service"])
    assert guard["Service"]["Type"] == "simple" and guard["Service"]["Restart"] == "always"
    assert guard["Service"]["ExecStart"] == "/usr/local/lib/jackin/nft-guard watch demo"
    assert guard["Service"]["ExecStopPost"] == "/usr/local/lib/jackin/nft-guard stopped demo"
    assert guard["Install"]["WantedBy"] == "multi-user.target"
    assert "PartOf" not in guard["Unit"] and "Requires" not in guard["Unit"]
    timer = unit(bundle["/etc/systemd/system/jackin-nft-check-demo.timer"])
    assert "Unit" not in timer["Timer"]  # so it starts the service of the same name
    assert (timer["Timer"]["OnUnitActiveSec"], timer["Timer"]["AccuracySec"]) == ("10s", "1s")
    assert timer["Install"]["WantedBy"] == "timers.target"
    check = unit(bundle["/etc/systemd/system/jackin-nft-check-demo.service"])
    assert check["Service"]["ExecStart"] == "/usr/local/lib/jackin/nft-guard check demo"
    assert check["Service"]["Type"] == "oneshot"


def stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


# --- apply_commands ----------------------------------------------------------------------------

APPLY = ("if nft -c -f /etc/jackin/nft/demo.nft && nft -f /etc/jackin/nft/demo.nft; then :; "
         "else nft -f /etc/jackin/nft/demo.lockdown.nft && /usr/local/lib/jackin/nft-guard record demo lockdown || true; "
         "systemctl restart jackin-nft-guard-demo.service jackin-nft-check-demo.timer; "
         "echo 'egress policy rejected by nft: agents of fleet demo are locked down' >&2; exit 1; fi")  # fmt: skip


def test_apply_nothing_when_loaded_and_up_to_date() -> None:
    assert apply_commands(PLAN, HostState(nft_table=True, nft_hash=policy.bundle_hash(PLAN), wall_held=True)) == []
    # Up to date, but the wall's holder ended: only the wall is started again.
    assert apply_commands(PLAN, HostState(nft_table=True, nft_hash=policy.bundle_hash(PLAN))) == [
        unmarked_check("demo"), "systemctl start jackin-wall.service"]  # fmt: skip


@pytest.mark.parametrize(
    "state",
    [HostState(), HostState(nft_table=True, nft_hash="0" * 16), HostState(nft_table=False, nft_hash=None),
     HostState(nft_table=False, nft_hash=policy.bundle_hash(PLAN))],  # a lost table is loaded again
    ids=["fresh", "stale-hash", "no-table", "lost-table"],
)  # fmt: skip
def test_apply_writes_the_bundle_then_checks_applies_and_records_the_hash(state: HostState) -> None:
    bundle = policy.bundle(PLAN)
    commands = apply_commands(PLAN, state)
    assert commands[0] == unmarked_check("demo")  # the wall is not held here: first, no fleet it would cut off
    commands = commands[1:]
    writes = write_files(bundle)
    rest = commands[len(writes) :]
    assert commands[: len(writes)] == writes  # every file by SFTP (tested in test_operations_script)
    uploads = {c.target: (c.data.decode(), c.mode) for c in writes if isinstance(c, Upload)}
    assert uploads == {p: (t, "0755" if t.startswith("#!") else "0644") for p, t in bundle.items()}
    assert rest == [
        "systemctl enable --no-reload --quiet jackin-wall.service jackin-nft-demo.service "
        "jackin-nft-guard-demo.service jackin-nft-check-demo.timer jackin-dns-demo.target",
        "systemctl daemon-reload",  # the only reload
        "systemctl start jackin-wall.service || { echo 'the wall under the egress policy (jackin-wall.service: an "
        "nftables table with flags owner, Linux 5.12 or later) did not start; see journalctl -u jackin-wall' >&2; "
        "exit 1; }",  # before the table: a no-op when it runs (never restarted)
        "systemctl stop jackin-nft-guard-demo.service jackin-nft-check-demo.timer jackin-nft-check-demo.service "
        "2>/dev/null || true",
        APPLY,
        "/usr/local/lib/jackin/nft-guard record demo policy",
        "systemctl restart jackin-nft-guard-demo.service jackin-nft-check-demo.timer",
        *dns.apply_commands(PLAN, state.files),
        f"echo {policy.bundle_hash(PLAN)} > /etc/jackin/nft/demo.sha",
    ]


def run_apply(tmp_path: Path, nft_body: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The apply command under ``set -e`` (as the operation's script runs it), with a stub nft."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    log.touch()
    stub(bin_dir, "nft", f'echo "$*" >> {log}\n{nft_body}')
    stub(bin_dir, "nft-guard", f'echo "guard $*" >> {log}')
    stub(bin_dir, "systemctl", f'echo "systemctl $*" >> {log}')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    apply = APPLY.replace(firewall.GUARD, str(bin_dir / "nft-guard"))
    done = subprocess.run(["sh", "-c", f"set -e\n{apply}\necho after"], env=env, capture_output=True,
                          text=True, timeout=10)  # fmt: skip
    return done, log.read_text().splitlines()


@pytest.mark.parametrize(
    ("nft_body", "calls", "rc"),
    [
        ("exit 0", ["-c -f /etc/jackin/nft/demo.nft", "-f /etc/jackin/nft/demo.nft"], 0),
        ('[ "$1" = -c ] && exit 1; exit 0',
         ["-c -f /etc/jackin/nft/demo.nft", "-f /etc/jackin/nft/demo.lockdown.nft", "guard record demo lockdown"], 1),
        ('case "$2" in *lockdown*) exit 0;; esac; [ "$1" = -c ] && exit 0; exit 1',
         ["-c -f /etc/jackin/nft/demo.nft", "-f /etc/jackin/nft/demo.nft", "-f /etc/jackin/nft/demo.lockdown.nft",
          "guard record demo lockdown"], 1),
        ("exit 1", ["-c -f /etc/jackin/nft/demo.nft", "-f /etc/jackin/nft/demo.lockdown.nft"], 1),
    ],
    ids=["accepted", "check-fails", "apply-fails", "nothing-loads"],
)  # fmt: skip
def test_apply_checks_first_and_falls_back_to_lockdown(
    tmp_path: Path, nft_body: str, calls: list[str], rc: int
) -> None:
    """On failure the guard runs again before the run fails: it was stopped for the apply."""
    done, logged = run_apply(tmp_path, nft_body)
    guard = "jackin-nft-guard-demo.service jackin-nft-check-demo.timer"
    restarted = [f"systemctl restart {guard}"]  # enabled, with one reload, before the apply
    assert logged == calls + (restarted if rc else [])
    assert done.returncode == rc
    assert (done.stdout == "after\n") == (rc == 0)
    assert ("agents of fleet demo are locked down" in done.stderr) == (rc == 1)


# --- remove_commands ---------------------------------------------------------------------------

CLEANUP = ("ls /etc/jackin/nft/*.nft >/dev/null 2>&1 || { systemctl disable --now --quiet jackin-wall.service "
           "2>/dev/null || true; rm -f /usr/local/lib/jackin/nft-resolve /usr/local/lib/jackin/nft-guard "
           "/usr/local/lib/jackin/dns-clean /usr/local/lib/jackin/wall.nft /etc/systemd/system/jackin-wall.service; systemctl daemon-reload || true; "
           "systemctl reset-failed jackin-wall.service 2>/dev/null || true; rmdir /etc/jackin/nft /etc/jackin /usr/local/lib/jackin /run/jackin/nft "
           "/run/jackin /etc/systemd/system/docker.service.d 2>/dev/null || true; }")  # fmt: skip


RESET_FAILED = ("systemctl reset-failed jackin-nft-guard-demo.service jackin-nft-check-demo.timer "
                "jackin-nft-check-demo.service jackin-nft-resolve-demo.timer jackin-nft-resolve-demo.service "
                "jackin-dns-demo.target jackin-nft-demo.service 'jackin-dns-demo@*' 2>/dev/null || true")  # fmt: skip


def test_remove_nothing_when_nothing_is_there() -> None:
    assert remove_commands(PLAN, HostState()) == []


def test_remove_table_only_when_loaded() -> None:
    assert remove_commands(PLAN, HostState(nft_table=True)) == ["nft delete table inet jackin-demo"]


def test_remove_everything() -> None:
    """The guard and its timer first (they would load the table again), the load unit only disabled
    (Docker requires it through its drop-in: stopping it now would stop Docker); then every file,
    Docker's drop-in included, one reload for all of it, and only then the load unit's stop and the table."""
    files = hostpaths.firewall_paths("demo")
    assert remove_commands(PLAN, HostState(nft_table=True, files=files)) == [
        "systemctl disable --now --no-reload --quiet jackin-nft-guard-demo.service jackin-nft-check-demo.timer "
        "jackin-nft-check-demo.service jackin-nft-resolve-demo.timer jackin-nft-resolve-demo.service "
        "jackin-dns-demo.target 2>/dev/null || true",
        "systemctl disable --no-reload --quiet jackin-nft-demo.service 2>/dev/null || true",
        *dns.remove_commands("demo", files, disabled=True),
        "rm -f " + " ".join(files),
        "systemctl daemon-reload",
        "systemctl stop jackin-nft-demo.service 2>/dev/null || true",
        RESET_FAILED,
        "nft delete table inet jackin-demo",
        CLEANUP,
    ]
    assert "/etc/systemd/system/docker.service.d/jackin-nft-demo.conf" in files
    assert sum(c.startswith("systemctl daemon-reload") for c in remove_commands(PLAN, HostState(files=files))) == 1


def test_remove_resets_every_failed_unit_of_the_fleet() -> None:
    """A unit of the fleet left failed (a check killed mid-run, a filter that gave up) stays loaded as
    "not-found failed" once its file is removed, and the host stays "degraded" after the fleet is gone:
    the teardown resets each unit the fleet's firewall ever installs, after its last stop."""
    files = hostpaths.firewall_paths("demo")
    commands = remove_commands(PLAN, HostState(nft_table=True, files=files))
    assert (
        commands.index(RESET_FAILED) == commands.index("systemctl stop jackin-nft-demo.service 2>/dev/null || true") + 1
    )
    installed = {p.rsplit("/", 1)[1] for p in policy.bundle(PLAN) if p.startswith("/etc/systemd/system/jackin-")}
    installed.remove("jackin-wall.service")  # shared: reset with the last fleet (CLEANUP)
    named = set(RESET_FAILED.split()[2:-3])
    for unit in installed:  # the filters' template by its instances
        assert (unit if "@." not in unit else f"'{unit.split('@')[0]}@*'") in named, unit
    assert {u for u in named if "resolve" in u} == {"jackin-nft-resolve-demo.timer", "jackin-nft-resolve-demo.service"}
    # Names not loaded are refused (systemctl exits 1) while the loaded ones are reset: never fatal under set -e.
    assert RESET_FAILED.endswith(" 2>/dev/null || true")
    # Only the fleet's files were there (no unit): nothing to reset.
    only = remove_commands(PLAN, HostState(files=["/etc/jackin/nft/demo.nft"]))
    assert not any("reset-failed" in c for c in only if c != CLEANUP)  # the cleanup resets the shared wall


def test_remove_only_the_files_that_exist() -> None:
    files = ["/etc/jackin/nft/demo.nft", "/etc/jackin/nft/demo.sha"]
    assert remove_commands(PLAN, HostState(files=files)) == [
        "rm -f /etc/jackin/nft/demo.nft /etc/jackin/nft/demo.sha",
        "systemctl daemon-reload",
        CLEANUP,
    ]


def run_cleanup(tmp_path: Path, files: list[str]) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """The resolver cleanup under ``set -e`` (as the teardown script runs it), in a scratch tree."""
    etc, lib = tmp_path / "etc" / "jackin", tmp_path / "lib" / "jackin"
    (etc / "nft").mkdir(parents=True), lib.mkdir(parents=True)
    (lib / "nft-resolve").write_text("#!/bin/sh\n")  # earlier versions' resolver
    for name in files:
        (etc / name).write_text("") if name != "-nft" else (etc / "nft").rmdir()
    command = (CLEANUP.replace("/etc/jackin", str(etc)).replace("/usr/local/lib/jackin", str(lib))
               .replace("/run/jackin", str(tmp_path / "run")).replace("/etc/systemd", str(tmp_path / "systemd")))  # fmt: skip
    stub(tmp_path, "systemctl", "exit 1")  # none here: every call fails, and the cleanup goes on
    done = subprocess.run(["sh", "-c", f"set -e\n{command}\necho after"], capture_output=True, text=True, timeout=10,
                          env={"PATH": f"{tmp_path}:/usr/sbin:/usr/bin:/sbin:/bin"})  # fmt: skip
    return done, etc, lib


@pytest.mark.parametrize(
    ("files", "resolver_kept"),
    [([], False), (["nft/other.nft", "nft/other.lockdown.nft"], True), (["nft/other.nft"], True)],
    ids=["last-fleet", "another-fleet", "another-fleet-table-only"],
)
def test_remove_keeps_the_shared_resolver_while_another_fleet_remains(
    tmp_path: Path, files: list[str], resolver_kept: bool
) -> None:
    done, etc, lib = run_cleanup(tmp_path, files)
    assert (done.returncode, done.stdout) == (0, "after\n"), done.stderr
    assert (lib / "nft-resolve").exists() == resolver_kept
    assert lib.exists() == etc.exists() == (etc / "nft").exists() == resolver_kept


@pytest.mark.parametrize(
    "files",
    [["nft/other.domains"], ["operator-notes.txt"], ["-nft"]],
    ids=["stray-file-in-nft-dir", "other-file-in-etc-jackin", "nft-dir-already-gone"],
)
def test_remove_cleanup_never_fails_the_teardown(tmp_path: Path, files: list[str]) -> None:
    done, _, lib = run_cleanup(tmp_path, files)
    assert not (lib / "nft-resolve").exists()
    assert (done.returncode, done.stdout) == (0, "after\n"), done.stderr
