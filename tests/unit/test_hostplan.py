"""``jackin.lifecycle.hostplan``: what fleet.up would do to a host, per category, from canned states; the deploy
decides with the very same steps; fleet.up's host split; fleet.plan's rendering (never a value)."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import jackin.lifecycle.fleet as fleet_api
from jackin.lifecycle import hostplan
from jackin.cli.render import fleet as ui
from jackin.spec.credentials import Secrets, read
from jackin.facts.daemon import DaemonState, parse_daemon, parse_section
from jackin.errors import ConnectError
from jackin.net.policy import bundle_hash
from jackin.lifecycle.hostplan import host_changes, steps
from jackin.operations.host import wanted_settings
from jackin.plan.fleet import build
from jackin.spec import parse_inventory
from jackin.transport.ssh import SshTarget
from jackin.facts.state import HostState, PathInfo, User

from .test_credentials import CREDS, ENV, KEY, VALUE_A, VALUE_B, _delivered, fleet, plan_of
from .test_operations_fleet import CODER, PLAN, container, present, replaced, without

NONE = Secrets({}, b"")
TOOLS = {"dockerd": "/usr/sbin/dockerd", "nft": "/usr/sbin/nft", "dnsmasq": "/usr/sbin/dnsmasq",
         "mkfs_btrfs": "/usr/sbin/mkfs.btrfs", "busybox": "/bin/busybox", "docker_active": "active",
         "docker_enabled": "enabled"}  # fmt: skip


def provisioned(plan=PLAN, state: HostState | None = None) -> HostState:
    """A host where ``plan`` was applied: tools, daemon settings, image, agents, the egress policy."""
    state = state or present(*plan.agents)
    daemon = DaemonState(config=json.dumps(wanted_settings(plan.address_pools)), live_restore=True)
    return state.model_copy(update={"host": TOOLS, "daemon": daemon, "nft_table": True, "nft_hash": bundle_hash(plan),
                                    "wall_held": True,
                                    "images": sorted({a.image for a in plan.agents})})  # fmt: skip


def categories(state: HostState, plan=PLAN, values: Secrets = NONE) -> list[str]:
    return host_changes(plan, state, values).categories()


def test_a_provisioned_host_has_nothing_to_change() -> None:
    changes = host_changes(PLAN, provisioned(), NONE, host="h1")
    assert changes.empty and changes.changes == [] and changes.refused == []
    assert not any(step.changes for step in steps(PLAN, provisioned(), NONE))


def test_a_fresh_host_gets_everything() -> None:
    assert categories(HostState()) == ["bootstrap", "docker daemon", "image", "users", "files", "networks",
                                       "containers", "firewall"]  # fmt: skip
    lines = [line for c in host_changes(PLAN, HostState(), NONE).changes for line in c.lines]
    assert lines[0] == "apt install docker.io nftables"
    assert "systemctl: docker running and enabled" in lines


@pytest.mark.parametrize(("change", "expected"), [
    (lambda s: s.model_copy(update={"host": {**TOOLS, "docker_active": "inactive"}}), ["bootstrap"]),
    (lambda s: s.model_copy(update={"daemon": DaemonState(config=s.daemon.config, live_restore=False)}),
     ["docker daemon"]),
    (lambda s: s.model_copy(update={"daemon": None}), ["docker daemon"]),
    (lambda s: s.model_copy(update={"images": []}), ["image"]),
    (lambda s: without(s, "users", CODER.user), ["users"]),
    (lambda s: replaced(s, "paths", CODER.workspace, PathInfo(mode="0755", uid=CODER.uid, gid=CODER.uid)), ["files"]),
    (lambda s: without(s, "networks", CODER.network), ["networks", "containers"]),
    (lambda s: replaced(s, "containers", CODER.container, container(CODER, running=False)), ["containers"]),
    (lambda s: s.model_copy(update={"nft_hash": "0" * 64}), ["firewall"]),
    (lambda s: s.model_copy(update={"marker": False}), ["files"]),
], ids=["docker stopped", "live-restore off", "daemon unread", "image", "user", "workspace mode", "network",
        "container stopped", "firewall", "marker"])  # fmt: skip
def test_each_drift_shows_only_its_category(change, expected: list[str]) -> None:
    assert categories(change(provisioned())) == expected


def test_the_checkpoint_filesystem_is_its_own_category() -> None:
    text = "fleet:\n  name: demo\n  provider: lab\n  snapshots: {checkpoints: btrfs}\n  agents:\n    - name: coder\n      count: 2\n"
    plan = build(parse_inventory(text, "f.yaml").fleet, {"coder-1": 60000, "coder-2": 60001})
    assert "checkpoint fs" in categories(provisioned(plan, present()), plan)


def test_a_refusal_is_shown_and_makes_the_host_not_empty() -> None:
    other = User(name="someone", uid=CODER.uid, gid=CODER.uid, comment="", home="/home/x", shell="/bin/sh")
    state = without(provisioned(), "users", CODER.user).model_copy(
        update={"users": {**without(provisioned(), "users", CODER.user).users, "someone": other}}
    )
    changes = host_changes(PLAN, state, NONE)
    assert not changes.empty
    assert changes.refused == ["agent coder-1: uid 60000 belongs to user 'someone', not 'jk-demo--coder-1'; "
                               "set a different fleet.uid_base"]  # fmt: skip


# --- credentials: names, never values ----------------------------------------------------------


def test_credentials_show_name_and_agent_only(tmp_path: Path) -> None:
    spec = fleet(tmp_path, CREDS)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = provisioned(plan)
    changes = host_changes(plan, state, values, host="h1")
    [credentials] = [c for c in changes.changes if c.category == "credentials"]
    assert credentials.lines[:4] == [f"credential {n} of {i}: deliver" for i in ("coder-1", "coder-2")
                                     for n in ("API_KEY", "GH_TOKEN")]  # fmt: skip
    text = changes.model_dump_json()
    assert VALUE_A not in text and VALUE_B.decode().strip() not in text
    done = _delivered(plan, values)
    delivered = state.model_copy(
        update={"credentials": done.credentials, "credential_digests": done.credential_digests}
    )
    assert host_changes(plan, delivered, values).empty  # delivered and unchanged: nothing


# --- the deploy decides with the same steps ------------------------------------------------------


def test_the_fleet_deploy_runs_exactly_the_hostplan_steps() -> None:
    """deploys/fleet.py has no decision of its own: it reads the state, reports facts, and applies
    ``hostplan.steps`` in order (so the in-process plan is the engine's)."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "deploys" / "fleet.py").read_text())
    calls = sorted({ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)})
    assert calls == ["FleetPlan.model_validate", "FleetPlan.model_validate(host.data.jackin).for_host", "hostplan.batched", "hostplan.steps", "len", "ops.apply", "ops.fleet_state",
                     "report.facts", "secrets.get", "state.host.get"]  # fmt: skip
    assert not any(isinstance(node, ast.If) for node in ast.walk(tree))


