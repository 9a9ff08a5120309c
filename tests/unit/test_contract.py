"""The launch contract (jackin/plan/contract.py): what it holds, its committed schema, its diff lines,
and that no credential value can be in it."""

from __future__ import annotations

import io
import json
import secrets
from pathlib import Path

import pytest
from rich.console import Console

from jackin.plan import contract, launch, terms
from jackin.spec import credentials
from jackin.plan import fleet as planning
from jackin.plan.contract import build, diff
from jackin.plan.terms import FleetContract
from jackin.store.ledger import Ledger
from jackin.spec import load_inventory, parse_inventory

SPEC = """
fleet:
  name: demo
  provider: lab
  ttl: 8h
  snapshots: {{keep: 3, checkpoints: btrfs, checkpoint_size: 1g}}
  agents:
    - name: coder
      count: {count}
      credentials:
        - {{name: API_KEY, from_env: {env}}}
{more_credentials}      mounts:
        - {{source: /data, target: /data}}
{more_mounts}      network:
        mode: allowlist
        allow: [{allow}]
        dns: [9.9.9.9]
        publish: [{{port: 8080}}]
      resources: {{memory: 512m, cpus: 0.5, pids: 128}}
    - name: other
"""


def inventory(*, count: int = 1, allow: str = "api.example.com:443, 10.1.0.0/16:5432", env: str = "JK_CONTRACT_KEY",
              more_credentials: str = "        - {name: GH_TOKEN, from_env: JK_CONTRACT_GH}\n", more_mounts: str = ""):
    return parse_inventory(SPEC.format(count=count, allow=allow, env=env, more_credentials=more_credentials,
                                       more_mounts=more_mounts), "c.yaml")  # fmt: skip


def contract_of(inv, host_facts=None) -> FleetContract:
    names = [i for _, i in planning.instances(inv.fleet)]
    plan = planning.build(inv.fleet, {n: 60000 + k for k, n in enumerate(names)})
    return build(inv, plan, host_facts)


def test_build_resolves_identity_mounts_credentials_network_resources() -> None:
    c = contract_of(inventory())
    assert [a.instance for a in c.agents] == ["coder-1", "other-1"]
    coder = c.agent("coder-1")
    assert coder.identity.model_dump() == {
        "user": "jk-demo--coder-1", "uid": 60000, "gid": 60000, "home": "/srv/jackin/demo/coder-1",
        "workspace": "/srv/jackin/demo/coder-1/workspace", "container": "jk-demo--coder-1"}  # fmt: skip
    assert [(m.source, m.target, m.mode, m.kind) for m in coder.mounts] == [
        ("/srv/jackin/demo/coder-1/workspace", "/workspace", "rw", "workspace"),
        ("/var/lib/jackin/credentials/demo/coder-1", "/run/jackin/credentials", "ro", "credentials"),
        ("/data", "/data", "ro", "spec"),
    ]
    assert [(k.name, k.mode, k.owner, k.container_path, k.source) for k in coder.credentials] == [
        ("API_KEY", "0400", "jk-demo--coder-1", "/run/jackin/credentials/API_KEY", "env"),
        ("GH_TOKEN", "0400", "jk-demo--coder-1", "/run/jackin/credentials/GH_TOKEN", "env"),
    ]
    net = coder.network
    assert (net.mode, net.allowlist, net.dns, net.dns_filter) == (
        "allowlist", ["api.example.com:443", "10.1.0.0/16:5432"], ["9.9.9.9"], True)
    assert [p.model_dump() for p in net.publish] == [{"bind": "127.0.0.1", "host_port": 8080, "port": 8080, "protocol": "tcp"}]
    assert net.enforcement == "partial" and len(net.enforcement_reasons) == 2
    assert (coder.resources.cpus, coder.resources.memory, coder.resources.memory_swap, coder.resources.pids) == (
        0.5, 512 * 1024**2, 512 * 1024**2, 128)
    assert coder.docker.access == "none"
    other = c.agent("other-1")
    assert [m.kind for m in other.mounts] == ["workspace"] and other.credentials == []
    assert other.network.mode == "none" and other.network.enforcement == "full"


