"""The launch contract at fleet.up on a real lab host: stored per run; a changed contract with no
terminal and no --yes is refused naming the difference, changing nothing on the host or in the
ledger; with --yes it is applied and the new contract stored.

One 1-host lab and one fleet for the module; the tests run in order, each building on the last.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from jackin.plan import launch
from jackin.plan.terms import FleetContract
from jackin.lab import Lab
from jackin.store.ledger import Ledger

from .conftest import ROOT, inv, module_lab, sh

FIRST, ADDED = "93.184.216.34/32:443", "1.1.1.1/32:443"


@pytest.fixture(scope="module")
def klab():
    yield from module_lab("k", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"k{secrets.token_hex(3)}"
        self.spec = tmp / f"{self.name}.yaml"
        self.write(FIRST)

    def write(self, *allow: str) -> None:
        self.spec.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {self.lab.name}, hosts: 1}}
  agents:
    - name: coder
      network: {{mode: allowlist, allow: [{", ".join(allow)}]}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")


@pytest.fixture(scope="module")
def kfleet(klab, tmp_path_factory):
    fleet = Fleet(klab, tmp_path_factory.mktemp("contract"))
    try:
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")


def up_without_terminal(fleet: Fleet) -> subprocess.CompletedProcess:
    """``inv fleet.up`` with no --yes and stdin not a terminal (as a script or a CI job runs it)."""
    return subprocess.run([sys.executable, "-m", "invoke", "fleet.up", "-i", str(fleet.spec)], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def host_state(fleet: Fleet) -> str:
    """Everything of the fleet a run could change on the host (nft stateless: no counters)."""
    return sh(fleet.lab, f"getent passwd | grep -- '{fleet.name}--'; "
                         f"docker ps -a --filter label=jackin.fleet={fleet.name} --format '{{{{.ID}}}} {{{{.Names}}}} "
                         f"{{{{.State}}}} {{{{.Label \"jackin.config\"}}}}'; docker network ls --format '{{{{.ID}}}} {{{{.Name}}}}'; "
                         f"ls -la /srv/jackin/{fleet.name} /var/lib/jackin; cat /var/lib/jackin/fleet-{fleet.name}.json; "
                         f"nft -s list table inet jackin-{fleet.name}", warn=True).stdout  # fmt: skip


def ledger_state(fleet: Fleet) -> tuple[list, str | None]:
    with Ledger() as ledger:
        return [dict(r) for r in ledger.runs(fleet.name)], ledger.last_contract(fleet.name)


def stored(fleet: Fleet) -> FleetContract:
    with Ledger() as ledger:
        found = launch.last_applied(ledger, fleet.name)
    assert found is not None
    return found


def test_a_first_up_without_a_terminal_is_refused_before_anything(kfleet: Fleet) -> None:
    before = ledger_state(kfleet)
    done = up_without_terminal(kfleet)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no launch contract applied yet" in done.stderr and "--yes" in done.stderr
    assert ledger_state(kfleet) == before


def test_up_with_yes_stores_the_contract(kfleet: Fleet) -> None:
    done = inv("fleet.up", "-i", str(kfleet.spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launch contract of fleet" in done.stdout
    terms = stored(kfleet)
    coder = terms.agent("coder-1")
    assert coder.network.allowlist == [FIRST] and coder.identity.user == f"jk-{kfleet.name}--coder-1"
    with Ledger() as ledger:  # stored against the run that applied it
        row = ledger.db.execute("SELECT run FROM run_contracts WHERE fleet = ? ORDER BY run DESC", (kfleet.name,)).fetchone()
        assert ledger.runs(kfleet.name)[-1]["id"] == row["run"]


def test_the_stored_contract_states_each_hosts_apparmor_as_the_host_has_it(kfleet: Fleet) -> None:
    """The lab's hosts (and this machine's kernel) have no AppArmor: no /sys/module/apparmor. The
    contract fleet.up stored says so per host, in the Docker line and the risks, not "not checked"."""
    truth = sh(kfleet.lab, "test -e /sys/module/apparmor && echo present || echo absent; uname -r").stdout.split()
    assert truth[0] == "absent"  # what the lab truly has; a host with AppArmor would need the other branch
    host = f"{kfleet.lab.name}-1"
    terms = stored(kfleet)
    assert [(h.name, h.kernel, h.apparmor, h.apparmor_docker) for h in terms.hosts] == [(host, truth[1], False, None)]
    coder = terms.agent("coder-1")
    assert coder.docker.apparmor == [f"{host}: no AppArmor on this host"]
    assert any(r.startswith(f"no AppArmor on {host}:") for r in coder.residual_risks)
    assert not any("not checked" in r for r in coder.residual_risks)
    planned = inv("fleet.plan", "-i", str(kfleet.spec))  # fleet.plan reads the hosts too: the same line
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert f"{host}: no AppArmor on this host" in planned.stdout and "not checked" not in planned.stdout


def test_a_changed_contract_without_a_terminal_is_refused_naming_the_difference(kfleet: Fleet) -> None:
    host_before, ledger_before = host_state(kfleet), ledger_state(kfleet)
    assert "93.184.216.34" in host_before  # the state read sees the policy
    kfleet.write(FIRST, ADDED)
    done = up_without_terminal(kfleet)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"coder-1 network: allowlist gained {ADDED}" in done.stderr
    assert "launch contract changed" in done.stderr and "--yes" in done.stderr
    assert host_state(kfleet) == host_before
    assert ledger_state(kfleet) == ledger_before


def test_with_yes_the_change_is_applied_and_the_new_contract_stored(kfleet: Fleet) -> None:
    runs_before = len(ledger_state(kfleet)[0])
    done = inv("fleet.up", "-i", str(kfleet.spec), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"coder-1 network: allowlist gained {ADDED}" in done.stdout  # shown, not asked
    assert stored(kfleet).agent("coder-1").network.allowlist == [FIRST, ADDED]
    assert len(ledger_state(kfleet)[0]) == runs_before + 1
    assert "1.1.1.1" in host_state(kfleet)


def test_an_unchanged_contract_names_no_difference(kfleet: Fleet) -> None:
    """Control: with the contract as applied, a run with no terminal is still refused (every change is
    confirmed), but by the general rule, with no contract difference named."""
    done = up_without_terminal(kfleet)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "launch contract" not in done.stderr and "gained" not in done.stderr
    assert "no terminal to confirm on" in done.stderr
