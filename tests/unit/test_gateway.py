"""The credential gateway's operator side, with no host: the spec's modes and budgets, the plan and contract of an
agent behind it, its files, its firewall rule, the state it makes an agent show, and the shared login's refresh.
(The program itself: test_gatewayd.py; on a lab host: tests/integration/test_gateway.py.)"""

from __future__ import annotations

import io
import json
import urllib.error

import pytest

from jackin.agents import state as derivation
from jackin.errors import SpecError
from jackin.facts.gateway import GatewayAccount
from jackin.net import firewall, gateway, logins
from jackin.operations import credentials as cred_ops
from jackin.plan import contract
from jackin.plan import fleet as planning
from jackin.spec import parse_inventory
from jackin.spec.credentials import Secrets

KEY = b"sk-ant-real-value"


def inventory(agent: str = "", fleet: str = "", hosts: int = 1):
    return parse_inventory(f"""
fleet:
  name: demo
  provider: lab
  lab: {{hosts: {hosts}}}
  network: {{mode: allowlist, allow: ["github.com:443"]}}{fleet}
  agents:
    - name: coder
      role: claude-code
      credentials: [{{name: ANTHROPIC_API_KEY, from_env: KEY}}]{agent}
""")


def plan_of(inv, hosts: int = 1):
    return planning.build(inv.fleet, {"coder-1": 60001}).model_copy(update={"host_count": hosts})


def secrets() -> Secrets:
    return Secrets({"coder": {"ANTHROPIC_API_KEY": KEY}}, b"k" * 32)


def test_by_default_the_api_key_goes_through_the_gateway_and_the_api_leaves_the_allowlist():
    [agent] = plan_of(inventory()).agents
    assert agent.gateway is not None and agent.gateway.upstream == "https://api.anthropic.com"
    assert agent.env == {"ANTHROPIC_BASE_URL": f"http://{planning.BRIDGE_GATEWAY}:8377"}
    assert agent.policy.allow == ["github.com:443"]  # no direct path to the vendor
    rules = firewall.render(plan_of(inventory()))
    assert f'iifname "{agent.bridge}" tcp dport 8377 fib daddr . iif type local accept' in rules


def test_the_agent_gets_a_placeholder_and_the_gateway_the_value():
    plan, values = plan_of(inventory()), secrets()
    [agent] = plan.agents
    placeholder = cred_ops.delivered_value(agent, "ANTHROPIC_API_KEY", values)
    assert placeholder.startswith(b"jackin-placeholder-") and KEY not in placeholder
    assert placeholder == values.placeholder("demo", "coder-1", "ANTHROPIC_API_KEY")  # the same on every run
    uploads = [c for c in cred_ops.credential_commands(plan, _empty(), values) if isinstance(c, cred_ops.SecretUpload)]
    assert [u.data for u in uploads] == [placeholder]
    config = json.loads(gateway.config(plan, values))
    cred = config["agents"]["coder-1"]["credentials"]["ANTHROPIC_API_KEY"]
    assert cred["placeholder"] == placeholder.decode() and KEY.decode() not in json.dumps(config)
    assert json.loads(gateway.secrets_blob(plan, values)) == {"coder-1/ANTHROPIC_API_KEY": KEY.decode()}


def _empty():
    from jackin.facts.state import HostState

    return HostState()


