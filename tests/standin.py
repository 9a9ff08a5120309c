"""A stand-in of a model vendor's API, for running a real agent runtime against scripted answers.

It speaks Anthropic's Messages API (``POST /v1/messages``, streamed as server-sent events or not), the
way Claude Code and OpenCode call it, OpenAI's Responses API (``POST /v1/responses``, streamed), the way
Codex CLI calls it, and Gemini's (``/v1beta/models/<model>:streamGenerateContent``), the way Gemini CLI
calls it. Each request that offers
tools (the runtime's main loop) gets the script's next step: a tool call (``bash``, ``write``) or a
final message (``say``); every other request (a runtime's side calls: titles, summaries on a small
model) gets a short text. A step may check the request before it answers (``expect``: the tool result
the runtime sent back). Every request is recorded: method, path, headers (the credential it carried),
model and body, so a test asserts on what the runtime sent.

    with StandIn([bash("echo hi > f"), say("done")]) as api:
        run the runtime with ANTHROPIC_BASE_URL=api.url ...
        api.requests  # what it received

No traffic leaves 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.server
import itertools
import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Step:
    """One answer of the script: tool blocks, or a final text (``text`` only)."""

    text: str = ""
    tool: str | None = None  # the runtime's tool name (Claude Code: Bash, Write)
    tool_input: dict[str, Any] = field(default_factory=dict)
    expect: Callable[[dict[str, Any]], None] | None = None  # checks the request it answers (raise to fail)


def bash(command: str, *, expect: Callable[[dict[str, Any]], None] | None = None) -> Step:
    return Step(text="Running a command.", tool="Bash", tool_input={"command": command, "description": "run"},
                expect=expect)  # fmt: skip


def write(path: str, content: str) -> Step:
    return Step(text="Writing a file.", tool="Write", tool_input={"file_path": path, "content": content})


def say(text: str, *, expect: Callable[[dict[str, Any]], None] | None = None) -> Step:
    return Step(text=text, expect=expect)


def last_tool_result(request: dict[str, Any]) -> str:
    """The text of the last tool result the runtime sent back in ``request`` ('' if none): Anthropic's
    ``tool_result`` block, or Gemini's ``functionResponse`` part."""
    for item in reversed(request["body"].get("input") or []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            try:  # Codex CLI sends {"output": ..., "metadata": ...} as a string
                output = json.loads(output).get("output", output)
            except (TypeError, ValueError, AttributeError):
                pass
            return output if isinstance(output, str) else json.dumps(output)
    for content in reversed(request["body"].get("contents", [])):
        for part in reversed(content.get("parts") or []):
            if "functionResponse" in part:
                response = part["functionResponse"].get("response") or {}
                return str(response.get("output", response.get("error", json.dumps(response))))
    for message in reversed(request["body"].get("messages", [])):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in reversed(content):
            if block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    return "".join(part.get("text", "") for part in inner if isinstance(part, dict))
                return str(inner or "")
    return ""


CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def _in_netns(path: str | None) -> Iterator[None]:
    """This thread in the network namespace at ``path`` (None: where it is), and back on the way out."""
    if path is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    home, there = os.open("/proc/thread-self/ns/net", os.O_RDONLY), os.open(path, os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {path}")
        try:
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(home)
        os.close(there)


@contextlib.contextmanager
def loopback_only() -> Iterator[str]:
    """A network namespace with only a loopback interface, held by a sleeping process; its path. A runtime
    run in it (``nsenter --net=PATH``) reaches a stand-in made in it (``StandIn(netns=PATH)``) and nothing
    else: no packet of a test can leave this machine, whatever the runtime tries."""
    holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up 2>/dev/null || "
                               "busybox ip link set lo up; exec sleep 3600"], start_new_session=True)  # fmt: skip
    path = f"/proc/{holder.pid}/ns/net"
    try:
        for _ in range(250):  # the holder's own namespace, once unshare has made it and lo has 127.0.0.1
            if os.readlink(path) != os.readlink("/proc/self/ns/net"):
                shown = subprocess.run(["nsenter", f"--net={path}", "ip", "-o", "addr", "show", "dev", "lo"],
                                       capture_output=True, text=True)  # fmt: skip
                if "127.0.0.1" in shown.stdout:
                    break
            time.sleep(0.02)
        else:
            raise RuntimeError("the loopback-only namespace did not come up")
        yield path
    finally:
        holder.kill()
        holder.wait()


