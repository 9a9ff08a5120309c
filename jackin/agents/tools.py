"""Operator tools: a command, the logs, or a shell in one agent's container, over strict SSH.

Each goes through ``jackin.transport.ssh.connect`` (host keys pinned, no agent forwarding) to the host the
agent runs on, and runs ``docker`` there as root, the way an operator logged in would:

    agent.exec AGENT -- CMD...   docker exec --user UID:GID <container> CMD...  (argv quoted, exit status passed through)
    agent.logs AGENT             docker logs [--follow] [--tail N] <container>  (Ctrl-C ends --follow cleanly)
    agent.shell AGENT            docker exec -it --user UID:GID <container> bash -l, else sh -l  (needs a terminal)
    agent.attach AGENT           docker exec -it --user UID:GID <container> jackin-attach <the role's attach argv>
                                 (the runtime's own session resumed on the operator's terminal; needs one)

The command runs as the agent's own uid and gid (the container's ``--user``), never as root in the
container. AGENT is an instance name (``coder-1``); an unknown one is a usage error naming the
known ones. The ledger says which host it is on (jackin/plan/placement.py); an agent with ``placement: each``
runs on each of its hosts: with more than one, ``--host`` says which.
"""

from __future__ import annotations

import re
import shlex
import sys
import termios
import threading
import tty
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from jackin import hostpaths
from jackin.errors import EXIT_OK, JackinError, SpecError
from jackin.lab import providers
from jackin.plan import fleet as planning
from jackin.plan import placement
from jackin.plan.make import record
from jackin.spec import Inventory
from jackin.store.ledger import Ledger
from jackin.transport import channel as reader
from jackin.transport import interrupts
from jackin.transport.target import SshTarget

SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"
MISSING = 125  # the exit status our check gives when the container is not there (docker's own for its errors)


class AgentRef(BaseModel):
    """Where one agent instance runs: its host, container and uid (gid: the same number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    instance: str
    container: str
    uid: int
    target: SshTarget

    @property
    def user(self) -> str:
        return f"{self.uid}:{self.uid}"


def remainder(argv: Sequence[str]) -> list[str]:
    """What follows the first ``--`` on the command line, verbatim (Invoke joins its own copy into one
    string, which loses the quoting of ``-- sh -c 'a b'``)."""
    argv = list(argv)
    return argv[argv.index("--") + 1 :] if "--" in argv else []


def command_of(argv: Sequence[str]) -> list[str]:
    """agent.exec's command: the remainder after ``--``; none is a usage error (exit 2)."""
    found = remainder(argv)
    if not found:
        raise SpecError("agent.exec needs a command after --: inv agent.exec coder-1 -- ls -la")
    return found


def resolve(inventory: Inventory, agent: str, *, host: str | None = None, uids: dict[str, int] | None = None,
            targets: list[SshTarget] | None = None, placed: placement.Placement | None = None) -> AgentRef:  # fmt: skip
    """The instance ``agent`` of the fleet on ``host`` (needed when it runs on several: ``placement: each``).
    ``uids``, ``targets`` and ``placed`` default to the ledger's and the provider's (never bringing a lab up)."""
    fleet = inventory.fleet
    known = [i for _, i in planning.instances(fleet)]
    if agent not in known:
        raise SpecError(f"no agent {agent!r} in fleet {fleet.name!r}: expected an instance name, one of: "
                        f"{', '.join(known)}")  # fmt: skip
    with Ledger() as ledger:
        where = placed or placement.recorded(inventory, record(inventory, ledger))
        if uids is None:
            uids = ledger.uids(fleet.name)
    if targets is None:
        targets = providers.targets(inventory, bring_up=False)
    if agent in where.stranded:
        raise JackinError(f"{agent} is on {where.stranded[agent]}, which left the inventory of fleet {fleet.name!r}",
                          hint=f"move it to one of the fleet's hosts: inv agent.move {agent} --to HOST")  # fmt: skip
    there = [t for t in targets if agent in where.hosts.get(t.name, [])]
    if agent not in uids or not there:
        raise JackinError(f"fleet {fleet.name!r} is not up (no uid or host recorded for {agent})",
                          hint="bring it up first: inv fleet.up")  # fmt: skip
    names = [t.name for t in there]
    if host is None and len(there) > 1:
        raise SpecError(f"agent {agent} runs on each of its hosts: give --host, one of: {', '.join(names)}")
    chosen = there[0] if host is None else next((t for t in there if t.name == host), None)
    if chosen is None:
        raise SpecError(f"{agent} does not run on host {host!r} in fleet {fleet.name!r}: it runs on {', '.join(names)}")
    return AgentRef(instance=agent, container=hostpaths.user_name(fleet.name, agent), uid=uids[agent], target=chosen)


