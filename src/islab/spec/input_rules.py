"""The rules of single input fields of the run spec: pure functions, each a value in and the value
(or its normal form) out, or a :class:`~islab.spec.issues.SpecError` naming the field and the fix.

:class:`~islab.spec.run_spec.RunSpec`'s field validators call them; the rules *across* fields stay
in the schema. Most guard text that ends up in a printed command, a directory name or a rank's
environment: one line, no control characters (:func:`islab.spec.text.unsafe_character`), the shape
the consumer parses (``key=value``, a module name, an environment variable name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from islab.spec.fields import ENV_NAME_PATTERN, MODULE_PATTERN, OVERRIDE_PATTERN, RUN_NAME_PATTERN
from islab.spec.issues import rule, suggest
from islab.spec.launch_rules import JOB_VARIABLES
from islab.spec.text import unsafe_character

# Task ids of Isaac Lab's own task packages (Isaac Lab 3 names contributed tasks IsaacContrib-...).
ISAAC_LAB_TASK_PREFIXES = ("Isaac-", "IsaacContrib-")

# The kinds of entry point a rank can run instead of our worker (``python PATH``, ``python -m NAME``,
# an executable: torchrun's ``--no-python``).
ENTRY_KINDS: tuple[str, ...] = ("script", "module", "command")


def known_task(value: str, known: Collection[str] | None) -> str:
    """``task`` is one of the installed tasks' ids (``known``; None: not checked, a spec built in code)."""
    if known is not None and value not in known and value.startswith(ISAAC_LAB_TASK_PREFIXES):
        raise rule(
            "task",
            f"{value!r} is one of Isaac Lab's own tasks, which islab's worker does not train",
            "Train it with Isaac Lab's trainer: add --isaaclab auto (Isaac Lab 3 installed in the ranks' Python, "
            "--python; 3.0 dropped the -v0 ids: Isaac-Cartpole-v0 is Isaac-Cartpole there) or --isaaclab DIR "
            f"(a checkout). islab's worker knows: {', '.join(known)}",
        )
    if known is not None and value not in known:
        hint = suggest(value, list(known))
        raise rule(
            "task",
            f"unknown task {value!r}",
            f"{hint + ' ' if hint else ''}Known tasks: {', '.join(known)}",
        )
    return value


def module_name(field: str, value: str | None) -> str | None:
    """A dotted module name (``task_module``), not a file path."""
    if value is not None and not MODULE_PATTERN.fullmatch(value):
        raise rule(
            field,
            f"{value!r} is not a module name",
            "Give a dotted module name such as my_tasks.reach (not a file path), importable from the working directory",
        )
    return value


def run_name(value: str | None) -> str | None:
    """``run_name`` becomes part of a directory name: letters, digits, ``.``, ``_``, ``-``."""
    if value is not None and (not RUN_NAME_PATTERN.fullmatch(value) or value in {".", ".."}):
        raise rule(
            "run_name",
            f"{value!r} may only contain letters, digits, '.', '_' and '-'",
            "Pick a name like baseline_2gpu (it becomes part of a directory name)",
        )
    return value


def printable_path(field: str, value: str | None, *, optional: bool = False) -> str | None:
    """A path printed in commands: not empty, one line, no control characters (None only if ``optional``)."""
    if value is None and optional:
        return value
    if not value or unsafe_character(value):
        raise rule(field, f"{value!r} is empty or contains a line break or control character", "Give a plain path")
    return value


def env_values_as_text(value: Any) -> Any:
    """``env``'s values as text. YAML turns ``NCCL_P2P_DISABLE: 1`` into an int; environment values
    are text anyway. Booleans are refused: YAML's yes/no/on/off would silently become "True"/"False"."""
    if not isinstance(value, Mapping):
        return value
    converted: dict[Any, Any] = {}
    for name, item in value.items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise rule(
                f"env.{name}",
                f"expected a text value, got {item!r} ({type(item).__name__})",
                'Quote it, e.g. NCCL_DEBUG: "INFO" or FLAG: "1"',
            )
        if unsafe_character(str(item)):
            raise rule(
                f"env.{name}",
                f"{str(item)!r} contains {unsafe_character(str(item))}, a line break or control character",
                "Give a one-line value without escape codes",
            )
        converted[name] = str(item)
    return converted


def env_names(value: Mapping[str, str]) -> dict[str, str]:
    """``env``'s names: valid variable names, none of those the launchers set per rank."""
    for name in value:
        if not ENV_NAME_PATTERN.fullmatch(name):
            raise rule(
                f"env.{name}",
                "is not a valid environment variable name",
                "Use letters, digits and '_' only, not starting with a digit",
            )
        if name in JOB_VARIABLES:  # the launchers set these per rank: a user value would be overwritten
            raise rule(f"env.{name}", "is set per rank by the launcher and cannot be overridden", "Remove it from env")
    return dict(value)


def overrides(value: tuple[str, ...]) -> tuple[str, ...]:
    """Agent-config overrides: each one line of ``dotted.key=value``."""
    for item in value:
        if unsafe_character(item):
            raise rule(
                "overrides",
                f"{item!r} contains {unsafe_character(item)}, a line break or control character",
                "Write each override as one line, dotted.key=value",
            )
        if not OVERRIDE_PATTERN.match(item):
            raise rule(
                "overrides",
                f"{item!r} is not key=value",
                "Write agent-config overrides as dotted.key=value, e.g. algorithm.learning_rate=0.0003",
            )
    return value


def entrypoint(value: Mapping[str, str] | None) -> dict[str, str] | None:
    """``{script|module|command: NAME}``: exactly one kind, a one-line name."""
    if value is None:
        return value
    kinds = list(value)
    if len(kinds) != 1 or kinds[0] not in ENTRY_KINDS:
        raise rule(
            "entrypoint",
            f"needs exactly one of {', '.join(ENTRY_KINDS)}, got {', '.join(map(str, kinds)) or 'nothing'}",
            "Write e.g. entrypoint: {script: train.py} (or --script PATH / --module NAME / --command NAME)",
        )
    name = value[kinds[0]]
    if not isinstance(name, str) or not name.strip() or unsafe_character(name):
        raise rule(f"entrypoint.{kinds[0]}", f"{name!r} is empty or not one line of text", "Give a path or name")
    return {kinds[0]: name}


def entry_args(value: tuple[str, ...]) -> tuple[str, ...]:
    """The entry point's arguments, passed verbatim: anything but a NUL, which no argv can hold."""
    if any("\0" in arg for arg in value):
        raise rule("args", "an argument contains a NUL character", "Remove it")
    return value
