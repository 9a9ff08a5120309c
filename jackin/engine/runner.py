"""The engine child process: ``python -m jackin.engine.runner < request.json``.

This process belongs to pyinfra alone, so it applies gevent's monkey-patching
first, as pyinfra's own CLI does. The original stdout carries events only (one
JSON object a line); anything else that prints goes to stderr.
"""

from gevent import monkey  # isort: skip

monkey.patch_all()  # noqa: E402 - must run before anything imports socket/ssl/threading

import importlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from pyinfra.api import Config, Host, Inventory, State  # noqa: E402
from pyinfra.api.connect import connect_all, disconnect_all  # noqa: E402
from pyinfra.api.exceptions import PyinfraError  # noqa: E402
from pyinfra.api.operations import run_ops  # noqa: E402
from pyinfra.api.state import BaseStateCallback, StateOperationHostData, StateStage  # noqa: E402
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state  # noqa: E402

from jackin.engine import report  # noqa: E402
from jackin.engine import secrets as engine_secrets  # noqa: E402
from jackin.engine.connector import NO_SSH_CONFIG, TARGET_DATA, PinnedSSHConnector  # noqa: E402
from jackin.engine.protocol import EngineRequest, HostResult, PlannedChange  # noqa: E402

_out = None
_last_seen: dict[str, float] = {}


def emit(event: str, **fields: Any) -> None:
    """Write one event line to the parent."""
    assert _out is not None, "emit() is only available inside the engine process"
    if fields.get("host"):
        _last_seen[fields["host"]] = time.monotonic()
    _out.write(json.dumps({"event": event, "t": time.time(), **fields}, default=str) + "\n")
    _out.flush()


class _Events(BaseStateCallback):
    @staticmethod
    def host_connect(state: State, host: Host) -> None:
        emit("connected", host=host.name)

    @staticmethod
    def host_connect_error(state: State, host: Host, error: object) -> None:
        emit("connect_error", host=host.name, error=_one_line(error))

    @staticmethod
    def operation_host_start(state: State, host: Host, op_hash: str) -> None:
        emit("op_start", host=host.name, op=_op_name(state, op_hash))

    @staticmethod
    def operation_host_success(state: State, host: Host, op_hash: str, retry_count: int = 0) -> None:
        emit("op_ok", host=host.name, op=_op_name(state, op_hash))

    @staticmethod
    def operation_host_error(
        state: State, host: Host, op_hash: str, retry_count: int = 0, max_retries: int = 0
    ) -> None:
        emit("op_error", host=host.name, op=_op_name(state, op_hash))


def _op_name(state: State, op_hash: str) -> str:
    names = state.get_op_meta(op_hash).names
    return ", ".join(sorted(names)) or op_hash


