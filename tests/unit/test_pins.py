"""The roles' npm pins (jackin/images/pins.py): parsed from each Dockerfile, judged against what npm
answers. The registry itself is asked in CI (``.ci/run``'s pins step), never here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jackin.images import pins
from jackin.images.pins import Pin, PinError, check


def test_every_shipped_role_that_installs_from_npm_has_its_pin() -> None:
    found = {pin.role: (pin.package, pin.argument) for pin in pins.pins()}
    assert found == {
        "amp": ("@ampcode/cli", "AMP_VERSION"),
        "claude-code": ("@anthropic-ai/claude-code", "CLAUDE_CODE_VERSION"),
        "codex": ("@openai/codex", "CODEX_VERSION"),
        "gemini": ("@google/gemini-cli", "GEMINI_CLI_VERSION"),
        "opencode": ("opencode-ai", "OPENCODE_VERSION"),
    }
    assert all(pin.version and "$" not in pin.version for pin in pins.pins())


def role(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "Dockerfile").write_text(text)


def test_a_pin_is_the_args_default_and_a_missing_arg_is_named(tmp_path: Path) -> None:
    role(tmp_path, "one", 'FROM x\nARG TOOL_VERSION=1.2.3\nRUN npm install -g --no-fund "@scope/tool@${TOOL_VERSION}"\n')
    role(tmp_path, "plain", "FROM x\nARG T_VERSION=4.0.0\nRUN npm install -g plain-tool@${T_VERSION} && true\n")
    assert pins.pins(tmp_path) == [Pin(role="one", package="@scope/tool", version="1.2.3", argument="TOOL_VERSION"),
                                   Pin(role="plain", package="plain-tool", version="4.0.0", argument="T_VERSION")]  # fmt: skip
    role(tmp_path, "bad", 'FROM x\nRUN npm install -g "tool@${NOPE}"\n')
    with pytest.raises(PinError, match=r"bad/Dockerfile:2: tool@\$\{NOPE\}: no ARG NOPE=VERSION before it"):
        pins.pins(tmp_path)


def test_every_way_of_writing_an_install_is_read_and_comments_are_not(tmp_path: Path) -> None:
    role(tmp_path, "many", "\n".join([
        "FROM x",
        'ARG A_VERSION="1.0.0"',
        "ARG B_VERSION=2.0.0",
        "# RUN npm install -g commented@9.9.9",
        "RUN apt-get update \\",
        " && npm i -g --no-fund \\",
        "      a@${A_VERSION} b@$B_VERSION lit@3.1.4; npm add @s/c@0.0.1-x",
    ]) + "\n")  # fmt: skip
    assert [(p.package, p.version, p.argument) for p in pins.pins(tmp_path)] == [
        ("a", "1.0.0", "A_VERSION"), ("b", "2.0.0", "B_VERSION"), ("lit", "3.1.4", None), ("@s/c", "0.0.1-x", None)]


@pytest.mark.parametrize("line", ["RUN npm install -g tool", "RUN npm i tool && true", "RUN pnpm add tool"])
def test_a_package_without_a_version_is_refused(tmp_path: Path, line: str) -> None:
    role(tmp_path, "loose", f"FROM x\n{line}\n")
    with pytest.raises(PinError, match=r"loose/Dockerfile:2: tool: not pinned to a version"):
        pins.pins(tmp_path)


PIN = Pin(role="codex", package="@openai/codex", version="0.39.0", argument="CODEX_VERSION")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ((0, '"0.39.0"'), None),
        ((0, '{"version": "0.39.0"}'), None),
        ((0, ""), "no version 0.39.0 of @openai/codex in the registry"),  # npm prints nothing for an unknown version
        ((0, '"0.40.0"'), "no version 0.39.0 of @openai/codex in the registry"),
        ((0, '{"version": "0.39.0", "deprecated": "use @openai/codex-next"}'),
         "@openai/codex@0.39.0 is deprecated: use @openai/codex-next"),
        ((1, 'npm error code E404\nnpm error 404 Not Found - GET .../@openai%2fcodex'),
         "npm view failed: 404 Not Found - GET .../@openai%2fcodex"),
        ((1, '{"error": {"code": "E404", "summary": "No match found for version 1.1.28", "detail": "..."}}'),
         "npm view failed: No match found for version 1.1.28"),  # npm 11 with --json
        ((0, "not json"), "npm view printed no JSON: not json"),
    ],
    ids=["bare", "object", "unknown-version", "other-version", "deprecated", "unknown-package", "json-error",
         "garbage"],
)  # fmt: skip
def test_check_says_why_a_pin_does_not_resolve(answer: tuple[int, str], problem: str | None) -> None:
    asked = []

    def view(package: str, version: str) -> tuple[int, str]:
        asked.append((package, version))
        return answer

    assert check(PIN, view) == problem
    assert asked == [("@openai/codex", "0.39.0")]


def test_main_names_each_failing_role_and_exits_1(tmp_path: Path, monkeypatch, capsys) -> None:
    role(tmp_path, "good", 'ARG A_VERSION=1.0.0\nRUN npm install -g "a@${A_VERSION}"\n')
    role(tmp_path, "gone", 'ARG B_VERSION=9.9.9\nRUN npm install -g "b@${B_VERSION}"\n')
    monkeypatch.setattr(pins.shutil, "which", lambda _: "/usr/bin/npm")
    monkeypatch.setattr(pins, "npm_view", lambda p, v: (0, '"1.0.0"') if p == "a" else (0, ""))
    monkeypatch.setattr(pins, "check", lambda pin, view=None: check(pin, pins.npm_view))
    assert pins.main([str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == ["role gone: b@9.9.9 (B_VERSION): no version 9.9.9 of b in the registry",
                                "role good: a@1.0.0 (A_VERSION): resolves"]  # fmt: skip
    assert err == "pins: 1 of 2 pins do not resolve\n"
    monkeypatch.setattr(pins.shutil, "which", lambda _: None)
    assert pins.main([str(tmp_path)]) == 2


def test_a_runtime_whose_linux_build_is_missing_does_not_resolve(monkeypatch) -> None:
    """Amp's pin installed its wrapper, whose native build for Linux was never published at that version: the
    wrapper's bin only said "Amp native binary not installed". Only this machine's architecture's glibc
    builds pinned exactly are asked for (musl builds and version ranges are not runtimes the images run)."""
    monkeypatch.setattr(pins.os, "uname", lambda: type("U", (), {"machine": "x86_64"})())
    pin = Pin(role="amp", package="@ampcode/cli", version="0.0.2-g1")
    optional = {"@ampcode/cli-linux-x64": "0.0.2-g1", "@ampcode/cli-linux-arm64": "0.0.2-g1",
                "@ampcode/cli-linux-x64-musl": "0.0.2-g1", "@ampcode/cli-darwin-x64": "0.0.2-g1",
                "@img/sharp-linux-x64": "^0.33.5"}  # fmt: skip
    asked = []

    def view(missing: set[str]):
        def answer(package: str, version: str) -> tuple[int, str]:
            asked.append(package)
            if package == "@ampcode/cli":
                return 0, json.dumps({"version": version, "optionalDependencies": optional})
            if package in missing:
                return 1, json.dumps({"error": {"code": "E404", "summary": f"No match found for version {version}"}})
            return 0, json.dumps(version)
        return answer

    assert check(pin, view(set())) is None
    assert asked == ["@ampcode/cli", "@ampcode/cli-linux-x64"]  # not arm64, musl, darwin or a range
    assert check(pin, view({"@ampcode/cli-linux-x64"})) == (
        "its Linux x64 build @ampcode/cli-linux-x64@0.0.2-g1 is not in the registry (No match found for version "
        "0.0.2-g1): the package would install without its runtime")  # fmt: skip


def test_a_platform_build_the_registry_did_not_answer_for_is_not_called_missing(monkeypatch) -> None:
    monkeypatch.setattr(pins.os, "uname", lambda: type("U", (), {"machine": "x86_64"})())
    pin = Pin(role="amp", package="@ampcode/cli", version="0.0.2-g1")

    def view(package: str, version: str) -> tuple[int, str]:
        if package == "@ampcode/cli":
            return 0, json.dumps({"version": version, "optionalDependencies": {"@ampcode/cli-linux-x64": version}})
        return 1, "npm error code ETIMEDOUT\nnpm error network request to the registry timed out"

    assert check(pin, view) == ("npm view of its Linux x64 build @ampcode/cli-linux-x64@0.0.2-g1 failed: "
                                "network request to the registry timed out")  # fmt: skip
