"""No two modules of qkv import each other, even lazily inside a function (shared/ARCHITECTURE.md:
imports flow downward only): the shared training runner imports no task, the shared command
helpers no command. The one circle allowed is the masks' own algebra (``base`` builds
``All``/``Any``/``Not`` from ``combine``, which combines ``base``'s masks)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ALLOWED = {frozenset({"qkv.engine.masks.base", "qkv.engine.masks.combine"})}


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _from_base(package: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = package
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def import_graph() -> dict[str, set[str]]:
    """Module → the qkv modules it imports anywhere in its text (top level or inside a
    function). A name taken from a package is followed to the submodule the package's
    ``__init__`` takes it from (a package's face is no module of its own in a circle), and
    ``from . import x`` is an import of the submodule ``x``."""
    paths = {_module_of(p): p for p in (SRC / "qkv").rglob("*.py")}
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in paths.items()}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}
    # package → {name it hands on: the submodule it takes that name from}
    faces: dict[str, dict[str, str]] = {pkg: {} for pkg in packages}
    for pkg in packages:
        for node in trees[pkg].body:
            if isinstance(node, ast.ImportFrom):
                base = _from_base(pkg, node)
                for a in node.names:
                    if base in paths and base != pkg:
                        faces[pkg][a.asname or a.name] = base

    def targets(name: str, node) -> list[str]:
        package = name if name in packages else name.rpartition(".")[0]
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = _from_base(package, node)
        out = []
        for a in node.names:
            if f"{base}.{a.name}" in paths:
                out.append(f"{base}.{a.name}")  # a submodule
            elif base in packages:
                out.append(faces[base].get(a.name, base))
            else:
                out.append(base)
        return out

    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        found = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                 for t in targets(name, node)}
        graph[name] = {t for t in found if t in paths and t != name and t not in packages}
    return graph


def circles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import ``a → b`` where ``b`` (through any chain) imports ``a`` back."""
    def reaches(start: str, goal: str) -> bool:
        seen, stack = {start}, [start]
        while stack:
            for t in graph.get(stack.pop(), ()):
                if t == goal:
                    return True
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return False

    return [(a, b) for a in sorted(graph) for b in sorted(graph[a]) if reaches(b, a)]


def test_the_graph_reads_lazy_imports():
    graph = import_graph()
    # run_recall's bar comes from a lazy import inside a function: it must be seen
    assert "qkv.tasks.recall" in graph["qkv.commands.train"]  # via the package's face
    assert "qkv.engine.masks.combine" in graph["qkv.engine.masks.base"]


def test_no_two_modules_import_each_other():
    loops = [c for c in circles(import_graph()) if frozenset(c) not in ALLOWED]
    assert loops == [], "imports that come back round: " + "; ".join(
        f"{a} → {b}" for a, b in loops)


def test_the_shared_runner_and_command_helpers_import_no_task_or_command():
    graph = import_graph()
    assert not {m for m in graph["qkv.tasks.training"]
                if m.startswith("qkv.tasks.") and m != "qkv.tasks.checkpoint"}
    assert not {m for m in graph["qkv.commands._train_common"] if m.startswith("qkv.commands")}
