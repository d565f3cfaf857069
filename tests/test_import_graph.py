"""No import cycle in src/kfoundry, at module level or inside functions.

The graph is read from the source with `ast`, nothing is imported. Every `import` and `from ... import`
of a kfoundry module counts, wherever it stands (module level, a function, a method, under
TYPE_CHECKING), relative imports resolved against the importing module's package:

- `import a.b.c` is an edge to the longest prefix of a.b.c that is a module of the package;
- `from pkg import name` is an edge to pkg.name where that is a module, else to pkg.

A strongly connected component of more than one module is a cycle; the failure names its modules and
one concrete loop of imports through them, each with its file and line, to show what to change.
Imports built at run time (importlib.import_module with a computed name, as the packages' lazy
__getattr__ do) are not seen."""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "kfoundry"


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module
    target: str  # the imported module
    path: Path  # the importing file
    line: int

    def describe(self, root: Path) -> str:
        try:
            where = self.path.relative_to(root)
        except ValueError:
            where = self.path
        return f"{self.source} -> {self.target}  ({where}:{self.line})"


def find_modules(src: Path, package: str) -> dict[str, Path]:
    """The package's modules by dotted name (a package is its __init__.py)."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _longest_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def import_edges(src: Path, package: str) -> list[Edge]:
    """Every import of one of the package's modules by another, wherever it stands in the file."""
    modules = find_modules(src, package)
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_longest_module(alias.name, modules) for alias in node.names
                           if _inside(alias.name, package)]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)])
                    origin = f"{base}.{node.module}" if node.module else base
                else:
                    origin = node.module or ""
                if not _inside(origin, package):
                    continue
                targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules
                           else _longest_module(origin, modules) for alias in node.names]
            for target in dict.fromkeys(targets):
                if target is not None and target != module:
                    edges.append(Edge(module, target, path, node.lineno))
    return edges


def strongly_connected(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Tarjan's components of more than one node (iterative: no recursion limit), each sorted."""
    successors: dict[str, list[str]] = {node: [] for node in nodes}
    for edge in edges:
        successors.setdefault(edge.source, []).append(edge.target)
        successors.setdefault(edge.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in successors:
        if root in index:
            continue
        work = [(root, iter(successors[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            for successor in pending:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(successors[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def loop_through(component: list[str], edges: list[Edge]) -> list[Edge]:
    """One shortest loop of imports from the component's first module back to it, inside the component."""
    members = set(component)
    out: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.source in members and edge.target in members:
            out.setdefault(edge.source, []).append(edge)
    start = component[0]
    came_by: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for edge in out.get(node, []):
            if edge.target == start:
                loop = [edge]
                while loop[0].source != start:
                    loop.insert(0, came_by[loop[0].source])
                return loop
            if edge.target not in came_by:
                came_by[edge.target] = edge
                queue.append(edge.target)
    raise AssertionError(f"no loop through {start} inside {component}")  # not a component, then


def cycle_report(src: Path, package: str) -> list[str]:
    """One paragraph per cycle: its modules, then one loop of imports through it."""
    edges = import_edges(src, package)
    reports = []
    for component in strongly_connected(list(find_modules(src, package)), edges):
        loop = "\n".join("    " + edge.describe(src.parent) for edge in loop_through(component, edges))
        reports.append(f"cycle of {len(component)} modules: {', '.join(component)}\n  for instance:\n{loop}")
    return reports


def test_no_import_cycle_in_the_package():
    reports = cycle_report(SRC, PACKAGE)
    assert not reports, f"{len(reports)} import cycle(s) in {PACKAGE}:\n\n" + "\n\n".join(reports)


# the graph builder itself, on a small package


def _write(root: Path, files: dict[str, str]) -> Path:
    """The files under root/src, which it returns."""
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "src"


def test_a_cycle_through_a_function_level_import_and_a_relative_one_is_found(tmp_path):
    src = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import os\nfrom pkg.b import thing\n",
        "pkg/b.py": "def thing():\n    from .sub import c\n    return c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "class C:\n    def method(self):\n        from .. import a\n        return a\n",
    })
    edges = import_edges(src, "pkg")
    assert {(e.source, e.target, e.line) for e in edges} == {
        ("pkg.a", "pkg.b", 2), ("pkg.b", "pkg.sub.c", 2), ("pkg.sub.c", "pkg.a", 3)}
    components = strongly_connected(list(find_modules(src, "pkg")), edges)
    assert components == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    loop = loop_through(components[0], edges)
    assert [(e.source, e.target) for e in loop] == [("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"), ("pkg.sub.c", "pkg.a")]
    (report,) = cycle_report(src, "pkg")
    assert "pkg.sub.c -> pkg.a  (src/pkg/sub/c.py:3)" in report


def test_edge_rules_and_no_false_cycle(tmp_path):
    src = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.low import VALUE\n",
        "pkg/low.py": "VALUE = 1\n",
        # `import a.b.c`: the longest existing module; `from pkg import name`: the module, else the package
        "pkg/mid.py": "import pkg.low.VALUE\nfrom pkg import low, VALUE\nimport pkgextra\nfrom . import nothing\n",
        "pkg/top/__init__.py": "",
        "pkg/top/use.py": "from ..mid import x\nfrom ... import outside\n",
    })
    edges = import_edges(src, "pkg")
    assert {(e.source, e.target) for e in edges} == {
        ("pkg", "pkg.low"), ("pkg.mid", "pkg.low"), ("pkg.mid", "pkg"), ("pkg.top.use", "pkg.mid")}
    # pkg.mid -> pkg -> pkg.low and pkg.mid -> pkg.low: paths that meet, no loop
    assert strongly_connected(list(find_modules(src, "pkg")), edges) == []
    assert cycle_report(src, "pkg") == []


def test_a_package_importing_a_module_that_imports_the_package_is_a_cycle(tmp_path):
    src = _write(tmp_path, {
        "pkg/__init__.py": "def helper():\n    pass\n\n\ndef later():\n    from pkg import user\n",
        "pkg/user.py": "from pkg import helper\n",
    })
    assert strongly_connected(list(find_modules(src, "pkg")), import_edges(src, "pkg")) == [["pkg", "pkg.user"]]
