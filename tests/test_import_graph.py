"""No import circle in python/gptcore: no module imports a module that imports it back,
directly or through others.

The graph is read from the source with ``ast`` (no module is imported), one node per module
file (a package is its ``__init__.py``; the compiled ``_native`` is its ``_native.pyi``). An
edge is every import statement anywhere in a file: at module level, inside functions and
methods (a function-local import is still a dependency; it only runs later), and under
``if TYPE_CHECKING:`` (a type-checker follows it, and a circle there is a circle in the design).
A statement's edges go to the module it names and, for ``from PACKAGE import NAME``, to the
submodule ``PACKAGE.NAME`` when there is one, else to ``PACKAGE``; also to every package on
the way (``import a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first), except the
packages that contain the importing module, which Python has started loading before it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

SOURCE = Path(__file__).resolve().parent.parent / "python"
PACKAGE = SOURCE / "gptcore"


def _module_files() -> Dict[str, Path]:
    """Module name -> the file that defines it (.py, or .pyi for an extension module)."""
    mods: Dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if path.suffix == ".py" or name not in mods:
            mods[name] = path
    return mods


MODULES = _module_files()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(importer: str, level: int, module: Optional[str]) -> str:
    """The absolute name ``from <level dots><module>`` means inside ``importer``."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _targets(importer: str, node: ast.AST) -> Set[str]:
    named: Set[str] = set()
    if isinstance(node, ast.Import):
        named = {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(importer, node.level, node.module)
        for a in node.names:
            sub = f"{base}.{a.name}"
            named.add(sub if sub in MODULES else base)
    out: Set[str] = set()
    own = set(_ancestors(importer))
    for name in named:
        if name not in MODULES:
            continue  # another package (numpy, distributed, ...)
        out.add(name)
        out.update(a for a in _ancestors(name) if a in MODULES and a not in own)
    out.discard(importer)
    return out


def import_graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: Set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(name, node)
        graph[name] = edges
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One circle of ``graph`` as a path ``[a, b, ..., a]``, or None (depth-first search)."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_graph_is_read():
    """The reader sees the imports it must see (a broken reader would find no circle)."""
    graph = import_graph()
    assert {"gptcore", "gptcore.model", "gptcore.text", "gptcore.weights.formats", "gptcore.cli",
            "gptcore.cli._common", "gptcore._native"} <= set(graph)
    assert "gptcore.text" in graph["gptcore.model"]
    assert "gptcore._native" in graph["gptcore.linalg"]  # from . import _native
    assert {"gptcore.weights", "gptcore.weights.checkpoint"} <= graph["gptcore.model"]  # a package on the way
    assert "gptcore.weights" not in graph["gptcore.weights.checkpoint"]  # its own package: not an edge
    assert "gptcore.model" in graph["gptcore.cli._common"]
    assert "gptcore" in graph["gptcore.cli"]  # from .. import __version__
    assert "gptcore.model" not in graph["gptcore.text"]


def test_find_cycle_finds_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": set(), "b": {"b"}}) == ["b", "b"]
    # a function-local import and a TYPE_CHECKING import are edges
    tree = ast.parse("def f():\n    from .model import Model\nif TYPE_CHECKING:\n    from .text import x\n")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= _targets("gptcore.scoring", node)
    assert found == {"gptcore.model", "gptcore.text"}


def test_no_import_circle_in_gptcore():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)
