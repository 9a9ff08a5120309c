"""The suite's CLI runs forked from a zygote (tests/zygote.py) give what a new interpreter gives.

The same argv, run both ways, prints the same bytes and exits with the same status; the zygote
hands each run its own environment and working directory, kills a run past its timeout, reports a
run ended by a signal as subprocess does, and never loads gevent or pyinfra.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jackin.engine import client
from jackin.engine.protocol import EngineRequest
from jackin.lifecycle.runs import deploys_dir
from tests.zygote import ROOT, Zygote

REQUEST = EngineRequest(deploy=str(deploys_dir() / "fleet.py"), targets=[])

CASES = [
    ["--list"],
    ["role.list"],  # a wide table: as wide as the run's COLUMNS says, not the zygote's
    ["fleet.validate", "-i", "inventory/lab.yaml"],
    ["fleet.validate", "-i", "tests/fixtures/bad/01-unknown-key.yaml"],
    ["fleet.validate", "-i", "/nonexistent/inventory.yaml"],
    ["fleet.validate"],
    ["no.such-task"],
]


@pytest.fixture(scope="module")
def zygote():
    """A zygote started with another terminal width than its runs get (as the suite's is)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "77"
    try:
        made = Zygote()
        made.run(["--list"], cwd=ROOT, env=dict(os.environ), timeout=60)  # started now, with COLUMNS=77
    finally:
        if saved is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = saved
    yield made
    made.stop()


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", **extra}


@pytest.mark.parametrize(("argv", "columns"), [(argv, "200") for argv in CASES] + [(["role.list"], None)],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else f"COLUMNS={v}")  # fmt: skip
def test_a_forked_run_prints_and_exits_as_a_new_interpreter_does(zygote, argv, columns) -> None:
    environment = {k: v for k, v in env(COLUMNS=columns or "").items() if k != "COLUMNS" or columns}
    fresh = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True,
                           env=environment, timeout=60)  # fmt: skip
    forked = zygote.run(argv, cwd=ROOT, env=environment, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.stdout or fresh.stderr  # positive control: the case says something


def test_each_run_gets_its_own_environment_and_directory(zygote, tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = zygote.run(["fleet.status", "-i", str(ROOT / "inventory/lab.yaml"), "--json"], cwd=ROOT,
                      env=env(JACKIN_STATE_DIR=str(state)), timeout=60)  # fmt: skip
    assert state.is_dir(), done.stdout + done.stderr  # the ledger went where this run's environment said
    elsewhere = zygote.run(["--list"], cwd=tmp_path, env=env(), timeout=60)
    assert elsewhere.returncode == 1 and "Can't find any collection" in elsewhere.stderr  # no tasks.py here


TASKS = """import os, signal, subprocess, sys, time
from invoke import task

@task
def hang(c):
    time.sleep(60)

@task
def die(c):
    os.kill(os.getpid(), signal.SIGTERM)

@task
def late(c):  # a background process keeps stdout open after the task ends: its output is waited for
    print("early", flush=True)
    subprocess.Popen(["sh", "-c", "sleep 1; echo late"])

@task
def keys(c):  # per-process secrets drawn at import: each run its own
    from jackin.operations import credentials, files
    print(files._KEY.hex(), credentials._KEY.hex())
"""


def test_output_a_background_process_writes_after_the_run_is_kept_as_subprocess_keeps_it(zygote, tmp_path) -> None:
    (tmp_path / "tasks.py").write_text(TASKS)
    fresh = subprocess.run([sys.executable, "-m", "invoke", "late"], cwd=tmp_path, capture_output=True, text=True,
                           env=env(), timeout=60)  # fmt: skip
    forked = zygote.run(["late"], cwd=tmp_path, env=env(), timeout=60)
    assert forked.stdout == fresh.stdout == "early\nlate\n"


def test_keys_drawn_at_import_differ_from_run_to_run(zygote, tmp_path) -> None:
    (tmp_path / "tasks.py").write_text(TASKS)
    first, second = (zygote.run(["keys"], cwd=tmp_path, env=env(), timeout=60).stdout.split() for _ in range(2))
    assert len(first) == len(second) == 2 and first[0] != second[0] and first[1] != second[1]


def test_a_run_past_its_timeout_is_killed_and_a_signal_is_a_negative_status(zygote, tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(TASKS)
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(["hang"], cwd=tmp_path, env=env(), timeout=1)
    assert zygote.run(["die"], cwd=tmp_path, env=env(), timeout=30).returncode == -15
    assert zygote.run(["--list"], cwd=ROOT, env=env(), timeout=30).returncode == 0  # it serves on


def test_a_client_killed_before_it_reads_its_runs_pid_takes_the_run_with_it(zygote, tmp_path: Path) -> None:
    """A client gone with the waiter's "pid" line unread: the waiter's read gets ECONNRESET, not an end of
    file, and once left the run behind (an engine holding its client's pipes open, reparented to init)."""
    (tmp_path / "tasks.py").write_text(TASKS)
    out_r, out_w = os.pipe()
    with open(os.devnull, "rb") as stdin, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(zygote.path)
        message = json.dumps({"argv": ["hang"], "cwd": str(tmp_path), "env": env()}).encode() + b"\n"
        socket.send_fds(conn, [message], [stdin.fileno(), out_w, out_w])
        os.close(out_w)
        select.select([conn], [], [], 30)  # the "pid" line has come; it is never read
    started = time.monotonic()
    ready, _, _ = select.select([out_r], [], [], 30)  # the run's end closes its copy of the pipe
    assert ready and os.read(out_r, 1) == b"" and time.monotonic() - started < 30
    os.close(out_r)


def test_the_zygote_never_loads_gevent_or_pyinfra() -> None:
    probe = subprocess.run([sys.executable, "-c", "import sys; from tests import zygote; zygote._preload('inv'); "
                            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'pyinfra')))"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stdout + probe.stderr


def test_the_zygote_ends_when_the_test_process_that_started_it_dies() -> None:
    starter = ("import os, sys; from tests.zygote import ROOT, Zygote; z = Zygote(); "
               "z.run(['--list'], cwd=ROOT, env=dict(os.environ), timeout=60); print(z._proc.pid, flush=True); "
               "os._exit(0)")  # fmt: skip  # killed as by SIGKILL: no atexit, no stop()
    done = subprocess.run([sys.executable, "-c", starter], cwd=ROOT, capture_output=True, text=True, timeout=120)
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, f"the zygote {pid} outlived its test process"
        time.sleep(0.1)


# --- the engine zygote: engine children forked with pyinfra loaded --------------------------------


@pytest.fixture(scope="module")
def engines():
    made = Zygote("engine")
    yield made
    made.stop()


def forked_engine(engines: Zygote, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(client.COMMAND_ENV, engines.engine_command())


def test_the_engine_command_is_this_interpreter_unless_the_environment_names_one(monkeypatch) -> None:
    monkeypatch.delenv(client.COMMAND_ENV, raising=False)
    assert client.command() == [sys.executable, "-m", "jackin.engine.runner"]
    monkeypatch.setenv(client.COMMAND_ENV, "/opt/py -I 'a b.py' sock")
    assert client.command() == ["/opt/py", "-I", "a b.py", "sock"]


def test_a_forked_engine_runs_a_request_as_a_new_one_does(engines, monkeypatch) -> None:
    runs = []
    for forked in (False, True):
        if forked:
            forked_engine(engines, monkeypatch)
        events: list[str] = []
        result = client.run(REQUEST, lambda e, into=events: into.append(e.event))
        runs.append((events, result.hosts, result.error))
    assert runs[0] == runs[1] == (["start", "done"], [], None)


def test_a_forked_engine_that_crashes_reports_it_as_a_new_one_does(engines, monkeypatch) -> None:
    def crash() -> tuple[int, str]:
        done = subprocess.run(client.command(), input="not a request\n", capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout.splitlines()[0].split('"error": ')[1]

    fresh = crash()
    forked_engine(engines, monkeypatch)
    assert crash() == fresh and fresh[0] == 70


def test_an_unused_forked_engine_is_ended_and_a_killed_stand_in_takes_its_engine_with_it(engines, monkeypatch) -> None:
    forked_engine(engines, monkeypatch)
    with client.started(True) as engine:
        assert engine is not None
    assert engine.proc.returncode is not None  # ended, with nothing run
    stand_in = subprocess.Popen(client.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert stand_in.stdout is not None
    before = engine_children(engines)
    deadline = time.monotonic() + 10
    while len(engine_children(engines)) <= len(before) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the zygote has forked its waiter and its engine
    assert len(engine_children(engines)) > len(before)
    stand_in.kill()  # as the client's watchdog does
    stand_in.wait()
    assert stand_in.stdout.read() == b""  # the engine's copy of stdout is closed: it is gone
    while len(engine_children(engines)) > len(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_children(engines) == before


def engine_children(engines: Zygote) -> set[int]:
    """The pids below the engine zygote (its waiters and their engines)."""
    assert engines._proc is not None
    found, todo = set(), [engines._proc.pid]
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found.add(int(child))
                todo.append(int(child))
    return found


def test_the_engine_zygote_loads_pyinfra_but_not_the_cli() -> None:
    probe = subprocess.run([sys.executable, "-c", "import sys; from tests import zygote; zygote._preload('engine'); "
                            "print(sorted({m.split('.')[0] for m in sys.modules} & {'gevent', 'pyinfra', 'tasks'}), "
                            "[m for m in sys.modules if m.startswith('jackin.cli')])"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert probe.returncode == 0 and probe.stdout.strip() == "['gevent', 'pyinfra'] []", probe.stdout + probe.stderr
