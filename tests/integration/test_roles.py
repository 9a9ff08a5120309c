"""Role images on a real lab host: the demo role's image, built on the operator's machine, is loaded
over SSH by ``fleet.up`` into a host that did not have it, runs the agent with the role's HEALTHCHECK,
and a second ``fleet.up`` does not load it again.

One 1-host lab and one fleet for the module; the tests run in order.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from jackin.spec import roles
from jackin.lab import Lab

from .conftest import inv, module_lab, sh


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("r", 1)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"r{secrets.token_hex(3)}"
        self.spec = tmp / f"{self.name}.yaml"
        self.spec.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  agents:
    - name: coder
      role: demo
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
        self.container = f"jk-{self.name}--coder-1"
        self.tag = roles.load("demo").tag


@pytest.fixture(scope="module")
def rfleet(rlab, tmp_path_factory):
    fleet = Fleet(rlab, tmp_path_factory.mktemp("roles"))
    try:
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup


def loaded_at(fleet: Fleet) -> str:
    """When the host last tagged the image (a ``docker load`` tags it again)."""
    return sh(fleet.lab, f"docker image inspect --format '{{{{.Id}}}} {{{{.Metadata.LastTagTime}}}}' {fleet.tag}").stdout


def test_fleet_plan_shows_the_image_load_from_the_operator(rfleet):
    absent = sh(rfleet.lab, f"docker image inspect {rfleet.tag}", warn=True)
    assert absent.exited != 0  # the lab host does not have the role's image
    done = inv("fleet.plan", "-i", str(rfleet.spec), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for host in json.loads(done.stdout)["hosts"] for change in host["changes"]["changes"]
             if change["category"] == "image" for line in change["lines"]]  # fmt: skip
    assert lines and lines[0].startswith(f"load image {rfleet.tag} from the operator (")
    # The fleet.up preview (its dry run) shows the same step; nothing is loaded by it.
    done = inv("fleet.up", "-i", str(rfleet.spec), "--dry-run", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [c["step"] for host in json.loads(done.stdout)["changes"] for c in host["changes"]["changes"]]
    assert any(step.startswith(f"load image {rfleet.tag} from the operator (") for step in steps), steps
    assert sh(rfleet.lab, f"docker image inspect {rfleet.tag}", warn=True).exited != 0


def test_fleet_up_loads_the_image_and_runs_the_agent_with_its_healthcheck(rfleet):
    done = inv("fleet.up", "-i", str(rfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"loaded {rfleet.tag}" in done.stderr
    image = json.loads(sh(rfleet.lab, f"docker image inspect {rfleet.tag}").stdout)[0]["Config"]
    assert image["Healthcheck"]["Test"] == ["CMD", "/usr/local/bin/jackin-health"]
    assert image["Entrypoint"] == [roles.ENTRYPOINT]
    found = json.loads(sh(rfleet.lab, f"docker inspect {rfleet.container}").stdout)[0]
    assert found["Config"]["Image"] == rfleet.tag
    assert found["Config"]["Healthcheck"]["Test"][-1] == "/usr/local/bin/jackin-health"
    assert found["State"]["Running"] and "Health" in found["State"]
    # No staging directory of the load is left on the host.
    assert sh(rfleet.lab, "ls -d /var/tmp/jackin-image.* 2>/dev/null || true").stdout.strip() == ""
    # The busybox applets the tests use are there, for the agent's user.
    tools = sh(rfleet.lab, f"docker exec {rfleet.container} sh -c 'command -v wget; command -v nc; command -v git'")
    assert tools.stdout.split() == ["/usr/local/bin/wget", "/usr/local/bin/nc", "/usr/bin/git"]


def test_second_fleet_up_does_not_load_the_image_again(rfleet):
    before = loaded_at(rfleet)
    done = inv("fleet.up", "-i", str(rfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loaded" not in done.stderr and json.loads(done.stdout)["unchanged"] == [rfleet.lab.status().hosts[0].name]
    assert loaded_at(rfleet) == before
