"""The state read's Docker part (``jackin.facts.state_read.DOCKER_READ``): run by the real perl against a fake
Docker daemon on a local unix socket, it makes the requests the docker CLI makes and prints what
the CLI's reads printed (the ``##docker`` ... ``##images`` sections, ``##live`` with bootstrap)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from jackin.facts import dockerapi
from jackin.facts.state import parse_state
from jackin.facts.state_read import DOCKER_READ, DOCKER_SOCKET, state_command

pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="no perl here")

CONTAINER_ID, OTHER_ID, NETWORK_ID, EARLIER_ID = "c0" * 32, "c1" * 32, "ee" * 32, "ef" * 32
CONTAINER = {"Id": CONTAINER_ID, "Name": "/jk-demo--coder-1", "RestartCount": 1,
             "State": {"Status": "running", "Running": True, "StartedAt": "2026-01-02T15:59:00Z", "Error": ""},
             "Config": {"Labels": {"jackin.fleet": "demo", "jackin.agent": "coder-1", "note": "a \"quoted\" \n value"}},
             "NetworkSettings": {"Networks": {"jk-demo--coder-1": {}}}}  # fmt: skip
NETWORK = {"Name": "jk-demo--coder-1", "Id": NETWORK_ID, "IPAM": {"Config": [{"Subnet": "172.20.0.0/16"}]},
           "Options": {"com.docker.network.bridge.name": "jk668ccdd6"}, "Labels": {"jackin.fleet": "demo"}}  # fmt: skip


class FakeDocker:
    """Answers HTTP/1.0 requests on a unix socket as dockerd does; records each request's path."""

    def __init__(self, path: Path, *, live: bool = True) -> None:
        self.path, self.live, self.requests = path, live, []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def answer(self, target: str) -> tuple[int, object]:
        url = urlsplit(target)
        path, query = url.path, parse_qs(url.query)
        if path == "/_ping":
            return 200, "OK"
        if path in ("/containers/json", "/networks"):
            if json.loads(query["filters"][0]) != {"label": {"jackin.fleet=demo": True}}:
                return 200, []  # another fleet's: none here
            if path == "/containers/json":  # a listed container gone before its inspect: skipped, as the CLI does
                return 200, [{"Id": CONTAINER_ID, "Labels": {"x": "\"Id\":\"" + "ab" * 32 + "\""}}, {"Id": OTHER_ID}]
            return 200, [{"Id": NETWORK_ID, "Name": "jk-demo--coder-1"}, {"Id": EARLIER_ID, "Name": "jk-demo--a"}]
        if path == f"/containers/{CONTAINER_ID}/json":
            return 200, CONTAINER
        if path == f"/networks/{NETWORK_ID}":
            return 200, NETWORK
        if path == f"/networks/{EARLIER_ID}":
            return 200, {**NETWORK, "Name": "jk-demo--a", "Id": EARLIER_ID}
        if path == "/images/jackin/role-demo:1/json":
            return 200, {"Id": "sha256:" + "1" * 64}
        if path == "/info":
            return 200, {"LiveRestoreEnabled": self.live, "Name": "host"}
        return 404, {"message": f"No such object: {unquote(path)}"}

    def stop(self) -> None:
        """Down: the socket file stays, connecting to it is refused."""
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed: the daemon is down
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    request += chunk
                target = request.split(b" ")[1].decode()
                self.requests.append(target)
                code, body = self.answer(target)
                data = (body if isinstance(body, str) else json.dumps(body) + "\n").encode()
                conn.sendall(f"HTTP/1.0 {code} X\r\nContent-Type: application/json\r\n\r\n".encode() + data)


@pytest.fixture
def docker(tmp_path: Path) -> Iterator[FakeDocker]:
    fake = FakeDocker(tmp_path / "docker.sock")
    yield fake
    if fake.server.fileno() != -1:
        fake.stop()


