"""Real runtimes in their role images on a lab host (Claude Code and Codex CLI here; OpenCode and Gemini CLI in
test_runtime_lab_more.py): each image built here offline
from its Dockerfile's recipe (the lab reaches no registry: jackin/images/build.py ``offline_context``),
loaded over SSH, run by ``fleet.up`` with work, against a stand-in of its vendor's API (tests/standin.py:
Anthropic's Messages API, Gemini's) on the lab's outside-standing address, reached through the agent's
egress allowlist (its ``api_url``). Claude Code holds its key (``mode: file``; through the credential gateway:
test_gateway.py); Codex CLI and OpenCode reach their stand-in over TLS through the host's credential gateway (the
default), which trusts the test's own authority (``api_ca``), and hold only a placeholder.

The stand-in's script drives each runtime through a day's work in small: it writes a file with its own
file tool, runs the project's test with its own shell tool and commits, asks with ``jackin-ask``
(answered with ``agent.answer``), writes its handoff, and ends. ``fleet.collect`` then brings its branch
back with the file, the answer and a handoff with evidence. The stand-in's log shows every request
carried this agent's credential, and the first the preamble and the task.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import secrets
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from jackin.lab import Lab
from jackin.spec import roles
from jackin.store.ledger import Ledger

from .conftest import inv, module_lab, sh

QUESTION = "Ship hello.sh as it is?"
ANSWER = f"yes, ship it {secrets.token_hex(3)}"
TASK = "Add hello.sh, which prints hello, and run it as the project's test."
STANDIN = Path(__file__).resolve().parent.parent / "standin.py"
# No command substitution: Gemini CLI's shell tool refuses $(...).
HANDOFF = ("{ printf '## What I did\\nAdded hello.sh.\\n## Files changed\\nhello.sh\\n## Tests run\\nsh hello.sh: printed "
           "hello\\n## Could not verify\\nNothing.\\n## Risks\\nNone.\\n## Commit\\n'; git rev-parse HEAD; } "
           "> /workspace/.jackin/handoff.md")  # fmt: skip
SCRIPT = [
    {"text": "Writing the file.", "tool": "Write",
     "input": {"file_path": "/workspace/repo/hello.sh", "content": "#!/bin/sh\necho hello\n"}},
    {"text": "Testing and committing.", "tool": "Bash",
     "input": {"command": "sh hello.sh && git add hello.sh && git commit -qm 'Add hello.sh' && git rev-parse HEAD",
               "description": "test and commit"}},
    {"text": "Asking.", "tool": "Bash",
     "input": {"command": f"jackin-ask {shlex.quote(QUESTION)} > answer.txt && cat answer.txt && git add answer.txt "
                          "&& git commit -qm 'Record the answer'", "description": "ask",
               "timeout": 600000}},  # as the preamble asks: the longest the shell tool allows (Codex's default: 10 s)
    {"text": "Handing off.", "tool": "Bash", "input": {"command": HANDOFF, "description": "handoff"}},
    {"text": "Done: hello.sh is in."},
]  # fmt: skip
UNASKED = [step for step in SCRIPT if step["text"] != "Asking."]  # the day's work without its question


def project(repo: Path) -> list[str]:
    """A git repository at ``repo`` with one commit (a README), as the operator's project; the git command line
    (``[*git, ...]``) that works in it as a committer."""
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("a project\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    return git


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("rt", 1, shared=True)


def svc(lab: Lab, command: str, *, check: bool = True) -> subprocess.CompletedProcess:
    """``command`` in the lab's service container (the outside-standing address's machine)."""
    return subprocess.run(["docker", "exec", lab.status().service.container, "sh", "-c", command],  # type: ignore[union-attr]
                          capture_output=True, text=True, check=check, timeout=60)  # fmt: skip


def authority(directory: Path, address: str) -> tuple[Path, Path, Path]:
    """A certificate authority of the test's own and a server certificate it signed for ``address`` (an IP
    subject name): (the authority's PEM, the server's chain, the server's key)."""
    ca, ca_key, csr, cert, key = (directory / n for n in ("ca.pem", "ca.key", "srv.csr", "srv.pem", "srv.key"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for argv in (["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=jackin test CA"],
                 ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=stand-in"],
                 ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
                  "-extfile", directory / "san.ext"]):  # fmt: skip
        (directory / "san.ext").write_text(f"subjectAltName=IP:{address}\n")
        subprocess.run(["openssl", *map(str, argv)], check=True, capture_output=True, timeout=30)
    return ca, cert, key


@contextlib.contextmanager
def standin(lab: Lab, port: int, key: str, tls: tuple[Path, Path] | None = None, script: list[dict] | None = None):
    """A stand-in serving SCRIPT on the lab's public address and ``port``, accepting only ``key``, over TLS with
    ``tls`` (its certificate chain and key); (its URL, its log's path in the service container)."""
    address, container = lab.status().service.public_address, lab.status().service.container  # type: ignore[union-attr]
    files = f"/dev/shm/standin-{port}"

    def put(data: bytes, path: str) -> None:
        # its root is read-only (/tmp too): /dev/shm is a tmpfs (and docker cp refuses a read-only root: stdin)
        subprocess.run(["docker", "exec", "-i", container, "sh", "-c", f"umask 077; cat > {path}"], input=data,
                       check=True, timeout=30)  # fmt: skip

    put(STANDIN.read_bytes(), "/dev/shm/standin.py")
    served = ""
    if tls is not None:
        put(tls[0].read_bytes(), f"{files}.pem")
        put(tls[1].read_bytes(), f"{files}.key")
        served = f" {files}.pem {files}.key"
    svc(lab, f"printf '%s' {shlex.quote(json.dumps(script or SCRIPT))} > {files}.json && rm -f {files}.log && "
             f"(setsid python3 /dev/shm/standin.py {address} {port} {files}.json {files}.log {shlex.quote(key)}{served} "
             f">{files}.out 2>&1 &)")  # fmt: skip
    for _ in range(50):
        if svc(lab, f"python3 -c 'import socket; socket.create_connection((\"{address}\", {port}), 1)'", check=False).returncode == 0:
            break
        time.sleep(0.1)
    try:
        yield f"{'https' if tls else 'http'}://{address}:{port}", f"{files}.log"
    finally:
        svc(lab, f"pkill -f 'standin.py {address} {port} '; rm -f {files}.json {files}.pem {files}.key", check=False)


ATTACHED = {"text": "Picked up where I left off."}  # the stand-in's answer to the operator's turn (agent.attach)
ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def take_over(spec: Path, key: str, log: str, lab: Lab) -> None:
    """``inv agent.attach coder-1`` on a terminal (a pty of this test's): Claude Code's own session resumed in its
    TUI, shown up to its last message; one turn typed, which the stand-in answers with the whole conversation
    before it; /exit, and the agent is done again (it was before, and the session set nothing). Claude Code's first-run
    dialogs (theme, trust, the custom key, bypass mode) are answered beforehand in its config, as an operator
    who has run it before has them."""
    config = ("const f='/workspace/.claude.json', fs=require('fs'); const c=JSON.parse(fs.readFileSync(f,'utf8'));"
              "Object.assign(c,{hasCompletedOnboarding:true,bypassPermissionsModeAccepted:true,theme:'dark',"
              f"customApiKeyResponses:{{approved:['{key[-20:]}'],rejected:[]}}}});"
              "c.projects=c.projects||{}; c.projects['/workspace/repo']=Object.assign(c.projects['/workspace/repo']||{},"
              "{hasTrustDialogAccepted:true}); fs.writeFileSync(f,JSON.stringify(c));")  # fmt: skip
    prepared = inv("agent.exec", "coder-1", "-i", str(spec), "--", "node", "-e", config)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    pid, fd = pty.fork()
    if pid == 0:  # the operator's terminal: inv agent.attach in it
        os.execve(sys.executable, [sys.executable, "-m", "invoke", "agent.attach", "coder-1", "-i", str(spec)],
                  {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "48"})  # fmt: skip
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    screen = bytearray()

    def until(text: bytes, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while text not in ANSI.sub(b"", bytes(screen)).replace(b"\r", b""):
            assert time.monotonic() < deadline, f"{text!r} not shown: {ANSI.sub(b'', bytes(screen))[-3000:]!r}"
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    screen.extend(os.read(fd, 65536))
                except OSError:  # the session ended
                    raise AssertionError(f"ended before {text!r}: {ANSI.sub(b'', bytes(screen))[-3000:]!r}") from None

    try:
        until(b"Done: hello.sh is in.", 60)  # its conversation, resumed: the last message it gave headless
        time.sleep(1)
        os.write(fd, b"go on from here")
        time.sleep(0.5)  # Enter apart from the text: in one read, Claude Code takes it as a paste (a new line)
        os.write(fd, b"\r")
        until(ATTACHED["text"].encode(), 60)
        shown = ANSI.sub(b"", bytes(screen)).count(b"/exit")
        os.write(fd, b"/exit")  # its own way out (exit 0), typed as a person would, Enter apart
        deadline = time.monotonic() + 10  # Enter once the TUI shows what was typed (its input line or command menu)
        while ANSI.sub(b"", bytes(screen)).count(b"/exit") <= shown and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                screen.extend(os.read(fd, 65536))
        os.write(fd, b"\r")
        deadline, again = time.monotonic() + 45, time.monotonic() + 10
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() < deadline, ANSI.sub(b"", bytes(screen))[-2000:]
            if again and time.monotonic() > again:  # its command menu took the first Enter (seen in CI under load):
                os.write(fd, b"\r")  # a person presses it again
                again = 0.0
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    screen.extend(os.read(fd, 65536))
                except OSError:
                    pass
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, ANSI.sub(b"", bytes(screen))[-2000:]
    turn = [r for r in requests(lab, log) if "go on from here" in json.dumps(r["body"].get("messages", []))]
    assert turn and TASK in json.dumps(turn[-1]["body"]["messages"]), "the operator's turn carried the session before it"
    assert turn[-1]["headers"].get("x-api-key") == key  # the agent's credential, given to the session too
    after = json.loads(inv("fleet.status", "-i", str(spec), "--json").stdout)
    [state] = [a["agent_state"] for h in after["hosts"] for a in h["agents"] if a["instance"] == "coder-1"]
    # it was done before the session, which set no state: done again, at the branch's head
    assert (state["state"], state["message"]) == ("done", "the operator's session ended (exit 0); done before it"), state


def requests(lab: Lab, log: str) -> list[dict]:
    out = svc(lab, f"cat {log} 2>/dev/null || true").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# role, its credential, the header the stand-in reads it from (Codex: "Bearer KEY"), its port. Gemini CLI's run is
# fleet.run's, its stand-in over TLS (test_runtime_lab_more.py).
RUNTIMES = [
    ("claude-code", "ANTHROPIC_API_KEY", "x-api-key", 8090),
    ("codex", "OPENAI_API_KEY", "authorization", 8091),
    ("opencode", "ANTHROPIC_API_KEY", "x-api-key", 8092),
]


HERE = [r for r in RUNTIMES if r[0] in ("claude-code", "codex")]  # OpenCode's and Gemini CLI's: test_runtime_lab_more.py
# (a worker of their own: the four runs take about 200 s)


@pytest.mark.parametrize(("role", "credential", "header", "port"), HERE, ids=[r[0] for r in HERE])
def test_a_runtime_in_its_image_works_asks_and_hands_off_through_fleet_up(rlab, tmp_path, monkeypatch, role: str,
                                                                          credential: str, header: str, port: int):  # fmt: skip
    run_runtime(rlab, tmp_path, monkeypatch, role, credential, header, port)


def run_runtime(rlab: Lab, tmp_path: Path, monkeypatch, role: str, credential: str, header: str, port: int) -> None:
    """The runtime of ``role`` in its image on the lab host, through fleet.up, against its stand-in (the module's
    docstring)."""
    key = f"{role}-key-{secrets.token_hex(6)}"
    name = f"rt{secrets.token_hex(3)}"
    repo = tmp_path / "repo"
    git = project(repo)
    spec = tmp_path / f"{name}.yaml"
    monkeypatch.setenv("JK_TEST_RUNTIME_KEY", key)
    carried = f"Bearer {key}" if header == "authorization" else key
    # With Codex, a second agent whose policy does not name the stand-in (network mode none: no allowlist entry
    # at all): its runtime fails at once, its own words in its status, and agent.denials shows the connection.
    fenced = role == "codex"
    # With Claude Code, the operator then takes it over (agent.attach): its session resumed in its TUI, one
    # more turn against the stand-in (ATTACHED), and out.
    attach = role == "claude-code"
    # Claude Code holds its key (mode file: test_gateway.py runs it through the gateway); Codex CLI and OpenCode
    # reach their stand-in, over TLS, through the credential gateway, which trusts the test's authority (api_ca).
    through = role in ("codex", "opencode")
    tls = None
    if through:
        (tmp_path / "tls").mkdir()
        ca, cert, cert_key = authority(tmp_path / "tls", rlab.status().service.public_address)  # type: ignore[union-attr]
        tls = (cert, cert_key)
    mode = {"api_ca": str(ca)} if through else {}
    with standin(rlab, port, key, tls, [*SCRIPT, ATTACHED] if attach else None) as (url, log):
        url += urlsplit(roles.load(role).api.url).path  # type: ignore[union-attr] - the role's API path (Codex: /v1)
        cred = {"name": credential, "from_env": "JK_TEST_RUNTIME_KEY", **({} if through else {"mode": "file"})}
        spec.write_text(json.dumps({"fleet": {
            "name": name, "provider": "lab", "lab": {"name": rlab.name, "hosts": 1},
            "resources": {"memory": "768m", "cpus": 1, "pids": 256},
            "network": {"mode": "allowlist"},
            "agents": [{"name": "coder", "role": role, "api_url": url, **mode, "credentials": [cred],
                        "work": {"repo": str(repo), "task": TASK}},
                       *([{"name": "fenced", "role": role, "api_url": url, "network": {"mode": "none"}, **mode,
                           "credentials": [cred], "work": {"repo": str(repo), "task": TASK}}] if fenced else [])],
        }}))  # fmt: skip
        try:
            up = inv("fleet.up", "-i", str(spec), "--yes")
            assert up.returncode == 0, up.stdout + up.stderr
            upped = time.monotonic()
            blocked = inv("fleet.wait", "-i", str(spec), "--until", "blocked", "--timeout", "90s", "--json")
            logs = sh(rlab, f"docker logs --tail 40 jk-{name}--coder-1 2>&1", warn=True).stdout
            assert blocked.returncode == 0, blocked.stdout[-1500:] + logs[-4000:] + json.dumps(requests(rlab, log))[-2000:]
            agents = {a["instance"]: a for a in json.loads(blocked.stdout)["agents"]}
            assert (agents["coder-1"]["state"], agents["coder-1"]["question"]) == ("blocked", QUESTION), agents
            answered = inv("agent.answer", "coder-1", ANSWER, "-i", str(spec))
            assert answered.returncode == 0, answered.stdout + answered.stderr
            fenced_failed = upped
            while fenced:  # how soon its runtime gives up on a connection the policy rejects (not TCP's 2 minutes)
                now = json.loads(inv("fleet.status", "-i", str(spec), "--json").stdout)
                [state] = [a["agent_state"]["state"] for h in now["hosts"] for a in h["agents"] if a["instance"] == "fenced-1"]
                fenced_failed = time.monotonic()
                if state == "failed" or fenced_failed - upped > 120:
                    break
                time.sleep(1)
            done = inv("fleet.wait", "-i", str(spec), "--until", "done", "--timeout", "3m", "--json")
            assert done.returncode == (1 if fenced else 0), done.stdout + done.stderr + json.dumps(requests(rlab, log))[-3000:]
            if fenced:  # exit 1: done, but an agent failed
                shut = {a["instance"]: a for a in json.loads(done.stdout)["agents"]}["fenced-1"]
                assert shut["state"] == "failed" and "its runtime ended in error" in shut["message"], shut
                assert fenced_failed - upped < 45, f"fenced-1 failed {fenced_failed - upped:.0f} s after fleet.up"
                print(f"\nfenced-1 failed {fenced_failed - upped:.1f} s after fleet.up: {shut['message']}")
                denied = json.loads(inv("agent.denials", "fenced-1", "-i", str(spec), "--json").stdout)["denials"]
                address, port_ = urlsplit(url).hostname, urlsplit(url).port
                if through:  # its way out is the gateway on its bridge, which mode none does not open
                    base = sh(rlab, f"docker exec jk-{name}--fenced-1 printenv OPENAI_BASE_URL").stdout.strip()
                    address, port_ = urlsplit(base).hostname, urlsplit(base).port
                assert any((d["destination"], d["port"]) == (address, port_) for d in denied), denied
            collected = inv("fleet.collect", "-i", str(spec), "--into", str(repo), "--json")
            assert collected.returncode == 0, collected.stdout + collected.stderr
            refs = subprocess.run([*git, "for-each-ref", "--format=%(refname)", "refs/jackin/"], capture_output=True,
                                  text=True, check=True).stdout.split()  # fmt: skip
            [ref] = [r for r in refs if r.endswith("coder-1")]
            files = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True).stdout
            assert {"README.md", "hello.sh", "answer.txt"} <= set(files.split()), files
            shown = subprocess.run([*git, "show", f"{ref}:answer.txt"], capture_output=True, text=True).stdout
            assert shown.strip() == ANSWER
            [result] = [a for a in json.loads(collected.stdout)["agents"] if a["instance"] == "coder-1"]
            assert (result["state"], result["result"], result["evidence"]["ok"]) == ("done", "collected", True), result
            assert result["evidence"]["commit"] == result["commit"]  # the handoff names the branch's head
            # the tokens its runtime reported: in fleet.status --json, fleet.review and the ledger's collection
            status = json.loads(inv("fleet.status", "-i", str(spec), "--json").stdout)
            [usage] = [a["agent_state"]["usage"] for h in status["hosts"] for a in h["agents"] if a["instance"] == "coder-1"]
            assert usage["input_tokens"] >= 12 * len(SCRIPT) and usage["output_tokens"] >= 7 * len(SCRIPT), usage
            assert result["usage"] == usage
            if attach:
                take_over(spec, key, log, rlab)
            reviewed = inv("fleet.review", "-i", str(spec), "--json")
            assert [r["usage"] for r in json.loads(reviewed.stdout)["rows"] if r["instance"] == "coder-1"] == [usage]
            with Ledger() as ledger:
                assert [r["detail"]["usage"] for r in ledger.collections(name)] == [usage]  # only coder-1 collected
        finally:
            inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")
        seen = requests(rlab, log)
    main = [r for r in seen if r["body"].get("tools")]  # all coder-1's: nothing of fenced-1's arrived
    assert len(main) == len(SCRIPT) + attach and not any(r.get("past_end") for r in seen), [r["path"] for r in seen]
    assert {r["headers"].get(header) for r in seen if r["method"] == "POST"} == {carried}  # its credential, every time
    assert TASK in json.dumps(main[0]["body"]) and "jackin-ask" in json.dumps(main[0]["body"])
