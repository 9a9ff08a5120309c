"""Agents resolve only through their own filtering resolver, on a real 2-host lab.

Lab host 2 runs the upstream resolver (a dnsmasq on its lab address that answers
every test name and logs every query it gets), and is the spec's ``dns`` server.
The fleet runs on both hosts; the checks look at host 1. Every "blocked" is paired
with a control from the host itself, every "refused" with an allowed name that
does resolve, and the upstream's own log shows what reached it.
"""

from __future__ import annotations

import json
import secrets
import shlex
import struct
import time

import pytest

from jackin.net import probes as agent_api
from jackin.lifecycle import down as down_api
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.plan.fleet import user_name

from .conftest import inv, module_lab, sh

FLEET = "dns"
UPSTREAM_LOG = "/var/log/upstream-dns.log"



@pytest.fixture(scope="module")
def dlab():
    yield from module_lab("d", 2)


@pytest.fixture(scope="module")
def dns(dlab, tmp_path_factory):
    status = dlab.status()
    pub, upstream = status.service.public_address, status.hosts[1].lab_ip
    names = ("allowed.lab.test", "other.lab.test", "evil.lab.test", "nothing-here.lab.test")
    sh(dlab, f"dnsmasq --listen-address={upstream} --bind-interfaces --no-resolv --no-hosts --log-queries "
             f"--log-facility={UPSTREAM_LOG} " + " ".join(f"--address=/{n}/{pub}" for n in names[:3]), host=1)  # fmt: skip
    # Host 1's own resolver is the upstream too: the agent without dns servers forwards there.
    sh(dlab, f"echo 'nameserver {upstream}' > /etc/resolv.conf")
    spec = tmp_path_factory.mktemp("dns") / "dns.yaml"
    spec.write_text(json.dumps({"fleet": {
        "name": FLEET, "provider": "lab", "lab": {"name": dlab.name, "hosts": 2},
        "agents": [
            {"name": "filt", "placement": "each", "network": {"mode": "allowlist", "dns": [upstream],
                                         "allow": ["allowed.lab.test:8080", "nothing-here.lab.test:443"]}},
            {"name": "other", "placement": "each", "network": {"mode": "allowlist", "allow": ["other.lab.test:8081"], "dns": [upstream]}},
            {"name": "hostdns", "placement": "each", "network": {"mode": "allowlist", "allow": ["allowed.lab.test:8080"]}},
        ],
        "resources": {"memory": "128m", "cpus": 0.5, "pids": 64},
    }}))  # fmt: skip
    first = inv("fleet.up", "-i", str(spec), "--yes", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    second = json.loads(inv("fleet.up", "-i", str(spec), "--yes", "--json", check=True).stdout)
    assert [h["changed"] for h in second["run"]["hosts"]] == [0, 0]
    gateway = sh(dlab, f"docker network inspect -f '{{{{(index .IPAM.Config 0).Gateway}}}}' {user_name(FLEET, 'filt-1')}")
    yield {"spec": str(spec), "inventory": fleet_api.load(str(spec)), "pub": pub, "upstream": upstream,
           "gateway": gateway.stdout.strip()}  # fmt: skip


def lookup(lab: Lab, agent: str, name: str, server: str = "") -> tuple[bool, str]:
    """busybox nslookup inside the agent's container: (answered with an address, output)."""
    done = sh(lab, f"docker exec {user_name(FLEET, agent)} timeout 10 nslookup -type=a {name} {server}", warn=True)
    out = done.stdout + done.stderr
    return done.ok and "Name:" in out and "Address" in out.split("Name:", 1)[1], out


def reach(dns: dict, lab: Lab, agent: str, target: str, port: int) -> str:
    probes = agent_api.netcheck(dns["inventory"], [lab.status().hosts[0].target()], agent, target, port, timeout=2)
    return probes[0].result


def host_reaches(lab: Lab, target: str, port: int) -> bool:
    return sh(lab, f"echo | timeout 5 busybox nc -w 2 {target} {port} >/dev/null", warn=True).ok


def upstream_log(lab: Lab) -> str:
    return sh(lab, f"cat {UPSTREAM_LOG}", host=1).stdout


def domain_set(lab: Lab, agent: str, index: int) -> str:
    return sh(lab, f"nft list set inet jackin-{FLEET} dom_{agent.replace('-', '_')}_{index}").stdout


def test_an_allowlisted_name_resolves_and_opens_exactly_its_port(dlab, dns):
    pub = dns["pub"]
    assert host_reaches(dlab, pub, 8080) and host_reaches(dlab, pub, 8081)
    sh(dlab, f"nft flush set inet jackin-{FLEET} dom_filt_1_0")  # as after a fresh load of the table
    assert reach(dns, dlab, "filt-1", pub, 8080) == "blocked"  # nothing resolved yet: nothing allowed
    answered, out = lookup(dlab, "filt-1", "allowed.lab.test")
    assert answered and pub in out, out
    assert pub in domain_set(dlab, "filt-1", 0)  # the filter put what it answered into the set, at once
    assert reach(dns, dlab, "filt-1", pub, 8080) == "reachable"
    assert reach(dns, dlab, "filt-1", pub, 8081) == "blocked"  # the entry's port only


def test_a_payload_in_a_name_is_refused_and_never_reaches_the_upstream(dlab, dns):
    payload = secrets.token_hex(8)
    allowed, out = lookup(dlab, "filt-1", "allowed.lab.test")  # the control: this one goes upstream
    assert allowed, out
    for name in (f"{payload}.evil.lab.test", f"{payload}x.allowed.lab.test", f"{payload}y.lab.test"):
        answered, out = lookup(dlab, "filt-1", name)
        assert not answered, out
    sh(dlab, f"docker exec {user_name(FLEET, 'filt-1')} nslookup -type=txt {payload}z.evil.lab.test", warn=True)
    time.sleep(0.5)
    log = upstream_log(dlab)
    assert f"allowed.lab.test from {dlab.status().hosts[0].lab_ip}" in log
    assert payload not in log
    # The agent's filter logged the refusals, under its own tag.
    journal = sh(dlab, f"journalctl -t jackin-dns-{FLEET}-filt-1 --no-pager").stdout
    assert f"config {payload}.evil.lab.test is NXDOMAIN" in journal


def test_the_agent_cannot_reach_the_upstream_directly(dlab, dns):
    upstream = dns["upstream"]
    assert host_reaches(dlab, upstream, 53)  # control: the host reaches the upstream (TCP)
    assert sh(dlab, f"busybox nslookup -type=a allowed.lab.test {upstream}", warn=True).ok  # control: and it answers
    assert reach(dns, dlab, "filt-1", upstream, 53) == "blocked"
    payload = secrets.token_hex(8)
    answered, out = lookup(dlab, "filt-1", f"{payload}.evil.lab.test", upstream)
    assert not answered, out
    assert payload not in upstream_log(dlab)


SNIFF_LOG = "/var/log/upstream-dns.hex"
SNIFF = f"""
import socket, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
open("{SNIFF_LOG}.ready", "w").close()
with open("{SNIFF_LOG}", "a") as log:
    while True:
        ip = s.recv(65535)[14:]
        if len(ip) < 28 or ip[9] != 17:
            continue
        udp = ip[(ip[0] & 15) * 4:]
        if struct.unpack("!H", udp[2:4])[0] == 53:
            log.write(udp[8:].hex() + "\\n")
            log.flush()
"""
ASK = """
import socket, struct, sys
def query(name, qtype, qid, option=b""):
    head = struct.pack("!6H", qid, 0x0100, 1, 0, 0, 1)
    labels = b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\\0"
    opt = b"\\0" + struct.pack("!HHIH", 41, 4096, 0, len(option)) + option
    return head + labels + struct.pack("!HH", qtype, 1) + opt
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for qtype in (1, 16, 255, 65000):
    s.sendto(query(sys.argv[2], qtype, 0xBEEF, struct.pack("!HH", 65001, 8) + b"LEAKLEAK"), (sys.argv[1], 53))
    try:
        r = s.recv(4096)
        print(qtype, r[3] & 15, socket.inet_aton(sys.argv[3]) in r[12:])
    except socket.timeout:
        print(qtype, "timeout", False)
"""


def sniffed(lab: Lab) -> list[bytes]:
    """Every DNS query that arrived at the upstream's host, as bytes (the sniffer's log)."""
    return [bytes.fromhex(line) for line in sh(lab, f"cat {SNIFF_LOG}", host=1).stdout.split()]


def test_a_query_reaches_the_upstream_rebuilt_and_nothing_the_agent_chose_with_it(dlab, dns):
    """From inside the agent's network namespace: a mixed-case name, query ID 0xBEEF and an EDNS option
    of the agent's, for A, TXT, ANY and type 65000. The upstream's host sniffs every DNS packet that
    arrives: the A query arrives (the control), lower-cased, under another ID, with no option of the
    agent's; the other types are answered on the agent's host and never arrive."""
    sh(dlab, f"rm -f {SNIFF_LOG}*; setsid python3 -c {shlex.quote(SNIFF)} >/dev/null 2>&1 & echo $! > {SNIFF_LOG}.pid; "
             f"for i in $(seq 50); do [ -e {SNIFF_LOG}.ready ] && break; sleep 0.1; done", host=1)  # fmt: skip
    try:
        pid = sh(dlab, f"docker inspect -f '{{{{.State.Pid}}}}' {user_name(FLEET, 'filt-1')}").stdout.strip()
        asked = sh(dlab, f"nsenter -t {pid} -n python3 -c {shlex.quote(ASK)} {dns['gateway']} AlLoWeD.lab.TEST "
                         f"{shlex.quote(dns['pub'])}").stdout.splitlines()  # fmt: skip
        time.sleep(0.5)
        got = sniffed(dlab)
    finally:
        sh(dlab, f"kill $(cat {SNIFF_LOG}.pid) || true", host=1)
    assert asked[0] == "1 0 True", asked  # the A query was answered with the service's address
    assert all(line.split()[1] not in ("0", "timeout") for line in asked[1:]), asked  # refused, on the host
    lowered = b"\x07allowed\x03lab\x04test\x00"
    ours = [q for q in got if lowered in q.lower()]
    assert ours, f"control failed: the sniffer saw no query for the name ({len(got)} packets)"
    for q in ours:
        assert lowered in q, q  # lower-cased
        assert q[:2] != b"\xbe\xef" and b"LEAKLEAK" not in q, q  # another ID; no option of the agent's
        qtype = struct.unpack("!H", q[q.index(lowered) + len(lowered) : q.index(lowered) + len(lowered) + 2])[0]
        assert qtype in (1, 28, 5), qtype  # never TXT, ANY or 65000
    assert not any(b"LEAKLEAK" in q for q in got)


def test_each_agent_has_its_own_filter(dlab, dns):
    answered, out = lookup(dlab, "other-1", "other.lab.test")  # control: its own name, through its own filter
    assert answered, out
    answered, out = lookup(dlab, "other-1", "allowed.lab.test")  # filt-1's name: not in other-1's allowlist
    assert not answered, out
    answered, out = lookup(dlab, "other-1", "allowed.lab.test", dns["gateway"])  # filt-1's filter, directly
    assert not answered, out
    assert reach(dns, dlab, "other-1", dns["gateway"], 53) == "blocked"


def test_without_dns_servers_the_filter_forwards_to_the_hosts_resolvers(dlab, dns):
    answered, out = lookup(dlab, "hostdns-1", "allowed.lab.test")
    assert answered and dns["pub"] in out, out
    assert reach(dns, dlab, "hostdns-1", dns["pub"], 8080) == "reachable"
    payload = secrets.token_hex(8)
    answered, out = lookup(dlab, "hostdns-1", f"{payload}.evil.lab.test")
    assert not answered, out
    sh(dlab, f"docker exec {user_name(FLEET, 'hostdns-1')} nslookup -type=txt {payload}.lab.test", warn=True)
    assert payload not in upstream_log(dlab)


def test_status_says_what_a_domain_entry_allows(dlab, dns):
    status = json.loads(inv("fleet.status", "-i", dns["spec"], "--json").stdout)
    filt = next(a for a in status["hosts"][0]["agents"] if a["instance"] == "filt-1")
    assert filt["enforcement"].startswith("partial: domain entries allow the addresses the agent's filtering resolver")


def test_the_filters_come_back_after_a_host_reboot(dlab, dns):
    host = dlab.status().hosts[0]
    dk.docker("restart", "-t", "5", host.container)  # a reboot of the lab host
    dlab.up()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        running = sh(dlab, f"docker ps -q --filter label=jackin.fleet={FLEET} --filter status=running | wc -l", warn=True)
        if running.ok and running.stdout.strip() == "3":
            break
        time.sleep(1)
    assert sh(dlab, f"systemctl is-active jackin-dns-{FLEET}.target jackin-dns-{FLEET}@filt-1").stdout.split() == [
        "active", "active"]  # fmt: skip
    for _ in range(20):  # the agent's first lookups may race the filter binding its new bridge address
        if lookup(dlab, "filt-1", "allowed.lab.test")[0]:
            break
        time.sleep(1)
    assert dns["pub"] in domain_set(dlab, "filt-1", 0)
    assert reach(dns, dlab, "filt-1", dns["pub"], 8080) == "reachable"
    assert reach(dns, dlab, "filt-1", dns["pub"], 8081) == "blocked"
    payload = secrets.token_hex(8)
    assert not lookup(dlab, "filt-1", f"{payload}.evil.lab.test")[0]
    assert payload not in upstream_log(dlab)


LEGACY = {  # what the previous version left on a host: its resolver script, units and domains list
    "/usr/local/lib/jackin/nft-resolve": "#!/bin/sh\n",
    f"/etc/jackin/nft/{FLEET}.domains": "dom_filt_1_0 allowed.lab.test\n",
    f"/etc/systemd/system/jackin-nft-resolve-{FLEET}.service": "[Service]\nType=oneshot\nExecStart=/bin/true\n",
    f"/etc/systemd/system/jackin-nft-resolve-{FLEET}.timer":
        "[Timer]\nOnUnitActiveSec=5min\n[Install]\nWantedBy=timers.target\n",
}  # fmt: skip


def plant_legacy(lab: Lab) -> None:
    for path, text in LEGACY.items():
        sh(lab, f"install -d {path.rsplit('/', 1)[0]} && printf '%s' {shlex.quote(text)} > {path}")
    sh(lab, f"systemctl daemon-reload && systemctl enable --now --quiet jackin-nft-resolve-{FLEET}.timer")


def test_an_upgraded_host_loses_the_old_resolver_and_its_timer(dlab, dns):
    plant_legacy(dlab)
    sh(dlab, f"echo 0 > /etc/jackin/nft/{FLEET}.sha")  # as a bundle of the previous version would differ
    assert sh(dlab, f"systemctl is-active jackin-nft-resolve-{FLEET}.timer", warn=True).stdout.strip() == "active"
    done = json.loads(inv("fleet.up", "-i", dns["spec"], "--yes", "--json", check=True).stdout)
    assert done["run"]["hosts"][0]["changed"] == 1
    assert sh(dlab, "ls -d " + " ".join(LEGACY) + " 2>/dev/null", warn=True).stdout.strip() == ""
    assert sh(dlab, f"systemctl is-active jackin-nft-resolve-{FLEET}.timer", warn=True).stdout.strip() != "active"
    assert lookup(dlab, "filt-1", "allowed.lab.test")[0]  # the filters were restarted and answer
    again = json.loads(inv("fleet.up", "-i", dns["spec"], "--yes", "--json", check=True).stdout)
    assert [h["changed"] for h in again["run"]["hosts"]] == [0, 0]
    plant_legacy(dlab)  # and a teardown removes them too (below)


def test_down_removes_every_filter(dlab, dns):
    result = down_api.down(dns["inventory"], keep_lab=True)
    assert result.clean, result.checks
    assert sh(dlab, "pgrep -a dnsmasq | grep jackin", warn=True).stdout == ""
    left = sh(dlab, "ls -d /etc/jackin /usr/local/lib/jackin /etc/systemd/system/jackin-dns-* "
                    "/etc/systemd/system/jackin-nft-* 2>/dev/null", warn=True)  # fmt: skip
    assert left.stdout.strip() == ""
    assert "dnsmasq" in sh(dlab, "pgrep -a dnsmasq", host=1).stdout  # the upstream (not ours) is untouched
