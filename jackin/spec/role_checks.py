"""A role's image recipe checked without a network (``role.validate``): role.yaml against the model
(``jackin.spec.roles``), then its Dockerfile, or the one generated for a debootstrap role, against what an
offline look can check (pinned bases and packages, no script piped into a shell, a non-root USER, the
role's HEALTHCHECK, ENTRYPOINT and CMD, roles/common copied in).
"""

from __future__ import annotations

import json
import re

from pydantic import Field

from jackin.errors import SpecError
from jackin.spec.roles import COMMON, ENTRYPOINT, ROLE_FILE, Role, dockerfile, load_file, names, roles_dir
from jackin.spec.values import Model

_PINNED_FROM = re.compile(r"^(?:--platform=\S+\s+)?(?P<image>[a-z0-9][a-z0-9._/-]*)(?::(?P<tag>[A-Za-z0-9._-]+))?"
                          r"(?:@sha256:[0-9a-f]{64})?(?:\s+AS\s+\S+)?$", re.IGNORECASE)  # fmt: skip
_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|da|z)?sh\b")
_NPM_GLOBAL = re.compile(r"\bnpm\s+(?:install|i)\s+(?:-g|--global)\b([^&;|]*)")


def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) of a Dockerfile: continuations joined, comments dropped."""
    out: list[tuple[int, str, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def check_dockerfile(role: Role, text: str, filename: str) -> list[str]:
    """What an offline look at the role's Dockerfile can check: FROM pinned to a tag (or digest), not
    ``latest``; no script piped from the network into a shell; every ``npm install -g`` package pinned to
    a version; the last USER not root; a HEALTHCHECK equal to the role's; ENTRYPOINT the common
    entrypoint; CMD the role's command; roles/common copied in. Problems as ``FILE:LINE: message``."""
    steps = dockerfile_instructions(text)
    problems: list[str] = []
    args = {m.group(1): m.group(2) for _, word, rest in steps if word == "ARG"
            for m in [re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S+)$", rest)] if m}  # fmt: skip

    def say(line: int, message: str) -> None:
        problems.append(f"{filename}:{line}: {message}")

    def last(word: str) -> tuple[int, str] | None:
        found = [(n, rest) for n, w, rest in steps if w == word]
        return found[-1] if found else None

    froms = [(n, rest) for n, w, rest in steps if w == "FROM"]
    if not froms:
        say(1, "no FROM: the base image is not named")
    for line, rest in froms:
        match = _PINNED_FROM.match(rest)
        if not match or (not match.group("tag") and "@sha256:" not in rest) or match.group("tag") == "latest":
            say(line, f"FROM {rest}: pin the base image to a tag (not latest) or a digest")
    for line, word, rest in steps:
        if word == "RUN" and _PIPE_TO_SHELL.search(rest):
            say(line, "a script fetched from the network is piped into a shell: install a pinned package instead")
        if word == "RUN":
            for spec in npm.group(1).split() if (npm := _NPM_GLOBAL.search(rest)) else []:
                spec = spec.strip("\"'")
                if spec.startswith("-"):
                    continue
                expanded = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m.group(1), ""), spec)
                version = expanded.rpartition("@")[2] if expanded.rfind("@") > 0 else ""
                if not version or version in ("latest", "next") or not re.match(r"^\d", version):
                    say(line, f"npm package {spec} is not pinned to a version")
    user = last("USER")
    if user is None or user[1].split(":")[0] in ("root", "0"):
        say(user[0] if user else 1, "the image's USER must not be root (jackin runs it as the agent's uid anyway)")
    health = last("HEALTHCHECK")
    if health is None:
        say(1, "no HEALTHCHECK")
    elif f"HEALTHCHECK {health[1]}" != role.healthcheck.instruction():
        say(health[0], f"HEALTHCHECK differs from role.yaml's healthcheck ({role.healthcheck.instruction()})")
    entry = last("ENTRYPOINT")
    if entry is None or _json_list(entry[1]) != [ENTRYPOINT]:
        say(entry[0] if entry else 1, f'ENTRYPOINT must be ["{ENTRYPOINT}"] (the common entrypoint)')
    cmd = last("CMD")
    if cmd is None or _json_list(cmd[1]) != role.command:
        say(cmd[0] if cmd else 1, "CMD must be role.yaml's command, in JSON form")
    if not any(w in ("COPY", "ADD") and rest.split()[0].rstrip("/") == COMMON for _, w, rest in steps if rest):
        say(1, f"roles/{COMMON} is not copied in (COPY {COMMON}/ /usr/local/bin/)")
    return problems


def _json_list(text: str) -> list[str] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


class RoleCheck(Model):
    """One role's validation: its file, and every problem found (empty: valid)."""

    name: str
    file: str
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(name: str | None = None) -> list[RoleCheck]:
    """Every role (or ``name``): role.yaml against the model, then its Dockerfile (or the generated one
    of a debootstrap role) against ``check_dockerfile``."""
    wanted = [name] if name else names()
    if name and name not in names():
        raise SpecError(f"unknown role {name!r} (known roles: {', '.join(names()) or 'none'})",
                        hint=f"roles live in {roles_dir()}")  # fmt: skip
    checks = []
    for each in wanted:
        path = roles_dir() / each / ROLE_FILE
        try:
            role = load_file(path)
        except SpecError as error:
            checks.append(RoleCheck(name=each, file=str(path), problems=error.problems or [error.message]))
            continue
        if role.image.dockerfile:
            docker = role.directory / role.image.dockerfile
            problems = check_dockerfile(role, docker.read_text(), str(docker))
        else:
            problems = check_dockerfile(role, dockerfile(role, "jackin/base:0"), f"{path} (generated Dockerfile)")
        checks.append(RoleCheck(name=each, file=str(path), problems=problems))
    return checks
