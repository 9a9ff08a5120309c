"""The suite's CLI runs, forked from a process that has already loaded the CLI's libraries.

The integration suite runs the real CLI about 700 times. Each run started a Python interpreter that
imported Invoke, Fabric, paramiko, pydantic, rich and jackin before doing anything: about 0.4 s of
CPU each, close to a fifth of all the CPU the suite spends on this 2-CPU machine. A zygote (as
Android starts its apps, and Chromium its renderers) imports those once; each CLI run is a fork of
it that then does what ``python -m invoke ARGS`` does: Invoke's ``program.run()`` with that argv,
which loads ``tasks.py`` afresh and runs the task. So each run is still its own process, with its
own argv, environment, working directory, stdin (/dev/null), stdout and stderr (files, read back
after), signals and exit status; only the imports are shared, and they are copy-on-write.

The engine child each CLI run starts (pyinfra and gevent, ``jackin.engine.runner``) costs the same
again: a second zygote, of kind ``engine``, has that module loaded (gevent's monkey-patching applied,
as in a fresh child), and each engine is a fork of it. The CLI run finds it through
``JACKIN_ENGINE_COMMAND`` (``jackin.engine.client.command``), which names ``tests/forked_engine.py``: a
bare interpreter that hands its stdin, stdout and stderr to this zygote and stands for the engine. The
engine zygote's own loop and its waiters make plain blocking calls (the standard library's functions,
from before the patching), so none of them enters gevent's hub; each engine re-initialises gevent's
loop after its fork, as gevent's own fork does.

What it leaves out, and where that is still tested the old way: a fresh interpreter's start
(``tests/unit/test_cli_imports.py`` runs ``inv`` as a new process and checks what a command
imports; ``tests/unit/test_engine_started.py`` starts engines as new processes), and the preloading
itself (the CLI zygote loads nothing of ``gevent`` or ``pyinfra``; neither zygote loads ``jackin.cli``
or ``tasks.py``, which each run loads with its own environment and terminal). Set
``JACKIN_TEST_INV=exec`` to run every CLI call and engine as a new interpreter instead.

Protocol, over a Unix socket: the client sends one JSON line (argv, cwd, env) with its stdin,
stdout and stderr descriptors attached (SCM_RIGHTS). The zygote forks a waiter, which forks the
run and reports ``pid N`` and then ``exit N`` (the run's status as subprocess reports it: -N for a
signal); a client whose connection closes first (killed) has its run killed. The zygote holds no
thread and no connection when it forks, and ends when the test process that started it does (its
stdin, a pipe from that process, reads end-of-file).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Loaded once in the zygote: the CLI's libraries, never gevent or pyinfra (the engine child's), and not
# jackin.cli, whose modules read the environment and the terminal as they load (jackin.cli.render makes its
# consoles then, as wide as COLUMNS says): each run loads those itself, with its own environment. The
# library below jackin.cli never imports it (import-linter's contract), so nothing else loads it early.
PRELOAD = ["invoke", "invoke.main", "fabric", "paramiko", "pydantic", "rich.console", "rich.table", "yaml"]
NEVER = ("gevent", "pyinfra")
NOT_PRELOADED = ("jackin.cli", "tasks")
MESSAGE_CAP = 1 << 22


def _preload(kind: str) -> list[str]:
    """Import what a run of ``kind`` needs, once; the jackin modules skipped.

    ``inv``: PRELOAD and every jackin module whose import pulls in nothing of NEVER. ``engine``: the
    engine child's module (which applies gevent's monkey-patching first, as it does in a fresh child)
    and every jackin module but the CLI's."""
    if kind == "engine":
        importlib.import_module("jackin.engine.runner")
    else:
        for name in PRELOAD:
            importlib.import_module(name)
    skipped = []
    for source in sorted((ROOT / "jackin").rglob("*.py")):  # by path: pkgutil would import jackin.cli to walk it
        name = ".".join(source.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        text = source.read_text()
        cli = name.startswith(tuple(f"{n}." for n in NOT_PRELOADED)) or name in NOT_PRELOADED
        engine_only = any(f"import {n}" in text or f"from {n}" in text for n in NEVER) and kind != "engine"
        if cli or engine_only or name.endswith("__main__"):
            skipped.append(name)
            continue
        importlib.import_module(name)
    never = () if kind == "engine" else NEVER
    leaked = [m for m in sys.modules if m.split(".")[0] in never or m.startswith(NOT_PRELOADED)]
    assert not leaked, f"the {kind} zygote must not load {leaked}"
    return skipped


def _original(module: str, name: str):  # noqa: ANN202 - a function or a class, as the module has it
    """``module.name`` as the standard library has it: the engine zygote has gevent's monkey-patching
    applied, and its own loop (and each waiter) must make plain blocking calls, never enter gevent's hub
    (whose state a fork would share with the parent)."""
    if "gevent.monkey" in sys.modules:
        from gevent.monkey import get_original

        return get_original(module, name)
    return getattr(importlib.import_module(module), name)


def _invoke(argv: list[str], cwd: str) -> int:
    """What ``python -m invoke ARGV`` does in ``cwd``, up to its exit status."""
    import invoke.main

    sys.argv = [str(Path(invoke.main.__file__).with_name("__main__.py")), *argv]
    sys.path[0] = cwd  # as ``python -m`` sets it: the working directory
    try:
        invoke.main.program.run()
    except SystemExit as done:
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except KeyboardInterrupt:
        return 130
    return 0


def _engine() -> int:
    """What ``python -m jackin.engine.runner`` does, up to its exit status."""
    from jackin.engine import runner

    sys.argv = [runner.__file__]
    return runner.entry()


def _run(kind: str, request: dict, fds: list[int]) -> None:
    """In the forked run: become ``python -m invoke ARGV`` (``engine``: ``python -m jackin.engine.runner``)
    in ``cwd`` with ``env``; never returns."""
    code = 1
    try:
        if kind == "engine":
            import gevent

            gevent.reinit()  # as gevent's own fork does: the child's loop is its own
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        setsignal = _original("signal", "signal")
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            setsignal(sig, signal.SIG_DFL)
        setsignal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if kind == "engine":
            code = _engine()
        else:
            code = _invoke(request["argv"], request["cwd"])
        threading._shutdown()  # type: ignore[attr-defined] # as the interpreter's exit: wait for non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback on stderr, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream: nothing more to say
                pass
        os._exit(code)


def _waiter(kind: str, conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked waiter: fork the run, say its pid, wait for it, say its status; never returns.
    A client that goes away (its end of ``conn`` closed, or it was killed) takes its run with it."""
    fork, waitpid, wait_for = _original("os", "fork"), _original("os", "waitpid"), _original("select", "select")
    _original("signal", "signal")(signal.SIGCHLD, signal.SIG_DFL)
    pid = fork()
    if pid == 0:
        conn.close()
        _run(kind, request, fds)
    for fd in fds:
        os.close(fd)
    try:
        watched = [conn]
        try:
            conn.sendall(f"pid {pid}\n".encode())
        except OSError:  # the client is gone already
            watched = []
            os.kill(pid, signal.SIGKILL)
        ended = os.pidfd_open(pid)
        while ended not in wait_for([*watched, ended], [], [])[0]:
            try:
                gone = not conn.recv(1)  # the client sends nothing more: readable is its end
            except OSError:  # ECONNRESET: it was killed before it read its "pid" line
                gone = True
            if gone:
                watched = []
                os.kill(pid, signal.SIGKILL)
        _, status = waitpid(pid, 0)
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    except BaseException:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # never leave a run behind: its client can no longer end it
        raise
    finally:
        os._exit(0)


def serve(kind: str, path: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the runs' (they reset it)
    _preload(kind)
    setsignal, fork, wait_for = _original("signal", "signal"), _original("os", "fork"), _original("select", "select")
    gc.freeze()  # the preloaded objects stay out of the runs' collections: their pages stay shared
    plain_socket = _original("socket", "socket")
    server = plain_socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    setsignal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    print("ready", flush=True)
    while True:
        ready, _, _ = wait_for([server, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process that started it has gone (its pipe's end-of-file): so do we
            return
        fd, _ = server._accept()  # not accept(): under gevent's patching it would make one of gevent's sockets
        conn = plain_socket(fileno=fd)
        try:
            data, fds, _, _ = socket.recv_fds(conn, MESSAGE_CAP, 3)
            while not data.endswith(b"\n"):
                more = conn.recv(MESSAGE_CAP)
                if not more:
                    raise ConnectionError("the client went away")
                data += more
            request = json.loads(data)
            if len(fds) != 3:
                raise ValueError(f"expected 3 descriptors, got {len(fds)}")
        except (OSError, ValueError) as error:
            print(f"zygote: bad request: {error}", file=sys.stderr, flush=True)
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if fork() == 0:
            server.close()
            _waiter(kind, conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.close()


class Zygote:
    """The client side: one zygote per test process and ``kind`` (``inv``, ``engine``), started on first
    use, ended at exit."""

    def __init__(self, kind: str = "inv") -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._dir = ""
        self.path = ""

    def _start(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self._dir = self._dir or tempfile.mkdtemp(prefix="jackin-zygote-")
            self.path = os.path.join(self._dir, f"socket-{time.time_ns()}")
            log = open(os.path.join(self._dir, "log"), "ab")  # noqa: SIM115 - the zygote's own output
            self._proc = subprocess.Popen([sys.executable, __file__, self.kind, self.path], cwd=ROOT,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)  # fmt: skip
            assert self._proc.stdout is not None
            ready, _, _ = select.select([self._proc.stdout], [], [], 120)
            line = self._proc.stdout.readline() if ready else b""
            if line.strip() != b"ready":
                raise RuntimeError(f"the zygote did not start: {Path(self._dir, 'log').read_text()[-2000:]}")
            atexit.register(self.stop)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""

    def engine_command(self) -> str:
        """``JACKIN_ENGINE_COMMAND`` for an engine forked from this (an ``engine``) zygote: a small
        interpreter that hands it its stdin, stdout and stderr and stands for the run (tests/forked_engine.py)."""
        self._start()
        return shlex.join([sys.executable, "-I", "-S", str(ROOT / "tests" / "forked_engine.py"), self.path])

    def run(self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``python -m invoke *argv`` as subprocess.run(capture_output=True, text=True, timeout=...) returns it:
        stdout and stderr are pipes read to their end (a background process that keeps one open is waited
        for, and what it writes is kept), then decoded strictly with universal newlines."""
        self._start()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        pid = code = None
        with open(os.devnull, "rb") as stdin, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(self.path)
                message = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode() + b"\n"
                socket.send_fds(conn, [message], [stdin.fileno(), out_w, err_w])
            finally:
                os.close(out_w)
                os.close(err_w)
            deadline, status, open_fds = time.monotonic() + timeout, b"", {out_r, err_r, conn.fileno()}
            try:
                while open_fds:
                    left = deadline - time.monotonic()
                    ready, _, _ = select.select(list(open_fds), [], [], max(0.0, left))
                    if not ready:
                        if pid:
                            os.kill(pid, signal.SIGKILL)
                        raise subprocess.TimeoutExpired(["inv", *argv], timeout, output=b"".join(chunks[out_r]),
                                                        stderr=b"".join(chunks[err_r]))  # fmt: skip
                    for fd in ready:
                        data = os.read(fd, 65536)
                        if not data:
                            open_fds.discard(fd)
                        elif fd == conn.fileno():
                            status += data
                        else:
                            chunks[fd].append(data)
                    for line in status.decode().split("\n")[:-1]:  # whole lines only
                        kind, _, value = line.partition(" ")
                        pid = int(value) if kind == "pid" else pid
                        code = int(value) if kind == "exit" else code
            finally:
                os.close(out_r)
                os.close(err_r)
        if code is None:
            raise RuntimeError(f"the zygote's waiter went away running inv {' '.join(argv)}")
        return subprocess.CompletedProcess(["inv", *argv], code, _text(b"".join(chunks[out_r])),
                                           _text(b"".join(chunks[err_r])))  # fmt: skip


def _text(data: bytes) -> str:
    """As subprocess's ``text=True`` reads it: decoded (strictly: bad bytes raise), universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    sys.path[0] = str(ROOT)  # run as a script, its own directory came first: this checkout's jackin, not an installed one
    serve(*sys.argv[1:]) if len(sys.argv) == 3 else serve("inv", sys.argv[1])
