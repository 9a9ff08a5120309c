"""The suite's CLI runs, forked from a process that has already loaded the CLI's libraries.

The integration suite runs the real CLI about 700 times. Each run started a Python interpreter that
imported Invoke, Fabric, paramiko, pydantic, rich and jackin before doing anything: about 0.4 s of
CPU each, close to a fifth of all the CPU the suite spends on this 2-CPU machine. A zygote (as
Android starts its apps, and Chromium its renderers) imports those once; each CLI run is a fork of
it that then does what ``python -m invoke ARGS`` does: Invoke's ``program.run()`` with that argv,
which loads ``tasks.py`` afresh and runs the task. So each run is still its own process, with its
own argv, environment, working directory, stdin (/dev/null), stdout and stderr (files, read back
after), signals and exit status; only the imports are shared, and they are copy-on-write.

What it leaves out, and where that is still tested the old way: a fresh interpreter's start
(``tests/unit/test_cli_imports.py`` runs ``inv`` as a new process and checks what a command
imports), and the preloading itself (nothing of ``gevent`` or ``pyinfra`` is preloaded: those
stay in the engine child, which every run still starts as its own interpreter; nor ``jackin.cli``
and ``tasks.py``, which each run loads with its own environment and terminal). Set
``JACKIN_TEST_INV=exec`` to run every CLI call as a new interpreter instead.

Protocol, over a Unix socket: the client sends one JSON line (argv, cwd, env) with its stdin,
stdout and stderr descriptors attached (SCM_RIGHTS). The zygote forks a waiter, which forks the
run and reports ``pid N`` and then ``exit N`` (the run's status as subprocess reports it: -N for a
signal). The zygote holds no thread and no connection when it forks, and ends when the test process that
started it does (its stdin, a pipe from that process, reads end-of-file).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import select
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


def _preload() -> list[str]:
    """Import PRELOAD and every jackin module whose import pulls in nothing of NEVER; the ones skipped."""
    for name in PRELOAD:
        importlib.import_module(name)
    skipped = []
    for source in sorted((ROOT / "jackin").rglob("*.py")):  # by path: pkgutil would import jackin.cli to walk it
        name = ".".join(source.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        text = source.read_text()
        cli = name.startswith(tuple(f"{n}." for n in NOT_PRELOADED)) or name in NOT_PRELOADED
        if cli or any(f"import {n}" in text or f"from {n}" in text for n in NEVER) or name.endswith("__main__"):
            skipped.append(name)
            continue
        importlib.import_module(name)
    leaked = [m for m in sys.modules if m.split(".")[0] in NEVER or m.startswith(NOT_PRELOADED)]
    assert not leaked, f"the zygote must not load {leaked}"
    return skipped


def _run(request: dict, fds: list[int]) -> None:
    """In the forked run: become ``python -m invoke ARGV`` in ``cwd`` with ``env``; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import invoke.main

        sys.argv = [str(Path(invoke.main.__file__).with_name("__main__.py")), *request["argv"]]
        sys.path[0] = request["cwd"]  # as ``python -m`` sets it: the working directory
        try:
            invoke.main.program.run()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            if not isinstance(done.code, int | None):
                print(done.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
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


def _waiter(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked waiter: fork the run, say its pid, wait for it, say its status; never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _run(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"pid {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def serve(path: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the runs' (they reset it)
    _preload()
    gc.freeze()  # the preloaded objects stay out of the runs' collections: their pages stay shared
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([server, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process that started it has gone (its pipe's end-of-file): so do we
            return
        conn, _ = server.accept()
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
        if os.fork() == 0:
            server.close()
            _waiter(conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.close()


class Zygote:
    """The client side: one zygote per test process, started on first use, ended at exit."""

    def __init__(self) -> None:
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
            self._proc = subprocess.Popen([sys.executable, __file__, self.path], cwd=ROOT, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=log)  # fmt: skip
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
    serve(sys.argv[1])
