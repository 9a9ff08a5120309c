"""Load an inventory file into models, or report every problem in it at once.

YAML is parsed to a node tree (ruamel.yaml, YAML 1.2: ``yes`` stays a string)
and turned into plain data by hand, so that every value keeps its line and a
duplicate key is reported with both lines instead of silently keeping the last.
Problems come out one a line: ``FILE:LINE: field.path: what was expected``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from jackin.errors import SpecError
from jackin.spec.models import Inventory

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    line: int | None
    path: Path_
    message: str

    def render(self, filename: str) -> str:
        where = f"{filename}:{self.line}" if self.line else filename
        field = format_path(self.path)
        return f"{where}: {field}: {self.message}" if field else f"{where}: {self.message}"


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class _Tree:
    """Plain data built from YAML nodes, with the line of every path."""

    MAX_NODES = 100_000  # an inventory is small; aliases must not expand without bound

    def __init__(self) -> None:
        self.lines: dict[Path_, int] = {}
        self.problems: list[Problem] = []
        self._yaml = YAML(typ="safe", pure=True)
        self._open: set[int] = set()  # nodes being built: an alias back into one is a loop
        self._count = 0

    def build(self, node: Node, path: Path_) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(path, line)
        self._count += 1
        if self._count > self.MAX_NODES:
            raise SpecError(
                "inventory is too large",
                problems=[f"{line}: more than {self.MAX_NODES} values (are aliases expanding without bound?)"],
            )
        if id(node) in self._open:
            self.problems.append(Problem(line, path, "recursive alias: a value cannot contain itself"))
            return None
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        self._open.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _scalar(self, node: ScalarNode, path: Path_) -> Any:
        try:
            return self._yaml.constructor.construct_object(node, deep=True)
        except (YAMLError, ValueError, KeyError, TypeError) as error:
            detail = getattr(error, "problem", None) or str(error).splitlines()[0]
            self.problems.append(
                Problem(
                    node.start_mark.line + 1, path, f"cannot read {node.value!r} as {node.tag}: {_one_line(detail)}"
                )
            )
            return None

    def _mapping(self, node: MappingNode, path: Path_) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode) or (key_node.tag or "").endswith(":merge"):
                self.problems.append(
                    Problem(line, path, "only plain keys are supported (no merge keys or complex keys)")
                )
                continue
            key = str(key_node.value)
            if key in first_line:
                self.problems.append(
                    Problem(
                        line,
                        path + (key,),
                        f"duplicate key {key!r} (first set on line {first_line[key]}); each key may appear once",
                    )
                )
                continue
            first_line[key] = line
            self.lines[path + (key,)] = line
            out[key] = self.build(value_node, path + (key,))
        return out


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


DEFAULT_INVENTORY = Path("inventory/lab.yaml")  # what commands read without -i


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate one inventory file; raise SpecError listing every problem."""
    path = Path(path)
    filename = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            f"{filename}: no such inventory file",
            hint="pass an existing file with -i, e.g. -i inventory/lab.yaml",
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{filename}: cannot read inventory: {error}") from None
    return parse_inventory(text, filename)


def parse_inventory(text: str, filename: str = "<inventory>") -> Inventory:
    data, tree = _parse_yaml(text, filename)
    problems = list(tree.problems)
    inventory: Inventory | None = None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        problems.append(Problem(1, (), f"expected a mapping with 'fleet' (and 'hosts', 'groups'), got {got}"))
    else:
        try:
            # Relative paths in the spec (work's repo and task_file) are the inventory file's neighbours.
            base = str(Path(filename).parent) if not filename.startswith("<") else "."
            inventory = Inventory.model_validate(data, context={"base_dir": base})
        except ValidationError as error:
            problems.extend(_from_validation(error, tree.lines, Inventory))
        problems.extend(_check_references(data, tree.lines))
    if problems:
        problems.sort(key=lambda p: (p.line or 0, format_path(p.path)))
        lines = [p.render(filename) for p in problems]
        count = f"{len(lines)} problem{'s' if len(lines) > 1 else ''}"
        raise SpecError(f"{filename}: invalid inventory ({count})", problems=lines)
    assert inventory is not None
    return inventory