def test_host_effects_recovery_teardown_and_risks() -> None:
    c = contract_of(inventory())
    effects = c.host_effects
    # busybox-static only for the busybox image (image: jackin/agent:busybox); the demo role's image comes from the operator
    assert [p.name for p in effects.packages] == ["docker.io", "nftables", "dnsmasq-base", "btrfs-progs"]
    assert "jackin-nft-demo.service" in effects.services and "jackin-dns-demo@coder-1.service" in effects.services
    assert {"/etc/jackin/nft/demo.nft", "/etc/docker/daemon.json", "/var/lib/jackin/fleet-demo.json"} <= set(effects.files)
    assert effects.firewall_tables == ["inet jackin-demo"]
    assert "/srv/jackin/demo" in effects.directories and "/var/lib/jackin/credentials/demo/coder-1" in effects.directories
    assert effects.users == ["jk-demo--coder-1", "jk-demo--other-1"]
    assert (c.recovery.keep, c.recovery.checkpoints, c.recovery.checkpoint_size) == (3, "btrfs", 1024**3)
    assert c.teardown.ttl == 8 * 3600 and c.teardown.ttl_enforced  # a systemd timer on each host
    risks = " | ".join(c.agent("coder-1").residual_risks)
    assert "kernel" in risks and "shared CDN" in risks and "127.0.0.1:8080/tcp" in risks and "AppArmor not checked" in risks
    assert "CDN" not in " ".join(c.agent("other-1").residual_risks)
    assert "root on the host can add one there unseen" in risks  # the guard's digest leaves the domain sets out
    assert "domain sets" not in " ".join(c.agent("other-1").residual_risks)  # no domain entries: no such set


def test_host_facts_name_a_host_without_apparmor() -> None:
    c = contract_of(inventory(), {"h1": {"kernel": "6.1.0", "apparmor": "N"},
                                  "h2": {"kernel": "6.1.0", "apparmor": "Y", "apparmor_docker": "enforce"}})  # fmt: skip
    assert [(h.name, h.apparmor, h.apparmor_docker) for h in c.hosts] == [("h1", False, None), ("h2", True, "enforce")]
    risks = c.agent("other-1").residual_risks
    assert any("no AppArmor on h1" in r for r in risks) and not any("h2" in r for r in risks)
    assert not any("not checked" in r for r in risks)
    assert c.agent("other-1").docker.apparmor == ["h1: no AppArmor on this host", "h2: AppArmor: docker-default (enforce)"]


def _state(apparmor_lines: list[str] | None):
    """A parsed state read whose ``##apparmor`` section holds ``apparmor_lines`` (None: no such section)."""
    from jackin.facts.state import parse_state

    lines = ["##host", "kernel=6.1.0-28-amd64"]
    return parse_state(lines + (["##apparmor", *apparmor_lines] if apparmor_lines is not None else []))


def test_host_states_read_give_each_hosts_apparmor_line_and_risk() -> None:
    states = {"a": _state(["enabled=Y", "docker-default=enforce"]), "b": _state(["enabled="]),
              "c": _state(["enabled=Y"]), "d": _state(None)}  # fmt: skip
    c = contract_of(inventory(), states)
    assert [(h.name, h.kernel, h.apparmor, h.apparmor_docker) for h in c.hosts] == [
        ("a", "6.1.0-28-amd64", True, "enforce"), ("b", "6.1.0-28-amd64", False, None),
        ("c", "6.1.0-28-amd64", True, None), ("d", "6.1.0-28-amd64", None, None)]  # fmt: skip
    coder = c.agent("coder-1")
    assert coder.docker.apparmor == [
        "a: AppArmor: docker-default (enforce)", "b: no AppArmor on this host",
        "c: AppArmor enabled, docker-default not loaded when read (Docker loads it when it starts)",
        "d: AppArmor not checked"]  # fmt: skip
    risks = [r for r in coder.residual_risks if "AppArmor" in r]
    assert risks == [
        "no AppArmor on b: the container runs without a mandatory access control profile",
        "AppArmor on c is enabled but docker-default was not enforcing when read: the container's profile is not "
        "confirmed", "AppArmor not checked (no host facts read): the container may run without a MAC profile"]  # fmt: skip


