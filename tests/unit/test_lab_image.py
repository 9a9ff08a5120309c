"""The lab image recipe: which apt mirror debootstrap uses, the cached image tag,
and the package list. All from temporary files; nothing is built or fetched."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from jackin.errors import LabError
from jackin.lab import image

# Made-up hosts only: these URIs must never resolve.
MAIN = "http://mirror.invalid/debian"
SECURITY = "http://mirror.invalid/debian-security"
OTHER = "http://other.invalid/debian"

DEBIAN_SOURCES = f"""\
Types: deb
# http://snapshot.invalid/archive/debian/20240101T000000Z
URIs: {MAIN}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JACKIN_APT_MIRROR", raising=False)
    monkeypatch.delenv("JACKIN_LAB_SUITE", raising=False)


def apt_root(tmp_path: Path, *, sources: dict[str, str] | None = None, sources_list: str | None = None) -> Path:
    """An /etc/apt look-alike: ``sources`` are files in sources.list.d/, by name."""
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    for name, text in (sources or {}).items():
        (root / "sources.list.d" / name).write_text(text)
    if sources_list is not None:
        (root / "sources.list").write_text(sources_list)
    return root


# --- apt_mirror: deb822 ---------------------------------------------------------


def test_deb822_picks_the_stanza_for_the_suite(tmp_path: Path) -> None:
    root = apt_root(tmp_path, sources={"debian.sources": DEBIAN_SOURCES})
    assert image.apt_mirror(root) == MAIN


def test_deb822_security_stanza_first_is_not_taken_for_bookworm(tmp_path: Path) -> None:
    security_first = f"""\
Types: deb
URIs: {SECURITY}
Suites: bookworm-security

Types: deb
URIs: {MAIN}
Suites: bookworm bookworm-updates
"""
    root = apt_root(tmp_path, sources={"debian.sources": security_first})
    assert image.apt_mirror(root) == MAIN


def test_deb822_first_of_several_uris(tmp_path: Path) -> None:
    text = f"Types: deb\nURIs: {MAIN} {OTHER}\nSuites: bookworm\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    assert image.apt_mirror(root) == MAIN


def test_deb822_field_names_are_case_insensitive(tmp_path: Path) -> None:
    text = f"types: deb\nuris: {MAIN}\nsuites: bookworm\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    assert image.apt_mirror(root) == MAIN


def test_deb822_source_only_stanza_is_skipped(tmp_path: Path) -> None:
    text = f"Types: deb-src\nURIs: {OTHER}\nSuites: bookworm\n\nTypes: deb deb-src\nURIs: {MAIN}\nSuites: bookworm\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    assert image.apt_mirror(root) == MAIN


def test_deb822_stanzas_separated_by_a_whitespace_only_line(tmp_path: Path) -> None:
    text = f"Types: deb\nURIs: {SECURITY}\nSuites: bookworm-security\n   \nTypes: deb\nURIs: {MAIN}\nSuites: bookworm\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    assert image.apt_mirror(root) == MAIN


def test_deb822_files_are_read_in_name_order(tmp_path: Path) -> None:
    one = f"Types: deb\nURIs: {OTHER}\nSuites: bookworm\n"
    two = f"Types: deb\nURIs: {MAIN}\nSuites: bookworm\n"
    root = apt_root(tmp_path, sources={"b.sources": two, "a.sources": one})
    assert image.apt_mirror(root) == OTHER


def test_deb822_wins_over_one_line_entries(tmp_path: Path) -> None:
    root = apt_root(
        tmp_path,
        sources={"debian.sources": DEBIAN_SOURCES},
        sources_list=f"deb {OTHER} bookworm main\n",
    )
    assert image.apt_mirror(root) == MAIN


def test_deb822_disabled_stanza_is_skipped(tmp_path: Path) -> None:
    text = f"Types: deb\nURIs: {OTHER}\nSuites: bookworm\nEnabled: no\n\nTypes: deb\nURIs: {MAIN}\nSuites: bookworm\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    assert image.apt_mirror(root) == MAIN


# --- apt_mirror: one-line sources.list --------------------------------------------


def test_one_line_sources_list(tmp_path: Path) -> None:
    text = f"""\
# deb {OTHER} bookworm main
deb-src {OTHER} bookworm main
deb {SECURITY} bookworm-security main
deb {MAIN} bookworm main contrib
"""
    root = apt_root(tmp_path, sources_list=text)
    assert image.apt_mirror(root) == MAIN


def test_one_line_with_options_in_brackets(tmp_path: Path) -> None:
    text = f"  deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] {MAIN} bookworm main\n"
    root = apt_root(tmp_path, sources_list=text)
    assert image.apt_mirror(root) == MAIN


