"""One adapter per RL library, imported lazily: importing a library has side effects (skrl joins
a process group at import time) and costs seconds, so only the chosen one is ever imported."""

from __future__ import annotations

import importlib

from islab.libs.base import LibraryAdapter

_ADAPTERS: dict[tuple[str, str], str] = {
    ("rsl_rl", "torch"): "islab.libs.rsl_rl:RslRlAdapter",
    ("rl_games", "torch"): "islab.libs.rl_games:RlGamesAdapter",
    ("skrl", "torch"): "islab.libs.skrl_torch:SkrlTorchAdapter",
    ("skrl", "jax"): "islab.libs.skrl_jax:SkrlJaxAdapter",
}


def load_adapter(lib: str, ml_framework: str = "torch") -> type[LibraryAdapter]:
    try:
        module_name, _, class_name = _ADAPTERS[(lib, ml_framework)].partition(":")
    except KeyError:
        raise ValueError(f"no adapter for library {lib!r} with ml_framework {ml_framework!r}") from None
    return getattr(importlib.import_module(module_name), class_name)