def test_no_host_read_says_not_checked_in_the_docker_line() -> None:
    assert contract_of(inventory()).agent("coder-1").docker.apparmor == ["AppArmor not checked (no host facts read)"]


def test_a_contract_stored_before_the_apparmor_fields_still_loads() -> None:
    document = contract_of(inventory(), {"h1": {"kernel": "6.1.0", "apparmor": "N"}}).model_dump(mode="json")
    for agent in document["agents"]:
        del agent["docker"]["apparmor"]
    for host in document["hosts"]:
        del host["apparmor_docker"]
    old = FleetContract.model_validate(document)
    new = contract_of(inventory(), {"h1": {"kernel": "6.1.0", "apparmor": "N"}})
    assert diff(old, new) == ["coder-1 docker: apparmor gained h1: no AppArmor on this host",
                              "other-1 docker: apparmor gained h1: no AppArmor on this host"]  # fmt: skip


def test_gate_without_a_host_read_takes_the_hosts_of_the_last_contract(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    with Ledger() as ledger:
        applied = launch.current(inventory(), ledger, host_facts={"h1": _state(["enabled="])})
        _record_ok(ledger, applied)
    found = launch.gate(inventory())  # no host read: the hosts as last found, so only the spec differs
    assert not found.differs and found.contract.hosts == applied.hosts
    assert "no AppArmor on h1" in " ".join(found.contract.agent("coder-1").residual_risks)
    read = launch.gate(inventory(), host_facts={"h1": _state(["enabled=Y", "docker-default=enforce"])})
    assert "coder-1 docker: apparmor gained h1: AppArmor: docker-default (enforce)" in read.changes
    assert "fleet hosts: h1.apparmor false -> true" in read.changes


def test_daemon_keys_match_the_hardening_applied() -> None:
    from jackin.operations.host import HARDENING

    assert contract.DAEMON_KEYS == sorted(HARDENING)


def test_a_docker_socket_mount_and_an_acknowledged_credential_mount_are_stated() -> None:
    mounts = ("        - {source: /var/run/docker.sock, target: /var/run/docker.sock, acknowledge_credentials: true}\n"
              "        - {source: /root/.aws, target: /aws, acknowledge_credentials: true}\n")  # fmt: skip
    coder = contract_of(inventory(more_mounts=mounts)).agent("coder-1")
    assert coder.docker.access == "socket" and "root on the host" in coder.docker.risk
    assert any("/root/.aws, a credential-like path the spec acknowledged" in r for r in coder.residual_risks)


# --- where a credential's file and a task's file are read from (jackin/spec/sources.py) ------------------


def sourced(tmp_path: Path, *, key: str, task: str):
    """An inventory file in ``tmp_path/inv`` with a from_file credential, an env one and a task_file."""
    folder = tmp_path / "inv"
    folder.mkdir(exist_ok=True)
    path = folder / "f.yaml"
    path.write_text(f"""\
fleet:
  name: src
  provider: lab
  agents:
    - name: coder
      credentials:
        - {{name: TOKEN, from_file: {key}}}
        - {{name: API_KEY, from_env: JK_SOURCE_KEY}}
      work: {{repo: repo, ref: main, task_file: {task}}}
    - name: other
""")
    return load_inventory(path)


def test_credentials_and_the_task_show_where_they_are_read_from_resolved(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "key").symlink_to("/etc/shadow")  # resolved, never read: the contract opens no file
    (tmp_path / "elsewhere.md").write_text("do it\n")
    (tmp_path / "inv" / "task.md").symlink_to(tmp_path / "elsewhere.md")
    coder = contract_of(sourced(tmp_path, key=str(tmp_path / "inv" / "key"), task="task.md")).agent("coder-1")
    assert [(c.name, c.source, c.source_path) for c in coder.credentials] == [
        ("API_KEY", "env", None), ("TOKEN", "file", "/etc/shadow")]  # fmt: skip
    assert coder.work is not None and coder.work.model_dump() == {
        "repo": str(tmp_path / "inv" / "repo"), "ref": "main", "branch": "jackin/coder-1", "task": "file",
        "task_path": str(tmp_path / "elsewhere.md")}  # fmt: skip
    trusted = f"{tmp_path / 'inv'}, {tmp_path / 'home'}"
    assert [r for r in coder.residual_risks if "is read from" in r] == [
        f"credential TOKEN's from_file is read from /etc/shadow ({tmp_path / 'inv' / 'key'} resolves there), outside "
        f"the inventory's directory and the operator's home ({trusted}): the agent receives that file's content",
        f"its task_file is read from {tmp_path / 'elsewhere.md'} ({tmp_path / 'inv' / 'task.md'} resolves there), "
        f"outside the inventory's directory and the operator's home ({trusted}): the agent receives that file's "
        "content"]  # fmt: skip
    assert "JK_SOURCE_KEY" not in coder.model_dump_json()  # an environment variable's name stays out, as before


def test_sources_in_the_inventorys_directory_or_the_home_are_no_risk(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".config").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "token").write_text("t\n")
    c = contract_of(sourced(tmp_path, key="~/.config/token", task="tasks/t.md"))  # the task need not exist yet
    coder = c.agent("coder-1")
    assert coder.credentials[1].source_path == str(tmp_path / "home" / ".config" / "token")
    assert coder.work is not None and coder.work.task_path == str(tmp_path / "inv" / "tasks" / "t.md")
    assert not [r for r in coder.residual_risks if "is read from" in r]
    assert c.agent("other-1").work is None


