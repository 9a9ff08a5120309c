"""The gateway program (jackin/net/gatewayd.py) as a process of its own, on loopback, in front of the stand-in:
the placeholder swapped for the value, another host refused, streams passed as they come, usage counted,
budgets refused with a 429 and raised without a restart. The lab proves the rest (bridges, the firewall,
the real runtimes): tests/integration/test_gateway.py."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jackin.net import gatewayd
from tests.standin import StandIn, say

pytest.importorskip("aiohttp")
PROGRAM = Path(gatewayd.__file__)
SECRET, PLACEHOLDER = "sk-real-value-0123456789", "jackin-placeholder-aaaa"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    def __init__(self, tmp: Path, upstream: str, *, budget: dict | None = None, header: str = "x-api-key",
                 prices: dict | None = None):  # fmt: skip
        self.conf, self.state = tmp / "conf", tmp / "state"
        self.conf.mkdir()
        self.state.mkdir()
        self.port = free_port()
        self.upstream, self.header, self.prices = upstream, header, prices or {}
        self.write(budget)
        (self.conf / "secrets.json").write_text(json.dumps({"a1/KEY": SECRET}))
        self.proc = subprocess.Popen([sys.executable, str(PROGRAM), str(self.conf), str(self.state)],
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                assert self.proc.poll() is None, self.proc.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the gateway did not listen"
                time.sleep(0.05)

    def write(self, budget: dict | None) -> None:
        cred = {
            "placeholder": PLACEHOLDER,
            "upstream": self.upstream,
            "header": self.header,
            "prices": self.prices,
            "paths": ["/v1/messages"],
        }
        config = {"port": getattr(self, "port", 0), "agents": {"a1": {"bridge": "lo", "budget": budget,
                                                                      "credentials": {"KEY": cred}}}}  # fmt: skip
        tmp = self.conf / "config.json.tmp"
        tmp.write_text(json.dumps(config))
        os.replace(tmp, self.conf / "config.json")

    def account(self) -> dict:
        try:
            return json.loads((self.state / "a1.json").read_text())
        except FileNotFoundError:  # written within a second of a change
            return {}

    def request(self, path: str = "/v1/messages", body: dict | None = None, headers: dict | None = None,
                target: str | None = None) -> tuple[int, dict, bytes]:  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        sent = {"x-api-key": PLACEHOLDER, "content-type": "application/json", **(headers or {})}
        conn.request("POST", target or path, body=json.dumps(body or {"model": "m", "stream": True, "tools": [{}]}),
                     headers={k: v for k, v in sent.items() if v is not None})  # fmt: skip
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, dict(response.getheaders()), data

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def gateway(tmp_path):
    made: list[Gateway] = []

    def make(upstream: str, **kwargs) -> Gateway:
        made.append(Gateway(tmp_path, upstream, **kwargs))
        return made[-1]

    yield make
    for g in made:
        g.stop()


def wait_for(check, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.05)
    return value


def test_the_placeholder_is_replaced_by_the_value_and_usage_is_counted(gateway):
    with StandIn([say("hello")], key=SECRET) as upstream:
        g = gateway(upstream.url)
        status, _, body = g.request()
        assert status == 200, body
        assert b"hello" in body and b"message_stop" in body
        [seen] = upstream.requests
        assert seen["headers"]["x-api-key"] == SECRET  # the value reached the upstream, never the placeholder
        assert PLACEHOLDER not in json.dumps(seen)
        account = wait_for(lambda: g.account() if g.account().get("requests") else None)
        assert (account["requests"], account["input_tokens"], account["output_tokens"]) == (1, 12, 7)
        assert account["statuses"] == {"200": 1}
        assert account["upstreams"] == {upstream.url: 1}


def test_without_the_placeholder_nothing_is_forwarded_and_with_it_the_control_passes(gateway):
    with StandIn([say("ok")], key=SECRET) as upstream:
        g = gateway(upstream.url)
        assert g.request(headers={"x-api-key": "something-else"})[0] == 401
        assert g.request(headers={"x-api-key": None, "authorization": f"Bearer {SECRET}"})[0] == 401
        assert upstream.requests == []
        assert g.request()[0] == 200  # the control: the same request with the placeholder
        account = wait_for(lambda: g.account() if g.account().get("denied") == 2 else None)
        assert [d["kind"] for d in account["denials"]] == ["placeholder", "placeholder"]


def test_another_host_is_refused_and_recorded_as_a_denial(gateway):
    with StandIn([say("ok")], key=SECRET) as upstream:
        g = gateway(upstream.url)
        status, _, body = g.request(target="http://elsewhere.example/v1/messages")  # the gateway as a proxy
        assert status == 403 and b"elsewhere.example" in body
        status, _, _ = g.request(headers={"host": "elsewhere.example"})
        assert status == 403
        assert upstream.requests == []
        account = wait_for(lambda: g.account() if g.account().get("denied") == 2 else None)
        assert {d["kind"] for d in account["denials"]} == {"upstream"}
        assert "elsewhere.example" in account["denials"][0]["detail"]
        assert g.request()[0] == 200 and len(upstream.requests) == 1  # the control: the bound upstream is reached


class _SlowStream(http.server.BaseHTTPRequestHandler):
    """Sends one event, then waits for the test to have read it through the gateway before the second."""

    protocol_version = "HTTP/1.1"
    first_read = threading.Event()

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(b'event: message_start\ndata: {"type":"message_start","message":{"model":"m","usage":'
                         b'{"input_tokens":5,"output_tokens":1}}}\n\n')  # fmt: skip
        self.wfile.flush()
        self.first_read.wait(15)
        self.wfile.write(b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":9}}\n\n')
        self.wfile.flush()


def test_a_stream_passes_event_by_event(gateway):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        g = gateway(f"http://127.0.0.1:{server.server_address[1]}")
        conn = http.client.HTTPConnection("127.0.0.1", g.port, timeout=10)
        conn.request("POST", "/v1/messages", body="{}", headers={"x-api-key": PLACEHOLDER})
        response = conn.getresponse()
        first = response.readline() + response.readline()  # the upstream holds its second event until then
        assert b"message_start" in first
        _SlowStream.first_read.set()
        rest = response.read()
        assert b"message_delta" in rest
        account = wait_for(lambda: g.account() if g.account().get("output_tokens") else None)
        assert (account["input_tokens"], account["output_tokens"]) == (5, 9)  # running totals, counted once
    finally:
        server.shutdown()


def test_a_spent_budget_is_refused_with_a_429_and_a_raised_one_applies_without_a_restart(gateway):
    with StandIn([say("one"), say("two"), say("three")], key=SECRET) as upstream:
        g = gateway(upstream.url, budget={"tokens": 19})
        assert g.request()[0] == 200  # 19 tokens: the budget is spent after this one
        status, headers, body = g.request()
        assert status == 429 and headers.get("Retry-After") == str(gatewayd.RETRY_AFTER)
        assert b"budget spent: tokens 19 of 19" in body
        assert len(upstream.requests) == 1
        wait_for(lambda: g.account().get("spent", "").startswith("budget spent: tokens 19 of 19"))
        pid = g.proc.pid
        g.write({"tokens": 1000})
        wait_for(lambda: not g.account()["spent"])
        assert g.request()[0] == 200 and g.proc.pid == pid
        assert len(upstream.requests) == 2


def test_usd_is_counted_from_the_role_prices_and_an_unpriced_model_fails_a_usd_budget(gateway):
    with StandIn([say("one"), say("two")], key=SECRET) as upstream:
        g = gateway(upstream.url, budget={"usd": 1.0}, prices={"stand": {"input": 1000.0, "output": 2000.0}})
        assert g.request(body={"model": "stand-in", "stream": True, "tools": [{}]})[0] == 200
        account = wait_for(lambda: g.account() if g.account().get("usd") else None)
        assert account["usd"] == pytest.approx((12 * 1000 + 7 * 2000) / 1e6)
        assert g.request(body={"model": "other", "stream": True, "tools": [{}]})[0] == 200
        status, _, body = g.request()
        assert status == 429 and b"no price" in body


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b'data: {"type":"response.completed","response":{"model":"gpt","usage":{"input_tokens":3,"output_tokens":4}}}\n\n',
         (3, 4, "gpt")),
        (b'data: {"candidates":[],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":5},'
         b'"modelVersion":"gemini-x"}\r\n\r\ndata: {"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":6}}\r\n\r\n',
         (2, 6, "gemini-x")),
        (b'data: {"type":"message_start","message":{"model":"c","usage":{"input_tokens":1,'
         b'"cache_read_input_tokens":10,"output_tokens":1}}}\n\ndata: {"type":"message_delta","usage":{"output_tokens":8}}\n',
         (11, 8, "c")),
    ],
)  # fmt: skip
def test_the_meter_reads_each_api_usage(stream, expected):
    meter = gatewayd.Meter("text/event-stream")
    for i in range(0, len(stream), 7):  # in pieces, as a network delivers them
        meter.feed(stream[i : i + 7])
    meter.done()
    assert (meter.input, meter.output, meter.model) == expected


def test_the_meter_reads_a_json_body_and_skips_a_line_past_its_cap():
    meter = gatewayd.Meter("application/json")
    meter.feed(b'{"usage": {"input_tokens": 4, "output_tokens": 2}, "model": "m"}')
    meter.done()
    assert (meter.input, meter.output) == (4, 2)
    sse = gatewayd.Meter("text/event-stream")
    sse.feed(b"data: " + b"x" * (gatewayd.MAX_LINE + 10))
    sse.feed(b'\ndata: {"usage": {"output_tokens": 3}}\n')
    sse.done()
    assert sse.output == 3


def test_a_shared_logins_access_token_goes_as_a_bearer_with_its_beta_and_an_expired_one_is_refused(gateway):
    from tests.standin import Login

    login = Login("rt-1", "at-current", 60)
    with StandIn([say("ok")], key=SECRET, login=login) as upstream:
        g = gateway(upstream.url)
        config = json.loads((g.conf / "config.json").read_text())
        config["agents"]["a1"]["credentials"]["KEY"].update(login="L1", inject="authorization", beta="oauth-2025-04-20")
        (g.conf / "logins.json").write_text(
            json.dumps({"L1": {"access_token": "at-current", "expires_at": time.time() + 60}})
        )
        (g.conf / "config.json.tmp").write_text(json.dumps(config))
        os.replace(g.conf / "config.json.tmp", g.conf / "config.json")
        side = {"model": "m"}  # a request with no tools: the stand-in answers it without taking a step

        def as_bearer() -> bool:  # the gateway reads changed files within a second
            return g.request(body=side)[0] == 200 and "authorization" in {
                k.lower() for k in upstream.requests[-1]["headers"]
            }

        wait_for(as_bearer)
        status, _, body = g.request(headers={"anthropic-beta": "claude-code-20250219"})
        assert status == 200, body
        seen = upstream.main_requests[-1]
        headers = {k.lower(): v for k, v in seen["headers"].items()}
        assert headers["authorization"] == "Bearer at-current" and "x-api-key" not in headers
        assert headers["anthropic-beta"] == "claude-code-20250219,oauth-2025-04-20"
        (g.conf / "logins.json").write_text(json.dumps({"L1": {"access_token": "at-current", "expires_at": 1}}))
        wait_for(lambda: g.request(body=side)[0] == 401)
        forwarded = len(upstream.requests)
        status, _, body = g.request()
        assert status == 401 and b"shared login L1 has no current access token" in body
        assert len(upstream.requests) == forwarded


def test_a_path_the_api_does_not_list_is_refused_and_recorded(gateway):
    with StandIn([say("ok")], key=SECRET) as upstream:
        g = gateway(upstream.url)
        status, _, body = g.request(path="/v1/files")
        assert status == 403 and b"path /v1/files is not one of this API's (/v1/messages)" in body
        assert g.request(path="/v1/messages/../files")[0] == 403
        assert upstream.requests == []
        assert g.request()[0] == 200  # the control: the API's own path
        account = wait_for(lambda: g.account() if g.account().get("denied") == 2 else None)
        assert [d["kind"] for d in account["denials"]] == ["path", "path"]
