"""Operator tools without a host: the trailing ``-- CMD`` as Invoke leaves it, the exact docker commands
(argv quoted, as the agent's uid), which host and container an agent name resolves to, and the refusals
(unknown agent or host, no command, no terminal) with their exit codes; and ``logs --follow``'s command,
run by a local sh with a fake docker, ending when the channel's input ends."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jackin.agents import tools as agent_tools
from jackin.errors import EXIT_SPEC, JackinError, SpecError
from jackin.plan.placement import Placement
from jackin.spec import parse_inventory
from jackin.transport.ssh import SshTarget

ROOT = Path(__file__).resolve().parents[2]
SPEC = parse_inventory("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      count: 2\n", "f.yaml")
H1 = SshTarget(name="h1", address="127.0.0.1", port=2201, known_hosts=Path("/dev/null"))
H2 = SshTarget(name="h2", address="127.0.0.1", port=2202, known_hosts=Path("/dev/null"))
UIDS = {"coder-1": 60000, "coder-2": 60001}
EACH = Placement(hosts={"h1": ["coder-1", "coder-2"], "h2": ["coder-1", "coder-2"]})  # placement: each, 2 hosts


def ref(host: str | None = None, targets=(H1,), placed: Placement = EACH) -> agent_tools.AgentRef:
    return agent_tools.resolve(SPEC, "coder-2", host=host, uids=UIDS, targets=list(targets), placed=placed)


def test_remainder_is_everything_after_the_first_double_dash_verbatim() -> None:
    argv = ["inv", "agent.exec", "coder-1", "--", "sh", "-c", "echo 'a b'; exit 3", "--", "x"]
    assert agent_tools.remainder(argv) == ["sh", "-c", "echo 'a b'; exit 3", "--", "x"]
    assert agent_tools.remainder(["inv", "agent.exec", "coder-1"]) == []
    with pytest.raises(SpecError, match="needs a command after --"):
        agent_tools.command_of(["inv", "agent.exec", "coder-1", "--"])


def test_resolve_names_the_container_uid_and_host() -> None:
    found = ref()
    assert (found.container, found.user, found.target.name) == ("jk-demo--coder-2", "60001:60001", "h1")
    assert ref("h2", targets=(H1, H2)).target.name == "h2"


def test_resolve_refusals() -> None:
    with pytest.raises(SpecError, match="no agent 'coder' in fleet 'demo': expected an instance name, one of: "
                                        "coder-1, coder-2"):  # fmt: skip
        agent_tools.resolve(SPEC, "coder", uids=UIDS, targets=[H1])
    with pytest.raises(SpecError, match="give --host, one of: h1, h2"):
        ref(targets=(H1, H2))
    with pytest.raises(SpecError, match="does not run on host 'h3'"):
        ref("h3", targets=(H1, H2))
    with pytest.raises(JackinError, match="is not up"):
        agent_tools.resolve(SPEC, "coder-1", uids={}, targets=[H1], placed=EACH)


def test_resolve_finds_a_spread_instance_on_its_one_host_without_host() -> None:
    """placement spread: the ledger's host for it, no --host needed; another host is refused; stranded: move it."""
    spread = Placement(hosts={"h1": ["coder-1"], "h2": ["coder-2"]})
    assert ref(targets=(H1, H2), placed=spread).target.name == "h2"
    with pytest.raises(SpecError, match="coder-2 does not run on host 'h1'.*it runs on h2"):
        ref("h1", targets=(H1, H2), placed=spread)
    gone = Placement(hosts={"h1": ["coder-1"], "h2": []}, stranded={"coder-2": "h9"})
    with pytest.raises(JackinError, match="coder-2 is on h9, which left the inventory"):
        ref(targets=(H1, H2), placed=gone)


def test_the_exact_commands() -> None:
    check = ("docker inspect --format ok jk-demo--coder-2 >/dev/null 2>&1 || { echo 'jackin: no container "
             "jk-demo--coder-2 on this host (is the fleet up?)' >&2; exit 125; }; ")  # fmt: skip
    assert agent_tools.exec_command(ref(), ["sh", "-c", "echo 'a b'; id -u"]) == (
        check + "exec docker exec --user 60001:60001 jk-demo--coder-2 sh -c 'echo '\"'\"'a b'\"'\"'; id -u'")
    assert agent_tools.logs_command(ref(), tail=5) == check + "exec docker logs --tail 5 jk-demo--coder-2"
    assert agent_tools.logs_command(ref(), follow=True, tail=5) == (
        check + "exec 3<&0; docker logs --follow --tail 5 jk-demo--coder-2 </dev/null 3<&- & logs=$!; "
        "{ cat <&3; kill $logs; } >/dev/null 2>&1 & exec 3<&-; wait $logs")
    assert agent_tools.shell_command(ref()) == (
        check + "exec docker exec -it --user 60001:60001 jk-demo--coder-2 /bin/sh -c "
        "'if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l'")