def delivered(tmp_path: Path, task: str) -> tuple[Path, str]:
    """The work as fleet.up delivers it to a runtime's entrypoint (jackin.work): a bundle of a one-commit
    repository, work.json with the agent's branch and the commit, and the task, under ``tmp_path/work``;
    (the work dir, the commit)."""
    source, work = tmp_path / "source", tmp_path / "work"
    work.mkdir()
    git = ["git", "-C", str(source), "-c", "user.name=op", "-c", "user.email=op@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(source)], check=True)
    (source / "README.md").write_text("a project\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "bundle", "create", "-q", str(work / "repo.bundle"), "main"], check=True, capture_output=True)
    (work / "work.json").write_text(json.dumps({"branch": "jackin/coder-1", "commit": commit}, separators=(",", ":")))
    (work / "task.md").write_text(task + "\n")
    return work, commit


class Login:
    """A subscription login's side of the API: the token endpoint (``POST /v1/oauth/token``, Anthropic's refresh grant:
    JSON ``grant_type``, ``refresh_token``, ``client_id``), whose refresh token is single-use (each refresh returns a
    new one: the old one is then refused, as the vendors rotate them), and the access tokens it issued, each valid
    ``lifetime`` seconds."""

    def __init__(self, refresh_token: str, access_token: str, lifetime: float):
        self.refresh_token, self.lifetime = refresh_token, lifetime
        self.tokens = {access_token: time.time() + lifetime}  # access token -> expiry
        self.refreshes = 0
        self.refused = 0  # refresh grants with a used or unknown refresh token

    def valid(self, token: str) -> bool:
        return self.tokens.get(token, 0) > time.time()

    def refresh(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if body.get("grant_type") != "refresh_token" or body.get("refresh_token") != self.refresh_token:
            self.refused += 1
            return None
        self.refreshes += 1
        access, self.refresh_token = f"at-{secrets.token_hex(8)}", f"rt-{secrets.token_hex(8)}"
        self.tokens[access] = time.time() + self.lifetime
        return {
            "access_token": access,
            "refresh_token": self.refresh_token,
            "expires_in": int(self.lifetime),
            "token_type": "Bearer",
            "scope": "user:inference",
        }


class StandIn:
    """The server, in a thread of this process, on 127.0.0.1 and a free port (``url``); ``netns``: in that
    network namespace (``loopback_only``)."""

    def __init__(
        self,
        script: list[Step],
        *,
        netns: str | None = None,
        bind: tuple[str, int] = ("127.0.0.1", 0),
        key: str | None = None,
        per_conversation: bool = False,
        login: Login | None = None,
    ):
        self.script = list(script)
        # per_conversation: every conversation (agent) gets the whole script, its step the number of assistant turns
        # in the request; else one script for all, step after step
        self.per_conversation = per_conversation
        self.login = login  # a subscription login's token endpoint (POST /v1/oauth/token) and its access tokens
        self.key = key  # the only credential it accepts (None: any); another gets the API's 401
        self.log: str | None = None  # a file each request is appended to, as a JSON line
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []  # a step's expectation that failed, or a request past the script
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        handler = type("Handler", (_Handler,), {"standin": self})
        with _in_netns(netns):  # its socket lives there: a runtime in that namespace reaches it, and nothing else
            self.server = http.server.ThreadingHTTPServer(bind, handler)
        self.url = f"http://{bind[0]}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, request: dict[str, Any]) -> None:
        """Keep ``request`` (and append it to ``log`` as a JSON line, when the stand-in has one)."""
        self.requests.append(request)
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(request) + "\n")

    @property
    def main_requests(self) -> list[dict[str, Any]]:
        """The requests of the runtime's main loop (they offer tools), in order."""
        return [r for r in self.requests if r["body"].get("tools")]

    def answer(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """(content blocks, stop reason) for ``request``."""
        with self._lock:
            turn = sum(1 for m in request["body"].get("messages") or [] if m.get("role") == "assistant")
            left = self.script[turn:] if self.per_conversation else self.script
            past = bool(request["body"].get("tools")) and not left
            self.record({**request, "past_end": past})
            if not request["body"].get("tools"):
                return [{"type": "text", "text": "ok"}], "end_turn"
            if not left:
                self.errors.append(f"request {len(self.requests)} came after the script's end")
                return [{"type": "text", "text": "The script has ended."}], "end_turn"
            step = left[0] if self.per_conversation else self.script.pop(0)
        if step.expect is not None:
            try:
                step.expect(request)
            except Exception as error:  # noqa: BLE001 - recorded for the test to report
                self.errors.append(f"step before {step.text!r}: {error}")
        blocks: list[dict[str, Any]] = [{"type": "text", "text": step.text}]
        if step.tool is None:
            return blocks, "end_turn"
        name, tool_input = _as_offered(step.tool, step.tool_input, request["body"].get("tools") or [])
        blocks.append({"type": "tool_use", "id": f"toolu_{next(self._ids):04d}", "name": name,
                       "input": tool_input})  # fmt: skip
        return blocks, "tool_use"


def _as_offered(name: str, tool_input: dict[str, Any], tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A step's tool (Claude Code's names: Bash, Write) as the runtime offers it on the Messages API: OpenCode's
    ``bash`` and ``write`` take ``command`` and ``filePath``. Unchanged when offered as it is."""
    offered = {t.get("name"): t for t in tools if isinstance(t, dict)}
    if name in offered or name.lower() not in offered:
        return name, tool_input
    properties = (offered[name.lower()].get("input_schema") or {}).get("properties") or {}
    camel = {k: "".join(w.capitalize() if i else w for i, w in enumerate(k.split("_"))) for k in tool_input}
    return name.lower(), {camel[k] if camel[k] in properties and k not in properties else k: v
                          for k, v in tool_input.items() if k in properties or camel[k] in properties}  # fmt: skip


_GEMINI_USAGE = {"usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}}
# A step's tool, as Gemini CLI names it and its arguments.
_GEMINI_TOOLS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "Bash": ("run_shell_command", lambda i: {"command": i["command"], "description": i.get("description", "run")}),
    "Write": ("write_file", lambda i: {"file_path": i["file_path"], "content": i["content"]}),
}


def _apply_patch_add(path: str, content: str) -> str:
    """Codex CLI's own file-writing patch (its apply_patch format) that adds ``path`` with ``content``."""
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


# A step's tool, as Codex CLI calls it: its shell tool (an argv), and apply_patch through it (Codex applies
# such a call itself, as its own file tool). ``bash -c``, not the ``bash -lc`` models tend to send: a login
# shell takes PATH from /etc/profile, which in a role's image has /usr/local/bin (jackin-ask) but not the
# directory a test on this machine puts it in.
_CODEX_TOOLS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "Bash": lambda i: {
        "command": ["bash", "-c", i["command"]],
        **({"timeout_ms": i["timeout"]} if "timeout" in i else {}),
    },
    "Write": lambda i: {"command": ["apply_patch", _apply_patch_add(i["file_path"], i["content"])]},
}
_RESPONSES_USAGE = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                    "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 19}  # fmt: skip


def _responses_events(model: str, response_id: str, blocks: list[dict[str, Any]]) -> list[tuple[str, dict]]:
    """OpenAI's Responses API stream of one response: response.created, each output item (text deltas,
    then the item done), response.completed with its usage."""
    base = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    events: list[tuple[str, dict]] = [("response.created", {"type": "response.created", "response": base})]
    items: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            item_id = f"msg_{response_id}_{index}"
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item_id,
                                                          "output_index": index, "content_index": 0,
                                                          "delta": block["text"]}))  # fmt: skip
            item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": block["text"], "annotations": []}]}  # fmt: skip
        else:
            args = _CODEX_TOOLS[block["name"]](block["input"]) if block["name"] in _CODEX_TOOLS else block["input"]
            item = {"type": "function_call", "id": f"fc_{block['id']}", "call_id": block["id"], "name": "shell",
                    "arguments": json.dumps(args), "status": "completed"}  # fmt: skip
        items.append(item)
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index,
                                                     "item": item}))  # fmt: skip
    done = {**base, "status": "completed", "output": items, "usage": _RESPONSES_USAGE}
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    return events


