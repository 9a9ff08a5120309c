"""The lab host image: a Debian root built with debootstrap, imported into Docker.

No registry is reachable, so the image is built locally from Debian packages,
from the package mirror this machine's apt already uses (``JACKIN_APT_MIRROR``
overrides it). It is tagged with a hash of its recipe, so a second ``lab.up``
finds it cached and an edited recipe builds a new one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from jackin.errors import LabError
from jackin.lab import docker as dk
from jackin.spec.roles import suite

RECIPE_DIR = Path(__file__).parent / "recipe"
RECIPE_FILES = ("packages.txt", "customize.sh", "agent-image.sh", "jackin-agent-image.service")
REPOSITORY = "jackin/lab-host"
AGENT_IMAGE = "jackin/agent:busybox"


def packages() -> list[str]:
    lines = (RECIPE_DIR / "packages.txt").read_text().splitlines()
    stripped = (line.split("#", 1)[0].strip() for line in lines)
    return [line for line in stripped if line]


def image_tag() -> str:
    digest = hashlib.sha256(suite().encode())
    for name in RECIPE_FILES:
        digest.update(name.encode() + b"\0" + (RECIPE_DIR / name).read_bytes())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def apt_mirror(sources_root: Path = Path("/etc/apt")) -> str:
    """The Debian archive URI from this machine's apt sources, for ``suite()``."""
    override = os.environ.get("JACKIN_APT_MIRROR")
    if override:
        return override
    wanted = suite()
    candidates: list[tuple[str, list[str]]] = []
    for path in sorted((sources_root / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE)
            )
            enabled = fields.get("enabled", "yes").lower() not in ("no", "false", "0")
            if enabled and "deb" in fields.get("types", "").split() and fields.get("uris"):
                candidates.append((fields["uris"].split()[0], fields.get("suites", "").split()))
    lists = [sources_root / "sources.list", *sorted((sources_root / "sources.list.d").glob("*.list"))]
    for path in lists:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                match = re.match(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
                if match:
                    candidates.append((match.group(1), [match.group(2)]))
    for uri, suites in candidates:
        if wanted in suites:
            return uri
    raise LabError(
        f"no apt source for Debian {wanted!r} found under {sources_root}",
        hint="set JACKIN_APT_MIRROR to a Debian archive URI",
    )


def ensure_image(log: Callable[[str], None] = lambda _: None) -> str:
    """Return the lab host image tag, building it first if it is not cached."""
    tag = image_tag()
    if dk.exists("image", tag):
        return tag
    _check_build_tools()
    log(f"building lab host image {tag} with debootstrap ({suite()}; about a minute)")
    with tempfile.TemporaryDirectory(prefix="jackin-image-", dir="/var/tmp") as work:
        root = Path(work) / "root"
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages())}",
                suite(),
                str(root),
                apt_mirror(),
            ],
            "debootstrap",
        )
        shutil.copy(RECIPE_DIR / "jackin-agent-image.service", root / "etc/systemd/system/")
        for script in ("customize.sh", "agent-image.sh"):
            shutil.copy(RECIPE_DIR / script, root / "tmp" / script)
        _run(["chroot", str(root), "/bin/sh", "/tmp/customize.sh"], "customizing the image")
        for script in ("customize.sh", "agent-image.sh"):
            (root / "tmp" / script).unlink()
        log("importing the root into the Docker engine")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            done = subprocess.run(
                [
                    "docker",
                    "import",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    f"LABEL jackin.recipe={tag.split(':')[1]}",
                    "-",
                    tag,
                ],
                stdin=tar.stdout,
                capture_output=True,
                check=False,
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if done.returncode != 0:
            raise LabError(f"docker import failed: {done.stderr.decode(errors='replace').strip()}")
    return tag


def _check_build_tools() -> None:
    if os.geteuid() != 0:
        raise LabError("building the lab image needs root (debootstrap and chroot)", hint="run as root")
    if shutil.which("debootstrap") is None:
        raise LabError(
            "debootstrap is not installed, and the lab image is not cached",
            hint="apt-get install debootstrap (bash .ci/setup does it)",
        )


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.decode(errors="replace").splitlines()[-15:])
        err = done.stderr.decode(errors="replace").strip()
        raise LabError(f"{what} failed (exit {done.returncode}):\n{tail}\n{err}".rstrip())
