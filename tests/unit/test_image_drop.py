"""``image.drop`` (jackin/images/build.py ``drop``) on a stand-in root: what it removes, and that it never
follows a link out of the root (it runs as root on the operator's machine)."""

from __future__ import annotations

import os
from pathlib import Path

from jackin.images.build import drop


def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "usr/lib/x86_64-linux-gnu/perl/5.36").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/perl-base").mkdir(parents=True)
    (root / "usr/lib/git-core").mkdir(parents=True)
    (root / "var").mkdir()
    outside.mkdir()
    (outside / "docker.sock").write_text("precious")
    (root / "var/run").symlink_to(outside)  # as Debian's var/run -> /run: absolute, out of the root
    (root / "etc").mkdir()
    (root / "etc/link").symlink_to(outside / "docker.sock")
    return root, outside


def test_a_star_matches_one_name_and_only_what_matches_goes(tmp_path: Path) -> None:
    root, _ = tree(tmp_path)
    assert drop(root, "usr/lib/*/perl") == 1
    assert not (root / "usr/lib/x86_64-linux-gnu/perl").exists()
    assert (root / "usr/lib/x86_64-linux-gnu/perl-base").is_dir() and (root / "usr/lib/git-core").is_dir()
    assert drop(root, "usr/lib/*/perl") == 0  # gone already: the build says so


def test_no_link_is_followed_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tree(tmp_path)
    assert drop(root, "var/run/docker.sock") == 0  # var/run is a link: not entered
    assert drop(root, "var/*/docker.sock") == 0
    assert (outside / "docker.sock").read_text() == "precious"
    assert drop(root, "etc/link") == 1  # a link that matches goes itself, not what it points at
    assert not os.path.lexists(root / "etc/link") and (outside / "docker.sock").exists()
    assert drop(root, "var/run") == 1 and outside.is_dir() and (outside / "docker.sock").exists()
