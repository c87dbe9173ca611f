"""Agent hyper-parameters: one YAML per library and task, in that library's own format.

A task's ``agents/<lib>_ppo_cfg.yaml`` (named by its ``<lib>_cfg_entry_point``, see
``islab.tasks``) is what Isaac Lab ships for each library, so a user can carry their tuned file
over unchanged. Command-line overrides are ``key=value`` with dotted keys
into that YAML (``algorithm.learning_rate=3e-4``); values are parsed with ``yaml.safe_load`` so
numbers, booleans and lists keep their types. A key that does not exist is an error with the
closest match (a typo must not be silently ignored); ``+key=value`` adds a new key on purpose.

Torch-free: the launcher validates overrides before anything starts, and every rank applies them.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Sequence
from typing import Any

import yaml

from islab.tasks import TASKS, agent_config_path

_EXPONENT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


class AgentConfigError(ValueError):
    """A bad agent config or override; ``field`` names what the user must change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def load_agent_config(lib: str, task_id: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    if task_id not in TASKS:
        raise AgentConfigError("task", f"unknown task {task_id!r}")
    path = agent_config_path(lib, task_id)
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except FileNotFoundError:
        raise AgentConfigError("lib", f"there is no {lib} agent config for task {task_id} (expected {path})") from None
    if not isinstance(config, dict):
        raise AgentConfigError(str(path), "an agent config must be a YAML mapping")
    return apply_overrides(config, overrides)


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


def _unknown_key(item: str, path: list[str], node: Any) -> AgentConfigError:
    dotted = ".".join(path)
    siblings = list(node) if isinstance(node, dict) else []
    close = difflib.get_close_matches(path[-1], siblings, n=1)
    hint = f" Did you mean {'.'.join([*path[:-1], close[0]])!r}?" if close else ""
    return AgentConfigError(
        f"override {item!r}",
        f"the agent config has no key {dotted!r}.{hint} Use +{dotted}=... to add a new key on purpose.",
    )