def test_the_deploy_runs_changed_agents_a_batch_at_a_time_their_files_first() -> None:
    """``batched``: agents with changes, AGENTS_AT_ONCE a step, users and directories one after another,
    then the Docker parts side by side; a batch's commands are every agent's, none lost or added."""
    plan = build(parse_inventory(INVENTORY_SIX, "f.yaml").fleet, {f"coder-{n}": 60000 + n for n in range(1, 7)})
    state = provisioned(plan).model_copy(update={"users": {}, "groups": {}, "paths": {}, "networks": {},
                                                 "containers": {}})  # fmt: skip
    planned = steps(plan, state, NONE)
    agents = [s for s in planned if s.docker_from is not None]
    run = hostplan.batched(planned)
    assert [s.name for s in run if s.category == "containers"] == [
        "agents coder-1, coder-2, coder-3, coder-4", "agents coder-5, coder-6"]  # fmt: skip
    assert [s.name for s in run if s.category != "containers"] == [s.name for s in planned if s.category != "containers"]
    first = next(s for s in run if s.name.startswith("agents coder-1"))
    heads = [c for s in agents[:4] for c in s.commands[: s.docker_from]]
    assert first.commands[:-1] == heads and all(str(c).startswith(("groupadd", "useradd", "{", "if", "[", "chown",
                                                                     "chmod")) for c in heads)  # fmt: skip
    for step in agents[:4]:
        assert all(str(c) in first.commands[-1] for c in step.commands[step.docker_from :])
    one = hostplan.batched([agents[0], planned[0]])
    assert one[0] is agents[0]  # a batch of one is the agent's own step
    # The preview counts what the engine will: the batched operations with changes, not one per agent.
    changes = hostplan.host_changes(plan, state, NONE)
    assert changes.operations == sum(1 for step in run if step.changes) < sum(1 for step in planned if step.changes)


