"""The package layout holds: no import circles, and the planner reaches no process or torch import.

Every module under ``src/islab`` is parsed with :mod:`ast` (not imported), and *every* import in it
counts: top level, inside functions, and under ``if TYPE_CHECKING:``. A type-only circle is still a
circle to a reader: the two modules can no longer be understood (or moved) one at a time.

``islab.plan`` is the pure half of the launcher (a spec in, argv and environments out). It must not
import ``subprocess`` or the heavy packages, directly or through anything of islab it imports, so a
plan can be built, printed and tested anywhere; no exception is granted. What planning needs of the
machine -- the installed tasks' ids, a task's default env count, the agent config's rollout length --
the resolve edge reads and hands in as values (``islab.resolve.edge``), since the task registry may
start a child process to read a registration. There only what runs counts: an import inside a function
does, one under ``if TYPE_CHECKING:`` does not. ``tests/project/test_torch_free.py`` adds the runtime check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import SRC

PURE_PACKAGES = ("islab.plan",)
IMPURE = ("subprocess", "torch", "numpy", "jax", "jaxlib", "flax", "optax", "gymnasium", "rl_games", "rsl_rl", "skrl")


def module_files(src: Path = SRC) -> dict[str, Path]:
    """``islab.a.b`` -> its file, for every module under ``src/islab``."""
    modules = {}
    for path in sorted((src / "islab").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _walk(node: ast.AST, type_only: bool) -> Iterator[ast.AST]:
    """ast.walk, leaving out the bodies of ``if TYPE_CHECKING:`` unless type-only imports are wanted."""
    yield node
    for child in ast.iter_child_nodes(node):
        if type_only or not _is_type_checking(child):
            yield from _walk(child, type_only)
        else:
            yield from (item for other in child.orelse for item in _walk(other, type_only))


def imported_names(module: str, path: Path, type_only: bool = True) -> Iterator[str]:
    """Every dotted name the module imports, wherever the statement sits (``if TYPE_CHECKING:`` when type_only)."""
    is_package = path.name == "__init__.py"
    for node in _walk(ast.parse(path.read_text(), str(path)), type_only):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import: resolve against this module's package
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules: dict[str, Path], type_only: bool = True) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """islab module -> the islab modules it imports (the most specific that exists), and -> outside packages."""
    inner: dict[str, set[str]] = {name: set() for name in modules}
    outer: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for imported in imported_names(name, path, type_only):
            if imported.split(".")[0] != "islab":
                outer[name].add(imported.split(".")[0])
                continue
            target = imported
            while target not in modules:  # `from islab.x import name`: the module is islab.x
                target = target.rpartition(".")[0]
            if target != name and target != "islab":
                inner[name].add(target)
    return inner, outer


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete circle per strongly connected component (Tarjan), as a path a -> ... -> a."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle_within(graph, set(component)) for component in components]


def _circle_within(graph: dict[str, set[str]], members: set[str]) -> list[str]:
    start = min(members)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first: the shortest way back to start
        node = frontier.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                frontier.append(nxt)
    raise AssertionError(f"no circle through {start}")  # a strongly connected component always has one


def reached_from(graph: dict[str, set[str]], roots: list[str]) -> dict[str, list[str]]:
    """Every islab module the roots import, transitively (with the packages around them), and the way there."""
    ways = {root: [root] for root in roots}
    frontier = list(roots)
    while frontier:
        node = frontier.pop()
        parents = [".".join(node.split(".")[:i]) for i in range(2, node.count(".") + 1)]  # run __init__ first
        for nxt in [*sorted(graph[node]), *parents]:
            if nxt in graph and nxt not in ways:
                ways[nxt] = [*ways[node], nxt]
                frontier.append(nxt)
    return ways


def test_no_import_circle_between_islab_modules_type_only_imports_included():
    inner, _ = import_graph(module_files())
    found = [" -> ".join(circle) for circle in cycles(inner)]
    assert not found, "import circles:\n" + "\n".join(found)


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_the_planner_reaches_no_subprocess_and_no_torch(package):
    modules = module_files()
    inner, outer = import_graph(modules, type_only=False)  # what runs: a function-body import counts
    roots = [name for name in modules if name == package or name.startswith(package + ".")]
    assert roots, f"{package} has no modules"
    bad = [
        f"{' -> '.join(way)} imports {heavy}"
        for module, way in reached_from(inner, roots).items()
        for heavy in sorted(outer[module] & set(IMPURE))
    ]
    assert not bad, f"{package} must stay pure:\n" + "\n".join(bad)


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    """The parser itself: a circle made only of a function-body import and a TYPE_CHECKING import is found."""
    pkg = tmp_path / "islab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from islab.b import g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from islab import a\n")
    inner, _ = import_graph(module_files(tmp_path))
    assert cycles(inner) == [["islab.a", "islab.b", "islab.a"]]
