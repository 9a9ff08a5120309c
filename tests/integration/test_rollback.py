"""fleet.rollback on a real lab host: back to an earlier spec, forward again, refusals that change
nothing, and a host whose fleet.up failed returned to its last good state.

One 1-host lab for the module, one fleet; the tests run in order on it (each starts from where the
previous one left the fleet, which its assertions say). Host state is read over SSH: the fleet's
users, containers (with their config hash), networks, the live nftables chain of the agent whose
policy changes and the policy file, and fleet.status.
"""

from __future__ import annotations

import json
import secrets

import pytest

from jackin.plan import launch
from jackin.lab import Lab
from jackin.store.ledger import Ledger

from .conftest import inv, module_lab, sh

RESOURCES = {"memory": "128m", "cpus": 0.5, "pids": 64}


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("r", 1, shared=True)



def spec_a(name: str, lab: Lab) -> dict:
    return {"fleet": {"name": name, "provider": "lab", "lab": {"name": lab.name, "hosts": 1}, "resources": RESOURCES,
                      "agents": [{"name": "keep", "network": {"mode": "none"}}, {"name": "gone"}]}}  # fmt: skip


def spec_b(name: str, lab: Lab) -> dict:
    """A with ``gone`` removed, ``keep``'s network changed, a new agent ``fresh``."""
    spec = spec_a(name, lab)
    spec["fleet"]["agents"] = [{"name": "keep", "network": {"mode": "allowlist", "allow": ["198.18.7.7:443"]}},
                               {"name": "fresh"}]  # fmt: skip
    return spec


class Fleet:
    def __init__(self, lab: Lab, name: str, path) -> None:
        self.lab, self.name, self.path = lab, name, path

    @property
    def file(self) -> str:
        return str(self.path)

    def write(self, spec: dict) -> None:
        self.path.write_text(json.dumps(spec))

    def up(self) -> None:
        done = inv("fleet.up", "-i", self.file, "--yes", "--json")
        assert done.returncode == 0, done.stdout + done.stderr

    def state(self) -> dict:
        """What of the fleet is on the host, and what fleet.status says of its agents."""
        f = self.name
        fmt = '{{.Names}} {{.State}} {{.Label "jackin.config"}}'
        read = sh(self.lab, f"getent passwd | cut -d: -f1 | grep '^jk-{f}--' | sort; echo '#'; "
                            f"docker ps -a --filter label=jackin.fleet={f} --format '{fmt}' | sort; echo '#'; "
                            f"docker network ls --filter label=jackin.fleet={f} --format '{{{{.Name}}}}' | sort; echo '#'; "
                            f"nft list chain inet jackin-{f} egress_keep_1 | sed -E 's/packets [0-9]+ bytes [0-9]+//'; "
                            f"echo '#'; sha256sum /etc/jackin/nft/{f}.nft").stdout  # fmt: skip
        users, containers, networks, chain, policy = (part.strip().splitlines() for part in read.split("#\n"))
        status = inv("fleet.status", "-i", self.file, "--json")
        assert status.returncode == 0, status.stdout + status.stderr  # 0: reachable, every policy enforced
        agents = {a["instance"]: (a["state"], a["egress"]) for h in json.loads(status.stdout)["hosts"] for a in h["agents"]}
        return {"users": users, "containers": containers, "networks": networks, "chain": chain, "policy": policy,
                "agents": agents}  # fmt: skip

    def runs(self) -> list[dict]:
        with Ledger() as ledger:
            return ledger.runs(self.name)


