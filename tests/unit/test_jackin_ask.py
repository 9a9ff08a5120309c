"""roles/common/jackin-ask, run here in sh with roles/common on PATH: blocked with the question until the
answer is there, then the answer on stdout and the state back to working. (The lab proves it in the demo
agent, which asks through it: tests/integration/test_agent_state.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "roles" / "common"

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="no flock here")


def status(d: Path) -> dict:
    return json.loads((d / "status.json").read_text())


def test_it_blocks_with_the_question_prints_the_answer_and_works_again(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(tmp_path)}
    (tmp_path / "answer").write_text("stale")  # an earlier answer is not this question's
    ask = subprocess.Popen(["jackin-ask", "Which port?"], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "status.json").exists() or status(tmp_path)["state"] != "blocked":
        assert time.monotonic() < deadline and ask.poll() is None
        time.sleep(0.05)
    assert (status(tmp_path)["question"], status(tmp_path)["message"]) == ("Which port?", "waiting for an answer")
    assert not (tmp_path / "answer").exists()
    (tmp_path / "answer.tmp").write_text("8080, as \"before\"\n")
    (tmp_path / "answer.tmp").rename(tmp_path / "answer")  # as agent.answer delivers it: whole
    out, _ = ask.communicate(timeout=10)
    assert (ask.returncode, out) == (0, "8080, as \"before\"\n")
    assert (status(tmp_path)["state"], status(tmp_path)["question"]) == ("working", None)
    assert not (tmp_path / "answer").exists()


def test_without_a_question_it_refuses(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(tmp_path)}
    for args in ([], [""], ["a", "b"]):
        done = subprocess.run(["jackin-ask", *args], env=env, capture_output=True, text=True, timeout=10)
        assert done.returncode == 2 and "usage: jackin-ask QUESTION" in done.stderr
    assert not (tmp_path / "status.json").exists()


def test_a_question_whose_asker_is_ended_does_not_leave_the_agent_blocked(tmp_path: Path) -> None:
    """A runtime's shell tool that times out ends jackin-ask (TERM): the agent is working again, saying it stopped
    waiting, so agent.answer is not asked to answer a question nothing reads."""
    env = {**os.environ, "PATH": f"{COMMON}:{os.environ['PATH']}", "JACKIN_DIR": str(tmp_path)}
    ask = subprocess.Popen(["jackin-ask", "Which port?"], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "status.json").exists() or status(tmp_path)["state"] != "blocked":
        assert time.monotonic() < deadline and ask.poll() is None
        time.sleep(0.05)
    ask.terminate()
    assert ask.wait(timeout=10) == 143
    assert (status(tmp_path)["state"], status(tmp_path)["message"]) == (
        "working", "stopped waiting for an answer: Which port?")  # fmt: skip