def _events(model: str, message_id: str, blocks: list[dict[str, Any]], stop: str) -> list[tuple[str, dict]]:
    """The Messages API's stream of one message: message_start, each block's start/delta/stop,
    message_delta (stop reason, usage), message_stop."""
    usage = {"input_tokens": 12, "output_tokens": 1}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})]  # fmt: skip
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": index})]  # fmt: skip
    events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 7}}),
               ("message_stop", {"type": "message_stop"})]  # fmt: skip
    return events


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    standin: StandIn

    def log_message(self, *_: object) -> None:
        pass

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, events: Iterable[tuple[str | None, dict]], *, end: str = "\n\n") -> None:
        """Server-sent events, each written as it comes (``event:`` when named); no length: the stream
        ends with the connection."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        for name, data in events:
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {json.dumps(data)}{end}".encode())
            self.wfile.flush()

    def _gemini(self, request: dict[str, Any]) -> None:
        """Gemini's API (``/v1beta/models/<model>:streamGenerateContent?alt=sse``, ``:generateContent``,
        ``:countTokens``), as Gemini CLI calls it; the key in ``x-goog-api-key``. A step's tool is sent as
        Gemini CLI's own (Bash: ``run_shell_command``, Write: ``write_file``)."""
        path = self.path
        if ":countTokens" in path:
            self.standin.record(request)
            self._json(200, {"totalTokens": 12})
            return
        if self.standin.key is not None and self.headers.get("x-goog-api-key") != self.standin.key:
            self.standin.record(request)
            self._json(400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                       "status": "INVALID_ARGUMENT"}})  # fmt: skip
            return
        if not request["body"].get("tools"):  # a side call (Gemini CLI's model router): a short JSON answer
            self.standin.record(request)
            text = json.dumps(
                {
                    "reasoning": "a stand-in",
                    "model_choice": "flash",  # and the classifier's fields
                    "complexity_reasoning": "a stand-in",
                    "complexity_score": 1,
                }
            )  # (0.40 logs a ZodError)
            self._json(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                             "finishReason": "STOP", "index": 0}], **_GEMINI_USAGE})  # fmt: skip
            return
        blocks, _ = self.standin.answer(request)
        parts: list[dict[str, Any]] = []
        for block in blocks:
            if block["type"] == "text":
                parts.append({"text": block["text"]})
                continue
            name, args = _GEMINI_TOOLS.get(block["name"], (block["name"], None))
            parts.append({"functionCall": {"name": name, "args": args(block["input"]) if args else block["input"]}})
        event = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 **_GEMINI_USAGE}  # fmt: skip
        if ":generateContent" in path:
            self._json(200, event)
            return
        self._stream([(None, event)], end="\r\n\r\n")  # Gemini's framing: data lines only

    def _responses(self, request: dict[str, Any]) -> None:
        """OpenAI's Responses API (``POST /v1/responses``, streamed), as Codex CLI calls it; the key as
        ``Authorization: Bearer``. A step's tool is sent as a call of Codex's ``shell`` tool (Write: its
        ``apply_patch``)."""
        if self.standin.key is not None and self.headers.get("authorization") != f"Bearer {self.standin.key}":
            self.standin.record(request)
            self._json(401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                       "param": None, "code": "invalid_api_key"}})  # fmt: skip
            return
        blocks, _ = self.standin.answer(request)
        model = request["body"].get("model", "stand-in")
        events = _responses_events(model, f"resp_{len(self.standin.requests):04d}", blocks)
        if not request["body"].get("stream"):
            self._json(200, events[-1][1]["response"])
            return
        self._stream(events)

    def _anthropic_auth(self) -> bool:
        """The key in x-api-key, or a current access token of the login as a bearer with the OAuth beta."""
        login, bearer = self.standin.login, self.headers.get("authorization", "")
        if login is not None and bearer.startswith("Bearer "):
            return login.valid(bearer[7:]) and "oauth-2025-04-20" in self.headers.get("anthropic-beta", "")
        return self.standin.key is None or self.headers.get("x-api-key") == self.standin.key

    def _token(self, request: dict[str, Any]) -> None:
        login = self.standin.login
        issued = login.refresh(request["body"]) if login is not None else None
        self.standin.record({**request, "refreshed": issued is not None})
        if issued is None:
            self._json(400, {"error": "invalid_grant", "error_description": "refresh token not found or already used"})
            return
        self._json(200, issued)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.standin.record({"method": "GET", "path": self.path, "headers": dict(self.headers), "body": {}})
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not in the stand-in"}})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        request = {
            "method": "POST",
            "path": self.path,
            "headers": dict(self.headers),
            "body": body,
            "client": self.client_address[0],
            "at": time.time(),
        }
        if self.path.startswith("/v1/oauth/token"):
            self._token(request)
            return
        if self.path.startswith("/v1beta/models/"):
            self._gemini(request)
            return
        if self.path.startswith("/v1/responses"):
            self._responses(request)
            return
        if not self.path.startswith("/v1/messages"):
            self.standin.record(request)
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
            return
        if self.path.startswith("/v1/messages/count_tokens"):
            self.standin.record(request)
            self._json(200, {"input_tokens": 12})
            return
        if not self._anthropic_auth():
            self.standin.record({**request, "refused": True})
            self._json(
                401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
            )
            return
        blocks, stop = self.standin.answer(request)
        model, message_id = body.get("model", "stand-in"), f"msg_{len(self.standin.requests):04d}"
        if not body.get("stream"):
            self._json(200, {"id": message_id, "type": "message", "role": "assistant", "model": model,
                             "content": blocks, "stop_reason": stop, "stop_sequence": None,
                             "usage": {"input_tokens": 12, "output_tokens": 7}})  # fmt: skip
            return
        self._stream(_events(model, message_id, blocks, stop))


