"""The filtering resolver's files and commands as exact text (jackin/net/dns.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from jackin import hostpaths
from jackin.net import dns, dnsclean
from jackin.net import firewall, policy
from jackin.plan.fleet import FleetPlan, build, instances
from jackin.spec import parse_inventory

SPEC = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: quiet
    - name: picky
      network:
        mode: allowlist
        allow: ["1.2.3.4", "GitHub.com:443", "github.com:22", "api.github.com", "10.0.0.0/8:53"]
        dns: ["192.0.2.53", "2001:db8::53"]
    - name: host
      network: {mode: allowlist, allow: ["pypi.org:443"]}
    - name: bare
      network: {mode: allowlist, allow: ["1.2.3.4:443"], dns: ["192.0.2.53"]}
    - name: roam
      network: {mode: open, allow: ["pypi.org:443"], dns: ["192.0.2.53"]}
"""


def make_plan(text: str = SPEC) -> FleetPlan:
    spec = parse_inventory(text, "f.yaml").fleet
    return build(spec, {instance: 60000 + n for n, (_, instance) in enumerate(instances(spec))})


PLAN = make_plan()
PICKY, HOST = PLAN.agents[1], PLAN.agents[2]

PICKY_CONF = f"""\
# jackin fleet demo, agent picky-1: the only resolver this agent can reach.
# Answers the allowlisted names below (exactly these names), puts every address it answers
# into the agent's nftables sets, and answers NXDOMAIN for anything else, never forwarding it.
interface={PICKY.bridge}
except-interface=lo
bind-dynamic
no-hosts
no-resolv
cache-size=0
max-ttl=60
log-queries
log-facility=-
server=/github.com/127.0.234.97
local=/*.github.com/
nftset=/github.com/4#inet#jackin-demo#dom_picky_1_1,4#inet#jackin-demo#dom_picky_1_2
server=/api.github.com/127.0.234.97
local=/*.api.github.com/
nftset=/api.github.com/4#inet#jackin-demo#dom_picky_1_3
address=/#/
"""

TEMPLATE = """\
[Unit]
Description=jackin fleet demo: filtering resolver of agent %i
After=jackin-nft-demo.service network.target
Before=docker.service
PartOf=jackin-dns-demo.target

[Service]
# The query cleaner binds its address, then runs dnsmasq as its child; either ending ends both.
ExecStart=/usr/local/lib/jackin/dns-clean /etc/jackin/dns/demo/%i.clean /usr/sbin/dnsmasq --keep-in-foreground --conf-file=/etc/jackin/dns/demo/%i.conf --pid-file
Restart=on-failure
RestartSec=2
SyslogIdentifier=jackin-dns-demo-%i
"""

TARGET = """\
[Unit]
Description=jackin fleet demo: filtering resolvers of its agents
Wants=jackin-dns-demo@picky-1.service jackin-dns-demo@host-1.service

[Install]
WantedBy=multi-user.target
"""


def test_only_allowlist_agents_with_domain_entries_are_filtered() -> None:
    assert [a.instance for a in dns.filtered(PLAN)] == ["picky-1", "host-1"]


def test_config_is_exact_names_forwarded_to_the_cleaner_everything_else_nxdomain() -> None:
    assert dns.config(PICKY) == PICKY_CONF
    assert dnsclean.config(PICKY, ["github.com", "api.github.com"]).splitlines()[1:] == [
        "listen 127.0.234.97", "upstream 192.0.2.53", "upstream 2001:db8::53", "name github.com",
        "name api.github.com"]  # fmt: skip  # the spec's resolvers are the cleaner's upstreams


def test_config_without_dns_servers_forwards_to_the_cleaner_which_asks_the_hosts_resolvers() -> None:
    conf = dns.config(HOST).splitlines()
    # Never resolv.conf as dnsmasq's default servers: those would answer every name, not only these.
    assert "no-resolv" in conf and not any(line.startswith(("resolv-file", "servers-file")) for line in conf)
    # No upstream in the cleaner's configuration: it reads the host's nameservers when it starts.
    assert dns.files(PLAN)["/etc/jackin/dns/demo/host-1.clean"].splitlines()[1:] == [
        "listen 127.0.234.98", "name pypi.org"]  # fmt: skip
    assert conf[-4:] == [
        "server=/pypi.org/127.0.234.98",
        "local=/*.pypi.org/",
        "nftset=/pypi.org/4#inet#jackin-demo#dom_host_1_0",
        "address=/#/",
    ]


