"""End to end: a fleet of 2 hosts x 2 demo agents runs ``fleet.run``: up, wait until every agent is done,
collect, down. Each agent's commit arrives in the operator's repository under its own ref, with its
handoff; the fleet is gone from the hosts afterwards.

Needs the agent-state wait (``jackin.agents.wait``) and the collect (``jackin.work.collect``): skipped in a build
without them. One 2-host lab for the module.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

from .conftest import inv, module_lab, sh

pytest.importorskip("jackin.agents.wait")
collect = pytest.importorskip("jackin.work.collect")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("r", 2)


def test_fleet_run_collects_every_agents_commit_under_its_own_ref_and_tears_down(rlab, tmp_path: Path) -> None:
    name = f"r{secrets.token_hex(3)}"
    repo = tmp_path / "src"
    git("init", "-q", "-b", "main", str(repo))
    (repo / "README.md").write_text("a project\n")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=op", "-c", "user.email=op@x", "commit", "-qm", "start")
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {rlab.name}, hosts: 2}}
  ttl: 1h
  agents:
    - name: coder
      count: 2
      placement: each
      role: demo
      work: {{repo: src, task: "Add notes\\nwrite: notes.txt: a note\\ntest: test -f notes.txt"}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
    try:
        done = inv("fleet.run", "-i", str(spec), "--yes", "--json", "--timeout", "400", "--keep-lab")
        assert done.returncode == 0, done.stdout + done.stderr
        outcome = json.loads(done.stdout)
        assert [(p["phase"], p["status"]) for p in outcome["phases"]] == [
            ("up", "ok"), ("wait", "ok"), ("collect", "ok"), ("down", "ok")]  # fmt: skip
        assert sorted(a["state"] for a in outcome["agents"]) == ["done"] * 4
        hosts = [h.name for h in rlab.status().hosts]
        for host in hosts:
            for instance in ("coder-1", "coder-2"):
                ref = f"refs/jackin/{name}/{host}/{instance}"
                assert git("-C", str(repo), "show", f"{ref}:notes.txt") == "a note"
                handoff = collect.handoff_path(name, host, instance).read_text()
                assert "## What I did" in handoff and "## Commit" in handoff
        for n in range(len(hosts)):  # torn down: nothing of the fleet is left on either host
            assert sh(rlab, f"docker ps -aq --filter label=jackin.fleet={name}", host=n).stdout.strip() == ""
            assert sh(rlab, f"ls /etc/systemd/system/jackin-ttl-{name}.timer", host=n, warn=True).failed
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--no-final-snapshot")