# --- as a process of its own: the lab's stand-in (python3 standin.py ADDRESS PORT SCRIPT LOG) ---------------


def serve(address: str, port: int, script: list[dict[str, Any]] | dict[str, Any], log: str, key: str | None = None,
          tls: tuple[str, str] | None = None) -> None:  # fmt: skip
    """Serve ``script`` (steps as JSON: ``text``, and ``tool`` with ``input`` for a tool call) on
    ``address:port`` until killed, appending each request to ``log`` as a JSON line (a main-loop request
    past the script's end with ``"past_end": true``); ``key``: the only credential it accepts; ``tls``:
    (certificate chain, key) PEM files, to serve HTTPS."""
    options = script if isinstance(script, dict) else {"script": script}  # or {"script", "per_conversation", "login"}
    login = options.get("login")
    standin = StandIn([Step(text=s.get("text", ""), tool=s.get("tool"), tool_input=s.get("input") or {})
                       for s in options["script"]], bind=(address, port), key=key,
                      per_conversation=bool(options.get("per_conversation")),
                      login=Login(login["refresh_token"], login["access_token"], login["lifetime"]) if login else None)  # fmt: skip
    standin.log = log
    if tls is not None:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        standin.server.socket = context.wrap_socket(standin.server.socket, server_side=True)
    standin.server.serve_forever()


if __name__ == "__main__":
    import sys

    # standin.py ADDRESS PORT SCRIPT LOG [KEY [CERT CERT_KEY]]
    serve(
        sys.argv[1],
        int(sys.argv[2]),
        json.loads(open(sys.argv[3], encoding="utf-8").read()),
        sys.argv[4],
        sys.argv[5] if len(sys.argv) > 5 else None,
        (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else None,
    )
