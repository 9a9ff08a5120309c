"""The lab lookup asks the local engine's socket (jackin.lab.docker.labelled_containers), and the
docker CLI when the socket cannot answer. A fake engine on a unix socket; the CLI stubbed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from jackin.lab import docker as dk
from tests.unit.test_state_docker import FakeDocker

LABEL = "jackin.lab=demo"
HOST = {"Id": "a1" * 32, "Name": "/jackin-lab-demo-1", "Config": {"Labels": {"jackin.lab": "demo"}}}
SERVICE = {"Id": "b2" * 32, "Name": "/jackin-lab-demo-svc", "Config": {"Labels": {"jackin.lab": "demo"}}}


class FakeEngine(FakeDocker):
    """The lab's containers on a fake engine socket (the state read's fake daemon, other answers)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gone: set[str] = set()  # ids listed but no longer there when inspected
        self.listing: tuple[int, str] | None = None  # (status, raw body) instead of the listing

    def answer(self, target: str) -> tuple[int, object]:
        url = urlsplit(target)
        if url.path == "/containers/json":
            if self.listing is not None:
                return self.listing
            query = parse_qs(url.query)
            assert query["all"] == ["1"]
            if json.loads(query["filters"][0]) != {"label": [LABEL]}:
                return 200, []
            return 200, [{"Id": HOST["Id"]}, {"Id": SERVICE["Id"]}]
        for doc in (HOST, SERVICE):
            if url.path == f"/containers/{doc['Id']}/json" and doc["Id"] not in self.gone:
                return 200, doc
        return 404, {"message": "No such container"}


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    fake = FakeEngine(tmp_path / "docker.sock")
    monkeypatch.setattr(dk, "SOCKET", str(tmp_path / "docker.sock"))
    for variable in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.docker/config.json unless a test writes one
    yield fake
    fake.stop()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The docker CLI, stubbed: records each call; ``ps`` lists the host, ``inspect`` returns it."""
    calls: list[tuple[str, ...]] = []

    def docker(*args: str, **_kw: object) -> str:
        calls.append(args)
        return "jackin-lab-demo-1\n" if args[0] == "ps" else json.dumps([HOST])

    monkeypatch.setattr(dk, "docker", docker)
    return calls


def test_the_socket_answers_with_no_docker_cli_start(engine: FakeEngine, cli: list) -> None:
    assert dk.labelled_containers(LABEL) == [HOST, SERVICE]
    assert cli == []
    assert engine.requests[1:] == [f"/containers/{HOST['Id']}/json", f"/containers/{SERVICE['Id']}/json"]


def test_a_container_gone_before_its_inspect_is_left_to_the_cli(engine: FakeEngine, cli: list) -> None:
    engine.gone.add(SERVICE["Id"])
    assert dk.labelled_containers(LABEL) == [HOST]  # what the CLI lists now
    assert [c[0] for c in cli] == ["ps", "container"]


@pytest.mark.parametrize("variable", ["DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG"])
def test_another_engine_chosen_by_the_environment_is_asked_by_the_cli(
    engine: FakeEngine, cli: list, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, {"DOCKER_HOST": "tcp://127.0.0.1:2375", "DOCKER_CONFIG": "/elsewhere"}.get(variable, "other"))
    assert dk.labelled_containers(LABEL) == [HOST]
    assert engine.requests == [] and [c[0] for c in cli] == ["ps", "container"]


def test_no_socket_is_the_cli(tmp_path: Path, cli: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dk, "SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    assert dk.labelled_containers(LABEL) == [HOST]
    assert [c[0] for c in cli] == ["ps", "container"]


@pytest.mark.parametrize(("config", "socket_asked"), [
    ('{"currentContext": "rootless"}', False), ('{"currentContext": "desktop-linux"}', False),
    ('{"currentContext": "default"}', True), ('{"auths": {}}', True), ("not json", False),
])  # fmt: skip
def test_a_context_chosen_with_docker_context_use_is_asked_by_the_cli(
    engine: FakeEngine, cli: list, tmp_path: Path, config: str, socket_asked: bool
) -> None:
    """``docker context use`` (Docker Desktop, a rootless engine) points the CLI at another engine than
    the default socket, with no variable set: the socket's answer would be another engine's lab."""
    (tmp_path / "home" / ".docker").mkdir(parents=True)
    (tmp_path / "home" / ".docker" / "config.json").write_text(config)
    dk.labelled_containers(LABEL)
    assert bool(engine.requests) == socket_asked and (cli == []) == socket_asked


@pytest.mark.parametrize("listing", [(500, '{"message": "busy"}\n'), (200, '[{"Id": "a1a1')], ids=["500", "cut-short"])
def test_an_answer_that_is_not_a_whole_200_is_left_to_the_cli(engine: FakeEngine, cli: list, listing) -> None:
    engine.listing = listing
    assert dk.labelled_containers(LABEL) == [HOST]
    assert [c[0] for c in cli] == ["ps", "container"]
