"""Imperative reads from many hosts at once over strict SSH (Fabric), with bounded timeouts.

A host that does not answer is a result (its error), never a hang and never an
exception that hides the other hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from jackin.errors import ConnectError
from jackin.ssh import SshTarget, connect

T = TypeVar("T")


def gather(
    targets: Sequence[SshTarget],
    command: str,
    parse: Callable[[str], T],
    *,
    timeout: float = 10,
) -> dict[str, T | ConnectError]:
    """Run ``command`` on every target in parallel; per host the parsed output or the error."""

    def one(target: SshTarget) -> T | ConnectError:
        try:
            with connect(target, timeout=min(timeout, 10)) as conn:
                result = conn.run(command, hide=True, warn=True, timeout=timeout)
        except ConnectError as error:
            return error
        except Exception as error:  # noqa: BLE001 - timeouts and SSH faults become that host's error
            return ConnectError(f"{type(error).__name__}: {' '.join(str(error).split())[:200]}", host=target.name)
        if result.exited != 0:
            return ConnectError(f"command failed (exit {result.exited}): {result.stderr.strip()[:200]}", host=target.name)
        return parse(result.stdout)

    if not targets:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(targets))) as pool:
        return dict(zip([t.name for t in targets], pool.map(one, targets)))
