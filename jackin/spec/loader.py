"""Load an inventory file into models, or report every problem in it at once.

The file is read by ``jackin.spec.reader`` (every value keeps its line; a duplicate key is reported
with both lines instead of silently keeping the last). Problems come out one a line:
``FILE:LINE: field.path: what was expected``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from jackin.errors import SpecError
from jackin.spec.models import Inventory
from jackin.spec.reader import Path_, Problem, format_path, from_validation, line_for, parse_yaml
from jackin.spec.values import decode_utf8

DEFAULT_INVENTORY = Path("inventory/lab.yaml")  # what commands read without -i


def load(path: str | Path | None) -> Inventory:
    """The inventory at ``path``, or at DEFAULT_INVENTORY when none is given (what ``-i`` defaults to)."""
    return load_inventory(path or DEFAULT_INVENTORY)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate one inventory file; raise SpecError listing every problem."""
    path = Path(path)
    filename = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            f"{filename}: no such inventory file",
            hint="pass an existing file with -i, e.g. -i inventory/lab.yaml",
        ) from None
    except OSError as error:
        raise SpecError(f"{filename}: cannot read inventory: {error}") from None
    try:
        text = decode_utf8(data)
    except ValueError as error:
        raise SpecError(f"{filename}: the inventory is not UTF-8 text: {error}") from None
    return parse_inventory(text, filename)


def parse_inventory(text: str, filename: str = "<inventory>") -> Inventory:
    data, tree = parse_yaml(text, filename)
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
            problems.extend(from_validation(error, tree.lines, Inventory))
        problems.extend(_check_references(data, tree.lines))
    if problems:
        problems.sort(key=lambda p: (p.line or 0, format_path(p.path)))
        lines = [p.render(filename) for p in problems]
        count = f"{len(lines)} problem{'s' if len(lines) > 1 else ''}"
        raise SpecError(f"{filename}: invalid inventory ({count})", problems=lines)
    assert inventory is not None
    return inventory


Add = Callable[[Path_, str], None]  # a problem at a path of the raw data


def _check_references(data: dict[str, Any], lines: dict[Path_, int]) -> list[Problem]:
    """Cross-field checks on the raw data (so they run even when fields have errors):
    unique names, and references to hosts and groups that exist."""
    problems: list[Problem] = []

    def add(path: Path_, message: str) -> None:
        problems.append(Problem(line_for(path, lines), path, message))

    hosts = _items(data.get("hosts"))
    groups = data["groups"] if isinstance(data.get("groups"), dict) else {}
    if not isinstance(data.get("fleet"), dict):
        return problems  # the structural check already says what is wrong with 'fleet'
    fleet = data["fleet"]
    names = _check_hosts(hosts, add)
    _check_groups(groups, names, add)
    _check_provider(data, fleet, hosts, groups, names, add)
    _check_agents(fleet, add)
    _check_agent_hosts(fleet, _fleet_hosts(data, fleet, names, groups), groups, add)
    return problems


def _check_hosts(hosts: list[tuple[int, dict[str, Any]]], add: Add) -> dict[str, int]:
    """Unique host names, and jump hosts that exist and form no loop; the hosts' names (index of each)."""
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
    return names


def _check_groups(groups: dict[str, Any], names: dict[str, int], add: Add) -> None:
    for group, members in groups.items():
        if group in names:
            add(("groups", group), f"group {group!r} has the same name as a host")
        for j, member in enumerate(members if isinstance(members, list) else []):
            if isinstance(member, str) and member not in names:
                add(("groups", group, j), f"unknown host {member!r} in group {group!r}")


def _check_provider(data: dict[str, Any], fleet: dict[str, Any], hosts: list[tuple[int, dict[str, Any]]],
                    groups: dict[str, Any], names: dict[str, int], add: Add) -> None:  # fmt: skip
    """What the provider needs: ``lab`` makes its own hosts; ``static`` needs hosts, and targets that exist."""
    provider = fleet.get("provider", "static")
    targets: list[Any] = fleet["hosts"] if isinstance(fleet.get("hosts"), list) else []
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


def _check_agents(fleet: dict[str, Any], add: Add) -> None:
    """Unique agent names, and unique credential names per agent."""
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


def _fleet_hosts(data: dict[str, Any], fleet: dict[str, Any], names: dict[str, int],
                 groups: dict[str, Any]) -> list[str] | None:  # fmt: skip
    """The fleet's host names from the raw data (None: unknown here, e.g. a lab whose settings do not parse)."""
    if fleet.get("provider", "static") == "lab":
        lab: dict[str, Any] = fleet["lab"] if isinstance(fleet.get("lab"), dict) else {}
        name, count = lab.get("name", "jackin"), lab.get("hosts", 2)
        return (
            [f"{name}-{i}" for i in range(1, count + 1)] if isinstance(name, str) and isinstance(count, int) else None
        )
    targets = fleet["hosts"] if isinstance(fleet.get("hosts"), list) and fleet["hosts"] else list(names)
    found: list[str] = []
    for target in targets:
        members = groups.get(target, [target]) if isinstance(target, str) else []
        found += [m for m in (members if isinstance(members, list) else []) if isinstance(m, str) and m not in found]
    return found


def _check_agent_hosts(fleet: dict[str, Any], hosts: list[str] | None, groups: dict[str, Any], add: Add) -> None:
    """Each agent's ``hosts``: names of the fleet's hosts, or of groups of them."""
    if hosts is None:
        return
    for i, agent in _items(fleet.get("agents")):
        entries: list[Any] = agent["hosts"] if isinstance(agent.get("hosts"), list) else []
        for j, entry in enumerate(entries):
            if not isinstance(entry, str):
                continue
            members = groups.get(entry, [entry])
            outside = [m for m in (members if isinstance(members, list) else []) if m not in hosts]
            if outside:
                what = (
                    f"group {entry!r} holds {', '.join(map(repr, outside))}, not"
                    if entry in groups
                    else f"{entry!r} is not"
                )
                add(("fleet", "agents", i, "hosts", j),
                    f"{what} among the fleet's hosts; expected some of: {', '.join(hosts) or 'none'}")  # fmt: skip


def _items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(value, list) else []
