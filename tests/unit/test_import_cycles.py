"""No import loop anywhere in ``jackin``: not at module level, not inside a function, not under
``TYPE_CHECKING`` (import-linter's layers check the packages; this checks every module against every
other). grimp comes with import-linter (the lint extra, which CI installs)."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp")


def _loops(graph) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_module_of_jackin_imports_itself_back() -> None:
    graph = grimp.build_graph("jackin", cache_dir=None, exclude_type_checking_imports=False)
    assert _loops(graph) == []


def test_the_loop_finder_finds_a_loop() -> None:
    """The positive control: a graph with a loop of three and a tail is reported as that one loop."""
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _loops(graph) == [["p.a", "p.b", "p.c"]]