def test_the_contract_says_who_holds_the_value():
    inv = inventory()
    coder = contract.build(inv, plan_of(inv)).agent("coder-1")
    [term] = coder.credentials
    assert term.delivery == "gateway" and term.holds.startswith("the agent never holds the value")
    assert term.upstream == "https://api.anthropic.com" and coder.api is not None and coder.api.via == "gateway"
    assert not any("exports ANTHROPIC_API_KEY" in r for r in coder.residual_risks)
    assert any("spend ANTHROPIC_API_KEY's quota" in r for r in coder.residual_risks)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("\n      budget: {tokens: 10}\n      role: claude-code", None),
        ("\n      budget: {}", "a budget needs at least one of tokens, usd or requests"),
        ("\n      budget: {tokens: 5}\n      credentials: [{name: ANTHROPIC_API_KEY, from_env: K, mode: file}]",
         "budget: the credential gateway counts it"),
        ("\n      credentials: [{name: ANTHROPIC_API_KEY, from_env: K}, {name: GH, from_env: G, mode: gateway}]",
         "credential GH: mode gateway is for the credential role 'claude-code'"),
        ('\n      api_url: "http://198.19.0.1:8091"', "the credential gateway forwards over verified TLS only"),
        ("\n      credentials: [{name: ANTHROPIC_API_KEY, from_env: K, kind: oauth, from_file: x, acknowledge_terms: true}]",
         "a credential needs exactly one of from_env or from_file"),
        ("\n      credentials: [{name: ANTHROPIC_API_KEY, kind: oauth, from_file: x}]", "set acknowledge_terms: true"),
        ("\n      credentials: [{name: ANTHROPIC_API_KEY, kind: oauth, from_file: x, acknowledge_terms: true, mode: file}]",
         "goes through the gateway only"),
        ("\n      credentials: [{name: ANTHROPIC_API_KEY, from_env: K, token_url: 'https://x.example/t'}]",
         "token_url and acknowledge_terms are for a credential of kind oauth"),
    ],
    ids=["ok", "empty-budget", "budget-file-mode", "gateway-other-credential", "plain-http-upstream",
         "two-sources", "oauth-unacknowledged", "oauth-file-mode", "token-url-for-a-key"],
)  # fmt: skip
def test_modes_and_budgets_the_gateway_cannot_serve_are_refused_before_any_host(agent: str, message: str | None):
    if message is None:
        inventory(agent.replace("\n      role: claude-code", ""))
        return
    with pytest.raises(SpecError) as caught:
        if "credentials:" in agent:
            parse_inventory("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      role: claude-code"
                            + agent + "\n")  # fmt: skip
        else:
            inventory(agent)
    assert any(message in p for p in caught.value.problems) or message in caught.value.message, caught.value.problems


def test_gemini_takes_only_https_so_its_key_stays_in_file_mode_and_gateway_is_refused():
    gemini = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: g\n      role: gemini\n      credentials: "
    inv = parse_inventory(gemini + "[{name: GEMINI_API_KEY, from_env: K}]\n")
    assert planning.build(inv.fleet, {"g-1": 60001}).agents[0].gateway is None
    with pytest.raises(SpecError) as caught:
        parse_inventory(gemini + "[{name: GEMINI_API_KEY, from_env: K, mode: gateway}]\n")
    assert any("takes only an https:// base URL" in p for p in caught.value.problems), caught.value.problems


def test_each_host_enforces_its_share_of_the_fleet_budget_rounded_down():
    inv = inventory(fleet="\n  budget: {tokens: 1001, usd: 3.0, requests: 7}", hosts=2)
    assert gateway.share(plan_of(inv, hosts=2)) == {"tokens": 500, "usd": 1.5, "requests": 3}
    assert json.loads(gateway.config(plan_of(inv, hosts=2), secrets()))["fleet_budget"]["tokens"] == 500


def test_a_spent_budget_makes_the_agent_blocked_with_the_gateways_words_but_done_stays_done():
    status = json.dumps({"schema_version": 1, "state": "working", "message": "on it", "heartbeat": 100.0}).encode()
    spent = GatewayAccount(requests=4, input_tokens=48, output_tokens=28, spent="budget spent: tokens 76 of 50")
    facts = derivation.AgentFacts(container="running", status=status, now=101.0, gateway=spent)
    found = derivation.derive(facts)
    assert (found.state, found.message) == ("blocked", "budget spent: tokens 76 of 50") and found.gateway == spent
    done = derivation.AgentFacts(container="exited", exit_code=0, now=101.0, gateway=spent,
                                 status=status.replace(b'"working"', b'"done"'))  # fmt: skip
    assert derivation.derive(done).state == "done"
    fine = facts.model_copy(update={"gateway": spent.model_copy(update={"spent": ""})})
    assert derivation.derive(fine).state == "working"


def test_a_gateway_record_is_read_bounded_and_a_bad_one_is_none():
    assert GatewayAccount.parse(b'{"requests": 2, "input_tokens": 3, "extra": 1}').tokens == 3  # type: ignore[union-attr]
    assert GatewayAccount.parse(b'{"requests": -1}') is None
    assert GatewayAccount.parse(b"not json") is None
    assert GatewayAccount.parse(b"x" * (300 * 1024)) is None


