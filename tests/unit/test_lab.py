"""The lab provider without Docker: names, status parsed from canned ``docker
inspect`` output, the tar injected before first boot, and generated keys."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import paramiko
import pytest

from jackin.errors import EXIT_SPEC, LabError, SpecError
from jackin.lab import Lab, LabHost, LabService, keys
from jackin.lab import docker as dk
from jackin.lab.image import image_tag
from jackin.lab.keys import HOSTKEY_LABEL, fingerprint, write_keypair
from jackin.lab.limits import ensure_inotify, inotify_in_use, inotify_needed
from jackin.lab.service import SERVICE_PORTS

# --- names ---------------------------------------------------------------------


def test_names(tmp_path: Path) -> None:
    lab = Lab("demo", root=tmp_path)
    assert lab.name == "demo"
    assert lab.host_name(1) == "demo-1"
    assert lab.host_name(12) == "demo-12"
    assert lab.container("demo-1") == "jackin-lab-demo-1"
    assert lab.volume("demo-1") == "jackin-lab-demo-1-docker"
    assert lab.network == "jackin-lab-demo"
    assert lab.service_container == "jackin-lab-demo-svc"
    assert lab.label == "jackin.lab=demo"
    assert lab.dir == tmp_path / "labs" / "demo"
    assert lab.key_file == tmp_path / "labs" / "demo" / "id_ed25519"
    assert lab.known_hosts == tmp_path / "labs" / "demo" / "known_hosts"


def test_default_name_and_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path))
    lab = Lab()
    assert lab.name == "jackin"
    assert lab.dir == tmp_path / "labs" / "jackin"
    assert lab.network == "jackin-lab-jackin"


@pytest.mark.parametrize("name", ["a", "lab-2", "x" * 24, "a1b2"])
def test_valid_names(name: str, tmp_path: Path) -> None:
    assert Lab(name, root=tmp_path).name == name


@pytest.mark.parametrize("name", ["Bad_Name", "", "-lab", "lab-", "2lab", "la b", "lab.x", "x" * 25])
def test_invalid_names_are_spec_errors(name: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        Lab(name, root=tmp_path)
    error = caught.value
    assert error.exit_code == EXIT_SPEC == 2
    assert isinstance(error, ValueError)
    assert error.message == (
        f"invalid lab name {name!r}: expected lower-case letters, digits and '-' (at most 24)"
    )


def test_name_with_trailing_newline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError):
        Lab("demo\n", root=tmp_path)


# --- status from a fake docker --------------------------------------------------

NETWORK = "jackin-lab-demo"


def container(
    name: str,
    labels: dict[str, str] | None,
    *,
    state: str = "running",
    port: str | None = None,
    ip: str | None = None,
    image: str = "jackin/lab-host:0123456789ab",
) -> dict[str, Any]:
    """A ``docker container inspect`` entry, trimmed to the fields the lab reads."""
    networks = {NETWORK: {"IPAddress": ip or "", "Gateway": ""}} if ip is not None else {}
    return {
        "Name": f"/{name}",
        "Config": {"Labels": labels, "Image": image},
        "State": {"Status": state},
        "HostConfig": {"PortBindings": {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": port}]} if port else {}},
        "NetworkSettings": {"Networks": networks},
    }


def host_container(index: int, **kwargs: Any) -> dict[str, Any]:
    name = f"demo-{index}"
    labels = {"jackin.lab": "demo", "jackin.lab.host": name, "jackin.lab.port": str(40000 + index)}
    return container(f"jackin-lab-{name}", labels, **kwargs)


class FakeDocker:
    """Stands in for jackin.lab.docker: canned inspect data, every call recorded."""

    def __init__(self, containers: list[dict[str, Any]]):
        self.containers = {c["Name"].lstrip("/"): c for c in containers}
        self.calls: list[tuple[Any, ...]] = []

    def ensure_engine(self) -> None:
        self.calls.append(("ensure_engine",))

    def labelled(self, kind: str, label: str) -> list[str]:
        self.calls.append(("labelled", kind, label))
        return sorted(self.containers)

    def inspect(self, kind: str, names: list[str]) -> list[dict[str, Any]]:
        self.calls.append(("inspect", kind, list(names)))
        return [self.containers[n] for n in names]


@pytest.fixture
def fake_docker(monkeypatch: pytest.MonkeyPatch):
    def install(containers: list[dict[str, Any]]) -> FakeDocker:
        fake = FakeDocker(containers)
        monkeypatch.setattr(dk, "ensure_engine", fake.ensure_engine)
        monkeypatch.setattr(dk, "labelled", fake.labelled)
        monkeypatch.setattr(dk, "inspect", fake.inspect)
        return fake

    return install


def test_status_parses_hosts_and_service(tmp_path: Path, fake_docker) -> None:
    lab = Lab("demo", root=tmp_path)
    fake = fake_docker([
        host_container(10, port="40010", ip="172.18.0.11"),
        host_container(2, state="exited", port="40002", ip=""),
        host_container(1, port="40001", ip="172.18.0.2"),
        container("jackin-lab-demo-svc", {"jackin.lab": "demo", "jackin.lab.role": "service"}, ip="172.18.0.4"),
        container("stray", {"jackin.lab": "demo"}),  # ours by label, but neither host nor service
    ])  # fmt: skip

    status = lab.status()

    assert fake.calls == [  # the engine is asked only when these fail (below)
        ("labelled", "container", "jackin.lab=demo"),
        ("inspect", "container", ["jackin-lab-demo-1", "jackin-lab-demo-10", "jackin-lab-demo-2",
                                  "jackin-lab-demo-svc", "stray"]),
    ]  # fmt: skip
    assert status.name == "demo"
    assert status.network == NETWORK
    assert status.directory == lab.dir
    assert status.image == image_tag()
    assert status.exists
    assert [h.name for h in status.hosts] == ["demo-1", "demo-2", "demo-10"]
    assert status.hosts[0] == LabHost(
        name="demo-1", container="jackin-lab-demo-1", state="running", address="127.0.0.1", port=40001,
        user="root", key_file=lab.key_file, known_hosts=lab.known_hosts, lab_ip="172.18.0.2",
    )  # fmt: skip
    assert [(h.state, h.port, h.lab_ip) for h in status.hosts] == [
        ("running", 40001, "172.18.0.2"),
        ("exited", 40002, None),
        ("running", 40010, "172.18.0.11"),
    ]
    assert status.service == LabService(
        container="jackin-lab-demo-svc", state="running", address="172.18.0.4", ports=SERVICE_PORTS
    )
    assert status.service.ports == (8080, 8081)


def test_status_of_an_empty_lab(tmp_path: Path, fake_docker) -> None:
    fake = fake_docker([])
    status = Lab("demo", root=tmp_path).status()
    assert status.hosts == []
    assert status.service is None
    assert not status.exists
    assert ("labelled", "container", "jackin.lab=demo") in fake.calls


def test_status_service_only_exists(tmp_path: Path, fake_docker) -> None:
    fake_docker([container("jackin-lab-demo-svc", {"jackin.lab": "demo", "jackin.lab.role": "service"},
                           state="exited", ip="")])  # fmt: skip
    status = Lab("demo", root=tmp_path).status()
    assert status.hosts == []
    assert status.service is not None
    assert (status.service.state, status.service.address) == ("exited", None)
    assert status.exists


def test_status_tolerates_containers_without_labels(tmp_path: Path, fake_docker) -> None:
    fake_docker([container("unlabelled", None), host_container(1, port="40001", ip="172.18.0.2")])
    status = Lab("demo", root=tmp_path).status()
    assert [h.name for h in status.hosts] == ["demo-1"]
    assert status.service is None


def test_status_without_an_engine_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine() -> None:
        raise LabError("the local Docker engine does not answer", hint="start it")

    def docker_fails(*_: Any) -> list[Any]:
        raise LabError("docker ps failed: Cannot connect to the Docker daemon")

    def must_not_run(*_: Any) -> list[Any]:
        raise AssertionError("docker inspect was called after docker ps failed")

    monkeypatch.setattr(dk, "ensure_engine", no_engine)
    monkeypatch.setattr(dk, "labelled", docker_fails)
    monkeypatch.setattr(dk, "inspect", must_not_run)
    with pytest.raises(LabError, match="does not answer"):
        Lab("demo", root=tmp_path).status()


def test_status_whose_docker_call_fails_with_an_engine_raises_that_error(
        tmp_path: Path, fake_docker, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    fake = fake_docker([host_container(1, port="40001", ip="172.18.0.2")])

    def gone(kind: str, names: list[str]) -> list[Any]:
        raise LabError("docker container inspect failed: No such object: jackin-lab-demo-1")

    monkeypatch.setattr(dk, "inspect", gone)
    with pytest.raises(LabError, match="No such object"):
        Lab("demo", root=tmp_path).status()
    assert fake.calls == [("labelled", "container", "jackin.lab=demo"), ("ensure_engine",)]


def test_host_from_port_binding(tmp_path: Path) -> None:
    host = Lab("demo", root=tmp_path)._host_from(host_container(3, port="41234", ip="172.18.0.5"))
    assert (host.name, host.container, host.port, host.lab_ip) == ("demo-3", "jackin-lab-demo-3", 41234, "172.18.0.5")
    assert host.target().endpoint == "root@127.0.0.1:41234"


@pytest.mark.parametrize(
    "bindings",
    [None, {}, {"22/tcp": None}, {"22/tcp": []}, {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}],
)
def test_host_from_falls_back_to_the_port_label(bindings: Any, tmp_path: Path) -> None:
    info = host_container(3, state="created", ip=None)
    info["HostConfig"]["PortBindings"] = bindings
    host = Lab("demo", root=tmp_path)._host_from(info)
    assert host.port == 40003
    assert host.state == "created"
    assert host.lab_ip is None


def test_host_from_other_networks_give_no_lab_ip(tmp_path: Path) -> None:
    info = host_container(1, port="40001")
    info["NetworkSettings"]["Networks"] = {"bridge": {"IPAddress": "172.17.0.2"}}
    assert Lab("demo", root=tmp_path)._host_from(info).lab_ip is None


# --- the injected tar -----------------------------------------------------------


def test_injection_tar(tmp_path: Path) -> None:
    lab = Lab("demo", root=tmp_path)
    host_key = lab.dir / "hosts" / "demo-1" / "ssh_host_ed25519_key"
    host_key.parent.mkdir(parents=True)
    (lab.dir / "id_ed25519.pub").write_bytes(b"ssh-ed25519 AAAAlab lab key\n")
    host_key.write_bytes(b"PRIVATE HOST KEY\n")
    (host_key.parent / "ssh_host_ed25519_key.pub").write_bytes(b"ssh-ed25519 AAAAhost demo-1 host key\n")

    with tarfile.open(fileobj=io.BytesIO(keys.injection(lab.key_file.with_suffix(".pub"), host_key))) as tar:
        members = tar.getmembers()
        contents = {m.name: tar.extractfile(m).read() for m in members if m.isfile()}  # type: ignore[union-attr]

    assert [(m.name, stat.S_IMODE(m.mode), m.uid, m.gid) for m in members] == [
        ("root/.ssh", 0o700, 0, 0),
        ("root/.ssh/authorized_keys", 0o600, 0, 0),
        ("etc/ssh/ssh_host_ed25519_key", 0o600, 0, 0),
        ("etc/ssh/ssh_host_ed25519_key.pub", 0o644, 0, 0),
    ]
    assert members[0].isdir()
    assert all(m.isfile() for m in members[1:])
    assert contents == {
        "root/.ssh/authorized_keys": b"ssh-ed25519 AAAAlab lab key\n",
        "etc/ssh/ssh_host_ed25519_key": b"PRIVATE HOST KEY\n",
        "etc/ssh/ssh_host_ed25519_key.pub": b"ssh-ed25519 AAAAhost demo-1 host key\n",
    }


def test_injection_without_lab_key_fails(tmp_path: Path) -> None:
    lab = Lab("demo", root=tmp_path)
    host_key = tmp_path / "ssh_host_ed25519_key"
    host_key.write_bytes(b"x")
    host_key.with_suffix(".pub").write_bytes(b"y")
    with pytest.raises(FileNotFoundError):
        keys.injection(lab.key_file.with_suffix(".pub"), host_key)


# --- generated keys -------------------------------------------------------------


def test_write_keypair(tmp_path: Path) -> None:
    path = tmp_path / "id_ed25519"
    write_keypair(path, comment="jackin lab demo")

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
    pub = (tmp_path / "id_ed25519.pub").read_text()
    assert pub.startswith("ssh-ed25519 ")
    assert pub.endswith(" jackin lab demo\n")
    assert len(pub.splitlines()) == 1

    key = paramiko.Ed25519Key.from_private_key_file(str(path))
    assert key.get_name() == "ssh-ed25519"
    assert pub.split()[1] == key.get_base64()


def test_write_keypair_tightens_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "ssh_host_ed25519_key"
    path.write_text("old")
    path.chmod(0o644)
    write_keypair(path, comment="demo-1 host key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (tmp_path / "ssh_host_ed25519_key.pub").read_text().endswith(" demo-1 host key\n")
    paramiko.Ed25519Key.from_private_key_file(str(path))


def test_write_keypair_makes_a_new_key_each_time(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write_keypair(one, comment="c")
    write_keypair(two, comment="c")
    assert one.with_suffix(".pub").read_text() != two.with_suffix(".pub").read_text()


# --- host keys pinned on this machine -----------------------------------------------


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    write_keypair(tmp_path / "k", comment="c")
    line = (tmp_path / "k.pub").read_text()
    key = paramiko.Ed25519Key(data=base64.b64decode(line.split()[1]))
    expected = "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    assert fingerprint(line) == expected and len(expected) == 50


def pinned_lab(tmp_path: Path) -> tuple[Lab, str]:
    lab = Lab("demo", root=tmp_path)
    key = lab._host_key("demo-1")
    key.parent.mkdir(parents=True)
    write_keypair(key, comment="demo-1 host key")
    return lab, fingerprint(key.with_suffix(".pub").read_text())


def presented(monkeypatch: pytest.MonkeyPatch, public_key: bytes | None) -> list[tuple[str, ...]]:
    """``docker cp CONTAINER:/etc/ssh/ssh_host_ed25519_key.pub -`` answers a tar of ``public_key``
    (None: the container has no such file). Returns the calls made."""
    calls: list[tuple[str, ...]] = []

    def docker(*args: str, **_kw: object) -> bytes:
        calls.append(args)
        if public_key is None:
            raise LabError("docker cp failed: no such file")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("ssh_host_ed25519_key.pub")
            info.size = len(public_key)
            tar.addfile(info, io.BytesIO(public_key))
        return buf.getvalue()

    monkeypatch.setattr(dk, "docker", docker)
    return calls


@pytest.mark.parametrize(("label", "pinned"), [("same", True), (None, False), ("SHA256:other", False)])
def test_status_says_whether_a_host_has_the_key_pinned_here(
    label: str | None, pinned: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = presented(monkeypatch, b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherOtherOtherOtherOtherOtherOtherOther1 x\n")
    lab, mine = pinned_lab(tmp_path)
    info = host_container(1, port="40001")
    if label is not None:
        info["Config"]["Labels"][HOSTKEY_LABEL] = mine if label == "same" else label
    assert lab._host_from(info).pinned is pinned
    assert bool(calls) == (label is None)  # the container is asked only when it has no label


def test_a_host_made_before_the_label_is_asked_for_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unlabelled host (made by an earlier version) that holds the pinned key is pinned: an upgrade
    must not replace it, with other fleets' agents and kept data on it. Without the key file: not pinned."""
    lab, _ = pinned_lab(tmp_path)
    mine = lab._host_key("demo-1").with_suffix(".pub").read_bytes()
    info = host_container(1, port="40001", image="img")
    info["NetworkSettings"]["Networks"][lab.public_network] = {}
    calls = presented(monkeypatch, mine)
    assert lab._host_from(info).pinned is True
    assert lab._replace_reason("demo-1", info, "img") is None
    assert calls[0][:2] == ("cp", f"{info['Name'].lstrip('/')}:/etc/ssh/ssh_host_ed25519_key.pub")
    presented(monkeypatch, None)
    assert lab._host_from(info).pinned is False


