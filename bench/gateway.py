"""The credential gateway program (jackin/net/gatewayd.py), measured as it runs: what it adds to the time to a
stream's first event, its memory with many agents, and that streams pass event by event and are counted exactly.

The upstream is an Anthropic-Messages-shaped SSE stand-in in this process, over TLS on 127.0.0.1 with a certificate
of a throwaway CA that gatewayd trusts through its config's ``ca`` key. As root, the run re-executes itself in a fresh
network namespace (``unshare -n``): loopback and, per gateway run, dummy interfaces jkb0.. (10.250.i.1/24; empty
bridges on a kernel with no dummy driver), the agents' bridges. Nothing can leave the machine. Per interpreter:
RSS at start (no bridge up yet) and with all listeners bound; time to the first SSE event, direct to the upstream
over HTTPS (the floor) and through gatewayd over plain HTTP (what an agent sees), interleaved, on a kept-alive
connection per client and on a new connection per request (the gateway pools its upstream connections); a 200 ms gap
between events 1 and 2 seen through gatewayd; one ~6 s trickling stream per agent, all at once (VmRSS, VmHWM); each
agent's record (STATE/<instance>.json): requests, tokens (12 in + 7 out each), usd and statuses exact.

    .venv/bin/python bench/gateway.py [--samples 400] [--agents 150] [--python PATH|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).resolve().parent.parent / "jackin" / "net" / "gatewayd.py"
REAL_KEY, PRICES = "sk-ant-real-0123456789", {"bench": {"input": 3.0, "output": 15.0}}
START, STOP = b'"type":"message_start"', b'{"type":"message_stop"}'
BODY = '{"model":"%s","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
WARMUP, TTFB_TARGET_MS, RSS_TARGET = 30, 2.0, 50e6
MET = ("TARGET MISSED", "target met")  # by whether it is
QUIET = ("listening on", "configuration loaded")  # gatewayd's routine lines; any other stderr line is shown


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data}, separators=(',', ':'))}\n\n".encode()


async def upstream_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The vendor stand-in (kept-alive). ``model`` = bench-<fast|gap|hold>-<ms>: gap waits ms after event 1,
    hold trickles 10 pings ms/10 apart. 401 unless the real key came."""
    try:
        while True:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(hdrs.get("content-length", "0")))
            if hdrs.get("transfer-encoding") == "chunked":
                while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                await reader.readuntil(b"\r\n")
            if hdrs.get("x-api-key") != REAL_KEY:
                writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 4\r\nconnection: close\r\n\r\nkey?")
                return
            model = json.loads(body)["model"]
            _, kind, ms = model.split("-")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            start = {"message": {"id": "m", "model": model, "usage": {"input_tokens": 12, "output_tokens": 1}}}
            events: list[bytes | float] = [sse("message_start", start)]
            events += (
                [int(ms) / 1e3] if kind == "gap" else [int(ms) / 1e4, sse("ping", {})] * 10 if kind == "hold" else []
            )
            events += [sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})]
            events += [sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hi "}})] * 3
            events += [sse("content_block_stop", {"index": 0}), sse("message_delta", {"usage": {"output_tokens": 7}})]
            for ev in [*events, sse("message_stop", {})]:
                if isinstance(ev, float):
                    await asyncio.sleep(ev)
                else:
                    writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
    except (asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def authority(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signed for IP:127.0.0.1: (CA PEM, server chain, server key)."""
    ca, ca_key, csr, cert, key = (directory / n for n in ("ca.pem", "ca.key", "srv.csr", "srv.pem", "srv.key"))
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for argv in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=jackin bench CA"],
                 ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=stand-in"],
                 ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
                  "-extfile", directory / "san.ext"]):  # fmt: skip
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=30)
    return ca, cert, key


def memory(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon of a process, and from smaps_rollup its Pss and private pages (USS: what it holds
    alone, shared libraries' pages left out), in bytes."""
    st = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines())
    found = {k: int(st[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM", "RssAnon")}
    roll = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    found["Pss"] = int(roll["Pss"].split()[0]) * 1024
    found["Uss"] = sum(int(roll[k].split()[0]) * 1024 for k in ("Private_Clean", "Private_Dirty"))
    return found


@dataclass
class Peer:
    host: str
    port: int
    key: str
    tls: ssl.SSLContext | None = None
    rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None


ERRORS: list[str] = []


async def ask(peer: Peer, model: str, keep: bool) -> tuple[float, float, bool]:
    """One streamed request: seconds from writing it (connecting too, when not kept alive) to event 1, to
    content_block_start; whether it ended with message_stop. (nan, nan, False) on an error, kept in ERRORS."""
    t0, t1, t2, buf = time.perf_counter(), math.nan, math.nan, b""
    try:
        if peer.rw is None or not keep:
            peer.rw = await asyncio.open_connection(peer.host, peer.port, ssl=peer.tls)
        reader, writer = peer.rw
        body = (BODY % model).encode()
        writer.write(f"POST /v1/messages HTTP/1.1\r\nhost: {peer.host}:{peer.port}\r\nx-api-key: {peer.key}\r\n"
                     f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
                     f"connection: {'keep-alive' if keep else 'close'}\r\n\r\n".encode() + body)  # fmt: skip
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).lower()
        if b"transfer-encoding: chunked" not in head:
            raise ValueError(f"{head[:60]!r} {await asyncio.wait_for(reader.read(300), 5)!r}")
        while size := int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 30)).split(b";")[0].strip(), 16):
            buf += (await reader.readexactly(size + 2))[:-2]
            now = time.perf_counter() - t0
            t1 = now if math.isnan(t1) and START in buf else t1
            t2 = now if math.isnan(t2) and b"content_block_start" in buf else t2
        await reader.readuntil(b"\r\n")
    except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as error:
        ERRORS.append(f"{peer.host}: {type(error).__name__}: {error}"[:300])
        keep = False
    if not keep and peer.rw is not None:
        peer.rw[1].close()
        peer.rw = None
    return t1, t2, STOP in buf


def bridges(n: int, op: str, kind: str = "dummy") -> None:
    """Add (or delete) the agents' bridges jkb0..jkb{n-1}, 10.250.i.1/24, in this network namespace."""
    add = [f"link add jkb{i} type {kind}\naddr add 10.250.{i}.1/24 dev jkb{i}\nlink set jkb{i} up" for i in range(n)]
    script = "\n".join(add if op == "add" else [f"link del jkb{i}" for i in range(n)]) + "\n"
    subprocess.run(["ip", "-batch", "-"], input=script, text=True, check=op == "add", capture_output=True)


async def until(check: Callable[[], bool], seconds: float) -> float | None:
    """Seconds until ``check()`` holds (polled every 20 ms), or None after ``seconds``."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > seconds:
            return None
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


def read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


async def run(
    python: str, n: int, samples: int, tmp: Path, up: int, client_tls: ssl.SSLContext, kind: str
) -> dict[str, str]:
    """One gatewayd on ``python`` with ``n`` agents, measured: the table's cells."""
    probe = subprocess.run([python, "-c", "import sys, aiohttp; print(sys.version.split()[0], aiohttp.__version__)"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode:
        return {"interpreter": f"{python}: skipped, cannot import aiohttp"}
    conf, state = tmp / python.replace("/", "_") / "conf", tmp / python.replace("/", "_") / "state"
    conf.mkdir(parents=True)
    state.mkdir()
    names, port, pem = [f"agent{i:03d}" for i in range(n)], 8377, (tmp / "ca.pem").read_text()  # a fresh netns
    holder = {name: f"jackin-placeholder-{name}" for name in names}
    cred = {"header": "x-api-key", "upstream": f"https://127.0.0.1:{up}", "prices": PRICES}
    agents = {name: {"bridge": f"jkb{i}", "budget": {"tokens": 10**9}, "credentials": {"KEY": cred | {
        "placeholder": holder[name], "ca": f"{name}/JACKIN_API_CA"}}} for i, name in enumerate(names)}  # fmt: skip
    (conf / "config.json").write_text(json.dumps({"port": port, "digest": "bench", "agents": agents}))
    secrets = {f"{name}/{k}": v for name in names for k, v in (("KEY", REAL_KEY), ("JACKIN_API_CA", pem))}
    (conf / "secrets.json").write_text(json.dumps(secrets))
    log = (tmp / python.replace("/", "_") / "stderr").open("w+")
    proc = subprocess.Popen([python, str(PROGRAM), str(conf), str(state)], stderr=log)
    cells = {"interpreter": f"{python} (Python {probe.stdout.split()[0]}, aiohttp {probe.stdout.split()[1]})"}
    sent = dict.fromkeys(names, 0)
    try:
        started = await until(lambda: len(read_json(state / "gateway.json").get("waiting", [])) == n, 30)
        if started is None:
            return cells | {"start": f"gatewayd did not start (exit {proc.poll()}): see its stderr below"}
        await asyncio.sleep(0.5)
        cells["RSS at start (no bridge yet)"] = mb(memory(proc.pid)["VmRSS"])
        bridges(n, "add", kind)
        bound = await until(lambda: len(read_json(state / "gateway.json").get("bound", [])) == n, 30)
        await asyncio.sleep(0.5)
        cells[f"RSS, {n} listeners bound"] = (
            f"{mb(memory(proc.pid)['VmRSS'])} (all bound {math.nan if bound is None else bound:.2f} s after the bridges)"
        )

        first = Peer("10.250.0.1", port, holder[names[0]])
        plan = [("direct", True, Peer("127.0.0.1", up, REAL_KEY, client_tls)), ("via", True, first),
                ("direct", False, Peer("127.0.0.1", up, REAL_KEY, client_tls)),
                ("via", False, Peer("10.250.0.1", port, holder[names[0]]))]  # fmt: skip
        times: dict[tuple[str, bool], list[float]] = {(w, k): [] for w, k, _ in plan}
        fails = 0
        for i in range(WARMUP + samples):
            random.shuffle(plan)
            for way, keep, peer in plan:
                t1, _, ok = await ask(peer, "bench-fast-0", keep)
                sent[names[0]] += way == "via"
                if i >= WARMUP:
                    times[way, keep] += [] if math.isnan(t1) else [t1]
                    fails += not ok
        for keep, what in ((True, "kept-alive connection"), (False, "new connection per request")):
            d, v = times["direct", keep], times["via", keep]
            if not d or not v:
                cells[f"TTFB, {what}"] = "no samples: see the errors below"
                continue
            p90d, p90v = statistics.quantiles(d, n=10)[8], statistics.quantiles(v, n=10)[8]
            md, mv = statistics.median(d) * 1e3, statistics.median(v) * 1e3
            cells[f"TTFB direct HTTPS (floor), {what}: median (p90)"] = f"{md:.2f} ms ({p90d * 1e3:.2f})"
            cells[f"TTFB via gatewayd (HTTP), {what}: median (p90)"] = f"{mv:.2f} ms ({p90v * 1e3:.2f})"
            cells[f"gateway adds, {what}: median (p90); via/direct"] = (
                f"{mv - md:+.2f} ms ({(p90v - p90d) * 1e3:+.2f}); x{mv / md:.2f}: {MET[mv - md <= TTFB_TARGET_MS]}"
            )
        cells["TTFB streams failed"] = f"{fails} of {4 * samples}"

        gaps = [await ask(first, "bench-gap-200", True) for _ in range(5)]
        sent[names[0]] += len(gaps)
        ev1, ev2 = max(g[0] for g in gaps) * 1e3, min(g[1] for g in gaps) * 1e3
        ok = ev1 < 50 and ev2 >= 200 and all(g[2] for g in gaps)
        cells["SSE via gatewayd, 200 ms gap: event 1 (max) / event 2 (min)"] = (
            f"{ev1:.1f} / {ev2:.0f} ms: {'event by event' if ok else 'NOT EVENT BY EVENT'}"
        )

        peers = [Peer(f"10.250.{i}.1", port, holder[name]) for i, name in enumerate(names)]
        load = asyncio.gather(*(ask(p, "bench-hold-6000", False) for p in peers))
        peak = memory(proc.pid)
        while not load.done():
            peak = max(peak, memory(proc.pid), key=lambda m: m["VmRSS"])
            await asyncio.wait([load], timeout=0.25)
        done, hwm = load.result(), memory(proc.pid)["VmHWM"]
        for name in names:
            sent[name] += 1
        cells[f"{n} streams (~6 s each, one per agent) completed"] = f"{sum(d[2] for d in done)}/{n}"
        cells[f"RSS, {n} concurrent streams: peak VmRSS (anon); VmHWM"] = (
            f"{mb(peak['VmRSS'])} ({mb(peak['RssAnon'])}); {mb(hwm)}: {MET[max(hwm, peak['VmRSS']) <= RSS_TARGET]}"
        )
        cells["at that peak: PSS; private (USS, no shared library pages)"] = (
            f"{mb(peak['Pss'])}; {mb(peak['Uss'])}: {MET[peak['Uss'] <= RSS_TARGET]}"
        )

        def exact(name: str) -> bool:
            r, k = read_json(state / f"{name}.json"), sent[name]
            usd = k * (12 * PRICES["bench"]["input"] + 7 * PRICES["bench"]["output"]) / 1e6
            got = (r.get("requests"), r.get("input_tokens"), r.get("output_tokens"), r.get("statuses"))
            return got == (k, 12 * k, 7 * k, {"200": k}) and math.isclose(r.get("usd", -1), usd, rel_tol=1e-9)

        wrote = await until(lambda: all(exact(name) for name in names), 5)
        cells["per-agent records exact (requests, 12 in + 7 out each, usd, statuses)"] = (
            f"{sum(map(exact, names))}/{n}" + (f", {wrote:.2f} s after the last stream" if wrote is not None else "")
            + f"; {names[0]}: {sent[names[0]]} requests"
        )  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        bridges(n, "del")
        log.seek(0)
        lines = log.read().splitlines()
        other = [ln for ln in lines if not any(q in ln for q in QUIET)]
        cells["gatewayd stderr"] = (
            f"exit {proc.returncode}; {len(lines)} lines, {len(other)} other than listening/loaded"
        )
        cells["_stderr"] = "\n".join(other[:20])
    return cells


async def main(args: argparse.Namespace) -> None:
    pythons = [sys.executable, "/usr/bin/python3"] if args.python == "both" else [args.python]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ca, cert, key = authority(tmp)
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(cert, key)
        client_tls = ssl.create_default_context(cafile=str(ca))
        server = await asyncio.start_server(upstream_conn, "127.0.0.1", 0, ssl=server_tls, backlog=1024)
        up = int(server.sockets[0].getsockname()[1])
        probe = subprocess.run(["ip", "link", "add", "jkbx", "type", "dummy"], capture_output=True)
        kind = "bridge" if probe.returncode else "dummy"
        subprocess.run(["ip", "link", "del", "jkbx"], capture_output=True)
        columns = [await run(p, args.agents, args.samples, tmp, up, client_tls, kind) for p in pythons]
        server.close()
    print(f"\ngatewayd, {args.agents} agents on {kind} interfaces; upstream: SSE stand-in, TLS (P-256, throwaway CA), "
          f"127.0.0.1, in the client's process. TTFB: request written (and connected, when new) -> message_start;\n"
          f"{args.samples} samples per way after {WARMUP} warm-up rounds, the 4 ways interleaved in random order. "
          f"MB = 10^6 bytes. Targets: gateway adds <= {TTFB_TARGET_MS:g} ms to median TTFB; RSS <= {RSS_TARGET / 1e6:g} MB.")  # fmt: skip
    rows = [k for c in columns for k in c if not k.startswith("_")]
    print("| measure | " + " | ".join(c["interpreter"] for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in dict.fromkeys(rows):
        if row != "interpreter":
            print(f"| {row} | " + " | ".join(c.get(row, "-") for c in columns) + " |")
    for c in columns:
        if c.get("_stderr"):
            print(f"\ngatewayd stderr on {c['interpreter']} (other lines):\n{c['_stderr']}")
    if ERRORS:
        print(f"\nclient errors ({len(ERRORS)}), the first:\n" + "\n".join(ERRORS[:5]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=400, help="TTFB samples per way (direct/via x kept-alive/new)")
    ap.add_argument("--agents", type=int, default=150, choices=range(1, 257), metavar="1..256")
    ap.add_argument("--python", default=sys.executable, help="the interpreter gatewayd runs on, or 'both' "
                    f"(this one and Debian's /usr/bin/python3); default {sys.executable}")  # fmt: skip
    a = ap.parse_args()
    if os.environ.get("JACKIN_BENCH_NETNS") == "1":
        asyncio.run(main(a))
    elif os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        sys.exit("bench/gateway.py runs as root (unshare -n, ip link add ... type dummy): sudo it")
    else:
        os.environ["JACKIN_BENCH_NETNS"] = "1"  # a fresh network namespace: loopback and the dummy bridges only
        cmd = 'ip link set lo up && exec "$@"'
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", cmd, "sh", sys.executable, *sys.argv])
