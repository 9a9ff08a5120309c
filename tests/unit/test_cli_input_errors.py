"""Bad input at the CLI edge, run as `inv` processes: a clean message and exit 2, before any host is touched.

Each inventory names one static host that nothing answers on (127.0.0.1, port 1, a well-formed pinned key):
a command that reached for it would end with exit 3 (unreachable), so exit 2 shows the input was refused
first. The controls run the same commands with good input and get exit 3: the host was reached for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"  # well-formed, no host's


def static(tmp_path: Path, fleet: str, agents: str = "    - {name: coder, count: 2}\n", more: str = "") -> str:
    """An inventory of one unreachable static host; its path."""
    path = tmp_path / f"{fleet}.yaml"
    path.write_text(f"hosts:\n  - {{name: h1, address: 127.0.0.1, port: 1, host_keys: ['{KEY}']}}\n"
                    f"fleet:\n  name: {fleet}\n{more}  agents:\n{agents}")  # fmt: skip
    return str(path)


def inv(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=120)  # fmt: skip
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def test_agent_answer_refuses_stdin_that_is_not_utf8_naming_the_offset(tmp_path: Path) -> None:
    path = static(tmp_path, "ans")
    code, _, err = inv("agent.answer", "coder-1", "-", "-i", path, stdin=b"use p\xffstgres\n")
    assert (code, err.strip()) == (2, "error: stdin is not UTF-8 text: byte 0xff at byte offset 5 (invalid start "
                                      "byte); nothing was sent")  # fmt: skip
    code, _, err = inv("agent.answer", "coder-1", "-", "-i", path, stdin="use postgres ✓\n".encode())  # control
    assert code == 3 and "h1" in err and "Traceback" not in err


def test_agent_netcheck_refuses_a_port_that_is_not_one_before_any_host(tmp_path: Path) -> None:
    code, _, err = inv("agent.netcheck", "coder-1", "192.0.2.1", "--port", "80;id", "-i", static(tmp_path, "nc"))
    assert (code, err.strip()) == (2, "error: --port expects a whole number from 1 to 65535, got '80;id'")
    code, _, err = inv("agent.netcheck", "coder-1", "192.0.2.1", "--port", "", "-i", static(tmp_path, "nc"))
    assert (code, err.strip()) == (2, "error: --port expects a whole number from 1 to 65535, got ''")  # not 443


def test_fleet_validate_and_plan_refuse_more_agents_than_the_default_pools_hold(tmp_path: Path) -> None:
    agents = "    - {name: a, count: 64}\n    - {name: b, count: 64}\n    - {name: c, count: 22}\n"
    path = static(tmp_path, "big", agents)
    for task in ("fleet.validate", "fleet.plan"):
        code, _, err = inv(task, "-i", path)
        assert code == 2, (task, err)
        assert err.startswith("error: fleet 'big': the hosts' Docker address pools cannot hold the agents' networks: "
                              "150 needed on a host, at most 30 fit"), err  # fmt: skip
        assert "\n  host h1: 150 agent instances need 150 networks\n" in err
        assert "Set fleet.address_pools" in err and "- {base: 10.213.0.0/16, size: 24}" in err


def test_fleet_collect_refuses_a_destination_under_proc_before_any_host(tmp_path: Path) -> None:
    path = static(tmp_path, "col")
    code, _, err = inv("fleet.collect", "--into", "/proc/x", "-i", path)
    assert code == 2, err
    assert err.splitlines()[0] == ("error: --into /proc/x: /proc/x is under /proc, a filesystem of the kernel's: "
                                   "no git repository can be made there")  # fmt: skip
    code, _, err = inv("fleet.collect", "--into", str(tmp_path / "new.git"), "-i", path)  # control: a good one
    assert code == 3 and not (tmp_path / "new.git").exists()


def test_fleet_plan_shows_each_source_path_and_flags_one_outside(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    for step in (["init", "-q"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                                  "-m", "one"]):  # fmt: skip
        subprocess.run(["git", "-C", str(tmp_path / "repo"), *step], check=True, capture_output=True)
    (tmp_path / "key").symlink_to("/etc/passwd")  # readable by anyone, outside this dir and the home
    (tmp_path / "task.md").write_text("do it\n")
    agents = (f"    - name: coder\n      credentials: [{{name: TOKEN, from_file: {tmp_path / 'key'}}}]\n"
              "      work: {repo: repo, task_file: task.md}\n")  # fmt: skip
    code, out, err = inv("fleet.plan", "--json", "-i", static(tmp_path, "src", agents))
    assert code == 3, err  # the host is unreachable; the contract is resolved all the same
    agent = json.loads(out)["contract"]["agents"][0]
    assert agent["credentials"][0]["source_path"] == "/etc/passwd"
    assert agent["work"]["task"] == "file" and agent["work"]["task_path"] == os.path.realpath(tmp_path / "task.md")
    flagged = [r for r in agent["residual_risks"] if "is read from" in r]
    assert flagged == [f"credential TOKEN's from_file is read from /etc/passwd ({tmp_path / 'key'} resolves there), "
                       f"outside the inventory's directory and the operator's home ({os.path.realpath(tmp_path)}, "
                       f"{os.path.realpath(Path.home())}): the agent receives that file's content"]  # fmt: skip