def _present(container: str) -> str:
    """Shell that exits ``MISSING`` with a clear message when ``container`` does not exist."""
    c = shlex.quote(container)
    return (f"docker inspect --format ok {c} >/dev/null 2>&1 || {{ echo {shlex.quote(f'jackin: no container {container} on this host (is the fleet up?)')} >&2; "
            f"exit {MISSING}; }}")  # fmt: skip


def exec_command(ref: AgentRef, argv: Sequence[str]) -> str:
    """``docker exec`` of ``argv`` in the agent's container as the agent (argv quoted: one word stays one)."""
    if not argv:
        raise SpecError("agent.exec needs a command after --: inv agent.exec coder-1 -- ls -la")
    return (
        f"{_present(ref.container)}; exec docker exec --user {ref.user} {shlex.quote(ref.container)} {shlex.join(argv)}"
    )


def logs_command(ref: AgentRef, *, follow: bool = False, tail: int | None = None) -> str:
    """``docker logs``; with ``follow``, one that ends when the channel's input does.

    ``docker logs --follow`` reads no input and notices a closed channel only at its next write: for
    a quiet container, never. So it runs in the background while ``cat`` waits for the end of the
    input (our channel closed, or the connection lost) and then ends it; its exit status is the
    command's."""
    options = (["--follow"] if follow else []) + (["--tail", str(tail)] if tail is not None else [])
    logs = f"docker logs {shlex.join(options + [ref.container])}"
    if not follow:
        return f"{_present(ref.container)}; exec {logs}"
    return (f"{_present(ref.container)}; exec 3<&0; {logs} </dev/null 3<&- & logs=$!; "
            f"{{ cat <&3; kill $logs; }} >/dev/null 2>&1 & exec 3<&-; wait $logs")  # fmt: skip


def shell_command(ref: AgentRef) -> str:
    return (f"{_present(ref.container)}; exec docker exec -it --user {ref.user} {shlex.quote(ref.container)} "
            f"/bin/sh -c {shlex.quote(SHELL)}")  # fmt: skip


def attach_argv(inventory: Inventory, agent: str) -> list[str]:
    """The role's ``attach`` argv of the instance ``agent`` (the runtime resuming its own session); a usage
    error (exit 2) when its role has none."""
    by_name = {a.name: a for a in inventory.fleet.agents}
    owner = next((by_name[name] for name, instance in planning.instances(inventory.fleet) if instance == agent), None)
    if owner is None:
        return []  # resolve() names the known instances
    from jackin.spec import roles  # the role file: only this command reads it

    role = roles.load(owner.role)
    if role.attach is None:
        raise SpecError(f"agent {agent}'s role {role.name!r} has no session to take over (its role file names no "
                        f"attach command); for a shell in its container use inv agent.shell {agent}")  # fmt: skip
    return list(role.attach)


def attach_command(ref: AgentRef, argv: Sequence[str]) -> str:
    """``docker exec -it`` of ``jackin-attach ARGV`` in the agent's container as the agent: it ends the headless
    run (if it still runs) and resumes the runtime's own session on this terminal (roles/common/jackin-attach)."""
    return (f"{_present(ref.container)}; exec docker exec -it --user {ref.user} {shlex.quote(ref.container)} "
            f"jackin-attach {shlex.join(argv)}")  # fmt: skip


