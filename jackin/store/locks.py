"""Lock files on this machine: one run at a time where runs share something (a fleet, a lab, the
Docker engine's image of a role).

A lock is ``flock`` on a file kept under the private state dir (``filelock``'s native Unix lock:
released when the holder ends, however it ends). The file stays after release, and what its holder
noted in it is left for the next contender's message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from jackin.errors import BusyError


@contextmanager
def held(path: Path, *, busy: Callable[[str], BusyError] | None = None, note: str = "") -> Iterator[None]:
    """Hold the lock file ``path`` while inside.

    Without ``busy``, wait for another holder to let go. With it, do not wait: raise
    ``busy(holder)``, ``holder`` being what that holder noted (empty if nothing). ``note`` is
    written into the file once held (who holds it and why), for the contenders to show."""
    import filelock  # lazy: its import costs more than the ledger's, and most commands take no lock

    def noted(fd: int) -> None:
        if note:
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode(), 0)

    lock = filelock.FileLock(path, blocking=busy is None, preserve_lock_file=True, on_acquired=noted)
    try:
        lock.acquire()
    except filelock.Timeout:
        assert busy is not None  # only a lock that does not wait times out
        raise busy(path.read_text(errors="replace").strip()) from None
    try:
        yield
    finally:
        lock.release()