def test_agents_publishing_a_host_port_run_alone_in_the_specs_order() -> None:
    """Two instances asking for one host port: the first gets it and the second fails, as in the spec's
    order; side by side, which one won would be a race (seen: clash-2 up, clash-1 not)."""
    text = INVENTORY_SIX + ("    - name: clash\n      count: 2\n      network: {mode: none, publish: "
                            "[{port: 8080, host_port: 18081}]}\n")  # fmt: skip
    uids = {**{f"coder-{n}": 60000 + n for n in range(1, 7)}, "clash-1": 60011, "clash-2": 60012}
    plan = build(parse_inventory(text, "f.yaml").fleet, uids)
    state = provisioned(plan).model_copy(update={"users": {}, "groups": {}, "paths": {}, "networks": {},
                                                 "containers": {}})  # fmt: skip
    run = [s.name for s in hostplan.batched(steps(plan, state, NONE)) if s.category == "containers"]
    assert run == ["agents coder-1, coder-2, coder-3, coder-4", "agents coder-5, coder-6", "agent clash-1",
                   "agent clash-2"]  # fmt: skip


def test_agents_in_place_are_not_batched() -> None:
    done = hostplan.batched(steps(PLAN, provisioned(), NONE))
    assert [s.name for s in done] == [s.name for s in steps(PLAN, provisioned(), NONE)]


INVENTORY_SIX = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: 6
"""


STATES = {
    "fresh": HostState(),
    "provisioned": provisioned(),
    "stopped": replaced(provisioned(), "containers", CODER.container, container(CODER, running=False)),
    "no image": provisioned().model_copy(update={"images": []}),
    "firewall": provisioned().model_copy(update={"nft_hash": None}),
}


@pytest.mark.parametrize("name", sorted(STATES))
def test_empty_plan_means_every_operation_is_a_noop(name: str) -> None:
    """What the engine counts as a change is a step whose operation yields commands (``script``),
    or pyinfra's own package/service step: empty host_changes iff none."""
    from jackin.operations.script import script

    class _Host:
        def noop(self, _: str) -> None: ...

    import jackin.operations.script as module

    saved, module.host = module.host, _Host()
    try:
        yielding = [
            s for s in steps(PLAN, STATES[name], NONE) if s.packages or s.service or script(s.commands, noop="")
        ]
    finally:
        module.host = saved
    assert host_changes(PLAN, STATES[name], NONE).empty == (not yielding)


# --- fleet.up's host split, and its no-engine path ------------------------------------------------


def targets(*names: str) -> list[SshTarget]:
    return [SshTarget(name=n, address="192.0.2.1", known_hosts=Path("/nonexistent")) for n in names]


def test_split_hands_only_changed_hosts_to_the_engine() -> None:
    down = ConnectError("connection refused", host="h3")
    changed = replaced(provisioned(), "containers", CODER.container, container(CODER, running=False))
    split = fleet_api.split_hosts(PLAN, targets("h1", "h2", "h3"), {"h1": provisioned(), "h2": changed, "h3": down},
                                  NONE)  # fmt: skip
    assert [h.name for h in split.run] == ["h2"] and split.unchanged == ["h1"] and split.unread == {"h3": down}
    assert split.plans["h1"].empty and split.plans["h2"].categories() == ["containers"]


class _Provider:
    def __init__(self, hosts: list[SshTarget]) -> None:
        self.hosts = hosts

    def targets(self, **_: object) -> list[SshTarget]:
        return self.hosts

    def addresses(self) -> list[str]:
        return []

    def unresolved(self) -> list[str]:
        return []

    def claim(self) -> None: ...


