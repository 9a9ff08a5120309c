"""A runtime role's model provider base URL (issue 19, item 3): the role names it and the variable its runtime
reads (``api``); the spec's ``api_url`` replaces it. The container gets it in that variable, the allowlist's
entry and the launch contract follow the URL in force. No host."""

from __future__ import annotations

import pytest

from jackin.errors import SpecError
from jackin.plan import contract
from jackin.plan import fleet as planning
from jackin.spec import parse_inventory, roles
from jackin.spec.values import api_entry


def inventory(api_url: str | None = None, mode: str = "allowlist", role: str = "claude-code", cred: str = "file"):
    """(Its credential in file mode: the agent reaches the URL itself. Through the gateway: test_gateway.py.)"""
    line = f"\n      api_url: {api_url!r}" if api_url else ""
    return parse_inventory(f"""
fleet:
  name: demo
  provider: lab
  network: {{mode: {mode}, allow: ["10.9.0.0/16:5432"]}}
  agents:
    - name: coder
      role: {role}
      credentials: [{{name: ANTHROPIC_API_KEY, from_env: KEY, mode: {cred}}}]{line}
""")


def plan_of(inv):
    return planning.build(inv.fleet, {"coder-1": 60001})


def test_every_runtime_role_names_its_base_url_and_the_variable_its_runtime_reads() -> None:
    found = {name: (r.api.env, r.api.url) for name in roles.names() if (r := roles.load(name)).api is not None}
    assert found == {
        "amp": ("AMP_URL", "https://ampcode.com"),
        "claude-code": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        "codex": ("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        "gemini": ("GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
        "opencode": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com/v1"),
    }
    assert roles.load("demo").api is None


def test_by_default_the_vendors_url_is_in_force_and_nothing_is_set() -> None:
    inv = inventory()
    [agent] = plan_of(inv).agents
    assert agent.env == {} and not any(a.startswith("ANTHROPIC_BASE_URL") for a in agent.run_args())
    assert "api.anthropic.com:443" in agent.policy.allow
    term = contract.build(inv, plan_of(inv)).agent("coder-1").api
    assert term is not None and (term.url, term.env, term.source) == ("https://api.anthropic.com",
                                                                      "ANTHROPIC_BASE_URL", "role")  # fmt: skip


def test_the_specs_url_is_set_in_the_container_and_replaces_the_vendors_allowlist_entry() -> None:
    inv = inventory("http://198.18.0.200:8080/anthropic")
    [agent] = plan_of(inv).agents
    assert agent.env == {"ANTHROPIC_BASE_URL": "http://198.18.0.200:8080/anthropic"}
    args = agent.run_args()
    assert args[args.index("ANTHROPIC_BASE_URL=http://198.18.0.200:8080/anthropic") - 1] == "--env"
    assert "198.18.0.200:8080" in agent.policy.allow and "api.anthropic.com:443" not in agent.policy.allow
    assert "10.9.0.0/16:5432" in agent.policy.allow  # the spec's own entries stay
    document = contract.build(inv, plan_of(inv))
    term = document.agent("coder-1").api
    assert term is not None and (term.url, term.source) == ("http://198.18.0.200:8080/anthropic", "spec")
    assert any("adds 198.18.0.200:8080 to the allowlist" in r for r in document.agent("coder-1").residual_risks)
    assert agent.config_hash != plan_of(inventory()).agents[0].config_hash  # a new URL recreates the container


def test_in_open_mode_the_url_is_set_and_the_allowlist_is_not_touched() -> None:
    [agent] = plan_of(inventory("https://gateway.example:8443", mode="open")).agents
    assert agent.env == {"ANTHROPIC_BASE_URL": "https://gateway.example:8443"}
    assert agent.policy.allow == ["10.9.0.0/16:5432"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://x.example", "expected http(s)://host[:port][/path]"),
        ("https://user@x.example", "expected http(s)://host[:port][/path]"),
        ("https://x.example/?q=1", "expected http(s)://host[:port][/path]"),
        ("https://x.example:70000", "port '70000' is not a number from 1 to 65535"),
        ("https://*.example", "expected http(s)://host[:port][/path]"),
        ("https://300.1.1.1", "is not a valid address"),
        ("https://x.example\n", "expected http(s)://host[:port][/path]"),  # nothing after the path, not a newline
        ("https://[1.2.3.4]", "an IPv6 address goes in brackets"),
        ("https://2001:db8::1", "expected http(s)://host[:port][/path]"),
        ("https://x.example:0443", "expected http(s)://host[:port][/path]"),
        ("http://169.254.169.254/latest", "is always denied to agents"),  # could never be reached
        ("http://[fe80::1]:8080", "is always denied to agents"),
        ("http://100.100.100.200", "is always denied to agents"),
    ],
)
def test_a_bad_or_unreachable_url_is_refused_with_its_line(url: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        inventory(url)
    assert any("api_url" in p and message in p for p in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ('{name: coder, api_url: "https://x.example"}', "role 'demo' declares no API base URL to replace"),
        ("{name: coder, role: claude-code, credentials: [{name: ANTHROPIC_API_KEY, from_env: K}, "
         "{name: ANTHROPIC_BASE_URL, from_env: U}]}", "a credential may not be named ANTHROPIC_BASE_URL"),
        ('{name: g, role: gemini, api_url: "http://198.19.0.1:8091", credentials: [{name: GEMINI_API_KEY, '
         'from_env: K}]}', "runtime refuses a base URL that is not https:// unless its host is localhost"),
        ('{name: c, role: claude-code, api_url: "http://198.19.0.1:8091", api_ca: ca.pem, credentials: '
         '[{name: ANTHROPIC_API_KEY, from_env: K, mode: file}]}', "api_ca: the authority of an https:// api_url's certificate; "
         "api_url http://198.19.0.1:8091 is not https://"),
        ('{name: c, role: claude-code, api_ca: ca.pem, credentials: [{name: ANTHROPIC_API_KEY, from_env: K}]}',
         "no api_url is set"),
        ('{name: c, role: claude-code, api_url: "https://198.19.0.1", api_ca: ca.pem, credentials: '
         '[{name: ANTHROPIC_API_KEY, from_env: K}, {name: JACKIN_API_CA, from_env: CA}]}',
         "credential JACKIN_API_CA is api_ca's: give the file as api_ca"),
        ('{name: x, role: codex, api_url: "https://198.19.0.1", api_ca: ca.pem, credentials: '
         '[{name: OPENAI_API_KEY, from_env: K, mode: file}]}', "role 'codex''s runtime does not take an extra certificate authority"),
    ],
    ids=["role-without-api", "credential-named-as-the-variable", "gemini-plain-http", "api-ca-plain-http",
         "api-ca-without-url", "api-ca-credential-given-otherwise", "api-ca-codex"],
)  # fmt: skip
def test_an_api_url_the_role_cannot_take_is_refused(agent: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_inventory(f"fleet:\n  name: demo\n  provider: lab\n  agents: [{agent}]\n")
    assert any(message in p for p in caught.value.problems), caught.value.problems


def test_a_runtime_that_takes_only_https_takes_https_anywhere_and_http_on_loopback() -> None:
    for url in ("https://198.19.0.1:8443", "http://127.0.0.1:8091"):  # controls: both run (the second on loopback)
        parse_inventory(f"fleet:\n  name: demo\n  provider: lab\n  agents: [{{name: g, role: gemini, api_url: "
                        f'"{url}", credentials: [{{name: GEMINI_API_KEY, from_env: K}}]}}]\n')  # fmt: skip
    assert roles.load("gemini").api.https and not roles.load("claude-code").api.https  # type: ignore[union-attr]


def test_the_allowlist_entry_of_a_url() -> None:
    assert [api_entry(u) for u in ("https://a.example", "http://a.example", "http://10.0.0.1:8080/v1",
                                   "https://[2001:db8::1]/x")] == [
        "a.example:443", "a.example:80", "10.0.0.1:8080", "[2001:db8::1]:443"]  # fmt: skip


def test_a_role_whose_base_url_is_not_in_its_egress_is_refused() -> None:
    import pydantic

    data = roles.load("claude-code").model_dump()
    data["egress"] = ["other.example:443"]
    with pytest.raises(pydantic.ValidationError, match=r"api.url https://api.anthropic.com needs egress entry "
                                                       r"api.anthropic.com:443"):  # fmt: skip
        roles.Role.model_validate(data)


def test_api_ca_is_delivered_as_a_credential_and_shown_in_the_contract() -> None:
    """The authority of a stand-in's or gateway's certificate reaches the agent as the credential JACKIN_API_CA (a
    file; the entrypoint points NODE_EXTRA_CA_CERTS at it): planned and shown like any credential."""
    inv = parse_inventory('fleet:\n  name: demo\n  provider: lab\n  agents: [{name: g, role: gemini, api_url: '
                          '"https://198.19.0.1:8443", api_ca: ca.pem, credentials: [{name: GEMINI_API_KEY, from_env: K}]}]\n')  # fmt: skip
    [agent] = inv.fleet.agents
    assert [(c.name, str(c.from_file or c.from_env)) for c in agent.credentials] == [
        ("GEMINI_API_KEY", "K"), ("JACKIN_API_CA", "ca.pem")]  # fmt: skip
    again = type(agent).model_validate(agent.model_dump())  # a spec read back from its dump: the same, once
    assert [c.name for c in again.credentials] == ["GEMINI_API_KEY", "JACKIN_API_CA"]
    plan = planning.build(inv.fleet, {"g-1": 60001})
    assert plan.agents[0].credentials == ["GEMINI_API_KEY", "JACKIN_API_CA"]
    shown = contract.build(inv, plan).agent("g-1").credentials
    assert [c.name for c in shown] == ["GEMINI_API_KEY", "JACKIN_API_CA"]