# --- the shared login ---------------------------------------------------------------------------


def test_a_login_is_taken_from_the_runtimes_login_file_or_a_bare_refresh_token():
    file = json.dumps({"claudeAiOauth": {"accessToken": "a", "refreshToken": "r", "expiresAt": 2_000_000}}).encode()
    assert logins.parse_login(file, "x") == ("r", "a", 2000.0)
    assert logins.parse_login(b"r-token\n", "x") == ("r-token", None, 0.0)
    with pytest.raises(SpecError, match="not a login file"):
        logins.parse_login(b'{"other": 1}', "credential K of agent coder")


class _Answer(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def test_a_refresh_rotates_the_refresh_token_and_a_refused_one_says_what_to_do():
    held = logins.Held(token_url="https://t.example/token", client_id="c", refresh_token="r1")
    assert held.due(0.0)
    sent = {}

    def opener(request, timeout):
        sent.update(json.loads(request.data))
        return _Answer(json.dumps({"access_token": "a2", "refresh_token": "r2", "expires_in": 30}).encode())

    after = logins.refreshed(held, opener=opener)
    assert sent == {"grant_type": "refresh_token", "refresh_token": "r1", "client_id": "c"}
    assert (after.access_token, after.refresh_token, after.lifetime, after.refreshes) == ("a2", "r2", 30.0, 1)
    assert not after.due(after.expires_at - 11) and after.due(after.expires_at - 10)  # a third of its lifetime left
    assert "a2" not in repr(after) and "r2" not in repr(after)

    def refused(request, timeout):
        raise urllib.error.HTTPError(held.token_url, 400, "Bad Request", {}, io.BytesIO(b'{"error":"invalid_grant"}'))  # type: ignore[arg-type]

    with pytest.raises(logins.LoginError) as caught:
        logins.refreshed(after, opener=refused)
    assert "HTTP 400" in caught.value.message and "invalid_grant" in caught.value.message
    assert "log in again" in (caught.value.hint or "")


def test_agents_given_one_login_share_it_and_the_gateway_injects_its_token_as_a_bearer():
    agent = ("\n      credentials: [{name: ANTHROPIC_API_KEY, kind: oauth, from_file: /l.json, acknowledge_terms: true}]"
             "\n      count: 2")  # fmt: skip
    text = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      role: claude-code" + agent + "\n"
    inv = parse_inventory(text)
    plan = planning.build(inv.fleet, {"coder-1": 60001, "coder-2": 60002})
    [one, two] = [a.gateway for a in plan.agents]
    assert one is not None and two is not None and one.login == two.login and one.beta == "oauth-2025-04-20"
    access = json.dumps({"access_token": "at-1", "expires_at": 9e9}).encode()
    values = Secrets({"coder": {"ANTHROPIC_API_KEY": access}}, b"k" * 32)
    assert json.loads(gateway.secrets_blob(plan, values)) == {}  # the login is never in secrets.json
    held = logins.Held(token_url="https://t.example/x", client_id="c", refresh_token="r", access_token="at-1",
                       expires_at=9e9)  # fmt: skip
    # logins.json: each login's access token and expiry alone, never its refresh token
    assert json.loads(logins.blob({one.login: held})) == {one.login: {"access_token": "at-1", "expires_at": 9e9}}
    cred = json.loads(gateway.config(plan, values))["agents"]["coder-1"]["credentials"]["ANTHROPIC_API_KEY"]
    assert (cred["login"], cred["inject"], cred["beta"], cred["header"]) == (one.login, "authorization",
                                                                            "oauth-2025-04-20", "x-api-key")  # fmt: skip


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/v1/messages", True), ("/v1/messages?beta=true", True), ("/v1/messages/count_tokens", True),
     ("/v1/messagesX", False), ("/v1/files", False), ("/v1/messages/../files", False), ("/v1/messages/%2e%2e/files", False),
     ("/v1/messages/..%2Ffiles", False), ("/v1/messages\\..\\files", False), ("/", False)],
)  # fmt: skip
def test_the_gateway_forwards_only_the_apis_own_paths(path: str, allowed: bool):
    from jackin.net import gatewayd

    assert gatewayd.path_allowed(path, ["/v1/messages"]) is allowed


