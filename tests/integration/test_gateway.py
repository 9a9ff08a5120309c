"""The credential gateway on a lab host (issue 20), with Claude Code in its image against a stand-in of the Messages
API served over TLS by a certificate of the test's own authority (the spec's ``api_ca``, trusted by the gateway).

One fleet: ``coder`` (work, a budget of BUDGET tokens) and ``other`` (no work: idle, its runtime never starts), both
with their API key in gateway mode (the default). Proven here:

- the secret never enters the sandbox: every request the stand-in saw carried the real key; the container's
  filesystem, its processes' environments, ``docker inspect``, the host's journal and the operator's state hold the
  placeholder at most (positive controls: the placeholder is found where the key is not looked for in vain);
- the budget stops spending: the request after BUDGET tokens is refused, the agent shows ``blocked: budget
  spent``, and a higher budget applied by ``fleet.up`` (no restart) lets it finish, its work collected;
- credentials cannot be swapped: ``coder``'s placeholder sent from ``other``'s network is refused, ``other``'s own is
  forwarded (the control), and ``coder``'s bridge address is not reachable from ``other`` at all;
- upstreams are bound: ``other`` asking the gateway for another host is refused, and ``agent.denials`` shows it;
- the gateway fails closed: stopped, the agents' requests fail at once and ``fleet.status`` says so (exit 4);
  ``fleet.up`` starts it again;
- ``fleet.down`` leaves nothing of it (the module's shared lab checks the host after every module).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import stat
import subprocess
import time

import pytest

from jackin.store.ledger import Ledger

from .conftest import inv, module_lab, sh
from .test_runtime_lab import TASK, UNASKED, authority, project, requests, standin

BUDGET = 50  # tokens: the stand-in counts 19 a request (12 in, 7 out), so the fourth request is refused
SCRIPT = UNASKED  # write, test and commit, hand off, done
# A request from inside an agent's container, as its user: raw HTTP/1.1 to HOST:PORT for TARGET with KEY in
# x-api-key; prints the status line (or ERROR <code>) and the time it took.
REQUEST = r"""
const net = require('net'); const [host, port, target, key] = process.argv.slice(1); const t0 = Date.now();
const body = '{"model":"stand-in","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}';
const s = net.connect({host, port: +port}, () => s.write(`POST ${target} HTTP/1.1\r\nHost: ${host}:${port}\r\n` +
  `x-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`));
