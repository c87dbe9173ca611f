"""Agent-config overrides: ``key=value`` with a dotted key into a library's agent config.

Command-line overrides address the YAML a task ships for a library (``algorithm.learning_rate=3e-4``);
values are parsed with ``yaml.safe_load`` so numbers, booleans and lists keep their types. A key that
does not exist is an error with the closest match (a typo must not be silently ignored), and so is a
value of another kind than the config's (``learning_rate=abc``); ``+key=value`` adds a new key, or
replaces a value with another kind, on purpose. :class:`AgentConfigError` names what the user must
change.

Pure and torch-free: values in, values out. Which file is a task's agent config is the task
registry's to say (:mod:`islab.spec.agent_config` loads it), so the planner, which reads only the
error type (through the budget), reaches no task registry.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Sequence
from typing import Any

import yaml

_EXPONENT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


class AgentConfigError(ValueError):
    """A bad agent config or override; ``field`` names what the user must change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def apply_overrides(config: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``config`` with every ``key=value`` / ``+key=value`` applied in order."""
    result = copy.deepcopy(config)
    for item in overrides:
        key, value = parse_override(item)
        adding = key.startswith("+")
        path = key.lstrip("+").split(".")
        node = result
        for depth, part in enumerate(path[:-1]):
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                if child is not None:
                    section = ".".join(path[: depth + 1])
                    raise AgentConfigError(
                        f"override {item!r}",
                        f"{section!r} is a value ({child!r}), not a section; there is no key {key.lstrip('+')!r}. "
                        f"Override it as {section}=...",
                    )
                if not adding:
                    raise _unknown_key(item, path[: depth + 1], node)
                child = node[part] = {}
            node = child
        leaf = path[-1]
        if leaf not in node and not adding:
            raise _unknown_key(item, path, node)
        if not adding:
            _check_type(item, ".".join(path), node[leaf], value)
        node[leaf] = value
    return result


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw_value = item.partition("=")
    if not sep or not key or any(not part for part in key.lstrip("+").split(".")):
        raise AgentConfigError(
            f"override {item!r}",
            "agent-config overrides look like key=value with a dotted key, e.g. algorithm.learning_rate=3e-4",
        )
    try:
        value = yaml.safe_load(raw_value) if raw_value.strip() else ""
    except yaml.YAMLError:
        value = raw_value  # not YAML: keep it as the string the user typed
    if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads "3e-4" (no dot) as a string; users mean the number
    return key, value


def _kind(value: Any) -> str | None:
    """The kind of an agent-config value an override must keep (None: anything goes)."""
    if isinstance(value, bool):
        return "boolean (true/false)"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return None  # text or null: a number or a word may both be meant


def _check_type(item: str, dotted: str, current: Any, value: Any) -> None:
    """A value of another kind than the config's (``learning_rate=abc``) would fail only inside the
    library, after launch, on every rank: refuse it here, naming the key, the kind and the value."""
    expected = _kind(current)
    if expected is None or _kind(value) == expected:
        return
    raise AgentConfigError(
        f"override {item!r}",
        f"{dotted} expects a {expected} (the agent config has {current!r}), got {value!r}. "
        f"Give a {expected}, or +{dotted}=... to replace it with another kind on purpose",
    )


def _unknown_key(item: str, path: list[str], node: Any) -> AgentConfigError:
    dotted = ".".join(path)
    siblings = list(node) if isinstance(node, dict) else []
    close = difflib.get_close_matches(path[-1], siblings, n=1)
    hint = f" Did you mean {'.'.join([*path[:-1], close[0]])!r}?" if close else ""
    return AgentConfigError(
        f"override {item!r}",
        f"the agent config has no key {dotted!r}.{hint} Use +{dotted}=... to add a new key on purpose.",
    )