def test_one_line_list_files_in_sources_list_d(tmp_path: Path) -> None:
    root = apt_root(tmp_path, sources={"mirror.list": f"deb {MAIN} bookworm main\n"})
    assert image.apt_mirror(root) == MAIN


def test_sources_list_is_read_before_list_d(tmp_path: Path) -> None:
    root = apt_root(
        tmp_path,
        sources={"extra.list": f"deb {OTHER} bookworm main\n"},
        sources_list=f"deb {MAIN} bookworm main\n",
    )
    assert image.apt_mirror(root) == MAIN


# --- apt_mirror: suite and override -----------------------------------------------


def test_suite_follows_jackin_lab_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = DEBIAN_SOURCES + f"\nTypes: deb\nURIs: {OTHER}\nSuites: trixie\n"
    root = apt_root(tmp_path, sources={"debian.sources": text})
    monkeypatch.setenv("JACKIN_LAB_SUITE", "trixie")
    assert image.apt_mirror(root) == OTHER


def test_override_wins_without_reading_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JACKIN_APT_MIRROR", OTHER)
    assert image.apt_mirror(tmp_path / "does-not-exist") == OTHER
    root = apt_root(tmp_path, sources={"debian.sources": DEBIAN_SOURCES})
    assert image.apt_mirror(root) == OTHER


def test_empty_override_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JACKIN_APT_MIRROR", "")
    root = apt_root(tmp_path, sources={"debian.sources": DEBIAN_SOURCES})
    assert image.apt_mirror(root) == MAIN


# --- apt_mirror: nothing matches ---------------------------------------------------


def assert_no_source(root: Path, suite: str) -> None:
    with pytest.raises(LabError) as caught:
        image.apt_mirror(root)
    error = caught.value
    assert error.message == f"no apt source for Debian {suite!r} found under {root}"
    assert error.hint == "set JACKIN_APT_MIRROR to a Debian archive URI"
    assert error.exit_code == 1


def test_no_matching_suite_raises_with_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = apt_root(
        tmp_path,
        sources={"debian.sources": DEBIAN_SOURCES},
        sources_list=f"deb {OTHER} bullseye main\n",
    )
    monkeypatch.setenv("JACKIN_LAB_SUITE", "trixie")
    assert_no_source(root, "trixie")


def test_security_suite_alone_does_not_match(tmp_path: Path) -> None:
    text = f"Types: deb\nURIs: {SECURITY}\nSuites: bookworm-security\n"
    root = apt_root(tmp_path, sources={"debian.sources": text}, sources_list=f"deb {SECURITY} bookworm-security main\n")
    assert_no_source(root, "bookworm")


def test_empty_and_missing_roots_raise(tmp_path: Path) -> None:
    assert_no_source(apt_root(tmp_path), "bookworm")
    assert_no_source(tmp_path / "nowhere", "bookworm")


# --- image_tag ------------------------------------------------------------------


def test_image_tag_is_stable_and_named() -> None:
    tag = image.image_tag()
    assert tag == image.image_tag()
    assert re.fullmatch(r"jackin/lab-host:[0-9a-f]{12}", tag)


def test_image_tag_changes_with_the_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    bookworm = image.image_tag()
    monkeypatch.setenv("JACKIN_LAB_SUITE", "bookworm")
    assert image.image_tag() == bookworm  # the default is bookworm
    monkeypatch.setenv("JACKIN_LAB_SUITE", "trixie")
    assert image.image_tag() != bookworm


@pytest.mark.parametrize("name", image.RECIPE_FILES)
def test_image_tag_changes_with_each_recipe_file(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = tmp_path / "recipe"
    shutil.copytree(image.RECIPE_DIR, recipe)
    monkeypatch.setattr(image, "RECIPE_DIR", recipe)
    before = image.image_tag()
    assert before == image.image_tag()
    with (recipe / name).open("a") as handle:
        handle.write("\n# edited\n")
    assert image.image_tag() != before


# --- packages -------------------------------------------------------------------


def test_packages_of_the_real_recipe() -> None:
    names = image.packages()
    assert {"systemd", "openssh-server", "nftables", "docker.io", "python3"} <= set(names)
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", name) for name in names), names


def test_packages_skip_comments_and_blank_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "packages.txt").write_text("# a comment\nsystemd\n\n   \nopenssh-server  \n#another\n")
    monkeypatch.setattr(image, "RECIPE_DIR", tmp_path)
    assert image.packages() == ["systemd", "openssh-server"]


def test_packages_skip_indented_comments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "packages.txt").write_text("systemd\n  # pinned for the lab\nnftables\n")
    monkeypatch.setattr(image, "RECIPE_DIR", tmp_path)
    assert image.packages() == ["systemd", "nftables"]