def _parse_yaml(text: str, filename: str) -> tuple[Any, _Tree]:
    tree = _Tree()
    yaml = YAML(typ="safe", pure=True)
    try:
        node = yaml.compose(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise SpecError(
            f"{filename}: invalid inventory (1 problem)",
            problems=[f"{filename}{line}: YAML syntax error: {error.problem or error.context}"],
        ) from None
    except YAMLError as error:
        raise SpecError(f"{filename}: invalid inventory (1 problem)", problems=[f"{filename}: {error}"]) from None
    if node is None:
        return None, tree
    try:
        return tree.build(node, ()), tree
    except SpecError as error:
        raise SpecError(f"{filename}: {error.message}", problems=[f"{filename}:{p}" for p in error.problems]) from None


def _line_for(path: Path_, lines: dict[Path_, int]) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def _model_at(model: type[BaseModel], path: Path_) -> type[BaseModel] | None:
    """The model class that holds the last key of ``path`` (for 'did you mean')."""
    current: Any = model
    for part in path[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _from_validation(error: ValidationError, lines: dict[Path_, int], root: type[BaseModel]) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False):
        path: Path_ = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        problems.append(Problem(_line_for(path, lines), path, _message(item, path, root)))
    return problems


_SECRET_KEYS = {"value", "secret", "password", "token", "key"}

_EXPECTED = {
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "missing": "required field is missing",
}


def _message(item: Mapping[str, Any], path: Path_, root: type[BaseModel]) -> str:
    kind = item["type"]
    value = item.get("input")
    if "credentials" in path and isinstance(value, str):
        value = _Hidden()  # whatever was typed there might be a pasted secret: never echo it
    if kind == "extra_forbidden":
        key = path[-1] if path else "?"
        model = _model_at(root, path)
        known = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (expected one of: {', '.join(known)})" if known else ""
        if "credentials" in path and key in _SECRET_KEYS:
            return (
                f"unknown key {key!r}: a spec never holds a secret's value; "
                "name where it lives with from_env or from_file"
            )
        return f"unknown key {key!r}{hint}{listing}"
    if kind in _EXPECTED:
        base = _EXPECTED[kind]
        return base if kind == "missing" else f"{base}, got {_show(value)}"
    if kind == "literal_error":
        expected = item.get("ctx", {}).get("expected", "")
        return f"expected one of {expected}, got {_show(value)}"
    if kind == "string_pattern_mismatch":
        return f"{_show(value)} is not valid here: {_pattern_hint(path)}"
    if kind in _BOUNDS:
        return f"expected a number {_BOUNDS[kind]} {_bound(item)}, got {_show(value)}"
    if kind == "value_error":
        message = str(item.get("ctx", {}).get("error", item["msg"]))
    else:
        message = item["msg"][0].lower() + item["msg"][1:]
    if isinstance(value, (dict, list)) or repr(value) in message:
        return message
    return f"{message}, got {_show(value)}"


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _bound(item: Mapping[str, Any]) -> str:
    ctx = item.get("ctx", {})
    return str(next(iter(ctx.values()), "")) if ctx else ""


class _Hidden:
    def __repr__(self) -> str:
        return "(value not shown)"


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_PATTERN_HINTS = {
    "user": "expected a Unix user name (lower-case letters, digits, '_' and '-')",
    "from_env": "expected an environment variable name",
    "image": "expected an image reference such as jackin/agent:busybox",
    "jump": "expected a host name of letters, digits, '.', '_' and '-'",
}
_SLUG_HINT = "expected a lower-case name of letters, digits and single '-' (at most 24 characters)"
_HOST_NAME_HINT = "expected a host name of letters, digits, '.', '_' and '-'"


def _pattern_hint(path: Path_) -> str:
    field = next((p for p in reversed(path) if isinstance(p, str)), "")
    if field in _PATTERN_HINTS:
        return _PATTERN_HINTS[field]
    if "credentials" in path:
        return "expected an upper-case name such as API_TOKEN (letters, digits and '_')"
    if path[:1] in (("hosts",), ("groups",)) or path[:2] == ("fleet", "hosts"):
        return _HOST_NAME_HINT
    return _SLUG_HINT


def _check_references(data: dict[str, Any], lines: dict[Path_, int]) -> list[Problem]:
    """Cross-field checks on the raw data (so they run even when fields have errors):
    unique names, and references to hosts and groups that exist."""
    problems: list[Problem] = []

    def add(path: Path_, message: str) -> None:
        problems.append(Problem(_line_for(path, lines), path, message))

    hosts = _items(data.get("hosts"))
    groups = data["groups"] if isinstance(data.get("groups"), dict) else {}
    if not isinstance(data.get("fleet"), dict):
        return problems  # the structural check already says what is wrong with 'fleet'
    fleet = data["fleet"]

    names: dict[str, int] = {}
    for i, host in hosts:
        name = host.get("name")
        if isinstance(name, str):
            if name in names:
                add(("hosts", i, "name"), f"duplicate host name {name!r} (also hosts[{names[name]}])")
            names.setdefault(name, i)
    for i, host in hosts:
        jump = host.get("jump")
        if isinstance(jump, str) and jump == host.get("name"):
            add(("hosts", i, "jump"), "a host cannot be its own jump host")
        elif isinstance(jump, str) and jump not in names:
            add(("hosts", i, "jump"), f"unknown jump host {jump!r}; expected one of the hosts")
    jumps = {h.get("name"): h.get("jump") for _, h in hosts if isinstance(h.get("jump"), str)}
    for i, host in hosts:
        name = host.get("name")
        chain, current = [name], jumps.get(name)
        while current is not None and current not in chain:
            chain.append(current)
            current = jumps.get(current)
        if current == name and len(chain) > 1:  # this host is on a loop (a self-jump is reported above)
            add(("hosts", i, "jump"), f"jump hosts form a loop: {' -> '.join(map(str, [*chain, name]))}")
    for group, members in groups.items():
        if group in names:
            add(("groups", group), f"group {group!r} has the same name as a host")
        for j, member in enumerate(members if isinstance(members, list) else []):
            if isinstance(member, str) and member not in names:
                add(("groups", group, j), f"unknown host {member!r} in group {group!r}")

    provider = fleet.get("provider", "static")
    targets = fleet.get("hosts") if isinstance(fleet.get("hosts"), list) else []
    if provider == "lab":
        if hosts:
            add(("hosts",), "provider 'lab' makes its own hosts; remove 'hosts' or use provider 'static'")
        if targets:
            add(("fleet", "hosts"), "provider 'lab' makes its own hosts; remove 'fleet.hosts'")
    elif provider == "static":
        if "lab" in fleet:
            add(("fleet", "lab"), "'lab' settings need provider 'lab'")
        if not data.get("hosts"):
            where: Path_ = ("hosts",) if "hosts" in data else ("fleet", "provider")
            add(where, "provider 'static' needs at least one entry under 'hosts'")
        for j, target in enumerate(targets):
            if isinstance(target, str) and target not in names and target not in groups:
                add(("fleet", "hosts", j), f"unknown host or group {target!r}")

    seen: dict[str, int] = {}
    for i, agent in _items(fleet.get("agents")):
        name = agent.get("name")
        if isinstance(name, str):
            if name in seen:
                add(("fleet", "agents", i, "name"), f"duplicate agent name {name!r} (also agents[{seen[name]}])")
            seen.setdefault(name, i)
        credentials: set[str] = set()
        for j, credential in _items(agent.get("credentials")):
            cname = credential.get("name")
            if not isinstance(cname, str):
                continue
            if cname in credentials:
                add(("fleet", "agents", i, "credentials", j, "name"), f"duplicate credential {cname!r}")
            credentials.add(cname)
    return problems


def _items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(value, list) else []
