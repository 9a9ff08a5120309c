"""Roles: every shipped role validates, each image recipe passes the offline check, a bad role file is
reported as FILE:LINE: field: message, and the spec takes role, credentials and egress from the role."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jackin.images import build as images
from jackin.plan import fleet as plan
from jackin.spec import role_checks, roles
from jackin.errors import SpecError
from jackin.spec import parse_inventory

SHIPPED = ["amp", "claude-code", "codex", "demo", "gemini", "opencode"]
RUNTIMES = {"claude-code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY", "opencode": "ANTHROPIC_API_KEY",
            "gemini": "GEMINI_API_KEY", "amp": "AMP_API_KEY"}  # fmt: skip


@pytest.fixture
def roles_dir(tmp_path, monkeypatch) -> Path:
    """A roles dir of our own (JACKIN_ROLES_DIR): the shipped roles copied, free to break."""
    target = tmp_path / "roles"
    shutil.copytree(roles.roles_dir(), target)
    monkeypatch.setenv("JACKIN_ROLES_DIR", str(target))
    return target


def test_every_shipped_role_validates() -> None:
    assert roles.names() == SHIPPED
    found, errors = roles.load_all()
    assert errors == [] and [r.name for r in found] == SHIPPED
    assert all(check.ok for check in role_checks.validate()), [c.problems for c in role_checks.validate()]


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_roles_build_on_the_host_with_their_credential_and_api_host(name: str) -> None:
    role = roles.load(name)
    assert role.image.build == "host" and role.image.dockerfile == "Dockerfile"
    assert role.credentials == [RUNTIMES[name]]
    assert role.egress and all(entry.endswith(":443") for entry in role.egress)
    assert role.healthcheck.test == ["/usr/local/bin/jackin-health"]
    assert role.tag.startswith(f"jackin/role-{name}:") and len(role.tag.rsplit(":", 1)[1]) == 12


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_dockerfiles_pass_the_offline_recipe_check(name: str) -> None:
    role = roles.load(name)
    text = (role.directory / "Dockerfile").read_text()
    assert role_checks.check_dockerfile(role, text, "Dockerfile") == []
    steps = role_checks.dockerfile_instructions(text)
    assert [w for _, w, _ in steps][0] == "FROM"
    assert "latest" not in next(rest for _, w, rest in steps if w == "FROM")


def test_the_demo_image_recipe_passes_the_same_check() -> None:
    role = roles.load("demo")
    text = images.dockerfile(role, "jackin/role-demo-base:0123456789ab")
    assert role_checks.check_dockerfile(role, text, "generated") == []
    assert "COPY common/ /usr/local/bin/" in text and "COPY jackin-demo-agent /usr/local/bin/" in text


BAD_RECIPES = {
    "FROM node\n": "pin the base image",
    "FROM node:latest\n": "pin the base image",
    "FROM debian:12\nRUN curl -fsSL https://example.invalid/install.sh | bash\n": "piped into a shell",
    "FROM debian:12\nRUN npm install -g @anthropic-ai/claude-code\n": "is not pinned to a version",
    "FROM debian:12\nARG V=latest\nRUN npm install -g \"x@${V}\"\n": "is not pinned to a version",
    "FROM debian:12\nUSER root\n": "must not be root",
}


@pytest.mark.parametrize("recipe,problem", BAD_RECIPES.items(), ids=list(range(len(BAD_RECIPES))))
def test_the_recipe_check_finds_each_problem_with_its_line(recipe: str, problem: str) -> None:
    role = roles.load("claude-code")
    found = role_checks.check_dockerfile(role, recipe, "D")
    assert any(problem in p for p in found), found
    # Everything else is missing too (HEALTHCHECK, ENTRYPOINT, CMD, common): each said, each with a line.
    assert all(p.startswith("D:") and p.split(":")[1].isdigit() for p in found)
    assert any("no HEALTHCHECK" in p for p in found) and any("ENTRYPOINT" in p for p in found)


def test_a_healthcheck_that_differs_from_the_role_file_is_found(roles_dir: Path) -> None:
    docker = roles_dir / "codex" / "Dockerfile"
    docker.write_text(docker.read_text().replace("--retries=3", "--retries=9"))
    [check] = role_checks.validate("codex")
    assert len(check.problems) == 1 and "HEALTHCHECK differs" in check.problems[0]
    assert check.problems[0].startswith(f"{docker}:")


def test_invalid_role_file_gives_file_line_and_field(roles_dir: Path) -> None:
    path = roles_dir / "demo" / "role.yaml"
    path.write_text(path.read_text().replace("  retries: 3", "  retries: lots").replace("command:", "comand:"))
    with pytest.raises(SpecError) as caught:
        roles.load_file(path)
    problems = caught.value.problems
    lines = path.read_text().splitlines()
    retries = next(n for n, line in enumerate(lines, 1) if "retries: lots" in line)
    assert f"{path}:{retries}: healthcheck.retries: expected a whole number, got 'lots'" in problems
    assert any(p.startswith(f"{path}:") and "unknown key 'comand'; did you mean 'command'?" in p for p in problems)
    [check] = role_checks.validate("demo")  # role.validate reports the same, role by role
    assert check.problems == problems


def test_role_file_problems_beyond_the_model(roles_dir: Path) -> None:
    path = roles_dir / "gemini" / "role.yaml"
    text = path.read_text().replace("name: gemini", "name: gemeni").replace("dockerfile: Dockerfile",
                                                                              "dockerfile: Dockerfil")  # fmt: skip
    path.write_text(text + "egress: [api.example.com:99999]\n")
    with pytest.raises(SpecError) as caught:
        roles.load_file(path)
    joined = "\n".join(caught.value.problems)
    assert "duplicate key 'egress'" in joined  # the spec's loader: a key given twice is refused with both lines


def test_a_role_needs_exactly_one_recipe(roles_dir: Path) -> None:
    path = roles_dir / "amp" / "role.yaml"
    path.write_text(path.read_text().replace("  dockerfile: Dockerfile", "  dockerfile: Dockerfile\n  debootstrap: [git]"))
    with pytest.raises(SpecError) as caught:
        roles.load_file(path)
    assert any("give exactly one of dockerfile" in p and p.startswith(f"{path}:") for p in caught.value.problems)


def test_role_name_is_its_directory_and_named_files_exist(roles_dir: Path) -> None:
    (roles_dir / "demo" / "jackin-demo-agent").unlink()
    shutil.move(roles_dir / "codex", roles_dir / "codex2")
    bad = {c.name: c.problems for c in role_checks.validate()}
    assert any("'jackin-demo-agent' is not a file" in p for p in bad["demo"])
    assert any("'codex' is not the role's directory name 'codex2'" in p for p in bad["codex2"])


def test_roles_dir_override_and_discovery(roles_dir: Path) -> None:
    shutil.rmtree(roles_dir / "amp")
    (roles_dir / "notarole").mkdir()
    assert roles.roles_dir() == roles_dir and "amp" not in roles.names() and "notarole" not in roles.names()


def test_tag_changes_with_the_role_and_with_roles_common(roles_dir: Path) -> None:
    before = roles.load("demo").tag
    (roles_dir / "common" / "jackin-health").write_text("#!/bin/sh\nexit 0\n")
    after_common = roles.load("demo").tag
    assert after_common != before and after_common.startswith("jackin/role-demo:")
    agent = roles_dir / "demo" / "jackin-demo-agent"
    agent.write_text(agent.read_text() + "\n# edited\n")
    assert roles.load("demo").tag not in (before, after_common)


# --- the spec: role, credentials, egress -------------------------------------------------------

SPEC = """\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      role: {role}
{extra}  network: {{mode: {mode}, dns: [192.0.2.53], allow: [github.com:443]}}
"""


def fleet(role: str = "demo", extra: str = "", mode: str = "allowlist"):
    text = SPEC.format(role=role, extra=extra, mode=mode)
    if mode != "allowlist":
        text = text.replace(", allow: [github.com:443]", "")
    return parse_inventory(text, "f.yaml").fleet


CLAUDE_KEY = "      credentials: [{name: ANTHROPIC_API_KEY, from_env: ANTHROPIC_API_KEY}]\n"
CLAUDE_KEY_FILE = "      credentials: [{name: ANTHROPIC_API_KEY, from_env: ANTHROPIC_API_KEY, mode: file}]\n"


def test_a_role_credential_not_given_is_a_spec_error_naming_agent_role_and_credential() -> None:
    with pytest.raises(SpecError) as caught:
        fleet("claude-code")
    assert caught.value.problems == [
        "f.yaml:5: fleet.agents[0]: agent 'coder' has role 'claude-code', which needs credential(s) "
        "ANTHROPIC_API_KEY: give each under the agent's credentials (from_env or from_file)"]  # fmt: skip
    assert fleet("claude-code", CLAUDE_KEY).agents[0].role == "claude-code"  # control: given, accepted


def test_role_egress_joins_the_allowlist_in_allowlist_mode_only() -> None:
    spec = fleet("claude-code", CLAUDE_KEY_FILE)
    assert spec.agent_network(spec.agents[0]).allow == ["github.com:443", "api.anthropic.com:443"]
    through = fleet("claude-code", CLAUDE_KEY)  # through the credential gateway: the API is not in the allowlist
    assert through.agent_network(through.agents[0]).allow == ["github.com:443"]
    none = fleet("claude-code", CLAUDE_KEY, mode="none")
    assert none.agent_network(none.agents[0]).allow == []
    demo = fleet("demo")
    assert demo.agent_network(demo.agents[0]).allow == ["github.com:443"]  # the demo role adds nothing


def test_the_plan_and_contract_carry_the_role_egress_and_the_runtime_environment_risk() -> None:
    from jackin.plan import contract
    inventory = parse_inventory(SPEC.format(role="claude-code", extra=CLAUDE_KEY_FILE, mode="allowlist"), "f.yaml")
    fleet_plan = plan.build(inventory.fleet, {"coder-1": 60000})
    agent = fleet_plan.agents[0]
    assert agent.image == roles.load("claude-code").tag and agent.command == roles.load("claude-code").command
    assert "api.anthropic.com:443" in agent.policy.allow
    terms = contract.build(inventory, fleet_plan)
    coder = terms.agent("coder-1")
    assert "api.anthropic.com:443" in coder.network.allowlist  # the contract's network line is true
    risks = " | ".join(coder.residual_risks)
    assert "exports ANTHROPIC_API_KEY into the runtime's process environment" in risks
    assert "role claude-code adds api.anthropic.com:443 to the allowlist" in risks
    [cred] = coder.credentials
    assert (cred.delivery, cred.holds) == ("file", "the agent's process holds the value (residual risk)")


# --- the image step ----------------------------------------------------------------------------


def test_image_step_loads_a_missing_operator_image_and_shows_its_size(monkeypatch) -> None:
    from jackin.lifecycle import hostplan
    from jackin.facts.state import HostState

    spec = fleet("demo", mode="none")
    fleet_plan = plan.build(spec, {"coder-1": 60000})
    tag = fleet_plan.agents[0].image
    monkeypatch.setattr(images, "archive_size", lambda t: 67_403_050 if t == tag else None)
    changes = hostplan.host_changes(fleet_plan, HostState(), {})
    lines = [line for c in changes.changes if c.category == "image" for line in c.lines]
    assert lines == [f"load image {tag} from the operator (67 MB)"]
    [step] = [s for s in hostplan.steps(fleet_plan, HostState(), {}) if s.category == "image"]
    assert step.name == lines[0]  # the fleet.up preview (a dry run of the deploy) shows the step by this name
    present = HostState(images=[tag])
    assert not [c for c in hostplan.host_changes(fleet_plan, present, {}).changes if c.category == "image"]


def test_image_step_of_a_host_built_role_sends_its_files_and_builds_there() -> None:
    from jackin.operations import host as host_ops
    from jackin.operations.files import Upload

    role = roles.load("codex")
    commands = host_ops.role_image_commands(role.tag, [], **images.source(role.tag))
    uploads = [c for c in commands if isinstance(c, Upload)]
    directory = f"{host_ops.BUILD_DIR}/{role.tag.rsplit(':', 1)[1]}/"
    assert {u.target.removeprefix(directory) for u in uploads} >= {"Dockerfile", "role.yaml", "common/jackin-entrypoint"}
    assert all(u.target.startswith(f"{host_ops.BUILD_DIR}/") for u in uploads)
    assert f"DOCKER_BUILDKIT=0 docker build -q -t {role.tag} {host_ops.BUILD_DIR}/{role.tag.rsplit(':', 1)[1]}" in commands
    assert commands[-1].startswith("rm -rf ")
    assert host_ops.role_image_commands(role.tag, [role.tag], **images.source(role.tag)) == []


def test_a_role_image_that_is_not_the_role_current_one_is_refused() -> None:
    from jackin.operations.files import Refused

    with pytest.raises(Refused, match="is not role demo's current image"):
        images.source("jackin/role-demo:000000000000")


def test_missing_lists_only_role_images_the_host_lacks() -> None:
    tag = roles.load("demo").tag
    assert images.missing([tag, plan.DEFAULT_IMAGE, tag], [plan.DEFAULT_IMAGE]) == [tag]
    assert images.missing([tag], [tag]) == []
    assert images.archive_path(tag).name == f"role-demo-{tag.rsplit(':', 1)[1]}.tar.gz"
