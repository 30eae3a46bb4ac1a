"""The package layers of fpipe, listed once, and a checker of the imports against them.

Each unit (a top-level package, or a subpackage of ``storage``) may import the units it lists and,
transitively, everything they may import. A module's unit is the longest unit name that prefixes
it; ``fpipe`` itself (the lazy facade) and ``fpipe._version`` sit outside the layers. Imports
under ``if TYPE_CHECKING:`` are annotations only and are not edges; imports inside functions are,
and so is a string in a package's ``__init__`` that names an fpipe module (a lazy export map).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

#: unit -> the units it may import directly (lowest layers first).
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (),
    "plan": ("core",),
    "decode": ("core",),
    "storage.paths": ("core",),
    "storage.msc": ("core",),  # Energon's msc:// and dss:// paths: where a dataset lives
    "storage.objects": ("storage.paths", "storage.msc"),  # whole objects in a bucket
    "samples": ("decode",),
    "storage.config": ("samples", "storage.objects"),
    "storage.read": ("storage.config",),
    "storage.prepare": ("storage.read", "samples"),
    "storage": ("storage.prepare",),  # the package facade: re-exports its subpackages
    "encode": ("samples",),
    "materialize": ("encode", "storage.read"),
    "loader": ("plan", "materialize"),
    "datasets": ("loader", "storage"),
    "preview": ("storage",),
    "view": ("datasets", "preview"),  # fpipe view: the web pages of a dataset and its plan
    "cli": ("datasets", "preview", "view"),
    "energon": ("datasets", "preview"),  # Energon's names and module paths over fpipe
}
#: modules outside the layers (no fpipe imports of their own): any unit may import them.
FREE = {"fpipe._version", "fpipe._lazy"}


@functools.cache
def allowed(unit: str) -> frozenset[str]:
    """Every unit that ``unit`` may import: its own layer's list, transitively."""
    out = {unit}
    for dep in LAYERS[unit]:
        out |= allowed(dep)
    return frozenset(out)


def unit_of(module: str) -> str | None:
    """The unit of a dotted module name (None for the fpipe facade and free modules)."""
    rel = module.split(".", 1)[1] if "." in module else ""
    parts = rel.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return name
    return None


@dataclasses.dataclass(frozen=True)
class Edge:
    src: str  # importing module
    dst: str  # imported module (or module.name)
    line: int
    names: tuple[str, ...]  # names taken with ``from dst import ...``


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if _type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


#: the fields of a node that hold statements (an import is a statement: these reach them all)
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(tree: ast.AST):
    """Every statement of ``tree`` (nested ones too) outside ``if TYPE_CHECKING:`` bodies: the
    nodes ``ast.walk`` would give that can be imports, without walking every expression."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        annotations_only = _type_checking(node)
        for field in _BODIES:
            if not (field == "body" and annotations_only):
                todo.extend(getattr(node, field, ()))


def import_edges(root: Path) -> list[Edge]:
    """Every import of an fpipe module by a module under ``root`` (the ``fpipe`` folder)."""
    return list(_import_edges(root, _tree_stamp(root)))


def _tree_stamp(root: Path) -> tuple:
    """The ``.py`` files under ``root`` with their sizes and times (a changed file: new edges)."""
    return tuple(
        (str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*.py"))
    )


@functools.lru_cache(maxsize=8)
def _import_edges(root: Path, stamp: tuple) -> tuple[Edge, ...]:
    # memo: the layer and circle checks read the same edges
    modules = {module_name(root, p) for p in root.rglob("*.py")}
    edges = []
    for path in sorted(root.rglob("*.py")):
        src, first = module_name(root, path), len(edges)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name == "__init__.py":  # strings name lazy exports: every node, not statements
            skip = _type_checking_nodes(tree)
            nodes = (n for n in ast.walk(tree) if id(n) not in skip)
        else:
            nodes = _statements(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == root.name:
                        edges.append(Edge(src, alias.name, node.lineno, ()))
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] == root.name
            ):
                names = tuple(a.name for a in node.names)
                edges.append(Edge(src, node.module, node.lineno, names))
            elif (
                path.name == "__init__.py"
                and isinstance(node, ast.Constant)
                and node.value in modules - {root.name, src}
            ):
                edges.append(Edge(src, node.value, node.lineno, ()))
        edges[first:] = sorted(edges[first:], key=lambda e: e.line)  # a file's in line order
    return tuple(edges)


def resolve(modules: set[str], name: str) -> str:
    """The longest prefix of ``name`` that is a module."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def layer_violations(root: Path) -> list[str]:
    """Imports that go up the layers, or across units to a ``_private`` name."""
    edges = import_edges(root)
    problems = []
    for e in edges:
        a, b = unit_of(e.src), unit_of(e.dst)
        if e.dst in FREE or a is None or b is None or a == b:
            continue
        where = f"{e.src}:{e.line} imports {e.dst}"
        if b not in allowed(a):
            problems.append(f"{where}: unit {a!r} may not import unit {b!r}")
        private = [n for n in e.names if n.startswith("_")]
        private += [p for p in e.dst.split(".") if p.startswith("_")]
        if private:
            problems.append(f"{where}: private name(s) {private} of another unit")
    return problems


def import_cycles(root: Path) -> list[list[str]]:
    """Strongly connected sets of modules (import circles, lazy imports included)."""
    edges = import_edges(root)
    modules = {module_name(root, p) for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for e in edges:
        targets = [resolve(modules, f"{e.dst}.{n}") for n in e.names] or [resolve(modules, e.dst)]
        graph[e.src].update(t for t in targets if t != e.src)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return cycles
