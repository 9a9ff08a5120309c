"""OpenCode and Gemini CLI in their role images on a lab host, against a stand-in of their vendor's API: the
same day's work as test_runtime_lab.py's (its docstring), in a module of its own so that the four runtimes'
runs share two workers. OpenCode runs through fleet.up, fleet.wait and fleet.collect as there; Gemini CLI
through ``fleet.run``, the whole loop (up, wait, collect, down), answered while it waits. Gemini CLI's
stand-in serves HTTPS with a certificate of the test's own authority, given to the agent as ``api_ca``."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest

from jackin.store.ledger import Ledger

from .conftest import ROOT, inv, module_lab
from .test_runtime_lab import (
    ANSWER,
    QUESTION,
    RUNTIMES,
    SCRIPT,
    TASK,
    authority,
    project,
    requests,
    run_runtime,
    standin,
)

OPENCODE = [r for r in RUNTIMES if r[0] == "opencode"]


@pytest.fixture(scope="module")
def rlab():
    yield from module_lab("rm", 1, shared=True)


@pytest.mark.parametrize(("role", "credential", "header", "port"), OPENCODE, ids=[r[0] for r in OPENCODE])
def test_a_runtime_in_its_image_works_asks_and_hands_off_through_fleet_up(rlab, tmp_path, monkeypatch, role: str,
                                                                          credential: str, header: str, port: int):  # fmt: skip
    run_runtime(rlab, tmp_path, monkeypatch, role, credential, header, port)


def test_gemini_cli_does_a_days_work_through_fleet_run_answered_while_it_waits(rlab, tmp_path, monkeypatch):
    key, name, repo = f"gemini-key-{secrets.token_hex(6)}", f"rt{secrets.token_hex(3)}", tmp_path / "repo"
    git = project(repo)
    monkeypatch.setenv("JK_TEST_RUNTIME_KEY", key)
    (tmp_path / "tls").mkdir()
    ca, cert, cert_key = authority(tmp_path / "tls", rlab.status().service.public_address)
    spec = tmp_path / f"{name}.yaml"
    with standin(rlab, 8093, key, (cert, cert_key)) as (url, log):
        spec.write_text(json.dumps({"fleet": {
            "name": name, "provider": "lab", "lab": {"name": rlab.name, "hosts": 1},
            "resources": {"memory": "768m", "cpus": 1, "pids": 256}, "network": {"mode": "allowlist"},
            "agents": [{"name": "coder", "role": "gemini", "api_url": url, "api_ca": str(ca),
                        "credentials": [{"name": "GEMINI_API_KEY", "from_env": "JK_TEST_RUNTIME_KEY"}],
                        "work": {"repo": str(repo), "task": TASK}}],
        }}))  # fmt: skip
        runner = subprocess.Popen([sys.executable, "-m", "invoke", "fleet.run", "-i", str(spec), "--yes", "--json",
                                   "--timeout", "300", "--keep-lab"], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})  # fmt: skip
        try:
            deadline, asked = time.monotonic() + 180, None
            while asked is None:  # fleet.run waits; the operator, beside it, sees the question and answers
                assert time.monotonic() < deadline and runner.poll() is None, runner.communicate(timeout=60)
                now = inv("fleet.status", "-i", str(spec), "--json")
                if now.returncode in (0, 4) and now.stdout.strip():
                    states = [a.get("agent_state") or {} for h in json.loads(now.stdout)["hosts"] for a in h["agents"]]
                    asked = next((s for s in states if s.get("state") == "blocked"), None)
                time.sleep(1)
            assert asked["question"] == QUESTION, asked
            answered = inv("agent.answer", "coder-1", ANSWER, "-i", str(spec))
            assert answered.returncode == 0, answered.stdout + answered.stderr
            out, err = runner.communicate(timeout=300)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.communicate()
            inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--discard-snapshots")
        seen = requests(rlab, log)
    assert runner.returncode == 0, out[-3000:] + err[-3000:]
    outcome = json.loads(out)
    assert [(p["phase"], p["status"]) for p in outcome["phases"]] == [
        ("up", "ok"), ("wait", "ok"), ("collect", "ok"), ("down", "ok")], outcome["phases"]  # fmt: skip
    [ref] = subprocess.run([*git, "for-each-ref", "--format=%(refname)", f"refs/jackin/{name}/"], capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    files = subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True).stdout.split()
    assert {"README.md", "hello.sh", "answer.txt"} <= set(files), files
    assert subprocess.run([*git, "show", f"{ref}:answer.txt"], capture_output=True, text=True).stdout.strip() == ANSWER
    with Ledger() as ledger:  # its collection: evidence, and the tokens Gemini CLI reported
        [row] = ledger.collections(name)
    assert (row["state"], row["evidence"]) == ("done", "ok"), row
    assert row["detail"]["usage"]["input_tokens"] >= 12 * len(SCRIPT) and row["detail"]["usage"]["cost_usd"] is None
    main = [r for r in seen if r["body"].get("tools")]
    assert len(main) == len(SCRIPT) and not any(r.get("past_end") for r in seen)
    assert {r["headers"].get("x-goog-api-key") for r in seen if r["method"] == "POST"} == {key}
    assert TASK in json.dumps(main[0]["body"]) and "jackin-ask" in json.dumps(main[0]["body"])
