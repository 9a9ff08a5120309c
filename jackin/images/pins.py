"""Every runtime pin of the shipped roles resolves in its registry: ``python -m jackin.images.pins``.

A role whose Dockerfile installs its runtime from npm names the version once, as a build argument
(``ARG CODEX_VERSION=0.39.0``), and uses it in its ``npm install`` (``"@openai/codex@${CODEX_VERSION}"``).
A version copied from documentation may not exist, and a package may be deprecated or renamed (as
``@sourcegraph/amp`` was, to ``@ampcode/cli``): the first user to build the role would be the first to
find out. So CI asks the registry this machine's npm is configured with (``npm view``: never a host
name written here) for each pin, and fails naming the role and the pin when one does not resolve to
exactly that version, or is deprecated.

The parsing is pure (``pins``); the registry is asked by ``npm`` (``check``), which ``main`` runs for
every pin, printing one line per pin, exiting 1 when any fails and 2 when npm is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
ARG = re.compile(r"^ARG\s+([A-Z][A-Z0-9_]*)=(\S+)\s*$", re.MULTILINE)
INSTALL = re.compile(r"npm install\b[^\n]*?[\"']?((?:@[a-z0-9._-]+/)?[a-z0-9._-]+)@\$\{([A-Z][A-Z0-9_]*)\}")


class Pin(BaseModel):
    """One runtime pin: the role, the npm package and the version its Dockerfile installs."""

    model_config = ConfigDict(frozen=True)

    role: str
    package: str
    version: str
    argument: str  # the Dockerfile's build argument that holds the version


class PinError(ValueError):
    """A Dockerfile installs from npm with a version that is no build argument of it."""


def pins(roles_dir: Path = ROLES_DIR) -> list[Pin]:
    """Every ``npm install PACKAGE@${ARG}`` of every role's Dockerfile, with the ARG's default."""
    found = []
    for dockerfile in sorted(roles_dir.glob("*/Dockerfile")):
        text = dockerfile.read_text()
        arguments = dict(ARG.findall(text))
        for package, argument in INSTALL.findall(text):
            if argument not in arguments:
                raise PinError(f"{dockerfile}: npm install {package}@${{{argument}}}: no ARG {argument}=VERSION")
            found.append(Pin(role=dockerfile.parent.name, package=package, version=arguments[argument],
                             argument=argument))  # fmt: skip
    return found


def npm_view(package: str, version: str) -> tuple[int, str]:
    """``npm view PACKAGE@VERSION version deprecated --json``: (exit status, output)."""
    done = subprocess.run(["npm", "view", f"{package}@{version}", "version", "deprecated", "--json"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    return done.returncode, done.stdout.strip() or done.stderr.strip()


def _npm_error(out: str) -> str:
    """npm's reason: its JSON error's summary (``--json``), else its first error line with words in it
    ("npm error code E404", "npm error 404 No match found for version 1.2")."""
    try:
        error = json.loads(out).get("error", {})
        return str(error.get("summary") or error.get("code") or "").strip()
    except (ValueError, AttributeError):
        pass
    lines = [line.removeprefix("npm error").strip() for line in out.splitlines() if line.strip()]
    return next((line for line in lines if len(line.split()) > 2), lines[-1] if lines else "")


def check(pin: Pin, view: Callable[[str, str], tuple[int, str]] = npm_view) -> str | None:
    """Why ``pin`` does not resolve (None: it does)."""
    code, out = view(pin.package, pin.version)
    if code != 0:
        return f"npm view failed: {_npm_error(out) or f'exit {code}'}"
    try:
        found = json.loads(out) if out else None
    except ValueError:
        return f"npm view printed no JSON: {out[:200]}"
    if isinstance(found, str):  # one field asked for and found: npm prints it bare
        found = {"version": found}
    if not isinstance(found, dict) or found.get("version") != pin.version:
        return f"no version {pin.version} of {pin.package} in the registry"
    if found.get("deprecated"):
        return f"{pin.package}@{pin.version} is deprecated: {found['deprecated']}"
    return None


def main(argv: list[str] | None = None) -> int:
    roles_dir = Path(argv[0]) if argv else ROLES_DIR
    if shutil.which("npm") is None:
        print("pins: npm is not installed: the roles' npm pins cannot be checked", file=sys.stderr)
        return 2
    try:
        found = pins(roles_dir)
    except PinError as error:
        print(f"pins: {error}", file=sys.stderr)
        return 1
    failed = 0
    for pin in found:
        problem = check(pin)
        print(f"role {pin.role}: {pin.package}@{pin.version} ({pin.argument}): {problem or 'resolves'}")
        failed += problem is not None
    if failed:
        print(f"pins: {failed} of {len(found)} pins do not resolve", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