def test_a_contract_stored_before_the_source_fields_still_loads_and_shows_them_once(tmp_path: Path) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "key").write_text("k\n")
    new = contract_of(sourced(tmp_path, key=str(tmp_path / "inv" / "key"), task="t.md"))
    document = new.model_dump(mode="json")
    for agent in document["agents"]:
        del agent["work"]
        for credential in agent["credentials"]:
            del credential["source_path"]
    old = FleetContract.model_validate(document)
    path = tmp_path / "inv" / "t.md"
    assert diff(old, new) == [f"coder-1 credentials: TOKEN.source_path none -> {tmp_path / 'inv' / 'key'}",
                              f"coder-1 work: repo none -> {tmp_path / 'inv' / 'repo'}", "coder-1 work: ref none -> main",
                              "coder-1 work: branch none -> jackin/coder-1", "coder-1 work: task none -> file",
                              f"coder-1 work: task_path none -> {path}"]  # fmt: skip
    assert diff(new, new) == []


def test_committed_schema_is_the_generated_one() -> None:
    committed = json.loads(terms.SCHEMA_FILE.read_text())
    assert committed == terms.schema(), "regenerate docs/contract.schema.json (see README: Launch contract)"
    assert committed["properties"]["schema_version"]["const"] == terms.SCHEMA_VERSION == 1
    assert set(committed["required"]) >= {"fleet", "agents", "host_effects", "recovery", "teardown", "residual_risks"}