let out = ''; s.setTimeout(8000, () => { console.log('ERROR timeout ' + (Date.now() - t0)); s.destroy(); });
s.on('data', d => out += d); s.on('end', () => console.log(out.split('\r\n')[0] + ' ' + (Date.now() - t0) + '\n' + out.slice(-300)));
s.on('error', e => console.log('ERROR ' + e.code + ' ' + (Date.now() - t0)));
"""


@pytest.fixture(scope="module")
def glab():
    yield from module_lab("gw", 1, shared=True)


def spec_of(name: str, url: str, ca, repo, budget: int) -> dict:
    cred = [{"name": "ANTHROPIC_API_KEY", "from_env": "JK_TEST_GATEWAY_KEY"}]
    return {"fleet": {
        "name": name, "provider": "lab", "lab": {"name": "", "hosts": 1},
        "resources": {"memory": "768m", "cpus": 1, "pids": 256}, "network": {"mode": "allowlist"},
        "agents": [{"name": "coder", "role": "claude-code", "api_url": url, "api_ca": str(ca), "credentials": cred,
                    "work": {"repo": str(repo), "task": TASK}, "budget": {"tokens": budget}},
                   {"name": "other", "role": "claude-code", "api_url": url, "api_ca": str(ca), "credentials": cred}],
    }}  # fmt: skip


def agent_request(lab, container: str, host: str, port: int, target: str, key: str) -> tuple[str, int, str]:
    """(the status line or ERROR code, milliseconds, the tail of the answer) of REQUEST run in ``container``."""
    out = sh(lab, f"docker exec {container} node -e {shlex.quote(REQUEST)} {host} {port} {shlex.quote(target)} "
                  f"{shlex.quote(key)}", timeout=30).stdout  # fmt: skip
    first, _, rest = out.partition("\n")
    words = first.split()
    return " ".join(words[:-1]), int(words[-1]), rest


def state_of(spec, instance: str) -> dict:
    out = json.loads(inv("fleet.status", "-i", str(spec), "--json").stdout)
    return next(a["agent_state"] for h in out["hosts"] for a in h["agents"] if a["instance"] == instance)


def test_claude_code_works_through_the_gateway_and_never_holds_the_key(glab, tmp_path, monkeypatch):
    key, name, repo = f"sk-ant-real-{secrets.token_hex(12)}", f"gw{secrets.token_hex(3)}", tmp_path / "repo"
    git = project(repo)
    monkeypatch.setenv("JK_TEST_GATEWAY_KEY", key)
    (tmp_path / "tls").mkdir()
    ca, cert, cert_key = authority(tmp_path / "tls", glab.status().service.public_address)
    spec = tmp_path / f"{name}.yaml"
    coder, other = f"jk-{name}--coder-1", f"jk-{name}--other-1"
    with standin(glab, 8095, key, (cert, cert_key), SCRIPT) as (url, log):
        document = spec_of(name, url, ca, repo, BUDGET)
        document["fleet"]["lab"]["name"] = glab.name
        spec.write_text(json.dumps(document))
        try:
            up = inv("fleet.up", "-i", str(spec), "--yes")
            assert up.returncode == 0, up.stdout + up.stderr
            # --- the budget: spent after BUDGET tokens, the agent blocked with the gateway's words
            blocked = inv("fleet.wait", "-i", str(spec), "--until", "blocked", "--timeout", "120s", "--json")
            logs = sh(glab, f"docker logs --tail 30 {coder} 2>&1; journalctl -u jackin-gateway-{name} --no-pager "
                            "| tail -20", warn=True).stdout  # fmt: skip
            assert blocked.returncode == 0, blocked.stdout[-1500:] + logs[-3000:]
            state = state_of(spec, "coder-1")
            assert state["state"] == "blocked" and state["message"].startswith("budget spent: tokens"), state
            assert state["gateway"]["tokens"] >= BUDGET and state["gateway"]["statuses"].get("429", 0) >= 1, state
            forwarded = [r for r in requests(glab, log) if r["method"] == "POST"]
            spent_at = len(forwarded)
            assert spent_at == -(-BUDGET // 19), forwarded  # the first request past BUDGET tokens went nowhere

            # --- the secret never enters the sandbox (checked while its runtime runs, waiting on the 429s)
            placeholder = sh(glab, f"docker exec {coder} cat /run/jackin/credentials/ANTHROPIC_API_KEY").stdout.strip()
            assert placeholder.startswith("jackin-placeholder-") and key not in placeholder
            # as root (no capability: no file it cannot read as root's) and as the agent (every file of its own, and
            # its processes' environments)
            search = (
                f"grep -rlF -e {shlex.quote(key)} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null"
            )
            as_root = sh(glab, f"docker exec -u 0 {coder} sh -c {shlex.quote(search + '; true')}", timeout=120).stdout
            inside = sh(
                glab,
                f"docker exec {coder} sh -c "
                + shlex.quote(
                    f"{search}; echo @@; grep -rlF -e {shlex.quote(placeholder)} /run /workspace 2>/dev/null; echo @@; "
                    "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done; true"
                ),
                timeout=120,
            ).stdout
            assert as_root.strip() == "", as_root
            files_with_key, files_with_placeholder, environ = inside.split("@@\n")
            assert files_with_key.strip() == "", files_with_key
            assert "/run/jackin/credentials/ANTHROPIC_API_KEY" in files_with_placeholder  # the control
            assert key not in environ and f"ANTHROPIC_API_KEY={placeholder}" in environ  # the runtime holds only it
            assert "ANTHROPIC_BASE_URL=http://" in environ and ":8377" in environ
            inspected = sh(glab, f"docker inspect {coder} {other}").stdout
            assert key not in inspected and "ANTHROPIC_BASE_URL=http://" in inspected
            journal = sh(glab, "journalctl --no-pager -o cat", timeout=60).stdout
            assert key not in journal
            assert "listening on" in sh(glab, f"journalctl -u jackin-gateway-{name} --no-pager -o cat").stdout
            for root, _, names in os.walk(os.environ["JACKIN_STATE_DIR"]):
                for file in names:
                    if not stat.S_ISREG(os.lstat(os.path.join(root, file)).st_mode):
                        continue  # the ssh multiplexers' sockets
                    with open(os.path.join(root, file), "rb") as handle:
                        assert key.encode() not in handle.read(), os.path.join(root, file)
            on_host = sh(glab, f"stat -c '%U:%G %a' /etc/jackin/gateway/{name}/secrets.json; "
                               f"grep -c {shlex.quote(key)} /etc/jackin/gateway/{name}/secrets.json").stdout.split("\n")  # fmt: skip
            assert on_host[:2] == [f"root:jk-gw-{name} 440", "1"], on_host  # only there: root's, the gateway's group
            # the gateway's own view of the host, from inside its mount namespace (its unit's sandbox): no capability;
            # the agents' homes and the delivered credentials are empty there even to root, where the host shows them
            # (the control), and its own configuration its user reads
            unit = f"jackin-gateway-{name}.service"
            count = f"ls -A /srv/jackin/{name} 2>/dev/null | wc -l; ls -A /var/lib/jackin/credentials/{name} 2>/dev/null | wc -l"
            seen = sh(glab, f"p=$(systemctl show -p MainPID --value {unit}); grep CapEff /proc/$p/status; "
                            f"nsenter -t $p -m sh -c {shlex.quote(count)}; echo @@; sh -c {shlex.quote(count)}; echo @@; "
                            f"nsenter -t $p -m -S $(id -u jk-gw-{name}) -G $(id -g jk-gw-{name}) "
                            f"cat /etc/jackin/gateway/{name}/config.json >/dev/null && echo config-read").stdout  # fmt: skip
            inside, outside, own = seen.split("@@\n") if seen.count("@@") == 2 else (seen, "", "")
            assert "CapEff:\t0000000000000000" in inside, seen
            assert inside.split()[-2:] == ["0", "0"] and "0" not in outside.split(), seen
            assert "config-read" in own, seen

            # --- credentials cannot be swapped; upstreams are bound (from the other agent's network)
            gw_other = sh(glab, f"docker exec {other} printenv ANTHROPIC_BASE_URL").stdout.strip()
            gw_coder = sh(glab, f"docker exec {coder} printenv ANTHROPIC_BASE_URL").stdout.strip()
            host_other, host_coder = gw_other.split("//")[1].split(":")[0], gw_coder.split("//")[1].split(":")[0]
            mine = sh(glab, f"docker exec {other} cat /run/jackin/credentials/ANTHROPIC_API_KEY").stdout.strip()
            assert mine != placeholder
            status, _, body = agent_request(glab, other, host_other, 8377, "/v1/messages", placeholder)
            assert status == "HTTP/1.1 403 Forbidden" and "coder-1's placeholder" in body, (status, body)
            status, _, body = agent_request(glab, other, host_other, 8377, "/v1/messages", mine)
            assert status == "HTTP/1.1 200 OK", (status, body)  # the control: its own placeholder is forwarded
            status, _, _ = agent_request(glab, other, host_coder, 8377, "/v1/messages", placeholder)
            assert status.startswith("ERROR"), status  # coder's bridge address: not reachable from other at all
            status, _, body = agent_request(glab, other, host_other, 8377, "http://elsewhere.example/v1/messages", mine)
            assert status == "HTTP/1.1 403 Forbidden" and "elsewhere.example" in body, (status, body)
            for _ in range(10):  # the gateway writes its records within a second
                denials = json.loads(inv("agent.denials", "other", "-i", str(spec), "--json").stdout)
                kinds = {(d["instance"], d["kind"]) for d in denials["gateway"]}
                if {("other-1", "placeholder"), ("other-1", "upstream")} <= kinds:
                    break
                time.sleep(0.5)
            assert {("other-1", "placeholder"), ("other-1", "upstream")} <= kinds, denials
            assert any(d["destination"] == host_coder and d["port"] == 8377 for d in denials["denials"]), denials
            assert len([r for r in requests(glab, log) if r["method"] == "POST"]) == spent_at + 1  # only the control

            # --- a higher budget, applied by fleet.up: no restart, the agent goes on and finishes
            document["fleet"]["agents"][0]["budget"] = {"tokens": 100_000}
            spec.write_text(json.dumps(document))
            pid = sh(glab, f"systemctl show -p MainPID --value jackin-gateway-{name}").stdout.strip()
            up = inv("fleet.up", "-i", str(spec), "--yes")
            assert up.returncode == 0, up.stdout + up.stderr
            assert sh(glab, f"systemctl show -p MainPID --value jackin-gateway-{name}").stdout.strip() == pid
            done = inv("fleet.wait", "-i", str(spec), "--until", "done", "--timeout", "150s", "--json")
            assert done.returncode == 0, (
                done.stdout[-2000:] + sh(glab, f"docker logs --tail 30 {coder}", warn=True).stdout
            )
            collected = inv("fleet.collect", "-i", str(spec), "--json")
            assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
            state = state_of(spec, "coder-1")
            assert state["state"] == "done" and state["gateway"]["statuses"]["200"] >= len(SCRIPT), state

            # --- the gateway fails closed
            sh(glab, f"systemctl stop jackin-gateway-{name}")
            status, took, _ = agent_request(glab, other, host_other, 8377, "/v1/messages", mine)
            assert status.startswith("ERROR") and took < 2000, (status, took)
            down = inv("fleet.status", "-i", str(spec))
            assert down.returncode == 4 and "credential gateway DOWN" in down.stdout, down.stdout[-1500:]
            assert inv("fleet.up", "-i", str(spec), "--yes").returncode == 0
            assert inv("fleet.status", "-i", str(spec)).returncode == 0
            # its unit gone altogether (removed by hand): still said, since the agents' spec goes through it
            unit = f"jackin-gateway-{name}.service"
            sh(glab, f"systemctl disable --now {unit}; rm -f /etc/systemd/system/{unit}; systemctl daemon-reload")
            gone = inv("fleet.status", "-i", str(spec))
            assert gone.returncode == 4 and f"({unit}) is missing" in gone.stdout, gone.stdout[-1500:]
            assert inv("fleet.up", "-i", str(spec), "--yes").returncode == 0
            assert inv("fleet.status", "-i", str(spec)).returncode == 0
        finally:
            inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")
        seen = [r for r in requests(glab, log) if r["method"] == "POST"]
    assert seen and {r["headers"].get("x-api-key") for r in seen} == {key}  # the real key on every request
    assert placeholder not in json.dumps(seen)  # and never the placeholder
    [ref] = subprocess.run([*git, "for-each-ref", "--format=%(refname)", f"refs/jackin/{name}/"], capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    files = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True).stdout.split()
    assert "hello.sh" in files, files
    with Ledger() as ledger:
        rows = ledger.collections(name)
    assert rows and rows[0]["detail"].get("gateway", {}).get("requests", 0) >= len(SCRIPT), rows
