"""The engine's pyinfra inventory: strict host keys, the pinned known_hosts file,
key, port and the ``jackin`` data for each target.

``jackin.engine.runner`` applies gevent's monkey-patching on import, so it is
never imported in the pytest process: a child process builds the inventory
and prints the host data as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jackin.engine import EngineRequest, run
from jackin.transport.ssh import SshTarget

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
from jackin.engine.protocol import EngineRequest
from jackin.engine.runner import _inventory
from pyinfra.api.exceptions import PyinfraError

out = {}
for name, text in json.loads(sys.stdin.read()).items():
    try:
        inventory = _inventory(EngineRequest.model_validate_json(text))
        out[name] = {"hosts": {h.name: {**h.data.dict(), "connector": h.connector_cls.__name__} for h in inventory}}
    except PyinfraError as error:
        out[name] = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(out, default=str))
"""

# What pyinfra's SSH client would connect to for each host, as its connect() resolves it:
# the connector's paramiko arguments, then the ssh config pass (HostName, Port, User,
# IdentityFile, ProxyJump, ForwardAgent). With ``control``, pyinfra's default config path.
_RESOLVE = """
import json, sys
from pyinfra.api import Config, State
from pyinfra.connectors.sshuserclient.client import SSHClient
from jackin.engine.protocol import EngineRequest
from jackin.engine.runner import _inventory

request = EngineRequest.model_validate_json(sys.stdin.read())
inventory = _inventory(request)
State(inventory, Config(CONNECT_TIMEOUT=request.connect_timeout))
out = {}
for host in inventory:
    kwargs = host.connector.make_paramiko_kwargs()
    hostname = kwargs.pop("hostname")
    private = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("_pyinfra_")}
    config_file = None if sys.argv[1] == "control" else private["_pyinfra_ssh_config_file"]
    try:
        resolved, cfg, forward, policy, *_ = SSHClient().parse_config(
            hostname, kwargs, ssh_config_file=config_file,
            strict_host_key_checking=private["_pyinfra_ssh_strict_host_key_checking"])
    except OSError as error:
        out[host.name] = {"error": type(error).__name__}
        continue
    out[host.name] = {"hostname": resolved, "port": cfg["port"], "username": cfg.get("username"),
                      "key_filename": cfg.get("key_filename"), "sock": "sock" in cfg,
                      "forward_agent": forward or bool(private["_pyinfra_ssh_forward_agent"]),
                      "policy": type(policy).__name__}
print(json.dumps(out))
"""


def target(name: str, address: str, **fields: Any) -> SshTarget:
    return SshTarget(name=name, address=address, known_hosts=Path("/state/fleets/demo/known_hosts"), **fields)


REQUESTS = {
    "two": EngineRequest(
        deploy="deploys/fleet.py",
        targets=[
            target("web-1", "127.0.0.1", port=40001, key_file=Path("/state/labs/demo/id_ed25519")),
            target("web-2", "10.0.0.2", user="admin"),
        ],
        data={"fleet": "demo", "agents": [{"name": "coder"}]},
        connect_timeout=7,
    ),
    "home_key": EngineRequest(deploy="d.py", targets=[target("a", "10.0.0.3", key_file=Path("~/.ssh/id_ed25519"))]),
    "jump": EngineRequest(
        deploy="d.py", targets=[target("a", "10.0.0.4", jump=target("bastion", "10.0.0.254"))]
    ),
}


