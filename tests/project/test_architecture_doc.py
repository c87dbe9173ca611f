"""docs/ARCHITECTURE.md stays true: every ``src/...`` and ``tests/...`` path it gives exists, every
``islab.x.y`` name it gives is a module (or a name defined or imported at the top of one), and its
package map lists every module under src/islab, so a new, moved or deleted module turns this red
until the map says so. Read with ``ast`` only: nothing is imported."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from paths import REPO

ROOT = REPO
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SRC = ROOT / "src"

PATH = re.compile(r"(?<![\w/.-])((?:src|tests)/[\w./<>-]+)")
DOTTED = re.compile(r"(?<![\w.-])(islab(?:\.\w+)+)")
MAP_HEADING = "## Package map"


def module_names() -> set[str]:
    """Every module and package under src/islab, dotted (``__init__.py`` -> its package)."""
    names = set()
    for path in (SRC / "islab").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def module_file(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level (what ``module.NAME`` can reach)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def dotted_name_problem(name: str) -> str | None:
    """None when ``name`` is a module, or a module followed by a name it defines or imports."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        if not rest or rest[0] in top_level_names(path):
            return None
        return f"{'.'.join(parts[:cut])} has no {rest[0]!r}"
    return "no such module"


def path_problem(text: str) -> str | None:
    """None when the path exists; a template (``src/islab/libs/<lib>.py``) needs its folder."""
    text = text.rstrip(".")
    if "<" in text:
        folder = ROOT / text.split("<", 1)[0]
        return None if folder.parent.exists() or folder.exists() else "its folder does not exist"
    return None if (ROOT / text).exists() else "does not exist"


def package_map(doc: str) -> str:
    start = doc.index(MAP_HEADING)
    end = doc.index("\n## ", start + len(MAP_HEADING))
    return doc[start:end]


def test_every_src_and_tests_path_in_the_doc_exists() -> None:
    doc = DOC.read_text(encoding="utf-8")
    paths = set(PATH.findall(doc))
    assert len(paths) >= 10, paths  # the how-to sections name their files
    bad = sorted(f"{path}: {problem}" for path in paths if (problem := path_problem(path)))
    assert not bad, "docs/ARCHITECTURE.md names paths that are not there:\n" + "\n".join(bad)


def test_every_islab_name_in_the_doc_exists() -> None:
    doc = DOC.read_text(encoding="utf-8")
    names = set(DOTTED.findall(doc))
    assert len(names) >= 100, len(names)
    bad = sorted(f"{name}: {problem}" for name in names if (problem := dotted_name_problem(name)))
    assert not bad, "docs/ARCHITECTURE.md names modules or functions that are not there:\n" + "\n".join(bad)


def test_the_package_map_lists_every_module() -> None:
    listed = set(re.findall(r"`(islab(?:\.\w+)*)`", package_map(DOC.read_text(encoding="utf-8"))))
    missing = sorted(module_names() - listed)
    assert not missing, "add a line for each to the package map of docs/ARCHITECTURE.md:\n" + "\n".join(missing)


def test_the_checks_themselves_tell_a_bad_name_from_a_good_one() -> None:
    """The helpers above must be able to fail: a name or path that is not there is reported."""
    assert dotted_name_problem("islab.plan.plan.build_plan") is None
    assert dotted_name_problem("islab.rundir.latest_checkpoint") is None  # imported by the package
    assert dotted_name_problem("islab.plan.plan.no_such_function") is not None
    assert dotted_name_problem("islab.launcher.plan") is not None
    assert path_problem("src/islab/spec/worker_args.py") is None
    assert path_problem("src/islab/libs/<lib>.py") is None
    assert path_problem("src/islab/launcher/plan.py") is not None


def test_every_shared_test_helper_is_listed() -> None:
    """A helper module at the top of tests/ is named in the doc's Tests section (what it is for), so a
    reader finds it before writing another."""
    doc = DOC.read_text(encoding="utf-8")
    tests_section = doc[doc.index("## Tests") : doc.index("\n## ", doc.index("## Tests") + 1)]
    helpers = sorted(path.name for path in (ROOT / "tests").glob("*.py"))
    missing = [name for name in helpers if f"`tests/{name}`" not in tests_section]
    assert not missing, "describe each in the Tests section of docs/ARCHITECTURE.md:\n" + "\n".join(missing)