@pytest.fixture(scope="module")
def fleet(rlab, tmp_path_factory):
    """Spec A brought up, then spec B (the file holds B from then on); the state after each is kept."""
    name = f"rb{secrets.token_hex(3)}"
    f = Fleet(rlab, name, tmp_path_factory.mktemp("rb") / f"{name}.yaml")
    try:
        f.write(spec_a(name, rlab))
        f.up()
        f.state_a, f.run_a = f.state(), f.runs()[-1]["id"]
        f.write(spec_b(name, rlab))
        f.up()
        f.state_b, f.run_b = f.state(), f.runs()[-1]["id"]
        yield f
    finally:
        done = inv("fleet.down", "-i", f.file, "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_and_b_differ_on_the_host(fleet):
    """The control for what follows: the two specs leave different hosts."""
    a, b = fleet.state_a, fleet.state_b
    user = f"jk-{fleet.name}--"
    assert [c.split()[0] for c in a["containers"]] == [f"{user}gone-1", f"{user}keep-1"]
    assert [c.split()[0] for c in b["containers"]] == [f"{user}fresh-1", f"{user}keep-1"]
    assert a["networks"] != b["networks"] and a["chain"] != b["chain"] and a["policy"] != b["policy"]
    assert a["agents"] == {"gone-1": ("running", "none"), "keep-1": ("running", "none")}
    assert b["agents"] == {"fresh-1": ("running", "none"), "keep-1": ("running", "allowlist")}
    assert "198.18.7.7" not in "\n".join(a["chain"]) and "198.18.7.7" in sh(fleet.lab, f"nft list table inet jackin-{fleet.name}").stdout


def test_rollback_returns_the_host_to_spec_a_and_records_the_run(fleet):
    file_before = fleet.path.read_text()
    dry = inv("fleet.rollback", "-i", fleet.file, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"back to run {fleet.run_a}'s" in dry.stdout and "+ agent gone" in dry.stdout and "- agent fresh" in dry.stdout
    assert "~ agent keep: network.mode: allowlist -> none" in dry.stdout
    assert fleet.state() == fleet.state_b and fleet.runs()[-1]["id"] == fleet.run_b  # the dry run changed nothing

    done = inv("fleet.rollback", "-i", fleet.file, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["mode"], [s["to"] for s in result["steps"]]) == ("step-back", [fleet.run_a])
    now = fleet.state()
    # fresh's container and network go; its user (and home) stay, as when fleet.up drops an agent
    assert now["users"] == sorted([*fleet.state_a["users"], f"jk-{fleet.name}--fresh-1"])
    assert {k: v for k, v in now.items() if k != "users"} == {k: v for k, v in fleet.state_a.items() if k != "users"}
    last = fleet.runs()[-1]
    assert (last["action"], last["status"], json.loads(last["detail"])["to"]) == ("fleet.rollback", "ok", fleet.run_a)
    assert fleet.path.read_text() == file_before  # the operator's file still holds B
    # the launch contract changed back: shown (on stderr with --json) and recorded against the rollback's run
    for line in ("gone-1: new agent", "fresh-1: removed", "keep-1 network: mode allowlist -> none"):
        assert line in done.stderr, line
    with Ledger() as ledger:
        row = ledger.db.execute("SELECT run FROM run_contracts WHERE fleet = ? ORDER BY run DESC",
                                (fleet.name,)).fetchone()  # fmt: skip
        terms = launch.last_applied(ledger, fleet.name)
    assert row["run"] == last["id"] and [a.instance for a in terms.agents] == ["keep-1", "gone-1"]
    fleet.run_back = last["id"]


def test_rollback_to_a_bad_run_refuses_and_changes_nothing(fleet):
    before, runs = fleet.state(), fleet.runs()
    with Ledger() as ledger:
        audit = len(ledger.audit_trail(fleet.name))
    for bad, message in ((999_999_999, "no run 999999999 in the ledger"), (0, "--to expects a whole number")):
        done = inv("fleet.rollback", "-i", fleet.file, "--to", str(bad), "--yes")
        assert done.returncode == 2, done.stdout + done.stderr
        assert message in done.stderr
    unknown = inv("fleet.rollback", "-i", fleet.file, "--host", "nosuch", "--yes")
    assert unknown.returncode == 2 and "is not one of the hosts" in unknown.stderr
    assert fleet.state() == before and fleet.runs() == runs
    with Ledger() as ledger:
        assert len(ledger.audit_trail(fleet.name)) == audit
    # control: a good run id is accepted (as a dry run, which changes nothing either)
    good = inv("fleet.rollback", "-i", fleet.file, "--to", str(fleet.run_b), "--dry-run")
    assert good.returncode == 0, good.stdout + good.stderr
    assert fleet.runs() == runs


def test_a_second_rollback_goes_forward_again(fleet):
    done = inv("fleet.rollback", "-i", fleet.file, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the inventory file is not rewritten" in done.stdout
    assert fleet.state() == fleet.state_b
    last = fleet.runs()[-1]
    assert (last["action"], json.loads(last["detail"])["to"]) == ("fleet.rollback", fleet.run_b)
    listed = inv("fleet.runs", "-i", fleet.file, "--json")
    assert [r["run"] for r in json.loads(listed.stdout)] == [fleet.run_a, fleet.run_b, fleet.run_back, last["id"]]


def test_a_host_whose_fleet_up_failed_part_way_returns_to_its_last_good_spec(fleet):
    """Spec C opens keep's network and adds two instances publishing the same host port: the first
    comes up, the second cannot, so fleet.up fails on the host after changing it. The default
    rollback then re-applies the last spec that succeeded there (B, re-applied by the last rollback)."""
    good, user = fleet.state(), f"jk-{fleet.name}--"
    broken = spec_b(fleet.name, fleet.lab)
    broken["fleet"]["agents"][0]["network"] = {"mode": "open"}
    broken["fleet"]["agents"].append({"name": "clash", "count": 2, "network": {
        "mode": "none", "publish": [{"port": 8080, "host_port": 18081}]}})  # fmt: skip
    fleet.write(broken)
    failed = inv("fleet.up", "-i", fleet.file, "--yes")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # control: the failed run changed the host before it failed (keep's policy, clash-1)
    policy = sh(fleet.lab, f"sha256sum /etc/jackin/nft/{fleet.name}.nft").stdout.strip().splitlines()
    assert policy != good["policy"]
    assert f"{user}clash-1" in sh(fleet.lab, f"docker ps --filter label=jackin.fleet={fleet.name} --format '{{{{.Names}}}}'").stdout
    last_good = [r for r in fleet.runs() if r["action"] != "snapshot.create"][-2]["id"]  # not the auto snapshot's run
    done = inv("fleet.rollback", "-i", fleet.file, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["mode"] == "repair"
    assert [(s["to"], s["hosts"]) for s in result["steps"]] == [(last_good, [fleet.lab.status().hosts[0].name])]
    now = fleet.state()
    assert now["users"] == sorted([*good["users"], f"{user}clash-1", f"{user}clash-2"])  # users stay, as ever
    assert {k: v for k, v in now.items() if k != "users"} == {k: v for k, v in good.items() if k != "users"}
