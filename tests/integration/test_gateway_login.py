"""One shared subscription login for a fleet (credential kind ``oauth``, issue 20): 6 Claude Code agents on 2 lab hosts
work through their hosts' credential gateways with one login whose access token expires every LIFETIME seconds
during the run. The stand-in's token endpoint rotates its refresh token at every refresh (a used one is refused, as
the vendors do), so two refreshers would lose the login; and its Messages API takes only a current access token, as a
bearer with the OAuth beta header.

Proven: every agent finishes; no refresh was refused and no request was; each refresh gave an access token that the
agents of both hosts then used (one refresh per expiry for the whole fleet, not one per agent or per host); no agent
ever held a token (its file holds a placeholder, its environment no token)."""

from __future__ import annotations

import json
import re
import secrets
import shlex
import time

import pytest

from .conftest import inv, module_lab, sh
from .test_runtime_lab import TASK, UNASKED, authority, project, requests, standin

# Seconds of each access token: the run (about 25 s) spans two or three of them. The refresh is made a third of the
# lifetime before expiry, while fleet.wait polls every 2 s: 8 s left a margin of 2.7 s, which a loaded CI machine
# (another module's 5 agents beside these 6) overran once (one call with an expired token); 12 s leaves 4 s.
LIFETIME = 12
SCRIPT = [
    *({"text": f"Step {n}.", "tool": "Bash", "input": {"command": "sleep 3", "description": "wait"}} for n in range(5)),
    *UNASKED,
]  # fmt: skip


@pytest.fixture(scope="module")
def two():
    yield from module_lab("gl", 2)


def test_one_shared_login_is_refreshed_once_per_expiry_for_six_agents_on_two_hosts(two, tmp_path, monkeypatch):
    name, repo = f"gl{secrets.token_hex(3)}", tmp_path / "repo"
    project(repo)
    (tmp_path / "tls").mkdir()
    ca, cert, cert_key = authority(tmp_path / "tls", two.status().service.public_address)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # this machine's refreshes reach the stand-in's token endpoint
    first_refresh, first_access = f"rt-{secrets.token_hex(8)}", f"at-{secrets.token_hex(8)}"
    login = tmp_path / "credentials.json"  # as Claude Code writes it after /login
    login.write_text(json.dumps({"claudeAiOauth": {"accessToken": first_access, "refreshToken": first_refresh,
                                                   "expiresAt": int((time.time() + LIFETIME) * 1000),
                                                   "scopes": ["user:inference"], "subscriptionType": "max"}}))  # fmt: skip
    login.chmod(0o600)
    options = {"script": SCRIPT, "per_conversation": True,
               "login": {"refresh_token": first_refresh, "access_token": first_access, "lifetime": LIFETIME}}  # fmt: skip
    spec = tmp_path / f"{name}.yaml"
    with standin(two, 8096, f"unused-{secrets.token_hex(4)}", (cert, cert_key), options) as (url, log):  # type: ignore[arg-type]
        spec.write_text(json.dumps({"fleet": {
            "name": name, "provider": "lab", "lab": {"name": two.name, "hosts": 2},
            "resources": {"memory": "640m", "cpus": 1, "pids": 256}, "network": {"mode": "allowlist"},
            "agents": [{"name": "coder", "role": "claude-code", "count": 3, "placement": "each", "api_url": url, "api_ca": str(ca),
                        "credentials": [{"name": "ANTHROPIC_API_KEY", "kind": "oauth", "from_file": str(login),
                                         "token_url": f"{url}/v1/oauth/token", "acknowledge_terms": True}],
                        "work": {"repo": str(repo), "task": TASK}}],
        }}))  # fmt: skip
        try:
            up = inv("fleet.up", "-i", str(spec), "--yes")
            assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
            started = time.time()
            # no agent holds a token of any kind (checked while they work)
            container = f"jk-{name}--coder-1"
            held = sh(two, f"docker exec {container} cat /run/jackin/credentials/ANTHROPIC_API_KEY").stdout.strip()
            environ = sh(
                two,
                f"docker exec {container} sh -c "
                + shlex.quote("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done; true"),
            ).stdout
            assert held.startswith("jackin-placeholder-"), held
            assert not re.search(r"\b[ar]t-[0-9a-f]{16}\b", environ), environ  # neither an access nor a refresh token
            done = inv("fleet.wait", "-i", str(spec), "--until", "done", "--timeout", "240s", "--json")
            logs = sh(two, f"docker logs --tail 20 {container} 2>&1", warn=True).stdout
            assert done.returncode == 0, done.stdout[-3000:] + logs[-2000:]
            agents = json.loads(done.stdout)["agents"]
            assert len(agents) == 6 and {a["state"] for a in agents} == {"done"}, agents
            took = time.time() - started
        finally:
            inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")
        seen = requests(two, log)
    grants = [r for r in seen if r["path"].startswith("/v1/oauth/token")]
    assert grants and all(r["refreshed"] for r in grants), grants  # no refresh was refused: one refresher
    calls = [r for r in seen if r["path"].startswith("/v1/messages")]
    assert calls and not [r for r in calls if r.get("refused")], [r for r in calls if r.get("refused")][:3]
    by_token: dict[str, set[str]] = {}
    for r in calls:
        token = r["headers"].get("Authorization", r["headers"].get("authorization", ""))
        assert token.startswith("Bearer at-") and "x-api-key" not in {k.lower() for k in r["headers"]}, r["headers"]
        by_token.setdefault(token[7:], set()).add(r["client"])
    # every refresh's token served both hosts' agents (the last may have come as the run ended)
    refreshed_tokens = [t for t in by_token if t != first_access]
    assert len(grants) >= 2 and len(refreshed_tokens) >= 2, (len(grants), by_token)
    assert sum(len(hosts) == 2 for hosts in by_token.values()) >= len(refreshed_tokens) - 1, by_token
    # one refresh per expiry for the fleet: at most the run's length over two thirds of a lifetime, plus the one at up
    assert len(grants) <= took / (LIFETIME * 2 / 3) + 2, (len(grants), took)
