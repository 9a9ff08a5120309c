"""agent.answer's checks (jackin/agents/answer.py): which host it answers on, what it refuses before anything
is written, and the command it runs (the text never in it). No host."""

from __future__ import annotations

import io
import os

import pytest

from jackin.facts import agent_files
from jackin.agents.state import AgentFacts, AgentState
from jackin.agents.answer import (
    MAX_ANSWER,
    NotBlocked,
    _user,
    check_instance,
    check_text,
    choose,
    decoded,
    read_text,
)
from jackin.errors import ConnectError, SpecError
from jackin.spec import Inventory


def st(state: str, message: str = "") -> AgentState:
    return AgentState(state=state, message=message, question="Q?" if state == "blocked" else None)


def test_the_one_host_where_it_is_blocked_is_chosen() -> None:
    assert choose("coder-1", {"h1": st("working"), "h2": st("blocked"), "h3": ConnectError("down")}) == "h2"


@pytest.mark.parametrize("state", ["working", "done", "failed", "idle", "stuck", "unknown"])
def test_not_blocked_is_refused_naming_its_state(state: str) -> None:
    with pytest.raises(NotBlocked) as caught:
        choose("coder-1", {"h1": st(state, "busy")})
    assert caught.value.exit_code == 1
    assert caught.value.message == f"coder-1 is not blocked, nothing written: h1: {state} (busy)"


def test_not_blocked_names_the_hosts_not_read() -> None:
    with pytest.raises(NotBlocked, match=r"h1: working \(not read: h2\)"):
        choose("coder-1", {"h1": st("working"), "h2": ConnectError("down")})


def test_blocked_on_two_hosts_needs_host() -> None:
    with pytest.raises(SpecError, match="blocked on 2 hosts \\(h1, h2\\): name one with --host"):
        choose("coder-1", {"h1": st("blocked"), "h2": st("blocked")})


def test_no_host_read_raises_its_error() -> None:
    with pytest.raises(ConnectError, match="down"):
        choose("coder-1", {"h1": ConnectError("down")})


def test_text_gets_a_final_newline_and_is_capped() -> None:
    assert check_text("use postgres") == b"use postgres\n"
    assert check_text("two\nlines\n") == b"two\nlines\n"
    assert len(check_text("é" * ((MAX_ANSWER - 1) // 2))) <= MAX_ANSWER
    with pytest.raises(SpecError, match=f"at most {MAX_ANSWER} are sent"):
        check_text("x" * MAX_ANSWER)
    with pytest.raises(SpecError, match="the answer is empty"):
        check_text(" \n")


@pytest.mark.parametrize("data, where", [
    (b"\xff", "byte 0xff at byte offset 0 (invalid start byte)"),
    ("café ".encode() + b"\xe9t\xe9", "byte 0xe9 at byte offset 6 (invalid continuation byte)"),
    ("ok ✓".encode()[:-1], "byte 0xe2 at byte offset 3 (unexpected end of data)"),
])  # fmt: skip
def test_stdin_that_is_not_utf8_is_refused_naming_the_byte_and_its_offset(data: bytes, where: str) -> None:
    with pytest.raises(SpecError) as caught:
        read_text(io.BytesIO(data))
    assert caught.value.message == f"stdin is not UTF-8 text: {where}; nothing was sent"
    assert caught.value.exit_code == 2


def test_stdin_is_read_as_bytes_and_capped() -> None:
    assert read_text(io.BytesIO("use postgres ✓\n".encode())) == "use postgres ✓\n"
    stream = io.BytesIO(b"x" * (MAX_ANSWER * 4))
    with pytest.raises(SpecError, match=f"stdin holds more than {MAX_ANSWER} bytes"):
        read_text(stream)
    assert stream.tell() == MAX_ANSWER + 1  # read no further than the cap


def test_an_argument_whose_bytes_are_not_utf8_is_refused_too() -> None:
    argument = os.fsdecode(b"use p\xffstgres")  # how the interpreter keeps argv bytes that do not decode
    with pytest.raises(SpecError, match=r"^the answer is not UTF-8 text: byte 0xff at byte offset 5 "):
        decoded(os.fsencode(argument), what="the answer")
    assert decoded(os.fsencode("use postgres ✓"), what="the answer") == "use postgres ✓"


def test_the_instance_must_be_one_of_the_fleets() -> None:
    spec = Inventory.model_validate({"fleet": {"name": "f", "agents": [{"name": "coder", "count": 2}]}})
    check_instance(spec, "coder-2")
    with pytest.raises(SpecError, match="no agent instance 'coder' in fleet 'f'") as caught:
        check_instance(spec, "coder")
    assert caught.value.hint == "expected one of: coder-1, coder-2"


@pytest.mark.parametrize("user, expected", [("60000:60000", "60000:60000"), ("60001", "60001:60001")])
def test_the_containers_user_is_used(user: str, expected: str) -> None:
    assert _user(AgentFacts(container="running", user=user, now=0), "h1") == expected


@pytest.mark.parametrize("user", [None, "0:0", "root", "60000:0", "999:999", "60000:x"])
def test_a_root_or_system_user_is_refused(user: str | None) -> None:
    with pytest.raises(Exception, match="not an agent's uid:gid: nothing written"):
        _user(AgentFacts(container="running", user=user, now=0), "h1")


def test_deliver_sends_the_text_on_stdin_never_in_the_command(monkeypatch) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from jackin.agents import answer

    calls = []

    class Conn:
        def run(self, command, **kwargs):
            calls.append((command, kwargs["in_stream"].read()))
            return SimpleNamespace(exited=0, stderr="")

    @contextmanager
    def connect(target):
        yield Conn()

    monkeypatch.setattr(answer, "connect", connect)
    answer.deliver(SimpleNamespace(name="h1"), "/srv/jackin/f/coder-1/workspace", "60000:60001", b"secret plan\n")
    [(command, stdin)] = calls
    assert stdin == "secret plan\n" and "secret" not in command
    # written on the host as the agent, never blocking (tests/unit/test_agent_files.py runs the writer)
    assert command == agent_files.write_command(60000, 60001, "/srv/jackin/f/coder-1/workspace", ".jackin", "answer",
                                                cap=MAX_ANSWER)  # fmt: skip
    assert command.endswith(" 60000 60001 /srv/jackin/f/coder-1/workspace .jackin answer 16384 20")


def test_a_failed_delivery_is_that_hosts_error(monkeypatch) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from jackin.agents import answer
    from jackin.errors import RemoteCommandError

    STDERR = "cannot rename .jackin/answer.0123456789ab.tmp to .jackin/answer: Is a directory\n"

    @contextmanager
    def connect(target):
        yield SimpleNamespace(run=lambda *a, **k: SimpleNamespace(exited=1, stderr=STDERR))

    monkeypatch.setattr(answer, "connect", connect)
    with pytest.raises(RemoteCommandError, match="answer not delivered \\(exit 1\\): cannot rename .* Is a directory"):
        answer.deliver(SimpleNamespace(name="h1"), "/w", "60000:60000", b"x\n")