def run_attach(ref: AgentRef, argv: Sequence[str], *, stdin: Any = None, stdout: Any = None) -> int:
    """The operator's session of the agent's runtime, on this terminal; refused without one on both ends.
    Its exit status is the runtime's."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    if not (stdin.isatty() and stdout.isatty()):
        raise SpecError(f"agent.attach needs a terminal (stdin and stdout are not both one): it resumes the "
                        f"runtime's session interactively; to follow the agent use inv agent.logs {ref.instance} "
                        "--follow")  # fmt: skip
    from jackin.transport.ssh import connect  # lazy: Fabric and paramiko load only for a command that opens SSH

    # The local terminal raw, not only Fabric's cbreak: cbreak keeps ICRNL, so Enter would reach the runtime's
    # TUI as a line feed (a new line in Claude Code's prompt, not a submit), and Ctrl-C would be this side's.
    # Raw only once connected: until then a Ctrl-C is this side's, and ends a connection that hangs.
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    with connect(ref.target) as conn:
        try:
            tty.setraw(fd)
            result = conn.run(attach_command(ref, argv), pty=True, warn=True, in_stream=stdin)
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    if result.exited == MISSING and "jackin: no container" in (result.stdout or ""):
        raise _missing(ref)
    return result.exited


def _missing(ref: AgentRef) -> JackinError:
    return JackinError(f"{ref.target.name}: no container {ref.container} (agent {ref.instance})",
                       hint="is the fleet up? inv fleet.status shows its agents", host=ref.target.name)  # fmt: skip


# What an agent prints is the agent's: on a terminal, control bytes (escape sequences that could
# retitle, clear or rewrite the operator's screen; C1 controls in UTF-8) are shown as U+FFFD. Tabs,
# newlines and carriage returns stay; output to a pipe or a file is copied unchanged.
_UNSAFE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]")


def _for(stream_: Any) -> Callable[[bytes], bytes]:
    try:
        tty = stream_.isatty()
    except (AttributeError, ValueError):
        tty = False
    return (lambda data: _UNSAFE.sub("\ufffd".encode(), data)) if tty else (lambda data: data)


def stream(ref: AgentRef, command: str, *, out: Any = None, err: Any = None) -> int:
    """Run ``command`` on the agent's host over one SSH channel, its stdout and stderr copied here as
    they come (bytes, unchanged); its exit status. The SSH work runs off the main thread
    (``jackin.transport.interrupts``): a Ctrl-C, at any moment from the connection on, is raised here within
    ``GRACE`` seconds, after the channel and connection were closed (the remote end sees its input
    end). Fabric's own runner would wait on a command with no terminal for ever."""
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    ended = interrupts.run(lambda stop: _copy(ref, command, out, err, stop), grace=interrupts.GRACE,
                           name=f"jackin-stream-{ref.instance}")  # fmt: skip
    assert ended is not None, "only a Ctrl-C stops the copy, and run raised it"
    code, tail = ended
    if code == MISSING and b"jackin: no container" in tail:
        raise _missing(ref)
    return code


def _copy(ref: AgentRef, command: str, out: Any, err: Any, stop: threading.Event) -> tuple[int, bytes] | None:
    """``stream``'s work: the exit status and the end of stderr, or None when ``stop`` was set first."""
    from jackin.transport.ssh import connect  # lazy: Fabric and paramiko load only for a command that opens SSH

    shown_out, shown_err = _for(out), _for(err)
    with connect(ref.target) as conn:
        if stop.is_set():
            return None
        channel = conn.client.get_transport().open_session()
        try:
            channel.exec_command(command)
            tail = b""

            def shown_stdout(data: bytes) -> None:
                out.write(shown_out(data))
                out.flush()

            def shown_stderr(data: bytes) -> None:
                nonlocal tail
                tail = (tail + data)[-4096:]
                err.write(shown_err(data))
                err.flush()

            if reader.pump(channel, out=shown_stdout, err=shown_stderr, stop=stop) == "stopped":
                return None
            return channel.recv_exit_status(), tail
        finally:
            channel.close()


def run_exec(ref: AgentRef, argv: Sequence[str], *, out: Any = None, err: Any = None) -> int:
    """The command's exit status, passed through (its output streamed as it comes)."""
    return stream(ref, exec_command(ref, argv), out=out, err=err)


def run_logs(ref: AgentRef, *, follow: bool = False, tail: int | None = None, out: Any = None, err: Any = None) -> int:
    """The container's logs; with ``follow``, until Ctrl-C, which ends it cleanly (exit 0)."""
    try:
        return stream(ref, logs_command(ref, follow=follow, tail=tail), out=out, err=err)
    except KeyboardInterrupt:
        return EXIT_OK


def run_shell(ref: AgentRef, *, stdin: Any = None, stdout: Any = None) -> int:
    """An interactive shell in the container as the agent; refused without a terminal on both ends."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    if not (stdin.isatty() and stdout.isatty()):
        raise SpecError(f"agent.shell needs a terminal (stdin and stdout are not both one); for one command "
                        f"use inv agent.exec {ref.instance} -- CMD")  # fmt: skip
    from jackin.transport.ssh import connect  # lazy: Fabric and paramiko load only for a command that opens SSH

    with connect(ref.target) as conn:  # Fabric's runner: a pty, the local terminal in raw mode, Ctrl-C sent on
        # (our connections read no stdin by default: the shell is the one place the terminal is forwarded)
        result = conn.run(shell_command(ref), pty=True, warn=True, in_stream=stdin)
    if result.exited == MISSING and "jackin: no container" in (result.stdout or ""):
        raise _missing(ref)
    return result.exited
