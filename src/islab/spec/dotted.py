"""Dotted field names: how ``rendezvous.master_port`` names a value inside a nested mapping.

The run spec is flat except for ``rendezvous``; every layer, record and table names its fields
with dots (``lib``, ``rendezvous.master_port``). A spec as a plain dict (``RunSpec.to_plain()``),
a stored ``launch.yaml`` and a sweep's base run are nested instead, so reading one field of
them is one walk down the dots -- written here once (pure, no imports of the spec: the worker's
argument table below the schema reads it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MISSING: Any = object()  # a ``missing`` to pass when None could be a value: ``field_value(..., missing=MISSING)``
_RAISE: Any = object()  # no ``missing`` given: an absent name is a KeyError


def field_value(nested: Mapping[str, Any], dotted: str, missing: Any = _RAISE) -> Any:
    """The value ``dotted`` names in ``nested`` (``"rendezvous.master_port"`` -> ``nested["rendezvous"]
    ["master_port"]``); ``missing`` when a step is absent or not a mapping, KeyError when ``missing``
    is not given."""
    node: Any = nested
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if missing is _RAISE:
                raise KeyError(dotted)
            return missing
        node = node[part]
    return node