def test_the_json_document_validates_against_the_committed_schema() -> None:
    import jsonschema  # a test dependency (pyproject: test extra)

    document = json.loads(contract_of(inventory()).model_dump_json())
    schema = json.loads(terms.SCHEMA_FILE.read_text())
    jsonschema.validate(document, schema)
    with_sources = contract_of(inventory(more_credentials="        - {name: GH_TOKEN, from_file: ~/gh}\n"))
    jsonschema.validate(json.loads(with_sources.model_dump_json()), schema)
    # control: the schema does reject a document it does not describe
    for broken in ({**document, "schema_version": 2}, {k: v for k, v in document.items() if k != "agents"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_no_credential_value_anywhere_in_the_contract(tmp_path: Path) -> None:
    marker = f"sk-marker-{secrets.token_hex(12)}"
    inv = inventory(more_credentials="")
    values = credentials.read(inv.fleet, environ={"JK_CONTRACT_KEY": marker}, key=b"k" * 32)
    assert values.agents() == ["coder"]  # the value was read: it exists on this side
    c = contract_of(inv)
    assert marker not in c.model_dump_json() and marker not in repr(c)
    assert "JK_CONTRACT_KEY" not in c.model_dump_json()  # not even where the operator keeps it


def test_equal_contracts_have_no_diff() -> None:
    assert diff(contract_of(inventory()), contract_of(inventory())) == []


def test_diff_names_a_network_change() -> None:
    old = contract_of(inventory())
    new = contract_of(inventory(allow="api.example.com:443, 10.1.0.0/16:5432, pypi.org:443"))
    assert diff(old, new) == ["coder-1 network: allowlist gained pypi.org:443"]
    assert diff(new, old) == ["coder-1 network: allowlist lost pypi.org:443"]


def test_diff_names_a_new_agent_and_a_removed_one() -> None:
    one, two = contract_of(inventory()), contract_of(inventory(count=2))
    lines = diff(one, two)
    assert "coder-2: new agent" in lines and lines.index("coder-2: new agent") < len(lines)
    assert any(line.startswith("fleet host effects: users gained jk-demo--coder-2") for line in lines)
    assert "coder-2: removed" in diff(two, one)


def test_diff_names_a_removed_credential_and_a_gained_mount() -> None:
    old = contract_of(inventory())
    new = contract_of(inventory(more_credentials="", more_mounts="        - {source: /srv/cache, target: /cache, readonly: false}\n"))
    lines = diff(old, new)
    assert "coder-1 credentials: lost GH_TOKEN" in lines
    assert "coder-1 mounts: gained /srv/cache at /cache (rw)" in lines
    assert "coder-1 risks: gained can write to the host path /srv/cache" in lines
    assert lines == diff(old, new)  # stable


def test_a_new_snapshot_is_no_change_of_terms() -> None:
    inv = inventory()
    plan = planning.build(inv.fleet, {"coder-1": 60000, "other-1": 60001})
    assert diff(build(inv, plan), build(inv, plan, last_snapshot="20261203-080000-abcd")) == []


def test_ledger_keeps_the_last_contract(tmp_path: Path) -> None:
    c = contract_of(inventory())
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        assert launch.last_applied(ledger, "demo") is None
        run = ledger.start_run("demo", "fleet.up")
        launch.record(ledger, run, c)
        assert launch.last_applied(ledger, "demo") is None  # still running: not known to be in place
        ledger.finish_run(run, "ok")
        assert launch.last_applied(ledger, "demo") == c
        assert launch.last_applied(ledger, "other") is None
        failed = ledger.start_run("demo", "fleet.up")
        launch.record(ledger, failed, contract_of(inventory(count=2)))
        ledger.finish_run(failed, "failed")
        assert launch.last_applied(ledger, "demo") == c  # a failed run's contract does not count


@pytest.mark.parametrize("previous", [None, "same", "changed"])
def test_gate_shows_first_same_and_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, previous) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    inv = inventory()
    if previous:
        stored = inventory(allow="api.example.com:443") if previous == "changed" else inv
        with Ledger() as ledger:
            _record_ok(ledger, launch.current(stored, ledger))
    found = launch.gate(inv)
    assert found.first == (previous is None)
    assert found.differs == (previous != "same")
    assert found.changes == (["coder-1 network: allowlist gained 10.1.0.0/16:5432"] if previous == "changed" else [])


# --- the gate in fleet.up (jackin/cli/contract.py contract_gate) ---------------------------------------


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A state dir of its own and the CLI's consoles captured at a fixed width."""
    import sys

    from jackin.cli import render as ui
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    text = io.StringIO()
    console = Console(file=text, width=200)
    monkeypatch.setattr(ui, "out", console)
    monkeypatch.setattr(ui, "err", console)
    return text


def _record_ok(ledger: Ledger, terms: FleetContract) -> None:
    run = ledger.start_run("demo", "fleet.up")
    launch.record(ledger, run, terms)
    ledger.finish_run(run, "ok")


def _runs() -> list:
    with Ledger() as ledger:
        return ledger.runs("demo")


def test_gate_refuses_a_changed_contract_without_terminal_naming_it(screen) -> None:
    from jackin.cli import contract as cli
    from jackin.errors import SpecError

    with Ledger() as ledger:
        _record_ok(ledger, launch.current(inventory(allow="api.example.com:443"), ledger))
    runs_before = _runs()
    with pytest.raises(SpecError) as refused:
        cli.contract_gate(inventory(), yes=False)
    assert "launch contract changed" in str(refused.value) and "--yes" in str(refused.value)
    assert refused.value.problems == ["coder-1 network: allowlist gained 10.1.0.0/16:5432"]
    assert "coder-1 network: allowlist gained 10.1.0.0/16:5432" in screen.getvalue()
    assert _runs() == runs_before  # the gate writes nothing


def test_gate_with_yes_shows_the_change_and_goes_on(screen) -> None:
    from jackin.cli import contract as cli
    found = cli.contract_gate(inventory(), yes=True)
    assert found.first and found.differs
    assert "launch contract of fleet demo" in screen.getvalue()
    assert "no launch contract was applied to this fleet before" in screen.getvalue()


def test_gate_passes_an_unchanged_contract_without_asking(screen) -> None:
    from jackin.cli import contract as cli
    with Ledger() as ledger:
        _record_ok(ledger, launch.current(inventory(), ledger))
    found = cli.contract_gate(inventory(), yes=False)
    assert not found.differs and "changed" not in screen.getvalue()


def test_a_first_up_without_terminal_is_refused(screen) -> None:
    from jackin.cli import contract as cli
    from jackin.errors import SpecError

    with pytest.raises(SpecError, match="no launch contract applied yet"):
        cli.contract_gate(inventory(), yes=False)
    assert "jk-demo--coder-1" in screen.getvalue()  # the whole contract was shown first


def test_renderers_show_each_term_and_the_summary() -> None:
    from jackin.cli.render import contract as ui
    c = contract_of(inventory())
    console = Console(file=io.StringIO(), width=200)
    for table in ui.contract_tables(c):
        console.print(table)
    console.print(ui.contract_summary(c))
    console.print(ui.contract_changes(["coder-1 network: allowlist gained pypi.org:443"], first=False))
    text = console.file.getvalue()
    for term in ("identity", "mounts", "credentials", "network", "docker", "resources", "residual risks",
                 "packages", "services", "firewall", "files", "directories", "recovery", "teardown"):
        assert f"│ {term} " in text, term
    assert "API_KEY: file /run/jackin/credentials/API_KEY, mode 0400, owner jk-demo--coder-1" in text
    sourced = contract_of(inventory(more_credentials="        - {name: GH_TOKEN, from_file: /srv/gh}\n"))
    console = Console(file=io.StringIO(), width=300)
    console.print(ui.contract_tables(sourced)[0])
    assert "GH_TOKEN: file /run/jackin/credentials/GH_TOKEN, mode 0400, owner jk-demo--coder-1; read from /srv/gh" in (
        console.file.getvalue())
    assert "launch contract of fleet demo (schema 1)" in text
    assert "  coder-1 network: allowlist gained pypi.org:443" in text
