"""The host's AppArmor in the state read (jackin/facts/state.py ``##apparmor``): its parser, strict, and
the read itself run locally against stand-in kernel files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jackin.facts.state import AppArmor, StateError, parse_state
from jackin.facts.state_read import APPARMOR_SECTION, state_command

ENABLED = "/sys/module/apparmor/parameters/enabled"
PROFILES = "/sys/kernel/security/apparmor/profiles"


@pytest.mark.parametrize(("lines", "expected"), [
    (["enabled=Y", "docker-default=enforce"], AppArmor(enabled=True, docker_default="enforce")),
    (["enabled=Y", "docker-default=complain"], AppArmor(enabled=True, docker_default="complain")),
    (["enabled=Y"], AppArmor(enabled=True)),
    (["enabled=N"], AppArmor(enabled=False)),
    (["enabled="], AppArmor(enabled=False)),  # no such file: a kernel without AppArmor
    ([], AppArmor(enabled=False)),
    (["enabled=yes"], AppArmor(enabled=False)),  # only the kernel's own "Y" counts
    (["enabled=Y", "docker-default=ENFORCE"], AppArmor(enabled=True)),  # not a lowercase word: dropped
    (["enabled=Y", "docker-default=enforce x"], AppArmor(enabled=True)),
    (["enabled=Y", "docker-default=" + "a" * 17], AppArmor(enabled=True)),
    (["enabled=Y", "noise", "docker-default=enforce"], AppArmor(enabled=True, docker_default="enforce")),
])  # fmt: skip
def test_parse_apparmor_section(lines: list[str], expected: AppArmor) -> None:
    assert parse_state(["##host", "kernel=6.1.0", "##apparmor", *lines]).apparmor == expected


def test_a_read_without_the_section_has_no_apparmor_facts() -> None:
    assert parse_state(["##host", "kernel=6.1.0"]).apparmor is None


def test_the_section_twice_is_a_state_error() -> None:
    with pytest.raises(StateError, match="section 'apparmor' twice"):
        parse_state(["##apparmor", "enabled=N", "##apparmor", "enabled=Y", "docker-default=enforce"])


def test_the_state_command_reads_apparmor_after_the_credentials() -> None:
    command = state_command("demo", 60000, 60999)
    assert APPARMOR_SECTION in command.splitlines()
    assert command.index("echo '##creddigests'") < command.index("echo '##apparmor'")


def _run(tmp_path: Path, enabled: str | None, profiles: str | None) -> AppArmor | None:
    """The section run by ``sh`` with the two kernel files replaced by files under ``tmp_path``."""
    script, tmp_path = APPARMOR_SECTION, tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    tmp_path.mkdir()
    for real, content, name in ((ENABLED, enabled, "enabled"), (PROFILES, profiles, "profiles")):
        path = tmp_path / name
        if content is not None:
            path.write_text(content)
        script = script.replace(real, str(path))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=10, check=True).stdout
    return parse_state(out.split("\n")).apparmor


def test_the_read_run_locally(tmp_path: Path) -> None:
    loaded = "unconfined-x (unconfined)\ndocker-default (enforce)\nlsb_release (complain)\n"
    assert _run(tmp_path, "Y\n", loaded) == AppArmor(enabled=True, docker_default="enforce")
    assert _run(tmp_path, "Y\n", "lsb_release (complain)\n") == AppArmor(enabled=True)
    assert _run(tmp_path, "N\n", None) == AppArmor(enabled=False)
    assert _run(tmp_path, None, None) == AppArmor(enabled=False)  # a kernel without AppArmor
    # a profile named like docker's but not it, or a forged section line, is not read as loaded
    assert _run(tmp_path, "Y\n", "docker-default-x (enforce)\n##apparmor\n") == AppArmor(enabled=True)
