"""One adapter per RL library, imported lazily: importing a library has side effects (skrl joins
a process group at import time) and costs seconds, so only the chosen one is ever imported.

Which class serves a (library, ml framework) pair is the registry's row (:mod:`islab.libs.registry`);
this package's import is torch-free so the launcher can read the registry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from islab.libs.registry import adapter_path

if TYPE_CHECKING:
    from islab.libs.base import LibraryAdapter


def load_adapter(lib: str, ml_framework: str = "torch") -> type[LibraryAdapter]:
    module_name, _, class_name = adapter_path(lib, ml_framework).partition(":")
    return getattr(importlib.import_module(module_name), class_name)
