"""The time-to-live on a real lab host: fleet.up writes the deadline file and the systemd timer, a
second up changes nothing, the timer stops the fleet's agents when the deadline passes (they were
running before: the positive control) and they stay stopped, fleet.status shows it, and fleet.down
removes the units and the file.

One 1-host lab and one fleet for the module; the tests run in order, each building on the last.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from jackin.lab import Lab

from .conftest import inv, module_lab, sh

TTL = 30  # seconds: the fixture's up without it loads the images, so the ttl's first up is warm and quick


@pytest.fixture(scope="module")
def tlab():
    yield from module_lab("ttl", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"t{secrets.token_hex(3)}"
        self.spec = tmp / f"{self.name}.yaml"
        text = f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {lab.name}, hosts: 1}}
  ttl: {TTL}s
  agents:
    - name: coder
      count: 2
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
"""
        self.spec.write_text(text)
        self.untimed = tmp / f"{self.name}-untimed.yaml"  # the same fleet without a ttl: its up starts no clock
        self.untimed.write_text(text.replace(f"  ttl: {TTL}s\n", ""))
        self.file = f"/var/lib/jackin/ttl/{self.name}"
        self.timer, self.service = f"jackin-ttl-{self.name}.timer", f"jackin-ttl-{self.name}.service"
        self.containers = [f"jk-{self.name}--coder-1", f"jk-{self.name}--coder-2"]


@pytest.fixture(scope="module")
def tfleet(tlab, tmp_path_factory):
    fleet = Fleet(tlab, tmp_path_factory.mktemp("ttl"))
    try:
        # The cold up (images, hardening) happens here, before any deadline runs: the clock starts at the
        # first up whose spec has a ttl (the first test's), and then only a warm up and reads precede it.
        warm = inv("fleet.up", "-i", str(fleet.untimed), "--yes")
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert sh(tlab, f"ls {fleet.file}", warn=True).failed  # no deadline yet
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")


def states(fleet: Fleet) -> list[str]:
    out = sh(fleet.lab, "docker inspect -f '{{.State.Status}}' " + " ".join(fleet.containers)).stdout
    return out.split()


def test_up_writes_the_deadline_and_starts_the_timer(tfleet: Fleet) -> None:
    before = time.time()
    done = inv("fleet.up", "-i", str(tfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = int(sh(tfleet.lab, f"cat {tfleet.file}").stdout)
    assert before + TTL - 5 <= deadline <= before + TTL + 5  # fixed when the up began (the lab's clock is ours)
    assert sh(tfleet.lab, f"stat -c '%a %U %G' {tfleet.file}").stdout.split() == ["600", "root", "root"]
    assert sh(tfleet.lab, f"systemctl is-enabled {tfleet.timer}; systemctl is-active {tfleet.timer}").stdout.split() \
        == ["enabled", "active"]
    calendar = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
    assert f"OnCalendar={calendar}" in sh(tfleet.lab, f"cat /etc/systemd/system/{tfleet.timer}").stdout
    assert states(tfleet) == ["running", "running"]  # the positive control of the stop below


def test_a_second_up_keeps_the_deadline_and_changes_nothing(tfleet: Fleet) -> None:
    files = f"{tfleet.file} /etc/systemd/system/{tfleet.timer} /etc/systemd/system/{tfleet.service}"
    before = sh(tfleet.lab, f"stat -c '%n %i %Y' {files}; cat {tfleet.file}").stdout
    done = inv("fleet.up", "-i", str(tfleet.spec), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["unchanged"] == [tfleet.lab.status().hosts[0].name]
    assert sh(tfleet.lab, f"stat -c '%n %i %Y' {files}; cat {tfleet.file}").stdout == before
    status = inv("fleet.status", "-i", str(tfleet.spec))
    assert "time-to-live: " in status.stdout and " left (until " in status.stdout, status.stdout
    document = json.loads(inv("fleet.status", "-i", str(tfleet.spec), "--json").stdout)
    assert document["ttl"]["ttl"] == TTL and 0 < document["ttl"]["left"] <= TTL
    assert [h["ttl_timer"] for h in document["hosts"]] == ["active"]


def test_the_timer_stops_the_agents_when_the_deadline_passes(tfleet: Fleet) -> None:
    deadline = int(sh(tfleet.lab, f"cat {tfleet.file}").stdout)
    assert states(tfleet) == ["running", "running"] and time.time() < deadline  # still before: running
    limit = deadline + 90  # the timer's accuracy is 1 s; the stop itself takes a few (docker stop)
    while time.time() < limit and states(tfleet) != ["exited", "exited"]:
        time.sleep(1)
    assert states(tfleet) == ["exited", "exited"]
    assert sh(tfleet.lab, f"systemctl show -p Result --value {tfleet.service}").stdout.strip() == "success"
    time.sleep(5)
    assert states(tfleet) == ["exited", "exited"]  # restart unless-stopped: a stopped container stays stopped
    status = inv("fleet.status", "-i", str(tfleet.spec))
    assert "time-to-live: passed " in status.stdout, status.stdout


def test_up_after_the_deadline_is_refused(tfleet: Fleet) -> None:
    done = inv("fleet.up", "-i", str(tfleet.spec), "--yes", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"time-to-live of fleet {tfleet.name} passed" in done.stdout + done.stderr
    assert states(tfleet) == ["exited", "exited"]


def test_down_removes_the_timer_and_the_file(tfleet: Fleet) -> None:
    present = f"ls {tfleet.file} /etc/systemd/system/{tfleet.timer} /etc/systemd/system/{tfleet.service}"
    assert sh(tfleet.lab, present).ok  # the positive control: they are there before
    done = inv("fleet.down", "-i", str(tfleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(tfleet.lab, present, warn=True).failed
    assert sh(tfleet.lab, f"systemctl is-active {tfleet.timer}", warn=True).stdout.strip() in ("inactive", "")
    assert sh(tfleet.lab, "ls -A /var/lib/jackin 2>/dev/null", warn=True).stdout.strip() == ""
