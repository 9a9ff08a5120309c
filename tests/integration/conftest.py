"""Integration fixtures: a real lab on the local Docker engine, reached over real SSH.

Each session uses its own lab name, and removes everything it made even when a
test fails; the teardown then asserts that nothing labelled is left.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from jackin.engine.client import COMMAND_ENV
from jackin.errors import LabError
from jackin.lab import Lab
from jackin.lab import docker as dk

from ..zygote import Zygote

ROOT = Path(__file__).resolve().parents[2]


def _engine_or_skip() -> None:
    try:
        dk.ensure_engine()
    except LabError as error:
        if os.environ.get("CI"):
            pytest.fail(f"integration tests need the Docker engine in CI: {error}; {error.hint}")
        pytest.skip(f"no Docker engine: {error}")


def new_lab_name(prefix: str = "t") -> str:
    return f"{prefix}{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def lab():
    """A 2-host lab shared by the session's read-only tests."""
    _engine_or_skip()
    lab = Lab(new_lab_name())
    try:
        lab.up(2)
        yield lab
    finally:
        forget(lab)
        lab.down()
        assert lab.leftovers() == {"containers": [], "volumes": [], "networks": [], "files": []}


@pytest.fixture
def fresh_lab():
    """A 1-host lab a test may break; removed afterwards whatever happens."""
    _engine_or_skip()
    lab = Lab(new_lab_name("x"))
    try:
        yield lab
    finally:
        forget(lab)
        lab.down()


_ZYGOTE = None if os.environ.get("JACKIN_TEST_INV") == "exec" else Zygote()
_ENGINES = None if os.environ.get("JACKIN_TEST_INV") == "exec" else Zygote("engine")


def pause(container: str, *, tries: int = 5) -> None:
    """``docker pause`` of a lab host's container (a hung server). Under load, runc's cgroup freeze can
    time out ("unable to freeze") and leave the container running: it is tried again, as the product's
    freezer does (``jackin.snapshots.freezer.PAUSE_TRIES``)."""
    for attempt in range(1, tries + 1):
        try:
            dk.docker("pause", container)
            return
        except LabError as error:
            if "unable to freeze" not in str(error) or attempt == tries:
                raise
            time.sleep(0.5)