def test_up_never_replaces_a_host_other_fleets_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that needs replacing (here: a new image recipe) on a lab other fleets use makes up fail,
    naming them; nothing is removed. Without other users the host is replaced."""
    lab, mine = pinned_lab(tmp_path)
    info = host_container(1, port="40001", image="old-image")
    info["Config"]["Labels"][HOSTKEY_LABEL] = mine
    removed: list[str] = []
    monkeypatch.setattr(dk, "inspect", lambda *_a, **_k: [info])
    monkeypatch.setattr(lab, "_remove_host", removed.append)
    monkeypatch.setattr(lab, "_create_host", lambda *_a: None)
    host = lab._host_from(info)
    with pytest.raises(LabError, match=r"demo-1 would be replaced \(its image recipe changed\), but fleet\(s\) a, b"):
        lab._converge_host("demo-1", host, "new-image", lambda _m: None, ["b", "a"])
    assert removed == []
    lab._converge_host("demo-1", host, "new-image", lambda _m: None, [])
    assert removed == ["demo-1"]


@pytest.mark.parametrize(("label", "reason"), [
    ("same", None),
    (None, "it presents a host key other than the one pinned on this machine (made from another state dir)"),
    ("SHA256:other", "it presents a host key other than the one pinned on this machine (made from another state dir)"),
])  # fmt: skip
def test_a_host_with_another_key_is_replaced(
    label: str | None, reason: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    presented(monkeypatch, None)
    lab, mine = pinned_lab(tmp_path)
    info = host_container(1, port="40001", image="img")
    info["NetworkSettings"]["Networks"][lab.public_network] = {}
    if label is not None:
        info["Config"]["Labels"][HOSTKEY_LABEL] = mine if label == "same" else label
    assert lab._replace_reason("demo-1", info, "img") == reason


def test_a_host_whose_key_is_missing_here_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    presented(monkeypatch, None)
    lab = Lab("demo", root=tmp_path)
    info = host_container(1, port="40001", image="img")
    assert lab._replace_reason("demo-1", info, "img") == "its host key is missing on this machine"
    assert lab._host_from(info).pinned is False


# --- inotify: room for booting hosts ----------------------------------------------


@pytest.mark.parametrize(("used", "limit", "new", "need"), [
    (50, 128, 0, None),      # nothing boots
    (50, 128, 1, None),      # 50 + 8 + 64 = 122 fits
    (50, 128, 2, 130),       # 50 + 16 + 64
    (100, 8192, 32, None),
    (100, 128, 32, 420),     # 100 + 256 + 64
])  # fmt: skip
def test_inotify_needed(used: int, limit: int, new: int, need: int | None) -> None:
    assert inotify_needed(used, limit, new) == need


def fake_proc(tmp_path: Path, inotify: int, other: int = 2) -> Path:
    fds = tmp_path / "proc" / "123" / "fd"
    fds.mkdir(parents=True)
    for i in range(inotify):
        (fds / str(i)).symlink_to("anon_inode:inotify")
    for i in range(other):
        (fds / str(100 + i)).symlink_to("/dev/null")
    (tmp_path / "proc" / "self").mkdir()  # not a pid: not counted
    return tmp_path / "proc"


def test_inotify_in_use_counts_inotify_descriptors(tmp_path: Path) -> None:
    assert inotify_in_use(fake_proc(tmp_path, 5)) == 5


def test_ensure_inotify_raises_the_limit_only_upward_and_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    limit, logged = tmp_path / "max_user_instances", []
    limit.write_text("128\n")
    proc = fake_proc(tmp_path, 100)
    ensure_inotify(32, logged.append, limit_file=limit, proc=proc)
    assert limit.read_text() == "420\n"
    assert logged == ["raised fs.inotify.max_user_instances from 128 to 420: "
                      "32 more lab host(s) need about 256 inotify instances"]  # fmt: skip
    ensure_inotify(2, logged.append, limit_file=limit, proc=proc)  # already enough: never lowered
    assert limit.read_text() == "420\n" and len(logged) == 1


def test_ensure_inotify_says_what_to_run_when_it_cannot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    with pytest.raises(LabError) as caught:
        ensure_inotify(16, lambda _: None, limit_file=limit, proc=fake_proc(tmp_path, 40))
    assert caught.value.message == ("16 more lab host(s) need about 128 inotify instances, beyond root's limit of 128: "
                                    "only root can raise fs.inotify.max_user_instances")  # fmt: skip
    assert caught.value.hint == "run as root: sysctl -w fs.inotify.max_user_instances=232"
    assert limit.read_text() == "128\n"


def test_wait_reports_every_host_that_is_not_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jackin.errors import ConnectError
    from jackin.lab import boot

    answers = {40001: "running", 40002: ConnectError("cannot reach root@127.0.0.1:40002", host="demo-2"),
               40003: "starting"}  # fmt: skip

    def wait_ready(target, **_: Any) -> str:
        answer = answers[target.port]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(boot, "wait_ready", wait_ready)
    lab = Lab("demo", root=tmp_path)
    hosts = [LabHost(name=f"demo-{i}", container=f"c{i}", state="running", port=40000 + i,
                     key_file=lab.key_file, known_hosts=lab.known_hosts) for i in (1, 2, 3)]  # fmt: skip
    with pytest.raises(LabError) as caught:
        boot.wait_booted(hosts, 1, lambda _: None)
    assert caught.value.message == ("2 of 3 lab hosts are not ready: demo-2: cannot reach root@127.0.0.1:40002; "
                                    "demo-3: systemd says 'starting'")  # fmt: skip
    with pytest.raises(ConnectError):
        boot.wait_booted(hosts[:2], 1, lambda _: None)  # one host: its own error, as it was


@pytest.mark.parametrize(("state", "code", "out"), [
    ("running", 0, "running\n"),
    ("degraded", 0, "degraded\nx.service loaded failed failed X\n"),  # booted: one unit failed
    ("maintenance", 1, "maintenance\n"),
    ("", 1, "\n"),  # systemd not answering yet: waited on
])  # fmt: skip
def test_a_lab_host_counts_as_booted_when_systemd_is_running_or_degraded(tmp_path, state, code, out) -> None:
    """``systemctl is-system-running`` exits 1 when degraded: the boot check judges its state instead."""
    import os
    import subprocess

    from jackin.lab.boot import BOOTED

    fake = tmp_path / "systemctl"
    fake.write_text(f"#!/bin/sh\ncase \"$1\" in is-system-running) echo {state!r}; exit 1;; "
                    "--failed) echo 'x.service loaded failed failed X';; esac\n")  # fmt: skip
    fake.chmod(0o755)
    done = subprocess.run(["bash", "-c", BOOTED], capture_output=True, text=True, timeout=10,
                          env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})  # fmt: skip
    assert (done.returncode, done.stdout) == (code, out)
