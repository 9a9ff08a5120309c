"""One function run on many hosts at once: every host's result or error comes back as data
(``HostResults``, like Fabric's ``GroupResult``), so one bad host never hides the others.

The work runs on daemon threads and the main thread only waits, in ``jackin.transport.interrupts.run``:
a Ctrl-C is raised there at once, never inside paramiko or a thread pool's shutdown. ``interrupted``
(closing the hosts' connections, ending their ssh clients) runs once, before the Ctrl-C or a bug of
the work is raised on, and no host is started after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from jackin.errors import ConnectError, JackinError
from jackin.transport import interrupts
from jackin.transport.target import SshTarget

T = TypeVar("T")
R = TypeVar("R")

WORKERS = 32  # at most this many threads for ``each``


@dataclass(frozen=True)
class HostResults(Generic[T]):
    """Per host, in the order the hosts were given: what its work returned, or its error."""

    hosts: tuple[str, ...]
    succeeded: dict[str, T] = field(default_factory=dict)
    failed: dict[str, JackinError] = field(default_factory=dict)

    def by_host(self) -> dict[str, T | JackinError]:
        """Every host's value or error, in the hosts' order."""
        return {h: self.failed[h] if h in self.failed else self.succeeded[h] for h in self.hosts}


def unreached(error: BaseException, host: str) -> ConnectError:
    """An SSH fault (a timeout, a reset connection...) as that host's ConnectError, in one line."""
    return ConnectError(f"{type(error).__name__}: {' '.join(str(error).split())[:200]}", host=host)


class _Once:
    """``fn`` run once, by whichever thread comes first; the others wait until it has run."""

    def __init__(self, fn: Callable[[], None] | None) -> None:
        self.fn, self.done, self.lock = fn, False, threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            if not self.done:
                self.done = True
                if self.fn is not None:
                    self.fn()


def each_host(targets: Sequence[SshTarget], work: Callable[[SshTarget], T], *,
              faults: tuple[type[Exception], ...] = (), interrupted: Callable[[], None] | None = None,
              grace: float = 0.0, workers: int = WORKERS) -> HostResults[T]:  # fmt: skip
    """``work(target)`` on every target in parallel (it opens its own connection).

    A JackinError is that host's failure (its ``host`` filled in), and so is an exception of one of
    ``faults`` (as ``unreached``). Anything else is a bug: ``interrupted`` runs, no other host is
    started, and it is raised once the hosts in flight have ended. On a Ctrl-C, ``interrupted`` runs,
    the hosts in flight get up to ``grace`` seconds to end, and the KeyboardInterrupt is raised."""
    cut = _Once(interrupted)

    def one(target: SshTarget) -> tuple[bool, Any]:
        if cut.done:  # interrupted: start nothing more
            return False, ConnectError("interrupted before anything was done here", host=target.name)
        try:
            return True, work(target)
        except JackinError as error:
            error.host = error.host or target.name
            return False, error
        except faults as error:
            return False, unreached(error, target.name)
        except BaseException:
            cut()
            raise

    results = HostResults[T](hosts=tuple(t.name for t in targets))
    for target, (ok, value) in zip(targets, each(one, targets, workers=workers, interrupted=cut, grace=grace),
                                   strict=True):  # fmt: skip
        (results.succeeded if ok else results.failed)[target.name] = value
    return results


def each(fn: Callable[[T], R], items: Iterable[T], *, workers: int = WORKERS,
         interrupted: Callable[[], None] | None = None, grace: float = 0.0) -> list[R]:  # fmt: skip
    """``fn(item)`` for every item in parallel on daemon threads, the results in the items' order
    (``interrupts.run``: a Ctrl-C is raised here at once, after ``interrupted`` ran and the items had up
    to ``grace`` seconds to end; the first exception of ``fn`` is raised after all, after ``interrupted``)."""
    todo: Sequence[T] = list(items)
    if not todo:
        return []
    cut = _Once(interrupted)
    count = min(workers, len(todo))
    results: list[Any] = [None] * len(todo)
    errors: list[BaseException | None] = [None] * len(todo)

    def share(first: int) -> None:  # items first, first + count, ...
        for index in range(first, len(todo), count):
            try:
                results[index] = fn(todo[index])
            except BaseException as error:  # noqa: BLE001 - raised on the waiting thread
                errors[index] = error

    def run(stop: threading.Event) -> list[R]:
        threads = [threading.Thread(target=share, args=(k,), name=f"jackin-each-{k}", daemon=True)
                   for k in range(count)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(interrupts.TICK)
                if stop.is_set():  # a Ctrl-C: cut the items short while the main thread grants them ``grace``
                    cut()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        return results

    try:
        return interrupts.run(run, grace=grace, name="jackin-each")
    except BaseException:
        cut()
        raise