def test_config_sets_are_the_firewalls_sets() -> None:
    rendered = firewall.render(PLAN)
    for agent in dns.filtered(PLAN):
        for set_name, _ in firewall.domain_sets(agent):
            assert f"\tset {set_name} {{ type ipv4_addr; }}" in rendered
            assert f"#{set_name}" in dns.config(agent)


def test_units_are_one_template_and_a_target_that_wants_each_filter() -> None:
    assert dns.units(PLAN) == {
        "/etc/systemd/system/jackin-dns-demo@.service": TEMPLATE,
        "/etc/systemd/system/jackin-dns-demo.target": TARGET,
    }


def test_target_of_a_fleet_without_filters_wants_nothing() -> None:
    none = make_plan(SPEC.split("    - name: picky")[0])
    assert dns.units(none)["/etc/systemd/system/jackin-dns-demo.target"] == (
        "[Unit]\nDescription=jackin fleet demo: filtering resolvers of its agents\n"
        "# no agent of this fleet resolves names\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    assert sorted(dns.files(none)) == ["/etc/systemd/system/jackin-dns-demo.target",
                                       "/etc/systemd/system/jackin-dns-demo@.service"]  # fmt: skip


def test_files_are_in_the_firewall_bundle_and_owned() -> None:
    files = dns.files(PLAN)
    assert sorted(files) == [
        "/etc/jackin/dns/demo/host-1.clean",
        "/etc/jackin/dns/demo/host-1.conf",
        "/etc/jackin/dns/demo/picky-1.clean",
        "/etc/jackin/dns/demo/picky-1.conf",
        "/etc/systemd/system/jackin-dns-demo.target",
        "/etc/systemd/system/jackin-dns-demo@.service",
    ]
    assert files.items() <= policy.bundle(PLAN).items()
    assert hostpaths.dns_paths("demo") == [
        "/etc/jackin/dns/demo",
        "/etc/systemd/system/jackin-dns-demo@.service",
        "/etc/systemd/system/jackin-dns-demo.target",
    ]
    assert set(hostpaths.dns_paths("demo")) <= set(hostpaths.firewall_paths("demo"))


STOP_OTHERS = ("for u in $(systemctl list-units --all --plain --no-legend 'jackin-dns-demo@*' | awk '{print $1}'); "
               'do case "$u" in jackin-dns-demo@picky-1.service|jackin-dns-demo@host-1.service) ;; '
               '*) systemctl stop "$u" ;; esac; done')  # fmt: skip
APPLY = [
    "[ ! -d /etc/jackin/dns/demo ] || find /etc/jackin/dns/demo -maxdepth 1 -type f "
    "! -name picky-1.conf ! -name picky-1.clean ! -name host-1.conf ! -name host-1.clean -delete",
    STOP_OTHERS,
    "systemctl restart jackin-dns-demo@picky-1.service jackin-dns-demo@host-1.service",
    "systemctl start jackin-dns-demo.target",
]


def test_apply_restarts_the_plans_filters_and_stops_the_rest() -> None:
    assert dns.apply_commands(PLAN, []) == APPLY
    assert dns.apply_commands(PLAN, hostpaths.firewall_paths("demo")[:2]) == APPLY


def test_apply_without_filters_stops_every_filter_of_the_fleet() -> None:
    none = make_plan(SPEC.split("    - name: picky")[0])
    assert dns.apply_commands(none, []) == [
        "[ ! -d /etc/jackin/dns/demo ] || find /etc/jackin/dns/demo -maxdepth 1 -type f -delete",
        "for u in $(systemctl list-units --all --plain --no-legend 'jackin-dns-demo@*' | awk '{print $1}'); "
        'do case "$u" in *) systemctl stop "$u" ;; esac; done',
        "systemctl start jackin-dns-demo.target",
    ]


