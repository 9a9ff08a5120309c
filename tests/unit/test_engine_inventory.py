"""The engine's pyinfra inventory: strict host keys, the pinned known_hosts file,
key, port and the ``jackin`` data for each target.

``jackin.engine.runner`` applies gevent's monkey-patching on import, so it is
never imported in the pytest process: a child process builds the inventory
and prints the host data as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jackin.engine import EngineRequest
from jackin.ssh import SshTarget

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
        out[name] = {"hosts": {h.name: h.data.dict() for h in inventory}}
    except PyinfraError as error:
        out[name] = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(out, default=str))
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
        assert data["ssh_paramiko_connect_kwargs"] == {"timeout": 7, "banner_timeout": 7}
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


def test_jump_hosts_are_refused(inventories: dict[str, Any]) -> None:
    assert inventories["jump"] == {"error": "PyinfraError: a: jump hosts are not supported by the engine yet"}
