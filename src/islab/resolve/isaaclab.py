"""The ``--isaaclab DIR`` preset for Isaac Lab 2.x: which script each rank runs and with which arguments
(Isaac Lab 3 is :mod:`islab.resolve.isaaclab3`; :mod:`islab.resolve.isaaclab_install` tells them apart).

Isaac Lab 2.x trains with one script per library, ``DIR/scripts/reinforcement_learning/<lib>/train.py``,
and its multi-GPU guide launches it as (one node, two GPUs)::

    python -m torch.distributed.run --nnodes=1 --nproc_per_node=2 \\
        scripts/reinforcement_learning/rsl_rl/train.py --task=Isaac-Cartpole-v0 --headless --distributed
    python -m skrl.utils.distributed.jax --nnodes=1 --nproc_per_node=2 \\
        scripts/reinforcement_learning/skrl/train.py --task=Isaac-Cartpole-v0 --headless --distributed \\
        --ml_framework jax

The three scripts share the option names this preset fills in (read from Isaac Lab's sources):
``--task``, ``--num_envs``, ``--seed``, ``--max_iterations`` (rl_games maps it to ``max_epochs``,
skrl to ``timesteps = max_iterations * rollouts``), ``--distributed`` (the script then takes its
device from ``LOCAL_RANK``: ``cuda:<local rank>``) and AppLauncher's ``--headless``; skrl's adds
``--ml_framework {torch,jax,jax-numpy}`` and ``--algorithm``. Unknown arguments become Hydra
overrides inside the script, so the user's extra arguments are appended verbatim.

Each script writes TensorBoard events under ``<working directory>/logs/<lib>/...`` (see
:func:`tensorboard_root`), which :mod:`islab.run.tensorboard_progress` reads.

Task ids are read statically from ``DIR/source`` (the ``gym.register(id=...)`` calls in the task
packages' ``__init__.py`` files) so that an unknown id is refused before launch without importing
Isaac Lab (or torch): :func:`registered_task_ids`, :func:`closest_task_id`.

Pure functions, standard library only: the launcher imports this module.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SCRIPTS_DIR = Path("scripts") / "reinforcement_learning"
LIBRARIES = ("rl_games", "rsl_rl", "skrl")  # the libraries Isaac Lab's guide trains distributed


@dataclass(frozen=True)
class PresetEntry:
    """What each rank runs: ``python <script> <*args>``, under the launcher the library registry names
    for the pair (the plan's one choice; this module makes none)."""

    script: Path
    args: tuple[str, ...]

    def argv(self) -> list[str]:
        """The script and its arguments, as they follow the launcher's own options."""
        return [str(self.script), *self.args]


def train_script(isaaclab_dir: str | Path, library: str) -> Path:
    """``DIR/scripts/reinforcement_learning/<library>/train.py`` (Isaac Lab 2.x: one script per
    library, the guide's layout), or, when that file is absent and the unified entry point exists
    (``scripts/reinforcement_learning/train.py --rl_library <library>``, which runs
    ``<library>/train_<library>.py``: trees between 2.x and 3.0; a tree with Isaac Lab 3's
    ``isaaclab_rl/entrypoints/multigpu.py`` gets the 3.x preset instead), that unified script. Not
    checked beyond that choice."""
    per_library = Path(isaaclab_dir) / SCRIPTS_DIR / library / "train.py"
    unified = Path(isaaclab_dir) / SCRIPTS_DIR / "train.py"
    return unified if not per_library.is_file() and unified.is_file() else per_library


def _is_unified(script: Path) -> bool:
    return script.parent.name == SCRIPTS_DIR.name


def preset_problem(isaaclab_dir: str | Path, library: str, ml_framework: str = "torch") -> str | None:
    """Why this preset cannot run, as ``<problem>. <fix>.``, or None when it can."""
    return combination_problem(library, ml_framework) or tree_problem(isaaclab_dir, library)


def combination_problem(library: str, ml_framework: str = "torch") -> str | None:
    """What no Isaac Lab checkout could run: a library or framework its scripts do not train with."""
    if library not in LIBRARIES:
        return f"Isaac Lab trains distributed with {', '.join(LIBRARIES)}, not {library!r}. Pick one of those"
    if ml_framework not in ("torch", "jax"):
        return f"unknown ML framework {ml_framework!r}. Use torch or jax"
    if ml_framework == "jax" and library != "skrl":
        return f"only skrl trains with JAX in Isaac Lab, not {library}. Use --lib skrl or --ml-framework torch"
    return None


def tree_problem(isaaclab_dir: str | Path, library: str) -> str | None:
    """What this machine's directory lacks: it is no Isaac Lab checkout (no train script)."""
    root = Path(isaaclab_dir)
    if not root.is_dir():
        return f"{root} is not a directory. Point --isaaclab (ISLAB_ISAACLAB) at an Isaac Lab checkout"
    script = train_script(root, library)
    if not script.is_file():
        return f"{script} does not exist. Point --isaaclab at the Isaac Lab checkout (it holds {SCRIPTS_DIR})"
    return None


def isaaclab_entry(
    isaaclab_dir: str | Path,
    library: str,
    ml_framework: str = "torch",
    *,
    task: str,
    num_envs: int | None = None,
    seed: int | None = None,
    max_iterations: int | None = None,
    extra_args: Sequence[str] = (),
    distributed: bool = True,
) -> PresetEntry:
    """The entry point and arguments of Isaac Lab's train.py for ``library``.

    Order: ``--task T [--num_envs N] [--seed S] [--max_iterations M] --headless --distributed
    [--ml_framework jax] EXTRA...``. ``--distributed`` is given (as Isaac Lab's
    train_multigpu.py does) so a one-rank run and a many-rank run use the same code path -- except
    ``distributed=False`` (one CPU rank): under ``--distributed`` every train.py sets the simulation
    and agent device to ``cuda:<local rank>``, overriding ``--device cpu``. An option the user
    repeats in ``extra_args`` wins (argparse keeps the last value).
    Raises ValueError with :func:`preset_problem`'s text for an impossible library/framework pair.
    """
    unsupported = library not in LIBRARIES or ml_framework not in ("torch", "jax")
    if unsupported or (ml_framework == "jax" and library != "skrl"):
        raise ValueError(preset_problem(isaaclab_dir, library, ml_framework) or "unsupported preset")
    script = train_script(isaaclab_dir, library)
    args = ["--rl_library", library] if _is_unified(script) else []  # the unified script's selector
    args += ["--task", task]
    args += trainer_flags(num_envs, seed, max_iterations)
    args += ["--headless"]
    if distributed and "--distributed" not in extra_args:
        args += ["--distributed"]
    if ml_framework == "jax":
        args += ["--ml_framework", "jax"]
    args += list(extra_args)
    return PresetEntry(script, tuple(args))


def trainer_flags(num_envs: int | None, seed: int | None, max_iterations: int | None) -> list[str]:
    """``[--num_envs N] [--seed S] [--max_iterations M]``: the names of Isaac Lab's trainers, 2.x and 3.x."""
    values = (("--num_envs", num_envs), ("--seed", seed), ("--max_iterations", max_iterations))
    return [item for option, value in values if value is not None for item in (option, str(value))]


def tensorboard_root(library: str, working_dir: str | Path) -> Path:
    """Where Isaac Lab's ``<library>/train.py`` writes its runs: ``<cwd>/logs/<library>``
    (then ``<experiment>/<%Y-%m-%d_%H-%M-%S>...``; rl_games puts its events in ``summaries/``)."""
    return Path(working_dir) / "logs" / library


# --- registered task ids, read without importing Isaac Lab -------------------------------------


def registered_task_ids(isaaclab_dir: str | Path) -> list[str]:
    """Every literal ``id`` of a ``gym.register(...)`` / ``gymnasium.register(...)`` /
    ``register(...)`` call in the ``__init__.py`` files under ``DIR/source``, sorted.

    Isaac Lab registers each task in its package's ``__init__.py`` with a literal id
    (``gym.register(id="Isaac-Cartpole-Direct-v0", entry_point=f"{__name__}...", ...)``); the
    entry points are f-strings, the ids are not. An id that is not a literal (built in a loop)
    cannot be known statically and is skipped. Files that do not parse are skipped too."""
    return task_ids_under([Path(isaaclab_dir) / "source"])


def task_ids_under(folders: Iterable[Path]) -> list[str]:
    """The literal ``register`` ids of every ``__init__.py`` below ``folders`` (missing ones skipped), sorted."""
    ids: set[str] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.rglob("__init__.py"):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "register(" not in text:  # most package __init__ files: skip the parse
                continue
            ids.update(_register_ids(text))
    return sorted(ids)


def _register_ids(text: str) -> Iterable[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name != "register":
            continue
        candidates = [kw.value for kw in node.keywords if kw.arg == "id"] or node.args[:1]
        for value in candidates:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield value.value


def closest_task_id(task: str, known: Sequence[str]) -> str | None:
    """The registered id most like ``task`` (case-insensitive match first), or None."""
    lowered = {name.lower(): name for name in known}
    if task.lower() in lowered:
        return lowered[task.lower()]
    matches = difflib.get_close_matches(task.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[matches[0]] if matches else None


def unknown_task_problem(task: str, isaaclab_dir: str | Path) -> str | None:
    """``<problem>. <fix>`` when ``DIR/source`` registers tasks but not ``task``; None when the id
    is registered or nothing can be read (no ``source`` tree: ids are passed through unchecked)."""
    known = registered_task_ids(isaaclab_dir)
    if not known or task in known:
        return None
    suggestion = closest_task_id(task, known)
    hint = f"Did you mean {suggestion}?" if suggestion else f"Registered ids include {', '.join(known[:5])}"
    return f"{task} is not registered under {Path(isaaclab_dir) / 'source'}. {hint}"


class UncheckedTree:
    """The preset for a dry run: plans Isaac Lab's command without a checkout on this machine (as a
    dry run plans GPUs it cannot see). Impossible library/framework pairs are still refused; what the
    directory lacks is remembered in ``unchecked`` (one warning line) instead. Task ids are checked
    when ``DIR/source`` can be read, as in a real launch."""

    def __init__(self) -> None:
        self.unchecked: list[str] = []

    def preset_problem(self, isaaclab_dir: str | Path, library: str, ml_framework: str = "torch") -> str | None:
        problem = combination_problem(library, ml_framework)
        if problem is None and tree_problem(isaaclab_dir, library) is not None:
            self.unchecked.append(
                f"warning: --isaaclab: {isaaclab_dir} holds no Isaac Lab train script here; planned without "
                "checking it (a real launch checks it)"
            )
        return problem

    # the rest as in a real launch
    unknown_task_problem = staticmethod(unknown_task_problem)
    isaaclab_entry = staticmethod(isaaclab_entry)
