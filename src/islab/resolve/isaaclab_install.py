"""Where Isaac Lab is, and which major version: read from a checkout's files (``--isaaclab DIR``) or
asked of the ranks' interpreter (``--isaaclab auto``). The launcher never imports Isaac Lab.

``auto`` runs :data:`PROBE` in the ranks' Python (``--python``, with the spec's ``env`` on top of
this process's environment, as the ranks get it): package metadata (``importlib.metadata``) for
``isaaclab``'s version and ``importlib.util.find_spec`` for where ``isaaclab``, ``isaaclab_rl`` and the
task packages live -- a top-level name is found without being imported -- plus the packages of the
``isaaclab.tasks`` entry points (external task packages, which Isaac Lab's trainer imports too).

The version that decides the plan is the layout: Isaac Lab 3 has the per-rank trainer
``isaaclab_rl/entrypoints/multigpu.py``; a checkout also says so in its ``VERSION`` file (``3.0.0``;
its packages' own pyproject versions are the extensions', e.g. 28.0.0, so metadata alone would
mislead for a checkout installed in editable mode). A 2.x checkout (the multi-GPU guide's
``scripts/reinforcement_learning/<lib>/train.py``) keeps the 2.x preset of
:mod:`islab.resolve.isaaclab`, unchanged.

:class:`IsaacLabReader` is what the resolution edge hands the preset step; :class:`DryRunReader`
plans a 2.x ``DIR`` that is not on this machine (a dry run for another machine).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from islab.resolve import isaaclab as isaaclab2
from islab.resolve.isaaclab3 import ENTRY_FILE, IsaacLab3, unknown_task3_problem

AUTO = "auto"
PROBE_TIMEOUT_S = 60.0
TASK_PACKAGES = ("isaaclab_tasks", "isaaclab_tasks_experimental")  # what the trainer imports itself
ENTRY_POINT_GROUP = "isaaclab.tasks"  # isaaclab/cli/__init__.py load_external_tasks

PROBE = r"""
import importlib.metadata as md, importlib.util, json
def where(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []
out = {"version": None, "packages": {}, "external": []}
try:
    out["version"] = md.version("isaaclab")
except md.PackageNotFoundError:
    pass
for name in ("isaaclab", "isaaclab_rl", *TASK_PACKAGES):
    out["packages"][name] = where(name)
for point in md.entry_points(group=GROUP):
    out["external"] += where(point.value.split(":")[0].split(".")[0])
print(json.dumps(out))
""".replace("TASK_PACKAGES", repr(TASK_PACKAGES)).replace("GROUP", repr(ENTRY_POINT_GROUP))


class PresetProblem(ValueError):
    """``<problem>. <fix>`` of a preset that cannot run (the preset step names the field)."""


class InterpreterMissing(PresetProblem):
    """``--python`` cannot be run on this machine (a job written here for another machine)."""


def checkout_version(root: Path) -> str | None:
    """The release in a checkout's ``VERSION`` file (``3.0.0``), None without one."""
    try:
        return (root / "VERSION").read_text(encoding="utf-8").strip().splitlines()[0].strip() or None
    except (OSError, UnicodeDecodeError, IndexError):
        return None


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


def from_checkout(root: Path) -> IsaacLab3 | None:
    """Isaac Lab 3 in the checkout ``root``, or None (2.x, or not a checkout: the 2.x preset decides)."""
    entry = root / "source" / "isaaclab_rl" / ENTRY_FILE
    version = checkout_version(root)
    if not entry.is_file() and (_major(version) or 0) < 3:
        return None
    return IsaacLab3(version or "3", entry.resolve() if entry.exists() else entry, (root / "source",), str(root))


def from_probe(report: Mapping[str, object], python: str) -> IsaacLab3:
    """:data:`PROBE`'s answer -> Isaac Lab 3, or PresetProblem naming what the interpreter lacks."""
    packages = report.get("packages") or {}
    assert isinstance(packages, Mapping)
    version = str(report.get("version") or "")
    if not packages.get("isaaclab") and not version:
        raise PresetProblem(
            f"auto found no isaaclab package in {python}. Install Isaac Lab 3 there (pip install isaaclab==3.0.0 "
            "in a Python 3.12 environment), point --python at the interpreter that has it, or give --isaaclab DIR"
        )
    entries = [Path(folder).parent / ENTRY_FILE for folder in packages.get("isaaclab_rl") or ()]
    entry = next((path for path in entries if path.is_file()), None)
    if entry is None:
        raise PresetProblem(
            f"auto found isaaclab {version or '(no version)'} in {python} but not Isaac Lab 3's per-rank trainer "
            f"{ENTRY_FILE}. Isaac Lab 2.x trains with its checkout's scripts: give --isaaclab DIR (the checkout)"
        )
    # A checkout installed in editable mode: <root>/source/isaaclab/isaaclab; its VERSION is the release.
    roots = [Path(folder).parent.parent.parent for folder in packages.get("isaaclab") or ()]
    version = next((found for found in map(checkout_version, roots) if found), None) or version or "3"
    task_dirs = [Path(folder) for name in TASK_PACKAGES for folder in packages.get(name) or ()]
    task_dirs += [Path(folder) for folder in report.get("external") or () if isinstance(folder, str)]
    return IsaacLab3(version, entry.resolve(), tuple(dict.fromkeys(task_dirs)), f"isaaclab {version} in {python}")


def probe_python(python: str, environ: Mapping[str, str]) -> Mapping[str, object]:
    """Run :data:`PROBE` in ``python``; PresetProblem when it cannot run."""
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env=dict(environ), check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        problem = f"auto could not run {python} ({exc}). Point --python at the ranks' interpreter"
        raise InterpreterMissing(problem) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PresetProblem(f"auto: {python} failed to report its packages ({last}). Check --python")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise PresetProblem(f"auto: {python} printed no report. Check --python") from None


def registered_ids(install: IsaacLab3) -> list[str]:
    """Every literal ``gym.register`` id under the install's task packages, sorted (read statically)."""
    return isaaclab2.task_ids_under(install.task_dirs)


class IsaacLabReader:
    """The preset's view of the machine (the resolution edge's ``isaaclab``): where Isaac Lab is, its
    tasks, and for a 2.x checkout the functions of :mod:`islab.resolve.isaaclab`."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def locate(self, value: str, python: str, env: Mapping[str, str]) -> IsaacLab3 | None:
        """Isaac Lab 3 for ``--isaaclab VALUE``; None for a 2.x checkout; PresetProblem when ``auto``
        finds none."""
        if value == AUTO:
            return from_probe(probe_python(python, {**self.environ, **env}), python)
        return from_checkout(Path(value))

    def unknown_task3_problem(self, task: str, install: IsaacLab3) -> str | None:
        return unknown_task3_problem(task, install, registered_ids(install))

    def entry3_problem(self, install: IsaacLab3) -> str | None:
        if install.entry.is_file():
            return None
        return f"{install.entry} does not exist. Point --isaaclab at an Isaac Lab 3 checkout, or use --isaaclab auto"

    preset_problem = staticmethod(isaaclab2.preset_problem)
    unknown_task_problem = staticmethod(isaaclab2.unknown_task_problem)
    isaaclab_entry = staticmethod(isaaclab2.isaaclab_entry)


class DryRunReader(IsaacLabReader):
    """The reader of a plan for another machine (a dry run, ``sbatch``, ``k8s``): a 2.x ``DIR`` need not
    be a checkout here, an Isaac Lab 3 entry file need not exist here, and ``auto`` with a ``--python``
    that is not on this machine plans a stand-in for its trainer's path with the task id unchecked --
    each said in one warning line (``unchecked``). Where things can be read, they are checked as in a
    real launch, which checks everything again."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(environ)
        self._tree = isaaclab2.UncheckedTree()
        self.unchecked: list[str] = self._tree.unchecked  # one list: the 2.x tree's warnings and ours

    def locate(self, value: str, python: str, env: Mapping[str, str]) -> IsaacLab3 | None:
        try:
            return super().locate(value, python, env)
        except InterpreterMissing:
            self.unchecked.append(f"warning: --isaaclab auto: {python} is not on this machine; planned Isaac Lab 3 "
                                  "without it (trainer path shown as a stand-in, task id not checked; the node's "
                                  "islab-train finds and checks both)")  # fmt: skip
            return IsaacLab3("3", Path(f"<site-packages of {python}>") / ENTRY_FILE, (), f"isaaclab in {python}")

    def preset_problem(self, isaaclab_dir: str | Path, library: str, ml_framework: str = "torch") -> str | None:  # type: ignore[override]
        return self._tree.preset_problem(isaaclab_dir, library, ml_framework)

    def entry3_problem(self, install: IsaacLab3) -> str | None:
        problem = super().entry3_problem(install)
        if problem is not None and not str(install.entry).startswith("<"):  # a stand-in is said already
            self.unchecked.append(f"warning: --isaaclab: {install.entry} is not on this machine; planned without "
                                  "checking it (a real launch checks it)")  # fmt: skip
        return None
