"""fleet.wait and agent.answer at the CLI edge: bad arguments are refused (exit 2) before any host is
read, with a message naming the option; the tasks are wired into ``inv``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jackin.cli import agent as agent_cli
from jackin.cli import fleet as fleet_cli
from jackin.lifecycle import fleet as fleet_api
from jackin.lab import providers
from jackin.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch) -> str:
    """A lab inventory; reading a host would need ``targets``, which fails the test here."""
    path = tmp_path / "f.yaml"
    path.write_text("fleet:\n  name: f\n  provider: lab\n  agents:\n    - {name: coder, count: 2}\n")
    monkeypatch.setattr(providers, "targets", lambda *a, **k: pytest.fail("a host was read"))
    return str(path)


@pytest.mark.parametrize("until, timeout, message", [
    ("all", None, "--until expects one of done, blocked, any, got 'all'"),
    ("done", "soon", "--timeout: expected a duration such as 30m, 8h or 2d, got 'soon'"),
    ("done", "0", "--timeout: expected a positive duration, got '0'"),
])  # fmt: skip
def test_fleet_wait_refuses_bad_options(inventory: str, until: str, timeout: str | None, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        fleet_cli.fleet_wait(inventory, until=until, timeout=timeout, json=False)
    assert caught.value.message == message and caught.value.exit_code == 2


@pytest.mark.parametrize("agent, text, message", [
    ("coder", "yes", "no agent instance 'coder' in fleet 'f'"),
    ("coder-3", "yes", "no agent instance 'coder-3' in fleet 'f'"),
    ("coder-1", "  \n", "the answer is empty: give the text to send (or - to read it from stdin)"),
])  # fmt: skip
def test_agent_answer_refuses_bad_arguments_before_any_host(inventory: str, agent: str, text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        agent_cli.agent_answer(inventory, agent, text, host=None)
    assert caught.value.message == message


def test_the_tasks_are_wired(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("fleet:\n  name: f\n  provider: lab\n  agents:\n    - {name: coder}\n")
    done = subprocess.run([sys.executable, "-m", "invoke", "fleet.wait", "-i", str(path), "--until", "never"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stderr.strip()) == (2, "error: --until expects one of done, blocked, any, got 'never'")
    done = subprocess.run([sys.executable, "-m", "invoke", "agent.answer", "nobody-1", "-", "-i", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, input="yes\n")  # fmt: skip
    assert done.returncode == 2 and "no agent instance 'nobody-1' in fleet 'f'" in done.stderr