def test_the_plan_binds_the_paths_under_the_api_urls_own():
    inv = inventory('\n      api_url: "https://proxy.example/anthropic"')
    [agent] = plan_of(inv).agents
    assert agent.gateway is not None and agent.gateway.paths == ["/anthropic/v1/messages"]
    assert agent.env == {"ANTHROPIC_BASE_URL": f"http://{planning.BRIDGE_GATEWAY}:8377/anthropic"}


def test_a_fleet_budget_smaller_than_its_hosts_is_refused(tmp_path):
    from jackin.plan.make import make_plan
    from jackin.store.ledger import Ledger

    inv = inventory(fleet="\n  budget: {requests: 2}", hosts=3)
    with Ledger() as ledger, pytest.raises(SpecError, match="budget.requests 2 is less than the fleet's 3 hosts"):
        make_plan(inv, ledger, store=False)


def test_fleet_status_says_when_the_gateway_runs_an_older_configuration_or_waits_for_a_bridge():
    from jackin.lifecycle import status

    record = json.dumps({"config": "aaaa", "waiting": [], "bound": ["coder-1"]}).encode()
    assert "older configuration (aaaa, not bbbb)" in (status._gateway_behind("bbbb", record) or "")
    assert status._gateway_behind("aaaa", record) is None
    waiting = json.dumps({"config": "aaaa", "waiting": ["coder-2"]}).encode()
    assert "no listener yet for coder-2" in (status._gateway_behind("aaaa", waiting) or "")


def test_a_shared_login_is_pushed_to_each_host_once_and_a_host_that_missed_it_is_tried_again(monkeypatch, tmp_path):
    from jackin.transport.target import SshTarget

    source = tmp_path / "login.json"
    source.write_text(json.dumps({"claudeAiOauth": {"accessToken": "at-0", "refreshToken": "rt-0", "expiresAt": 9e12}}))
    agent = ("\n      credentials: [{name: ANTHROPIC_API_KEY, kind: oauth, from_file: " + str(source) +
             ", acknowledge_terms: true}]")  # fmt: skip
    inv = parse_inventory("fleet:\n  name: lg\n  provider: lab\n  agents:\n    - name: coder\n      role: claude-code"
                          + agent + "\n")  # fmt: skip
    values = Secrets({"coder": {"ANTHROPIC_API_KEY": source.read_bytes()}}, b"k" * 32)
    held = logins.current(inv, values)  # fleet.up takes it: a fresh token (no refresh due)
    assert [h.access_token for h in held.values()] == ["at-0"]
    pushes: list[list[str]] = []
    down = {"h2"}

    def push(targets, fleet, data):
        pushes.append([t.name for t in targets])
        assert json.loads(data) == {next(iter(held)): {"access_token": "at-0", "expires_at": 9e9}}
        return {t.name: "refused" for t in targets if t.name in down}

    monkeypatch.setattr(logins, "push", push)
    hosts = [SshTarget(name=n, address="127.0.0.1", known_hosts=tmp_path / "kh") for n in ("h1", "h2")]
    with pytest.raises(logins.LoginError, match="did not reach h2: refused"):
        logins.keep(inv, hosts, force=True)
    down.clear()
    assert logins.keep(inv, hosts) == [] and pushes == [["h1", "h2"], ["h2"]]  # only the host that missed it
    logins.keep(inv, hosts)
    assert pushes == [["h1", "h2"], ["h2"]]  # nothing new: nothing pushed


def test_a_gateway_down_missing_or_behind_is_said_and_a_running_current_one_is_not():
    from jackin.lifecycle.status import AgentStatus, HostStatus, gateway_down

    agent = AgentStatus(instance="coder-1", container="c", state="running", restarts=0)
    host = HostStatus(host="h", address="127.0.0.1", port=22, reachable=True, agents=[agent], gateway="active")
    assert gateway_down("demo", host) is None
    for state in ("inactive", "failed", "missing"):
        said = gateway_down("demo", host.model_copy(update={"gateway": state}))
        assert said is not None and f"(jackin-gateway-demo.service) is {state}" in said
    behind = host.model_copy(
        update={"gateway_behind": "it runs an older configuration (a, not b): it refused the new one"}
    )
    assert "is behind: it runs an older configuration" in (gateway_down("demo", behind) or "")
    assert gateway_down("demo", host.model_copy(update={"gateway": None})) is None  # no gateway here: nothing to say
