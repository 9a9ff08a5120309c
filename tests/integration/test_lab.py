"""The lab: disposable Debian servers over real SSH with pinned host keys."""

from __future__ import annotations

import json

import pytest

from jackin.errors import HostKeyError, LabError
from jackin.lab import Lab
from jackin.lab import docker as dk
from jackin.lab.image import image_tag
from jackin.transport.ssh import connect

from .conftest import inv, settle


def test_hosts_behave_like_fresh_debian_servers(lab):
    status = lab.status()
    assert [h.name for h in status.hosts] == [f"{lab.name}-1", f"{lab.name}-2"]
    for host in status.hosts:
        assert host.address == "127.0.0.1"
        with connect(host.target()) as conn:
            out = conn.run(
                "hostname; systemctl is-system-running; . /etc/os-release; echo $ID $VERSION_ID; "
                "systemctl is-active ssh docker nftables; nft --version >/dev/null && echo nft-ok; "
                "python3 -c 'print(\"py-ok\")'; docker image inspect -f ok jackin/agent:busybox",
                hide=True,
            ).stdout.split()
        assert out[0] == host.name
        assert out[1] in ("running", "degraded")
        assert out[2:4] == ["debian", "12"]
        assert out[4:7] == ["active", "active", "active"]
        assert out[7:] == ["nft-ok", "py-ok", "ok"]


def test_every_host_has_its_own_host_key(lab):
    keys = set()
    for host in lab.status().hosts:
        with connect(host.target()) as conn:
            keys.add(conn.client.get_transport().get_remote_server_key().get_base64())
    assert len(keys) == 2


def test_ssh_is_published_on_loopback_only(lab):
    for host in lab.status().hosts:
        info = dk.inspect("container", [host.container])[0]
        bindings = info["HostConfig"]["PortBindings"]["22/tcp"]
        assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(host.port)}]


def test_wrong_pinned_key_is_refused(lab, tmp_path):
    host = lab.status().hosts[0]
    other = lab.status().hosts[1]
    # Pin host 2's key for host 1's address: the key host 1 presents is then "changed".
    other_key = (lab.dir / "hosts" / other.name / "ssh_host_ed25519_key.pub").read_text().split()
    bad = tmp_path / "known_hosts"
    bad.write_text(f"[127.0.0.1]:{host.port} {other_key[0]} {other_key[1]}\n")
    target = host.target().model_copy(update={"known_hosts": bad})
    with pytest.raises(HostKeyError, match="host key mismatch"):
        connect(target)


def test_unpinned_host_is_refused_not_trusted_on_first_use(lab, tmp_path):
    host = lab.status().hosts[0]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyError, match="no pinned host key"):
        connect(host.target().model_copy(update={"known_hosts": empty}))
    assert empty.read_text() == ""  # nothing was added


def test_test_service_answers_on_two_ports_from_a_lab_host(lab):
    status = lab.status()
    assert status.service is not None and status.service.state == "running"
    with connect(status.hosts[0].target()) as conn:
        for port in status.service.ports:
            body = conn.run(
                f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
                f"'http://{status.service.address}:{port}', timeout=5).read().decode())\"",
                hide=True,
            ).stdout
            assert f"port {port}" in body


def test_lab_status_json_gives_what_scripts_need(lab):
    done = inv("lab.status", "--json", "--name", lab.name, check=True)
    data = json.loads(done.stdout)
    assert data["name"] == lab.name
    for host in data["hosts"]:
        assert set(host) >= {"name", "container", "address", "port", "user", "key_file", "known_hosts"}
        assert host["address"] == "127.0.0.1" and host["user"] == "root"
    assert data["service"]["ports"] == [8080, 8081]


def test_the_lab_lookup_from_the_engines_socket_is_what_the_docker_cli_gives(lab, monkeypatch):
    from_socket = {d["Id"]: d for d in dk.labelled_containers(lab.label)}
    cli = {d["Id"]: d for d in dk.inspect("container", dk.labelled("container", lab.label))}
    assert len(from_socket) == 3 and set(from_socket) == set(cli)  # 2 hosts and the service
    for key, doc in from_socket.items():  # the same documents (the CLI prints the engine's own JSON)
        for field in ("Name", "Config", "HostConfig", "NetworkSettings"):
            assert doc[field] == cli[key][field], field
    settle()  # no lab is booted or removed in the background while the docker CLI is patched
    calls = []
    real = dk.docker
    monkeypatch.setattr(dk, "docker", lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1])
    via_socket = Lab(lab.name).status()
    assert calls == []  # no docker CLI start
    monkeypatch.setenv("DOCKER_HOST", "unix://" + dk.SOCKET)  # the same engine, by the CLI
    assert Lab(lab.name).status() == via_socket
    assert calls == ["ps", "container"]


def test_second_up_is_fast_and_changes_nothing(lab):
    before = lab.status()
    after = lab.up()
    assert [(h.container, h.port) for h in after.hosts] == [(h.container, h.port) for h in before.hosts]


def test_stopped_lab_is_resumed_with_the_same_ports_and_keys(fresh_lab):
    first = fresh_lab.up(1)
    host = first.hosts[0]
    dk.docker("stop", "-t", "2", host.container, fresh_lab.service_container)  # as after an engine restart
    assert fresh_lab.status().hosts[0].state == "exited"
    again = fresh_lab.up()
    assert again.hosts[0].port == host.port and again.hosts[0].state == "running"
    with connect(again.hosts[0].target()) as conn:  # same pinned key still matches
        assert conn.run("hostname", hide=True).stdout.strip() == host.name


def test_host_that_never_started_is_replaced(fresh_lab):
    fresh_lab.up(1)
    host = fresh_lab.status().hosts[0]
    dk.docker("rm", "-f", host.container)
    # A killed run leaves a created-but-never-started container behind.
    dk.docker("create", "--name", host.container, "--label", fresh_lab.label,
              "--label", f"jackin.lab.host={host.name}", image_tag())  # fmt: skip
    status = fresh_lab.up()
    assert status.hosts[0].state == "running"
    with connect(status.hosts[0].target()) as conn:
        assert conn.run("systemctl is-active ssh", hide=True).stdout.strip() == "active"


def test_foreign_container_with_our_name_is_not_touched(fresh_lab):
    name = fresh_lab.container(fresh_lab.host_name(1))
    dk.docker("create", "--name", name, image_tag())
    try:
        with pytest.raises(LabError, match="not labelled"):
            fresh_lab.up(1)
        assert dk.exists("container", name)
    finally:
        dk.docker("rm", "-f", name)


def test_down_leaves_no_container_volume_network_or_key(fresh_lab):
    fresh_lab.up(1)
    assert fresh_lab.leftovers()["containers"]
    done = inv("lab.down", "--name", fresh_lab.name, check=True)
    assert "gone" in done.stdout
    assert fresh_lab.leftovers() == {"containers": [], "volumes": [], "networks": [], "files": []}
    again = inv("lab.down", "--name", fresh_lab.name, check=True)
    assert "nothing to remove" in again.stdout
