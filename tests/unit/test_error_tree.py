"""The error tree drawn at the top of jackin/errors.py names every error class of the package, under its parent."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jackin.errors

ROOT = Path(__file__).resolve().parents[2] / "jackin"


def _classes() -> dict[str, list[str]]:
    """Every class in jackin/ whose bases include an error of ours, with those bases' names."""
    found: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                found[node.name] = bases
    ours = {"JackinError"}
    changed = True
    while changed:  # the closure: subclasses of subclasses
        changed = False
        for name, bases in found.items():
            if name not in ours and ours & set(bases):
                ours.add(name)
                changed = True
    return {name: found.get(name, []) for name in ours}


def test_every_error_class_is_in_the_tree_under_its_parent() -> None:
    tree = jackin.errors.__doc__ or ""
    rows = {m.group(2): len(m.group(1)) for m in re.finditer(r"^(\s*(?:[│ ]*[├└]── )?)(\w+)", tree, re.M)}
    classes = _classes()
    assert sorted(set(classes) - set(rows)) == []
    for name, bases in classes.items():
        parent = next(b for b in bases if b in classes) if name != "JackinError" else None
        if parent is not None:
            assert rows[name] > rows[parent], (name, parent)