INVENTORY = "fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      count: 2\n"


@pytest.fixture
def no_engine(tmp_path, monkeypatch):
    """fleet.up with the hosts, their state read and the engine replaced (the engine must not start); the lab's
    first host (named as the placement names it) holds both agents, found there before any record."""
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    inventory = parse_inventory(INVENTORY, "f.yaml")
    plan = fleet_api.make_plan(inventory, fleet_api.Ledger(), store=True)
    monkeypatch.setattr(fleet_api, "provider_for", lambda *a: _Provider(targets("jackin-1")))
    monkeypatch.setattr(fleet_api, "read_states", lambda p, hosts: {"jackin-1": provisioned(plan)})

    def engine(*args, **kwargs):
        raise AssertionError("the engine was started")

    monkeypatch.setattr(fleet_api, "recorded_run", engine)
    return inventory


def test_a_no_change_up_records_an_ok_run_without_the_engine(no_engine) -> None:
    result = fleet_api.up(no_engine, bring_up=False)
    assert result.unchanged == ["jackin-1"] and [(h.host, h.ok, h.changed) for h in result.run.hosts] == [("jackin-1", True, 0)]
    with fleet_api.Ledger() as ledger:
        [run] = [r for r in ledger.db.execute("SELECT * FROM runs")]
        assert run["status"] == "ok" and json.loads(run["detail"])["unchanged"] == ["jackin-1"]
    assert fleet_api.up(no_engine, dry_run=True).run.hosts[0].changed == 0


def test_the_engine_is_handed_the_state_the_run_planned_from(no_engine, monkeypatch) -> None:
    """A host with changes: its deploy gets the state fleet.up read (``host_data``), so it runs the planned
    steps without reading the host again; the state survives the trip through JSON unchanged."""
    changed = replaced(provisioned(), "containers", CODER.container, container(CODER, running=False))
    monkeypatch.setattr(fleet_api, "read_states", lambda p, hosts: {"jackin-1": changed})
    handed = {}

    def engine(*args, host_data=None, hosts=(), **kwargs):
        handed.update(host_data or {})
        return None, fleet_api.RunResult(hosts=[fleet_api.HostResult(host=h.name, connected=True) for h in hosts])

    monkeypatch.setattr(fleet_api, "recorded_run", engine)
    fleet_api.up(no_engine, bring_up=False)
    assert list(handed) == ["jackin-1"]
    assert HostState.model_validate(json.loads(json.dumps(handed["jackin-1"]["state"]))) == changed


@pytest.mark.parametrize("given, bootstrap, reads", [
    (None, True, True),  # a deploy run by hand: read
    ("state", True, False),  # handed over: not read again
    ("state", False, False),
    ("no daemon", True, True),  # read without the daemon's settings: an up reads it whole
    ("other fleet", False, True),
])  # fmt: skip
def test_the_deploy_reads_the_state_only_when_not_handed_over(given, bootstrap: bool, reads: bool,
                                                              monkeypatch) -> None:  # fmt: skip
    from jackin.operations import ops

    state = provisioned().model_copy(update={"fleet": PLAN.fleet})
    states = {"state": state, "no daemon": state.model_copy(update={"daemon": None}),
              "other fleet": state.model_copy(update={"fleet": "other"})}  # fmt: skip
    read = state.model_copy(update={"images": ["read"]})

    class _Host:
        data = {"jackin_host": {"state": states[given].model_dump(mode="json")} if given else {}}

        def get_fact(self, *args, **kwargs) -> HostState:
            return read

    monkeypatch.setattr(ops, "host", _Host())
    got = ops.fleet_state(PLAN, bootstrap=bootstrap)
    assert got == (read if reads else states[given])


# --- fleet.plan's rendering --------------------------------------------------------------------


def render(result) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(ui.host_plan_view(result))
    return buffer.getvalue()


