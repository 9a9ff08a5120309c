"""fleet.plan and fleet.up's no-change fast path on a real lab host.

One 1-host lab and one fleet of two agents for the module; the tests run in file order. "Changes
nothing" compares the host's state read (``state_command``, with the daemon section) and the
ledger's rows (``iterdump``) before and after. Whether fleet.up started the engine for the host is
read from the run's record: ``unchanged`` in its detail, ``engine: false`` in the host's audit entry.
"""

from __future__ import annotations

import json
import secrets
import sqlite3

import pytest

from jackin.plan import terms
from jackin.store.ledger import Ledger
from jackin.plan.fleet import UIDS_PER_FLEET
from jackin.facts.state_read import state_command

from .conftest import inv, module_lab, sh


@pytest.fixture(scope="module")
def plab():
    yield from module_lab("p", 1, shared=True)


class Fleet:
    def __init__(self, lab, name: str, path) -> None:
        self.lab, self.name, self.path = lab, name, path
        self.host = lab.status().hosts[0].name

    def write(self, *, memory: str = "128m") -> None:
        self.path.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {self.lab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo, count: 2}}
  resources: {{memory: {memory}, cpus: 0.5, pids: 64}}
  snapshots: {{before_changes: false}}
""")

    def run(self, *args: str):
        return inv(*args, "-i", str(self.path))

    def plan(self) -> dict:
        done = self.run("fleet.plan", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def host_state(self) -> str:
        """Everything the fleet has on the host, as the state read sees it (containers with their start times)."""
        with Ledger() as ledger:
            uids = [r["uid"] for r in ledger.db.execute("SELECT uid FROM uids WHERE fleet = ?", (self.name,))]
        low = min(uids, default=60000)
        out = sh(self.lab, state_command(self.name, low, low + UIDS_PER_FLEET - 1, bootstrap=True)).stdout
        return "\n".join(_without_health(line) for line in out.split("\n")  # the host's clock and free disk move
                         if not line.startswith(("now=", "free=")))  # fmt: skip

    def ledger(self) -> list[str]:
        with Ledger() as ledger:
            path = ledger.path
        db = sqlite3.connect(path)
        try:
            return list(db.iterdump())
        finally:
            db.close()

    def last_up(self) -> tuple[dict, list[dict]]:
        with Ledger() as ledger:
            run = [r for r in ledger.runs(self.name) if r["action"] == "fleet.up"][-1]
            audit = [dict(r) for r in ledger.db.execute("SELECT * FROM audit WHERE run = ?", (run["id"],))]
        return json.loads(run["detail"]), audit


def _without_health(line: str) -> str:
    """A container's inspect line without ``State.Health``: Docker runs the role's health check every
    10 s by itself (its status, streak and log move), which is no change of the fleet's."""
    if not line.startswith("{"):
        return line
    info = json.loads(line)
    if isinstance(info.get("State"), dict):
        info["State"].pop("Health", None)
    return json.dumps(info, sort_keys=True)


@pytest.fixture(scope="module")
def fleet(plab, tmp_path_factory):
    name = f"p{secrets.token_hex(3)}"
    fl = Fleet(plab, name, tmp_path_factory.mktemp("plan") / f"{name}.yaml")
    fl.write()
    try:
        yield fl
    finally:
        inv("fleet.down", "-i", str(fl.path), "--yes", "--keep-lab", "--no-final-snapshot")


def test_plan_on_a_fresh_host_lists_changes_and_changes_nothing(fleet):
    state, ledger = fleet.host_state(), fleet.ledger()
    done = fleet.run("fleet.plan")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{fleet.host}: would change" in done.stdout
    document = fleet.plan()
    [host] = document["hosts"]
    categories = {c["category"] for c in host["changes"]["changes"]}
    assert {"users", "files", "networks", "containers", "firewall"} <= categories
    assert fleet.host_state() == state and fleet.ledger() == ledger
    # the contract fleet.up would apply: valid against the committed schema, with the host's facts as read
    import jsonschema

    jsonschema.validate(document["contract"], json.loads(terms.SCHEMA_FILE.read_text()))
    kernel = sh(fleet.lab, "uname -r").stdout.strip()
    assert sh(fleet.lab, "test -e /sys/module/apparmor", warn=True).failed  # the lab truly has no AppArmor
    assert document["contract"]["hosts"] == [{"name": fleet.host, "kernel": kernel, "apparmor": False,
                                              "apparmor_docker": None}]  # fmt: skip
    assert document["contract_changes"] is None  # no contract applied yet


def test_after_up_plan_says_unchanged(fleet):
    done = fleet.run("fleet.up", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    detail, _ = fleet.last_up()
    assert detail["unchanged"] == []  # the first up ran the engine on the host
    state, ledger = fleet.host_state(), fleet.ledger()
    done = fleet.run("fleet.plan")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{fleet.host}: unchanged (fleet.up would not touch it)" in done.stdout
    document = fleet.plan()
    assert document["hosts"][0]["changes"]["changes"] == [] and document["contract_changes"] == []
    assert fleet.host_state() == state and fleet.ledger() == ledger  # a provisioned host: nothing changed either


def test_a_warm_no_change_up_starts_no_engine_and_changes_nothing(fleet):
    state = fleet.host_state()
    done = fleet.run("fleet.up", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    detail, audit = fleet.last_up()
    assert detail["unchanged"] == [fleet.host]
    [entry] = [a for a in audit if a["host"] == fleet.host]
    assert entry["result"] == "ok" and json.loads(entry["detail"])["engine"] is False
    assert fleet.host_state() == state


def test_a_spec_change_shows_only_that_change_and_up_applies_it(fleet):
    fleet.write(memory="144m")
    document = fleet.plan()
    [host] = document["hosts"]
    for n in (1, 2):  # the spec change shows in the contract's difference too
        assert f"coder-{n} resources: memory {128 * 2**20} -> {144 * 2**20}" in document["contract_changes"]
    changes = host["changes"]["changes"]
    assert {c["category"] for c in changes} == {"containers"}
    assert sorted(c["step"] for c in changes) == ["agent coder-1", "agent coder-2"]
    done = fleet.run("fleet.up", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.last_up()[0]["unchanged"] == []
    memory = sh(fleet.lab, f"docker inspect -f '{{{{.HostConfig.Memory}}}}' jk-{fleet.name}--coder-1").stdout
    assert memory.strip() == str(144 * 2**20)
    assert fleet.plan()["hosts"][0]["changes"]["changes"] == []


def test_a_container_removed_by_hand_is_planned_and_up_runs_the_engine_for_it(fleet):
    sh(fleet.lab, f"docker rm -f jk-{fleet.name}--coder-2")
    [host] = fleet.plan()["hosts"]
    assert [(c["category"], c["step"]) for c in host["changes"]["changes"]] == [("containers", "agent coder-2")]
    done = fleet.run("fleet.up", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.last_up()[0]["unchanged"] == []
    assert sh(fleet.lab, f"docker inspect -f '{{{{.State.Running}}}}' jk-{fleet.name}--coder-2").stdout.strip() == "true"
    assert fleet.plan()["hosts"][0]["changes"]["changes"] == []
