"""images.load_missing: the state handed to a host's deploy lists the role images just loaded there,
so the deploy does not plan their load again; a host whose load failed keeps its state and is not run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from jackin.images import build as images
from jackin.errors import JackinError
from jackin.transport.ssh import SshTarget
from jackin.facts.state import HostState

TAG = "jackin/role-demo:0123456789ab"


def target(name: str) -> SshTarget:
    return SshTarget(name=name, address="127.0.0.1", known_hosts=Path("/nonexistent"))


def test_loaded_images_join_the_handed_state_and_a_failed_host_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    agents = [SimpleNamespace(image=TAG), SimpleNamespace(image="jackin/agent:busybox")]
    plan = SimpleNamespace(agents=agents, images_here=True, at=lambda _host: agents)  # every agent on every host
    split = SimpleNamespace(run=[target("a"), target("b"), target("c")])
    states = {"a": HostState(images=["other:1"]), "b": HostState(), "c": HostState(images=[TAG])}
    asked: dict = {}

    def deliver(wanted, targets, *, log):
        asked.update(wanted)
        return {"b": JackinError("no space left")}

    monkeypatch.setattr(images, "deliver", deliver)
    not_run = images.load_missing(plan, split, states)
    assert asked == {"a": [TAG], "b": [TAG], "c": []}
    assert [t.name for t in split.run] == ["a", "c"] and [h.host for h in not_run] == ["b"]
    assert states["a"].images == ["jackin/role-demo:0123456789ab", "other:1"]  # loaded: the deploy sees it
    assert states["b"].images == [] and states["c"].images == [TAG]  # failed: unchanged; had it: unchanged
