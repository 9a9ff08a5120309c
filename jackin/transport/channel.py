"""A command's output read off its SSH channel as it comes: the one loop over a paramiko channel's
stdout, stderr and exit status (snapshot sessions and restores, collected work, followed logs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from paramiko import Channel

POLL = 0.05  # seconds between looks at a channel with nothing to read
CHUNK = 65536


def pump(channel: Channel, *, out: Callable[[bytes], object], err: Callable[[bytes], object],
         until: Callable[[], bool] | None = None, stop: threading.Event | None = None,
         deadline: float | None = None, poll: float = POLL) -> Literal["ended", "until", "stopped"]:  # fmt: skip
    """Hand the channel's stdout to ``out`` and its stderr to ``err`` as they come, until the command
    ended and everything was read ("ended"; its status is then ready), ``until()`` holds ("until"), or
    ``stop`` was set ("stopped"). A channel closed under us with no status is an EOFError, and past
    ``deadline`` (monotonic) a TimeoutError; ``out`` and ``err`` may raise to end the read."""
    while stop is None or not stop.is_set():
        if until is not None and until():
            return "until"
        idle = True
        if channel.recv_ready():
            out(channel.recv(CHUNK))
            idle = False
        if channel.recv_stderr_ready():
            err(channel.recv_stderr(CHUNK))
            idle = False
        if not idle:
            continue
        if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
            return "ended"
        if channel.closed:  # closed under us (a Ctrl-C closed the connection): no status will come
            raise EOFError("the SSH channel was closed")
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("no end within the time allowed")
        if stop is not None:
            stop.wait(poll)
        else:
            time.sleep(poll)
    return "stopped"