def inv(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI (`inv ...`) from the repo root, as an operator would: a process of its own, forked
    from one that has loaded the CLI's libraries already, and its engine child forked from one that has
    loaded pyinfra (tests/zygote.py; ``JACKIN_TEST_INV=exec``: a new interpreter each time, for both)."""
    env = {**os.environ, "COLUMNS": "200"}
    if _ENGINES is not None:  # its engine children forked too, with pyinfra loaded (tests/forked_engine.py)
        env[COMMAND_ENV] = _ENGINES.engine_command()
    if _ZYGOTE is not None:
        done = _ZYGOTE.run(list(args), cwd=ROOT, env=env, timeout=600)
    else:
        done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                              env=env, timeout=600)  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"inv {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


class _Labs:
    """Brand-new 1-host labs booted one module ahead, in the background, and used labs removed in the
    background: each module still gets a lab nobody used before, but no longer waits for its boot or
    its removal. The session's end waits for every removal and asserts that nothing of them is left."""

    AHEAD_HOSTS = 1  # most modules use one host; the others boot their own

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lab")
        self._ahead: Future | None = None
        self._removals: list[tuple[Lab, Future]] = []
        self._shared: Lab | None = None
        self._baseline: dict[str, list[str]] = {}

    @staticmethod
    def _boot(lab: Lab, hosts: int) -> Lab:
        """``lab`` brought up (made on the calling thread: a Lab reads JACKIN_STATE_DIR when made, which a
        test may point elsewhere for a while), removed again when its boot fails."""
        try:
            lab.up(hosts)
        except BaseException:
            lab.down()
            raise
        return lab

    def take(self, prefix: str, hosts: int) -> Lab:
        lab = None
        if hosts == self.AHEAD_HOSTS and self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            with contextlib.suppress(Exception):  # its boot failed (and removed it): one is booted here instead
                lab = ahead.result()
        if lab is None:
            lab = self._boot(Lab(new_lab_name(prefix)), hosts)  # failing loudly
        if self._ahead is None:
            self._ahead = self._pool.submit(self._boot, Lab(new_lab_name("q")), self.AHEAD_HOSTS)
        return lab

    def take_shared(self) -> Lab:
        """The worker's warm 1-host lab: the first module that takes it pays the boot and the cold up
        (images, hardening); later ones find the host as a real one after an earlier fleet's down."""
        if self._shared is None:
            self._shared = self.take("w", 1)
            self._baseline = host_leftovers(self._shared)  # what the lab's own image has (its units)
        return self._shared

    def give_back(self, lab: Lab) -> None:
        forget(lab)
        self._removals.append((lab, self._pool.submit(lab.down)))

    def give_back_shared(self, lab: Lab) -> None:
        """After a module: the shared host must hold nothing of any fleet (its fleet's down left it clean),
        else it is replaced for the next module and the module fails with what was left."""
        left = {kind: new for kind, lines in host_leftovers(lab).items()
                if (new := sorted(set(lines) - set(self._baseline.get(kind, []))))}  # fmt: skip
        if left:
            self._shared = None
            self.give_back(lab)
            raise AssertionError(f"the module left this on the shared lab host {lab.name}: {left}")

    def settle(self) -> None:
        """Wait until no background work runs (the boot ahead done, every removal done)."""
        for future in [*(f for _, f in self._removals), *([self._ahead] if self._ahead else [])]:
            with contextlib.suppress(Exception):  # their failures are reported by close()
                future.result()

    def close(self) -> None:
        if self._shared is not None:
            self.give_back(self._shared)
            self._shared = None
        if self._ahead is not None:
            with contextlib.suppress(Exception):  # a failed boot removed its lab itself
                self.give_back(self._ahead.result())
        self._pool.shutdown(wait=True)
        for lab, removal in self._removals:
            removal.result()
            assert lab.leftovers() == {"containers": [], "volumes": [], "networks": [], "files": []}, lab.name


_labs: _Labs | None = None


def drain() -> None:
    """Wait for the labs removed in the background and remove the one booted ahead; fail if anything of
    them is left. Run at the session's end, and before a unit test on the same worker (they replace the
    docker CLI this background work uses)."""
    global _labs
    labs, _labs = _labs, None
    if labs is not None:
        labs.close()


def settle() -> None:
    """Wait for the labs booted and removed in the background, for a test that patches what they use."""
    if _labs is not None:
        _labs.settle()


@pytest.fixture(scope="session", autouse=True)
def _lab_pool():
    yield
    drain()


def module_lab(prefix: str, hosts: int = 1, *, shared: bool = False):
    """The body of a module-scoped lab fixture (``yield from module_lab("p", 1)``): a brand-new lab of its
    own (booted ahead while the previous module ran, when it has one host), removed afterwards whatever
    happens. ``shared``: the worker's warm 1-host lab instead, for a module that leaves its host as it found
    it (its fleets' downs); afterwards the host must hold nothing of any fleet (``host_leftovers``)."""
    global _labs
    _engine_or_skip()
    if _labs is None:
        _labs = _Labs()
    if shared:
        assert hosts == 1, "the shared lab has one host"
        lab = _labs.take_shared()
        yield lab
        _labs.give_back_shared(lab)
        return
    lab = _labs.take(prefix, hosts)
    try:
        yield lab
    finally:
        _labs.give_back(lab)


# What a fleet leaves on a host, read independently of the product's own clean check: any of it after
# every fleet's down fails the module that left it. Warm things stay (role images, Docker's hardened
# daemon.json): a real host keeps them between fleets too.
_LEFTOVERS = {
    "users": "getent passwd | cut -d: -f1 | grep '^jk-' || true",
    "containers": "docker ps -aq --filter label=jackin.fleet",
    "networks": "docker network ls -q --filter label=jackin.fleet",
    "tables": "nft list tables | grep jackin || true",
    "units": "systemctl list-units --all --plain --no-legend 'jackin*' | awk '{print $1}'",
    "unit files": "ls /etc/systemd/system | grep '^jackin' || true",
    "files": "find /srv/jackin /var/lib/jackin /etc/jackin /usr/local/lib/jackin /var/lib/jackin-gateway -mindepth 1 "
             "2>/dev/null | head -20",
    "mounts": "findmnt -rn -o TARGET | grep jackin || true",
}  # (not loop devices: the kernel's list holds every lab's and every other test's)


def host_leftovers(lab: Lab, host: int = 0) -> dict[str, list[str]]:
    """Per kind (``_LEFTOVERS``), the lines found of it on the host."""
    out = sh(lab, "; ".join(f"echo '@@{name}'; {command}" for name, command in _LEFTOVERS.items()), host=host).stdout
    found: dict[str, list[str]] = {}
    for part in out.split("@@")[1:]:
        name, _, text = part.partition("\n")
        if lines := [line for line in text.splitlines() if line.strip()]:
            found[name] = lines
    return found


# One open connection per lab host, reused by every ``sh`` call until it breaks (a reboot, a restarted
# sshd) or its lab goes down: a handshake and a lab lookup per call cost more than most commands.
_connections: dict[tuple[str, int], object] = {}


def _connection(lab: Lab, host: int):
    from jackin.transport.ssh import connect

    key = (str(lab.dir), host)
    conn = _connections.get(key)
    if conn is not None and conn.is_connected:
        return conn
    if conn is not None:
        conn.close()
    conn = _connections[key] = connect(lab.status().hosts[host].target())
    return conn


def forget(lab: Lab) -> None:
    """Close the lab's cached connections (its hosts are going away)."""
    for key in [k for k in _connections if k[0] == str(lab.dir)]:
        _connections.pop(key).close()


def sh(lab: Lab, command: str, *, host: int = 0, warn: bool = False, timeout: float | None = None):
    """``command`` as root on the lab's host number ``host``, over strict SSH (one cached connection per
    host: a connection found broken when the command starts is replaced, and the command sent once)."""
    import paramiko

    conn = _connection(lab, host)
    try:
        conn.client.get_transport().open_session(timeout=10).close()
    except (paramiko.SSHException, EOFError, OSError):  # the host went away under the cached connection
        _connections.pop((str(lab.dir), host)).close()
        conn = _connection(lab, host)
    return conn.run(command, hide=True, warn=warn, timeout=timeout)


def at_a_terminal() -> None:
    """``preexec_fn`` for a CLI a test interrupts with SIGINT: the child starts with SIGINT at its default,
    as under an operator's terminal, even when the suite itself was started with SIGINT ignored (a
    background job of a shell without job control ignores it, and every child inherits that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
