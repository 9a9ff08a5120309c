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


@pytest.mark.parametrize("agent, target, port, message", [
    ("coder-1", "192.0.2.1", "80;id", "--port expects a whole number from 1 to 65535, got '80;id'"),
    ("coder-1", "192.0.2.1", "0", "--port expects a whole number from 1 to 65535, got 0"),
    ("coder-1", "192.0.2.1", "65536", "--port expects a whole number from 1 to 65535, got 65536"),
    ("coder-1", "192.0.2.1;id", "443", "target '192.0.2.1;id' is not an IP address or a host name"),
    ("coder-1", "-oProxyCommand=x", None, "target '-oProxyCommand=x' is not an IP address or a host name"),
    ("coder-1", "fe80::1%eth0", None, "target 'fe80::1%eth0': scoped IPv6 addresses are not supported"),
    ("nobody", "192.0.2.1", None, "no agent 'nobody' in fleet 'f'"),
])  # fmt: skip
def test_agent_netcheck_refuses_every_bad_argument_before_any_host(inventory: str, monkeypatch, agent: str,
                                                                     target: str, port: str | None, message: str) -> None:  # fmt: skip
    monkeypatch.setattr(fleet_api, "targets", lambda *a, **k: pytest.fail("a host was looked up"))
    with pytest.raises(SpecError) as caught:
        agent_cli.agent_netcheck(inventory, agent, target, port, json=False)
    assert caught.value.message == message and caught.value.exit_code == 2


def test_agent_netcheck_with_good_arguments_goes_on_to_the_hosts(inventory: str, monkeypatch) -> None:
    monkeypatch.setattr(fleet_api, "targets", lambda *a, **k: [])  # the positive control of the refusals above
    assert agent_cli.agent_netcheck(inventory, "coder", "example.com", None, json=True) == 0


def test_no_task_option_is_a_number_invoke_would_cast_itself() -> None:
    """Invoke casts an option whose default is an int (or float) and shows a traceback for a value that is not
    one; every numeric option is a string, parsed by its command (exit 2 naming the option)."""
    import tasks

    def walk(collection):
        for task in collection.tasks.values():
            yield task
        for sub in collection.collections.values():
            yield from walk(sub)

    typed = [f"{t.name} --{a.name}" for t in walk(tasks.ns) for a in t.get_arguments() if a.kind in (int, float)]
    assert typed == []


def test_the_tasks_are_wired(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("fleet:\n  name: f\n  provider: lab\n  agents:\n    - {name: coder}\n")
    done = subprocess.run([sys.executable, "-m", "invoke", "fleet.wait", "-i", str(path), "--until", "never"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stderr.strip()) == (2, "error: --until expects one of done, blocked, any, got 'never'")
    done = subprocess.run([sys.executable, "-m", "invoke", "agent.answer", "nobody-1", "-", "-i", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, input="yes\n")  # fmt: skip
    assert done.returncode == 2 and "no agent instance 'nobody-1' in fleet 'f'" in done.stderr