@pytest.fixture(scope="module")
def inventories() -> dict[str, Any]:
    """Every request's inventory, built in one child process."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps({name: r.model_dump_json() for name, r in REQUESTS.items()}),
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_runner_is_not_imported_here() -> None:
    assert "jackin.engine.runner" not in sys.modules


def test_host_data(inventories: dict[str, Any]) -> None:
    hosts = inventories["two"]["hosts"]
    assert list(hosts) == ["web-1", "web-2"]
    web1, web2 = hosts["web-1"], hosts["web-2"]
    for data in (web1, web2):
        assert data["ssh_strict_host_key_checking"] == "yes"
        assert data["ssh_known_hosts_file"] == "/state/fleets/demo/known_hosts"
        assert data["ssh_connect_retries"] == 0
        assert data["ssh_look_for_keys"] is False
        assert data["ssh_paramiko_connect_kwargs"] == {"timeout": 7, "banner_timeout": 7, "auth_timeout": 7}
        assert data["jackin"] == {"fleet": "demo", "agents": [{"name": "coder"}]}
    assert (web1["ssh_hostname"], web1["ssh_port"], web1["ssh_user"]) == ("127.0.0.1", 40001, "root")
    assert web1["ssh_key"] == "/state/labs/demo/id_ed25519"
    assert web1["ssh_allow_agent"] is False
    assert (web2["ssh_hostname"], web2["ssh_port"], web2["ssh_user"]) == ("10.0.0.2", 22, "admin")
    assert "ssh_key" not in web2
    assert web2["ssh_allow_agent"] is True


def test_key_path_is_expanded(inventories: dict[str, Any]) -> None:
    key = inventories["home_key"]["hosts"]["a"]["ssh_key"]
    assert key == str(Path("~/.ssh/id_ed25519").expanduser())
    assert not key.startswith("~")


def test_every_host_uses_the_pinned_connector_and_no_ssh_config(inventories: dict[str, Any]) -> None:
    for request in ("two", "home_key", "jump"):
        for data in inventories[request]["hosts"].values():
            assert data["connector"] == "PinnedSSHConnector"
            assert data["ssh_config_file"] == os.devnull
            assert data["ssh_forward_agent"] is False


def test_jump_host_travels_with_its_target(inventories: dict[str, Any]) -> None:
    data = inventories["jump"]["hosts"]["a"]
    assert (data["ssh_hostname"], data["ssh_port"]) == ("10.0.0.4", 22)
    target = SshTarget.model_validate(data["jackin_ssh_target"])
    assert target == REQUESTS["jump"].targets[0]
    assert target.jump is not None and (target.jump.name, target.jump.address) == ("bastion", "10.0.0.254")


# --- the operator's ~/.ssh/config changes nothing ------------------------------------


@pytest.fixture(scope="module")
def operator_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HOME whose ~/.ssh/config redirects 10.0.0.7 and sends 10.0.0.8 through a jump host
    on a closed loopback port, if anything reads it."""
    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    (home / ".ssh" / "config").write_text(
        "Host 10.0.0.7\n  HostName 10.9.9.9\n  Port 2222\n  User mallory\n"
        f"  IdentityFile {home}/.ssh/id_mallory\n  ForwardAgent yes\n  StrictHostKeyChecking no\n"
        f"Host 10.0.0.8\n  ProxyJump mallory@127.0.0.1:{closed}\n"
    )
    return home


def _resolve(home: Path, mode: str) -> dict[str, Any]:
    request = EngineRequest(deploy="d.py", targets=[target("a", "10.0.0.7"), target("b", "10.0.0.8", user="ops")])
    done = subprocess.run(
        [sys.executable, "-c", _RESOLVE, mode], input=request.model_dump_json(),
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_operator_ssh_config_changes_no_connection(operator_home: Path) -> None:
    resolved = _resolve(operator_home, "engine")
    plain = {"key_filename": None, "sock": False, "forward_agent": False, "policy": "StrictPolicy", "port": 22}
    assert resolved == {
        "a": {"hostname": "10.0.0.7", "username": "root", **plain},
        "b": {"hostname": "10.0.0.8", "username": "ops", **plain},
    }


def test_operator_ssh_config_would_apply_to_pyinfra_defaults(operator_home: Path) -> None:
    """Control: pyinfra's default config path does read that HOME's config."""
    resolved = _resolve(operator_home, "control")
    assert resolved["a"] == {
        "hostname": "10.9.9.9", "port": 2222, "username": "mallory",
        "key_filename": [f"{operator_home}/.ssh/id_mallory"], "sock": False, "forward_agent": True,
        "policy": "StrictPolicy",
    }  # fmt: skip
    assert resolved["b"] == {"error": "NoValidConnectionsError"}  # it tried the ProxyJump hop


def test_engine_reports_an_unreachable_jump_host_for_its_target(tmp_path: Path) -> None:
    """The connector opens the jump host itself: its failure is the target's connect error, naming the hop."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    bastion = SshTarget(name="bastion", address="127.0.0.1", port=closed, known_hosts=known_hosts)
    deploy = tmp_path / "noop.py"
    deploy.write_text("")
    request = EngineRequest(deploy=str(deploy), connect_timeout=2,
                            targets=[SshTarget(name="a", address="10.0.0.4", known_hosts=known_hosts, jump=bastion)])
    (host,) = run(request, timeout=60).hosts
    assert not host.connected
    assert host.error is not None
    assert host.error.startswith(f"through jump host bastion: cannot reach root@127.0.0.1:{closed}: ")
