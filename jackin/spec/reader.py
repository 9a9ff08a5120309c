"""The line-aware YAML reader behind every file jackin reads: inventories (``jackin.spec.loader``) and
roles (``jackin.spec.roles``).

YAML is parsed to a node tree (ruamel.yaml, YAML 1.2: ``yes`` stays a string)
and turned into plain data by hand, so that every value keeps its line and a
duplicate key is reported with both lines instead of silently keeping the last.
A pydantic error becomes one ``Problem`` per field: ``FILE:LINE: field.path: what was expected``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

from jackin.errors import SpecError

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


def parse_yaml(text: str, filename: str) -> tuple[Any, _Tree]:
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


def line_for(path: Path_, lines: dict[Path_, int]) -> int | None:
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


def from_validation(error: ValidationError, lines: dict[Path_, int], root: type[BaseModel]) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False):
        path: Path_ = tuple(p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        problems.append(Problem(line_for(path, lines), path, _message(item, path, root)))
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