def test_shell_refuses_without_a_terminal() -> None:
    with pytest.raises(SpecError, match="agent.shell needs a terminal") as error:
        agent_tools.run_shell(ref(), stdin=io.StringIO(), stdout=io.StringIO())
    assert error.value.exit_code == EXIT_SPEC


def test_attach_runs_the_roles_attach_through_jackin_attach_and_refuses_without_a_terminal_or_one() -> None:
    runtime = parse_inventory("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n      role: claude-code\n"
                              "      credentials: [{name: ANTHROPIC_API_KEY, from_env: K}]\n", "f.yaml")  # fmt: skip
    argv = agent_tools.attach_argv(runtime, "coder-1")
    assert argv[:2] == ["sh", "-c"] and 'claude --resume "$JACKIN_SESSION"' in argv[2]
    assert agent_tools.attach_command(ref(), ["claude", "--resume", "a b"]) == (
        "docker inspect --format ok jk-demo--coder-2 >/dev/null 2>&1 || { echo 'jackin: no container "
        "jk-demo--coder-2 on this host (is the fleet up?)' >&2; exit 125; }; "
        "exec docker exec -it --user 60001:60001 jk-demo--coder-2 jackin-attach claude --resume 'a b'")  # fmt: skip
    with pytest.raises(SpecError, match="role 'demo' has no session to take over") as error:  # the demo: no runtime
        agent_tools.attach_argv(SPEC, "coder-1")
    assert error.value.exit_code == EXIT_SPEC
    with pytest.raises(SpecError, match="agent.attach needs a terminal") as error:
        agent_tools.run_attach(ref(), argv, stdin=io.StringIO(), stdout=io.StringIO())
    assert error.value.exit_code == EXIT_SPEC


def _inv(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=60)  # fmt: skip


def test_invoke_accepts_the_trailing_command_and_refuses_before_any_host(tmp_path: Path) -> None:
    spec = tmp_path / "f.yaml"
    spec.write_text("fleet:\n  name: demo\n  provider: lab\n  agents:\n    - name: coder\n")
    unknown = _inv("agent.exec", "nobody-1", "-i", str(spec), "--", "ls", "-la", cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stderr
    assert "no agent 'nobody-1' in fleet 'demo': expected an instance name, one of: coder-1" in unknown.stderr
    bare = _inv("agent.exec", "coder-1", "-i", str(spec), cwd=tmp_path)
    assert bare.returncode == 2 and "needs a command after --" in bare.stderr
    shell = _inv("agent.logs", "nobody-1", "-i", str(spec), cwd=tmp_path)
    assert shell.returncode == 2 and "no agent 'nobody-1'" in shell.stderr


class _Tty(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_agent_output_on_a_terminal_shows_control_bytes_as_replacement_characters() -> None:
    from jackin.agents.tools import _for

    data = "a\tb\r\nc \x1b]0;title\x07 \x1b[2J d\u009b e 中\n".encode()
    assert _for(io.BytesIO())(data) == data  # a pipe or a file gets the bytes unchanged
    shown = _for(_Tty())(data).decode()
    assert "\x1b" not in shown and "\x07" not in shown and "\u009b" not in shown
    assert shown.startswith("a\tb\r\nc ") and shown.endswith(" e 中\n") and "\ufffd" in shown


def _follow(tmp_path: Path, logs: str) -> subprocess.Popen:
    """``agent.logs --follow``'s command in a local sh, with a fake ``docker`` whose ``logs`` runs ``logs``
    (its pid in ``pid``): the channel's input is the process's stdin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\n[ "$1" = inspect ] && exit 0\necho $$ > {tmp_path}/pid\n{logs}\n')
    docker.chmod(0o755)
    return subprocess.Popen(["sh", "-c", agent_tools.logs_command(ref(), follow=True)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})  # fmt: skip


def _read_until(stream, text: bytes, seconds: float = 5) -> bytes:
    seen, deadline = b"", time.monotonic() + seconds
    while text not in seen and time.monotonic() < deadline:
        if select.select([stream], [], [], 0.1)[0]:
            seen += os.read(stream.fileno(), 4096)
    return seen


def test_the_follower_ends_when_the_channels_input_ends(tmp_path: Path) -> None:
    """Closing the channel ends ``docker logs --follow`` on the host at once, though it prints nothing."""
    follow = _follow(tmp_path, "echo following; exec sleep 60")
    try:
        assert b"following" in _read_until(follow.stdout, b"following")
        assert follow.poll() is None
        follow.stdin.close()  # what the host's sshd does when our channel closes or the connection drops
        follow.wait(timeout=2)
        with pytest.raises(ProcessLookupError):  # the follower (the fake docker) is gone, not orphaned
            os.kill(int((tmp_path / "pid").read_text()), 0)
    finally:
        follow.kill()
        follow.wait()


def test_a_follower_that_ends_by_itself_gives_its_exit_status(tmp_path: Path) -> None:
    follow = _follow(tmp_path, "echo last; exit 3")
    try:
        assert follow.wait(timeout=5) == 3  # the channel's input still open: the command ends all the same
        assert follow.stdout.read() == b"last\n"
    finally:
        follow.kill()
        follow.wait()
