"""The DNS query cleaner (jackin/net/dnsclean.py) run for real on this machine: perl, on loopback, between
a client standing in for the agent's dnsmasq and a fake upstream that records every byte it gets."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jackin.net import dnsclean
from jackin.plan.fleet import build
from jackin.spec import parse_inventory

pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="no perl here")

ANSWER = bytes([198, 18, 0, 9])


def wire(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"


def query(name: str, qtype: int = 1, *, qid: int = 0xBEEF, flags: int = 0x0100, edns: bytes = b"") -> bytes:
    """A query; ``edns``: the option bytes of an OPT record (present when not empty)."""
    head = struct.pack("!6H", qid, flags, 1, 0, 0, 1 if edns else 0)
    opt = b"\0" + struct.pack("!HHIH", 41, 4096, 0, len(edns)) + edns if edns else b""
    return head + wire(name) + struct.pack("!HH", qtype, 1) + opt


class Upstream:
    """A resolver on loopback that records every query and answers A 198.18.0.9 (truncated over UDP
    for names starting ``big``: then the whole answer over TCP)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        self.udp.bind((host, 0))
        self.port = self.udp.getsockname()[1]
        self.tcp = socket.socket(family, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((host, self.port))
        self.tcp.listen(4)
        self.got: list[tuple[str, bytes]] = []
        for target in (self._serve_udp, self._serve_tcp):
            threading.Thread(target=target, daemon=True).start()

    @staticmethod
    def reply(q: bytes, *, truncated: bool = False) -> bytes:
        end = q.index(b"\0", 12) + 5
        flags = 0x8180 | (0x0200 if truncated else 0)
        answer = b"" if truncated else b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + ANSWER
        return q[:2] + struct.pack("!5H", flags, 1, 0 if truncated else 1, 0, 0) + q[12:end] + answer

    def _serve_udp(self) -> None:
        while True:
            q, peer = self.udp.recvfrom(4096)
            self.got.append(("udp", q))
            self.udp.sendto(self.reply(q, truncated=q[13:16] == b"big"), peer)

    def _serve_tcp(self) -> None:
        while True:
            conn, _ = self.tcp.accept()
            with conn:
                (length,) = struct.unpack("!H", conn.recv(2))
                q = conn.recv(length)
                self.got.append(("tcp", q))
                r = self.reply(q)
                conn.sendall(struct.pack("!H", len(r)) + r)


SPEC = """
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      network:
        mode: allowlist
        dns: [192.0.2.53]
        allow: [ok.allowed.test:443, big.allowed.test:443]
"""


def test_the_config_names_the_uids_address_the_spec_servers_and_the_names() -> None:
    agent = build(parse_inventory(SPEC).fleet, {"coder-1": 60001}).agents[0]
    assert dnsclean.listen_address(60001) == "127.0.234.97" and dnsclean.listen_address(1 << 20 | 5) == "127.16.0.5"
    assert dnsclean.config(agent, ["OK.Allowed.test", "big.allowed.test"]).splitlines()[1:] == [
        "listen 127.0.234.97", "upstream 192.0.2.53", "name ok.allowed.test", "name big.allowed.test"]  # fmt: skip


@pytest.fixture(scope="module")
def cleaner(tmp_path_factory) -> Iterator[tuple[Upstream, tuple[str, int], subprocess.Popen[str]]]:
    up = Upstream()
    tmp = tmp_path_factory.mktemp("clean")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    address = ("127.0.0.1", port)
    conf = tmp / "agent.clean"
    conf.write_text(f"listen 127.0.0.1#{port}\nupstream 127.0.0.1#{up.port}\nname ok.allowed.test\n"
                    "name big.allowed.test\n")  # fmt: skip
    script = tmp / "dns-clean"
    script.write_text(dnsclean.SCRIPT)
    log = (tmp / "stderr").open("w")  # a file, not a pipe nobody reads: a full pipe would stall its children
    proc = subprocess.Popen(["perl", str(script), str(conf), "sleep", "600"], stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(address, timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield up, address, proc
    proc.terminate()
    proc.wait(timeout=10)


def ask(address: tuple[str, int], q: bytes) -> bytes:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(q, address)
    return s.recvfrom(4096)[0]


def test_an_allowlisted_query_reaches_the_upstream_rebuilt(cleaner) -> None:
    up, address, _ = cleaner
    before = len(up.got)
    q = query("OK.aLLowed.TeSt", edns=struct.pack("!HH", 65001, 8) + b"LEAKLEAK")
    r = ask(address, q)
    sent = [p for _, p in up.got[before:]]
    assert len(sent) == 1
    upstream = sent[0]
    assert upstream[12:12 + len(wire("ok.allowed.test"))] == wire("ok.allowed.test")  # lower-cased
    assert b"LEAKLEAK" not in upstream and b"\xfd\xe9" not in upstream  # no option of the agent's
    assert upstream.endswith(b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0))  # an EDNS record of its own, empty
    assert struct.unpack("!H", upstream[2:4])[0] == 0x0100  # recursion desired, nothing else
    # The reply: the client's ID and question as it asked, the upstream's answer.
    assert r[:2] == b"\xbe\xef" and r[12:12 + len(wire("OK.aLLowed.TeSt"))] == wire("OK.aLLowed.TeSt")
    assert r.endswith(ANSWER) and struct.unpack("!H", r[2:4])[0] & 0xF == 0


def test_the_upstream_never_sees_the_agents_query_id(cleaner) -> None:
    up, address, _ = cleaner
    before = len(up.got)
    for _ in range(3):
        assert ask(address, query("ok.allowed.test", qid=0x1234))[:2] == b"\x12\x34"
    ids = {p[:2] for _, p in up.got[before:]}
    assert b"\x12\x34" not in ids and len(ids) == 3  # fresh and random each time


@pytest.mark.parametrize(
    ("q", "rcode"),
    [
        (query("ok.allowed.test", 16), 5),  # TXT
        (query("ok.allowed.test", 255), 5),  # ANY
        (query("ok.allowed.test", 65000), 5),
        (query("ok.allowed.test", 15), 5),  # MX
        (query("other.test"), 5),  # not on the list
        (query("x.ok.allowed.test"), 5),  # a subdomain is not the name
        (query("ok.allowed.test")[:-4] + struct.pack("!HH", 1, 3), 5),  # class CHAOS
        (query("ok.allowed.test", flags=0x1100), 4),  # opcode 2 (STATUS): NOTIMP
        (struct.pack("!6H", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack("!HH", 1, 1), 1),  # a pointer
        (struct.pack("!6H", 7, 0x0100, 2, 0, 0, 0) + wire("ok.allowed.test") * 2 + b"\0\1\0\1" * 2, 1),
        (b"\x00\x07\x01", 1),  # too short
    ],
    ids=["txt", "any", "type-65000", "mx", "unlisted", "subdomain", "chaos", "opcode", "pointer", "two-questions",
         "short"],
)  # fmt: skip
def test_anything_else_is_answered_locally_and_never_forwarded(cleaner, q: bytes, rcode: int) -> None:
    up, address, _ = cleaner
    before = len(up.got)
    r = ask(address, q)
    assert struct.unpack("!H", r[2:4])[0] & 0xF == rcode
    assert r[:2] == q[:2] and struct.unpack("!H", r[2:4])[0] & 0x8000  # a reply, under the query's ID
    time.sleep(0.1)
    assert up.got[before:] == []


def test_a_truncated_reply_is_asked_again_over_tcp_and_tcp_clients_are_served(cleaner) -> None:
    up, address, _ = cleaner
    before = len(up.got)
    r = ask(address, query("big.allowed.test"))
    assert [kind for kind, _ in up.got[before:]] == ["udp", "tcp"] and r.endswith(ANSWER)
    with socket.create_connection(address, timeout=10) as s:
        q = query("OK.allowed.test", qid=0x4242)
        s.sendall(struct.pack("!H", len(q)) + q)
        (length,) = struct.unpack("!H", s.recv(2))
        r = s.recv(length)
    assert r[:2] == b"\x42\x42" and r.endswith(ANSWER)


def test_many_queries_at_once_never_exhaust_it(cleaner) -> None:
    """Each query is a child process; a child that ended before the parent recorded it once stayed
    counted forever, and after a few thousand concurrent queries every answer was SERVFAIL."""
    _, address, _ = cleaner
    failed: list[int] = []

    def worker() -> None:
        for n in range(400):  # refused ones mostly: their child ends at once, the race's likeliest case
            rcode = struct.unpack("!H", ask(address, query("ok.allowed.test", 16 if n % 8 else 1, qid=n))[2:4])[0]
            if rcode & 0xF not in (0, 5):
                failed.append(rcode & 0xF)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert ask(address, query("ok.allowed.test"))[3] & 0xF == 0  # and the next one too


def test_an_ipv6_upstream_is_asked(tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        up = Upstream("::1")
    except OSError as error:
        pytest.skip(f"no ::1 here: {error}")
    conf = tmp_path / "c"
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    conf.write_text(f"listen 127.0.0.1#{port}\nupstream ::1#{up.port}\nname ok.allowed.test\n")
    script = tmp_path / "dns-clean"
    script.write_text(dnsclean.SCRIPT)
    proc = subprocess.Popen(["perl", str(script), str(conf), "sleep", "60"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        assert ask(("127.0.0.1", port), query("ok.allowed.test")).endswith(ANSWER)
        assert len(up.got) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_when_its_command_ends_the_cleaner_ends(tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text("listen 127.0.0.1#0\nupstream 127.0.0.1#9\nname a.test\n")
    script = tmp_path / "dns-clean"
    script.write_text(dnsclean.SCRIPT)
    done = subprocess.run(["perl", str(script), str(conf), "sh", "-c", "exit 3"], capture_output=True, text=True,
                          timeout=20)  # fmt: skip
    assert done.returncode == 1 and "sh ended" in done.stderr


def test_a_bad_config_is_refused_with_its_line(tmp_path: Path) -> None:
    conf = tmp_path / "c"
    conf.write_text("listen 127.0.0.1#0\nnonsense here\n")
    script = tmp_path / "dns-clean"
    script.write_text(dnsclean.SCRIPT)
    done = subprocess.run(["perl", str(script), str(conf), "true"], capture_output=True, text=True, timeout=20)
    assert done.returncode != 0 and "bad line: nonsense here" in done.stderr