def read(docker: FakeDocker, fleet: str, live: int, *images: str) -> str:
    script = DOCKER_READ.replace(DOCKER_SOCKET, str(docker.path))
    done = subprocess.run(["perl", "-e", script, fleet, str(live), *images], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_docker_read_gives_what_the_cli_reads_gave(docker: FakeDocker) -> None:
    out = read(docker, "demo", 1, "jackin/role-demo:1", "python:3.12-slim")
    state = parse_state(["##docker", *out.split("\n"), "##daemon", "args="])
    assert state.docker is True
    assert list(state.containers) == ["jk-demo--coder-1"]  # the one that vanished is skipped
    coder = state.containers["jk-demo--coder-1"]
    assert (coder.running, coder.restarts, coder.instance, coder.networks) == (True, 1, "coder-1", ["jk-demo--coder-1"])
    assert coder.labels["note"] == "a \"quoted\" \n value"
    assert state.networks["jk-demo--coder-1"].subnets == ["172.20.0.0/16"]
    assert list(state.networks) == ["jk-demo--a", "jk-demo--coder-1"]  # by name, as docker network ls lists them
    assert state.images == ["jackin/role-demo:1"]  # the missing one is not listed
    assert state.daemon is not None and state.daemon.live_restore is True
    assert docker.requests[0] == "/_ping" and docker.requests[1].startswith("/containers/json?all=1&filters=")
    assert docker.requests[-1] == "/info"


def test_without_bootstrap_no_info_is_asked(docker: FakeDocker) -> None:
    out = read(docker, "demo", 0)
    assert "##live" not in out and "/info" not in docker.requests
    assert out.split("\n")[:2] == ["ok", "##containers"]


def test_live_restore_off_and_a_daemon_that_does_not_answer(tmp_path: Path, docker: FakeDocker) -> None:
    docker.live = False
    state = parse_state(["##docker", *read(docker, "demo", 1).split("\n"), "##daemon", "args="])
    assert state.daemon is not None and state.daemon.live_restore is False
    docker.stop()
    out = read(docker, "demo", 1, "jackin/role-demo:1")
    assert out == "##containers\n##networks\n##images\n##live\n\n"  # no "ok": docker is not up
    state = parse_state(["##docker", *out.split("\n"), "##daemon", "args="])
    assert (state.docker, state.containers, state.images, state.daemon.live_restore) == (False, {}, [], None)


def test_the_fleet_name_is_data_json_escaped_and_url_encoded(docker: FakeDocker) -> None:
    read(docker, 'x"y\\z $(touch /tmp/owned)', 0)
    lists = [r for r in docker.requests if r.startswith("/containers/json")]
    assert json.loads(parse_qs(urlsplit(lists[0]).query)["filters"][0]) == {
        "label": {'jackin.fleet=x"y\\z $(touch /tmp/owned)': True}}  # fmt: skip


def test_the_command_runs_perl_only_on_the_default_socket_and_falls_back_to_the_cli() -> None:
    command = state_command("demo", 60000, 60999, ["jackin/role-demo:1"], bootstrap=True)
    assert f"if ! {{ {dockerapi.USABLE}; }}; then" in command
    assert f"[ -S {DOCKER_SOCKET} ]" in dockerapi.USABLE and '"${DOCKER_HOST:-}${DOCKER_CONTEXT:-}${DOCKER_CONFIG:-}"' in dockerapi.USABLE
    assert "' demo 1 jackin/role-demo:1\n" in command  # the perl program's arguments: fleet, bootstrap, images
    assert "docker info --format '{{.LiveRestoreEnabled}}'" in command  # the fallback's
    assert "live=" not in command  # the daemon section's own docker info is gone
    assert "' demo 0 \n" in state_command("demo", 60000, 60999)


# --- the one systemctl show -------------------------------------------------------------------

SHOW = """MainPID=955
Id=docker.service
ActiveState=active
UnitFileState=enabled

Id=jackin-ttl-demo.timer
ActiveState=active
UnitFileState=enabled

Id=srv-jackin-demo.mount
ActiveState=active
UnitFileState=enabled
"""


def test_one_systemctl_show_gives_docker_the_timer_and_the_mount_and_dockerds_pid(tmp_path: Path) -> None:
    """Run for real with a stand-in systemctl: its blank lines are gone after the section split, each
    unit is found by its Id, and ``$dp`` is dockerd's main pid (the ``##daemon`` args come from it)."""
    (tmp_path / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" > {tmp_path}/args\ncat <<'X'\n{SHOW}X\n")
    (tmp_path / "systemctl").chmod(0o755)
    line = state_command("demo", 60000, 60999, bootstrap=True).splitlines()[0]
    done = subprocess.run(["sh", "-c", line + '; echo "##pid"; echo "$dp"'], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=10)  # fmt: skip
    assert (tmp_path / "args").read_text().split()[-3:] == ["docker.service", "jackin-ttl-demo.timer",
                                                           "srv-jackin-demo.mount"]  # fmt: skip
    assert done.stdout.endswith("##pid\n955\n")
    state = parse_state(["##fleet", "demo", *done.stdout.split("\n"), "##host", "docker_active=stale", "##ttl",
                         "now=5", "##cow"])  # fmt: skip
    assert (state.host["docker_active"], state.host["docker_enabled"]) == ("active", "enabled")
    assert (state.ttl.enabled, state.ttl.active, state.cow.enabled) == ("enabled", "active", True)


def test_units_systemctl_does_not_know_read_as_is_enabled_and_is_active_report_them() -> None:
    lines = ["##fleet", "demo", "##systemd", "MainPID=0", "Id=docker.service", "ActiveState=inactive",
             "UnitFileState=", "Id=jackin-ttl-demo.timer", "ActiveState=inactive", "UnitFileState=", "##ttl", "##cow"]
    state = parse_state(lines)
    assert (state.host["docker_active"], state.host["docker_enabled"]) == ("inactive", "")
    assert (state.ttl.enabled, state.ttl.active, state.cow.enabled) == ("", "inactive", False)
    empty = parse_state(["##fleet", "demo", "##systemd", "##ttl"])  # no systemctl on the host
    assert (empty.host["docker_active"], empty.ttl.enabled, empty.ttl.active) == ("", "", "")


@pytest.mark.parametrize(("setup", "usable"), [
    ("", True),
    ("export DOCKER_CONFIG=/elsewhere", False),
    ("export DOCKER_HOST=tcp://127.0.0.1:1", False),
    ("mkdir -p $HOME/.docker && echo '{\"auths\": {}}' > $HOME/.docker/config.json", True),
    ("mkdir -p $HOME/.docker && echo '{\"currentContext\": \"rootless\"}' > $HOME/.docker/config.json", False),
])  # fmt: skip
def test_perl_reads_only_the_engine_the_docker_cli_would_ask(tmp_path: Path, setup: str, usable: bool) -> None:
    """A context chosen with ``docker context use`` (Docker Desktop, a rootless engine) can point the CLI at
    another engine than the default socket: then the CLI reads, never perl on the default socket."""
    sock = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        test = dockerapi.USABLE.replace(dockerapi.SOCKET, str(sock))
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
        done = subprocess.run(["sh", "-c", f"{setup}\n{test}"], env=env, capture_output=True, text=True, timeout=10)
        assert (done.returncode == 0) == usable, done.stderr
    finally:
        server.close()