def test_plan_view_unchanged_in_one_line_changes_by_category_no_value(tmp_path: Path) -> None:
    spec = fleet(tmp_path, CREDS)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    result = fleet_api.PlanResult(fleet="demo", plan=plan, hosts=[
        fleet_api.HostPlan(host="h1", changes=hostplan.HostChanges(host="h1")),
        fleet_api.HostPlan(host="h2", changes=host_changes(plan, provisioned(plan), values, host="h2")),
        fleet_api.HostPlan(host="h3", error="connection refused", unreachable=True)])  # fmt: skip
    text = render(result)
    assert "h1: unchanged (fleet.up would not touch it)" in [line.strip() for line in text.splitlines()]
    assert "h2: would change credentials" in text and "credential API_KEY of coder-1: deliver" in text
    assert "h3: cannot plan (unreachable): connection refused" in text
    document = result.model_dump_json()
    for value in (VALUE_A, VALUE_B.decode().strip()):
        assert value not in text and value not in document


def test_daemon_section_parses_as_the_fact_does() -> None:
    config = '{\n  "icc": false\n}\n'
    args = ["/usr/sbin/dockerd", "-H", "fd://"]
    section = ["live=true", "args=" + "\0".join(args).encode().hex() + "00", "config=" + config.encode().hex()]
    fact = parse_daemon(["##jackin-live-restore", "true", "##jackin-dockerd-args", *args, "", "##jackin-file",
                         *config.splitlines()])  # fmt: skip
    parsed = parse_section(section)
    assert (parsed.live_restore, parsed.args, json.loads(parsed.config)) == (fact.live_restore, fact.args,
                                                                             json.loads(fact.config))  # fmt: skip
    assert parse_section(["live=", "args="]) == DaemonState() and parse_section([]) is None


# --- fleet.plan: checks first, exit codes ---------------------------------------------------------


def test_plan_checks_credentials_before_it_opens_the_ledger(tmp_path: Path, monkeypatch) -> None:
    from jackin.spec.credentials import CredentialError
    from jackin.errors import SpecError

    from .test_credentials import MOUNTS, spec_text

    touched: list[str] = []
    monkeypatch.setattr(fleet_api, "Ledger", lambda *a, **k: touched.append("ledger"))
    monkeypatch.delenv("JK_TEST_API_KEY", raising=False)
    with pytest.raises(CredentialError):
        fleet_api.plan(parse_inventory(spec_text(CREDS.replace("FILE", str(tmp_path / "none"))), "f.yaml"))
    with pytest.raises(SpecError, match="mount of /home/me/.aws is refused"):
        fleet_api.plan(parse_inventory(spec_text("", MOUNTS), "f.yaml"))
    assert touched == []


@pytest.mark.parametrize(("hosts", "code"), [
    ([fleet_api.HostPlan(host="h1", changes=hostplan.HostChanges(host="h1"))], 0),
    ([fleet_api.HostPlan(host="h1", changes=hostplan.HostChanges(host="h1", refused=["agent coder-1: no"]))], 1),
    ([fleet_api.HostPlan(host="h1", error="does not parse")], 1),
    ([fleet_api.HostPlan(host="h1", changes=hostplan.HostChanges(host="h1")),
      fleet_api.HostPlan(host="h2", error="connection refused", unreachable=True)], 3),
], ids=["unchanged", "refused", "read failed", "unreachable"])  # fmt: skip
def test_fleet_plan_exit_codes_and_json(monkeypatch, capsys, tmp_path, hosts, code: int) -> None:
    from jackin.cli import fleet as cli

    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))  # the contract's ledger read: a fresh, empty ledger
    result = fleet_api.PlanResult(fleet="demo", plan=PLAN, hosts=hosts)
    monkeypatch.setattr(cli.fleet_api, "load", lambda _: parse_inventory(INVENTORY, "f.yaml"))
    monkeypatch.setattr(cli.fleet_api, "plan", lambda spec, log: result)
    assert cli.fleet_plan(None, json=True) == code
    document = json.loads(capsys.readouterr().out)
    assert "plan" not in document and [h["host"] for h in document["hosts"]] == [h.host for h in hosts]
    # the launch contract fleet.up would apply; none applied before, so no difference list
    assert document["contract"]["schema_version"] == 1 and document["contract_changes"] is None
    assert [a["instance"] for a in document["contract"]["agents"]] == ["coder-1", "coder-2"]