def _one_line(error: object) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _inventory(request: EngineRequest) -> Inventory:
    """Each target as a pyinfra host: strict keys from the pinned known_hosts only, no
    ssh config (the inventory is the whole truth), jump hosts opened by our connector."""
    hosts = []
    for target in request.targets:
        timeout = request.connect_timeout
        data: dict[str, Any] = {
            "ssh_hostname": target.address,
            "ssh_port": target.port,
            "ssh_user": target.user,
            "ssh_config_file": NO_SSH_CONFIG,
            "ssh_known_hosts_file": str(target.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "ssh_forward_agent": False,
            "ssh_connect_retries": 0,
            "ssh_allow_agent": target.key_file is None,
            "ssh_look_for_keys": False,
            "ssh_paramiko_connect_kwargs": {"timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout},
            TARGET_DATA: target.model_dump(mode="json"),
            "jackin": request.data,
            "jackin_host": request.host_data.get(target.name, {}),
            "_timeout": request.command_timeout,
        }
        if target.key_file is not None:
            data["ssh_key"] = str(target.key_file.expanduser())
        hosts.append((target.name, data))
    inventory = Inventory((hosts, {}))
    for host in inventory:
        host.connector_cls = PinnedSSHConnector  # before State.init, which creates each host's connector
    return inventory


def _load_deploy(state: State, filename: str) -> None:
    """Run the deploy file once per connected host, each in its own greenlet, as pyinfra's CLI does
    (``ctx_host`` and ``ctx_config`` are greenlet-local): the hosts' fact reads (a deploy's state read
    is one round trip of real work on the host) overlap instead of queueing one host behind another."""
    code = compile(open(filename, encoding="utf-8").read(), filename, "exec")
    state.current_deploy_filename = filename

    def prepare(host: Host) -> None:
        try:
            with ctx_config.use(state.config.copy()), ctx_host.use(host):
                exec(code, {"__file__": filename, "__name__": "__jackin_deploy__"})
        except Exception as error:  # noqa: BLE001 - one host's failure must not stop the others
            emit("op_error", host=host.name, op="prepare", error=_one_line(error))
            _prepare_errors[host.name] = f"{type(error).__name__}: {_one_line(error)}"
            state.failed_hosts.add(host)
            state.active_hosts.discard(host)

    gevent.joinall([state.pool.spawn(prepare, host) for host in list(state.inventory.get_active_hosts())])


_prepare_errors: dict[str, str] = {}


def _results(
    state: State,
    request: EngineRequest,
    connect_errors: dict[str, str],
    facts: dict[str, dict[str, Any]],
    started: float,
) -> None:
    for host in state.inventory:
        ops = state.ops.get(host, {})
        changed = failed = 0
        error = connect_errors.get(host.name) or _prepare_errors.get(host.name)
        executing = not request.dry_run and host in state.activated_hosts and host.name not in _prepare_errors
        for op_hash, op_data in ops.items():
            meta = op_data.operation_meta
            if executing and not meta.is_complete():
                failed += 1  # the run stopped on this host before the op ran (connection lost, host down)
                if error is None:
                    error = f"{_op_name(state, op_hash)}: did not run (the host stopped answering?)"
            elif meta.is_complete():
                if meta.did_change():
                    changed += 1
                if meta.did_error():
                    failed += 1
                    if error is None:
                        lines = [line for line in meta.stderr_lines if line.strip()] or ["(no output)"]
                        error = f"{_op_name(state, op_hash)}: {lines[-1].strip()}"
        planned = _planned(state, host, ops) if request.dry_run else []
        if request.dry_run:
            changed = len(planned)  # what pyinfra predicted while preparing
        result = HostResult(
            host=host.name,
            connected=host in state.activated_hosts,
            ops=len(ops),
            changed=changed,
            failed=failed + (1 if host.name in _prepare_errors else 0),
            error=error,
            facts=facts.get(host.name, {}),
            elapsed=round(_last_seen.get(host.name, started) - started, 3),
            changes=planned,
        )
        emit("host_done", host=host.name, result=result.model_dump())


def _planned(state: State, host: Host, ops: dict[str, StateOperationHostData]) -> list[PlannedChange]:
    """Operations predicted to change the host, with the commands they would run."""
    planned = []
    for op_hash, op_data in ops.items():
        if not op_data.operation_meta._maybe_is_change:
            continue
        commands: list[str] = []
        try:
            with ctx_host.use(host):
                commands = [_command_text(c) for c in op_data.command_generator()]
        except Exception as error:  # noqa: BLE001 - a preview must not fail the run
            commands = [f"(commands not shown: {_one_line(error)})"]
        planned.append(PlannedChange(op=_op_name(state, op_hash), commands=commands))
    return planned


def _command_text(command: Any) -> str:
    get = getattr(command, "get_masked_value", None) or getattr(command, "get_raw_value", None)
    return get() if callable(get) else str(command)


def _state(request: EngineRequest, handler: _Events) -> State:
    """pyinfra's state for the request's targets, set as the current one, with ``handler`` for its callbacks."""
    inventory = _inventory(request)
    config = Config(PARALLEL=request.parallel, CONNECT_TIMEOUT=request.connect_timeout)
    state = State(check_for_changes=True)
    ctx_state.set(state)
    ctx_inventory.set(inventory)
    state.init(inventory, config)
    state.add_callback_handler(handler)
    return state


def main() -> int:
    global _out
    events_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, never into the event stream
    _out = os.fdopen(events_fd, "w", buffering=1)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    importlib.import_module("jackin.operations.ops")  # what every deploy imports: loaded before the request comes

    head, _, rest = sys.stdin.read().partition("\n")  # the request, then credential values (jackin.engine.secrets)
    if not head.strip():  # started ahead (jackin.engine.client.Engine) and not needed: nothing to do
        return 0
    request = EngineRequest.model_validate_json(head)
    engine_secrets.load(rest)
    del rest
    started = time.monotonic()
    emit("start", data={"hosts": [t.name for t in request.targets], "dry_run": request.dry_run})
    connect_errors: dict[str, str] = {}
    facts: dict[str, dict[str, Any]] = {}

    class Collect(_Events):
        @staticmethod
        def host_connect_error(state: State, host: Host, error: object) -> None:
            connect_errors[host.name] = _one_line(error)
            _Events.host_connect_error(state, host, error)

    def sink(host: str, data: dict[str, Any]) -> None:
        facts.setdefault(host, {}).update(data)
        emit("facts", host=host, data=data)

    report._sink = sink

    state = _state(request, Collect())
    failed_all = None
    try:
        state.set_stage(StateStage.Connect)
        connect_all(state)
        state.set_stage(StateStage.Prepare)
        _load_deploy(state, request.deploy)
        if not request.dry_run and state.active_hosts:
            state.set_stage(StateStage.Execute)
            run_ops(state, no_wait=True)  # each host runs its ops on its own: one slow or lost host holds up no other
    except PyinfraError as error:
        failed_all = _one_line(error)
    finally:
        _results(state, request, connect_errors, facts, started)
        try:
            state.current_stage = StateStage.Disconnect
            disconnect_all(state)
        except Exception:  # noqa: BLE001 - disconnect errors do not change results
            pass
    if failed_all and failed_all != "No hosts remaining!":
        emit("error", error=failed_all)
    emit("done", data={"elapsed": round(time.monotonic() - started, 3)})
    return 0


def entry() -> int:
    """``main``'s exit status, an engine bug reported as an event (the traceback on stderr) and 70."""
    try:
        return main()
    except Exception as error:  # noqa: BLE001 - report engine bugs as an event, with the traceback on stderr
        traceback.print_exc()
        if _out is not None:
            emit("error", error=f"engine crashed: {type(error).__name__}: {_one_line(error)}")
            emit("done")
        return 70


if __name__ == "__main__":
    sys.exit(entry())