def test_apply_keeps_the_guards_timer_and_every_current_file() -> None:
    """A re-apply on a host with the whole bundle retires nothing: the guard's check timer ends in
    .timer too, and deleting it silently took the guard's backstop away."""
    current = [p for p in hostpaths.firewall_paths("demo") if p not in dns.legacy_paths("demo")]
    assert "/etc/systemd/system/jackin-nft-check-demo.timer" in current
    assert dns.apply_commands(PLAN, current) == APPLY


def test_apply_retires_the_host_side_resolver_of_earlier_versions() -> None:
    legacy = ["/etc/jackin/nft/demo.domains", "/etc/systemd/system/jackin-nft-resolve-demo.service",
              "/etc/systemd/system/jackin-nft-resolve-demo.timer"]  # fmt: skip
    assert dns.apply_commands(PLAN, ["/etc/jackin/nft/demo.nft", *legacy]) == [
        "systemctl disable --now --quiet jackin-nft-resolve-demo.timer jackin-nft-resolve-demo.service "
        "2>/dev/null || true",
        "rm -f " + " ".join(legacy),
        "ls /etc/jackin/nft/*.domains >/dev/null 2>&1 || rm -f /usr/local/lib/jackin/nft-resolve",
        "rmdir /usr/local/lib/jackin 2>/dev/null || true",
        "systemctl daemon-reload",
        *APPLY,
    ]


def test_remove_only_when_something_is_there() -> None:
    assert dns.remove_commands("demo", ["/etc/jackin/nft/demo.nft"]) == []
    assert dns.remove_commands("demo", ["/etc/jackin/dns/demo"]) == [
        "systemctl disable --now --quiet jackin-dns-demo.target 2>/dev/null || true",
        "systemctl stop 'jackin-dns-demo@*' 2>/dev/null || true",
        "rm -rf --one-file-system /etc/jackin/dns/demo",
        "rmdir /etc/jackin/dns 2>/dev/null || true",
    ]


def test_remove_leaves_the_disable_to_a_caller_that_did_it() -> None:
    """fleet.down's firewall removal names the target in its own ``systemctl disable --now`` (one call)."""
    assert dns.remove_commands("demo", ["/etc/jackin/dns/demo"], disabled=True) == [
        "systemctl stop 'jackin-dns-demo@*' 2>/dev/null || true",
        "rm -rf --one-file-system /etc/jackin/dns/demo",
        "rmdir /etc/jackin/dns 2>/dev/null || true",
    ]


def test_stale_config_removal_in_a_shell(tmp_path: Path) -> None:
    """The find line keeps exactly the plan's configurations (and tolerates a missing directory)."""
    conf = tmp_path / "demo"
    conf.mkdir()
    for name in ("picky-1.conf", "picky-1.clean", "host-1.conf", "host-1.servers", "gone-1.conf", "gone-1.clean",
                 "x.tmp"):  # fmt: skip
        (conf / name).write_text("")
    line = dns.apply_commands(PLAN, [])[0].replace("/etc/jackin/dns/demo", str(conf))
    for _ in range(2):
        done = subprocess.run(["sh", "-ec", line], capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        # An earlier version's servers file goes too: the cleaner reads the host's resolvers itself.
        assert sorted(p.name for p in conf.iterdir()) == ["host-1.conf", "picky-1.clean", "picky-1.conf"]
    missing = subprocess.run(["sh", "-ec", line.replace(str(conf), str(tmp_path / "none"))], timeout=10)
    assert missing.returncode == 0


DNSMASQ = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/tmp/dnsm/usr/sbin")


@pytest.mark.skipif(DNSMASQ is None, reason="dnsmasq is not installed here")
@pytest.mark.parametrize("agent", ["picky-1", "host-1"])
def test_dnsmasq_accepts_the_config(tmp_path: Path, agent: str) -> None:
    path = tmp_path / "f.conf"
    path.write_text(dns.config(next(a for a in PLAN.agents if a.instance == agent)))
    done = subprocess.run([DNSMASQ, "--test", "-C", str(path)], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0 and "syntax check OK" in done.stderr, done.stderr
