"""Where a role's image is built (jackin/images/build.py): a ``build: host`` role's on the host for real
servers, here (offline, loaded over SSH) for a lab fleet, whose hosts reach no registry; an operator
role's always here. Pure: the plan and the state read in, what is built here and what the host is told."""

from __future__ import annotations

import pytest

from jackin.facts.fleet import HostState
from jackin.images import build as images
from jackin.plan.fleet import build as plan_of
from jackin.spec import parse_inventory, roles

SPEC = """\
fleet:
  name: f
  provider: {provider}
  agents:
    - {{name: coder, role: claude-code, credentials: [{{name: ANTHROPIC_API_KEY, from_env: K}}]}}
    - {{name: helper, role: demo}}
"""


def plan(provider: str):
    fleet = parse_inventory(SPEC.format(provider="lab"), "f.yaml").fleet.model_copy(update={"provider": provider})
    return plan_of(fleet, {"coder-1": 60000, "helper-1": 60001})


def test_a_lab_fleet_builds_every_role_image_here_and_a_real_one_only_the_operators() -> None:
    lab, real = plan("lab"), plan("static")
    assert (lab.images_here, real.images_here) == (True, False)
    claude, demo = roles.load("claude-code").tag, roles.load("demo").tag
    states = {"h1": HostState(images=[])}
    assert images._wanted(lab, states) == {"h1": sorted([claude, demo])}
    assert images._wanted(real, states) == {"h1": [demo]}  # claude-code's: built by the host's own step
    assert images._wanted(real, {"h1": HostState(images=[demo])}) == {"h1": []}


def test_the_host_is_told_to_load_a_host_roles_image_in_the_lab_and_to_build_it_elsewhere(monkeypatch) -> None:
    monkeypatch.setattr(images, "archive_size", lambda tag: 123)
    tag = roles.load("claude-code").tag
    assert images.source(tag, here=True) == {"build": "operator", "size": 123}
    built = images.source(tag)
    assert built["build"] == "host" and "Dockerfile" in built["files"] and "common/jackin-task" in built["files"]


def test_an_offline_build_needs_a_node_base_image(tmp_path, monkeypatch) -> None:
    role = roles.load("claude-code")
    monkeypatch.setattr(type(role), "directory", property(lambda self: tmp_path))
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n")
    with pytest.raises(images.LabError, match="is not node:<version>"):
        images.offline_context(role, tmp_path / "ctx", base="jackin/role-demo:x")


def test_the_platform_builds_an_install_script_did_not_link_are_the_ones_left_out(tmp_path) -> None:
    """OpenCode's postinstall hard-links the build it chose (by CPU) to its bin; the other builds of the
    same platform are weight in every host's load. A package that linked none keeps them all."""
    import json as _json
    import os as _os

    from jackin.images.build import _unchosen

    package = tmp_path / "opencode-ai"
    for name in ("opencode-linux-x64", "opencode-linux-x64-baseline"):
        (package / "node_modules" / name / "bin").mkdir(parents=True)
        (package / "node_modules" / name / "bin" / "opencode").write_bytes(name.encode())
    (package / "bin").mkdir()
    (package / "package.json").write_text(_json.dumps({"optionalDependencies": {
        "opencode-linux-x64": "1", "opencode-linux-x64-baseline": "1", "opencode-darwin-x64": "1"}}))  # fmt: skip
    assert _unchosen(package) == []  # nothing linked yet: all stay
    _os.link(package / "node_modules" / "opencode-linux-x64" / "bin" / "opencode", package / "bin" / "opencode.exe")
    assert _unchosen(package) == [package / "node_modules" / "opencode-linux-x64-baseline"]
