"""Every npm package a shipped role's Dockerfile installs is pinned, and each pin resolves in the registry:
``python -m jackin.images.pins``.

A role whose Dockerfile installs its runtime from npm names the version once, as a build argument
(``ARG CODEX_VERSION=0.39.0``), and uses it in its install command (``"@openai/codex@${CODEX_VERSION}"``);
a version written out in the command is a pin too, and a package with no version is refused.
A version copied from documentation may not exist, and a package may be deprecated or renamed (as
``@sourcegraph/amp`` was, to ``@ampcode/cli``): the first user to build the role would be the first to
find out. So CI asks the registry this machine's npm is configured with (``npm view``: never a host
name written here) for each pin, and fails naming the role and the pin when one does not resolve to
exactly that version, or is deprecated, or ships its native runtime as platform packages of which the
one for Linux on this machine's architecture does not resolve (Amp's pin once did not: its wrapper
installed, with only a stub saying "Amp native binary not installed").

The parsing is pure (``pins``); the registry is asked by ``npm`` (``check``), which ``main`` runs for
every pin, printing one line per pin, exiting 1 when any fails and 2 when npm is missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from jackin.spec import roles
from jackin.spec.role_checks import dockerfile_instructions

ARG = re.compile(r"^([A-Z][A-Z0-9_]*)=(.+)$")
INSTALLERS = {("npm", "install"), ("npm", "i"), ("npm", "add"), ("pnpm", "add"), ("yarn", "add")}
SPEC = re.compile(r"^((?:@[a-z0-9._-]+/)?[a-z0-9._-]+)(?:@(.+))?$")
NODE_ARCH = {"x86_64": "x64", "aarch64": "arm64"}  # a machine's architecture as npm's platform packages name it
EXACT = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")
VARIABLE = re.compile(r"^\$\{?([A-Z][A-Z0-9_]*)\}?$")


class Pin(BaseModel):
    """One runtime pin: the role, the npm package and the version its Dockerfile installs."""

    model_config = ConfigDict(frozen=True)

    role: str
    package: str
    version: str
    argument: str | None = None  # the Dockerfile's build argument that holds the version (None: written out)


class PinError(ValueError):
    """A Dockerfile installs an npm package with no version, or with one that is no build argument of it."""


def _installs(command: str) -> list[str]:
    """The package arguments of every install command in one RUN line (its options left out)."""
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        words = command.split()
    found, i = [], 0
    while i < len(words) - 1:
        if (words[i], words[i + 1]) in INSTALLERS:
            i += 2
            while i < len(words) and words[i] not in ("&&", "||", ";", "|") and not words[i].endswith(";"):
                if not words[i].startswith("-"):
                    found.append(words[i])
                i += 1
            if i < len(words) and words[i].endswith(";") and not words[i].startswith("-") and words[i] != ";":
                found.append(words[i].rstrip(";"))
        i += 1
    return found


def pins(directory: Path | None = None) -> list[Pin]:
    """Every package an install command of a role's Dockerfile names, with its version: a build
    argument's default (``pkg@${ARG}``) or written out (``pkg@1.2.3``). Continuations are joined and
    comments dropped (``jackin.spec.role_checks.dockerfile_instructions``); a package with no version, or
    with a variable that is no ARG of the file, is refused, naming the file and the line."""
    found = []
    for dockerfile in sorted((directory or roles.roles_dir()).glob("*/Dockerfile")):
        arguments: dict[str, str] = {}
        for line, word, rest in dockerfile_instructions(dockerfile.read_text()):
            if word == "ARG" and (match := ARG.match(rest)):
                arguments[match.group(1)] = match.group(2).strip().strip("\"'")
            if word != "RUN":
                continue
            for spec in _installs(rest):
                match = SPEC.match(spec)
                if match is None or match.group(2) is None:
                    raise PinError(f"{dockerfile}:{line}: {spec}: not pinned to a version (pkg@${{ARG}} or pkg@1.2.3)")
                package, version = match.group(1), match.group(2)
                variable = VARIABLE.match(version)
                if variable is None:
                    found.append(Pin(role=dockerfile.parent.name, package=package, version=version))
                elif variable.group(1) in arguments:
                    found.append(Pin(role=dockerfile.parent.name, package=package,
                                     version=arguments[variable.group(1)], argument=variable.group(1)))  # fmt: skip
                else:
                    raise PinError(f"{dockerfile}:{line}: {spec}: no ARG {variable.group(1)}=VERSION before it")
    return found


NETWORK = ("ENOTFOUND", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "EAI_AGAIN", "timed out")


def npm_view(package: str, version: str) -> tuple[int, str]:
    """``npm view PACKAGE@VERSION version deprecated optionalDependencies --json``: (exit status, output);
    asked once more when the registry did not answer (a passing network error, not a missing version)."""
    for attempt in (1, 2):
        try:
            fields = ["version", "deprecated", "optionalDependencies"]
            done = subprocess.run(["npm", "view", f"{package}@{version}", *fields, "--json"],
                                  capture_output=True, text=True, timeout=90, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            code, out = 1, "npm view timed out after 90 s (the registry did not answer)"
        else:
            code, out = done.returncode, done.stdout.strip() or done.stderr.strip()
        if code == 0 or attempt == 2 or not any(word in out for word in NETWORK):
            return code, out
    return code, out


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
    # Its native build for Linux on this machine's architecture, when it ships one as an optional dependency
    # (Amp, OpenCode): npm installs the wrapper without it, and the runtime only says it is not installed.
    optional = found.get("optionalDependencies")
    optional = optional if isinstance(optional, dict) else {}
    arch = NODE_ARCH.get(os.uname().machine, os.uname().machine)
    for name, version in sorted(optional.items()):
        # glibc builds (the images are Debian's) pinned exactly (a range is another package's choice, not a build)
        if f"linux-{arch}" not in name or "musl" in name or not isinstance(version, str) or not EXACT.match(version):
            continue
        code, out = view(name, version)
        try:
            shown = json.loads(out) if code == 0 and out else None
        except ValueError:
            shown = None
        shown = shown.get("version") if isinstance(shown, dict) else shown
        if code != 0 and not any(word in out for word in ("E404", "404", "No match found")):
            return f"npm view of its Linux {arch} build {name}@{version} failed: {_npm_error(out) or f'exit {code}'}"
        if shown != version:
            return (
                f"its Linux {arch} build {name}@{version} is not in the registry"
                f"{f' ({_npm_error(out)})' if code != 0 else ''}: the package would install without its runtime"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    directory = Path(argv[0]) if argv else None
    if shutil.which("npm") is None:
        print("pins: npm is not installed: the roles' npm pins cannot be checked", file=sys.stderr)
        return 2
    try:
        found = pins(directory)
    except PinError as error:
        print(f"pins: {error}", file=sys.stderr)
        return 1
    failed = 0
    for pin in found:
        problem = check(pin)
        where = f" ({pin.argument})" if pin.argument else ""
        print(f"role {pin.role}: {pin.package}@{pin.version}{where}: {problem or 'resolves'}")
        failed += problem is not None
    if failed:
        print(f"pins: {failed} of {len(found)} pins do not resolve", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
