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

MISSING: Any = object()  # what ``field_value`` returns for a name the mapping does not hold


def field_value(nested: Mapping[str, Any], dotted: str, missing: Any = MISSING) -> Any:
    """The value ``dotted`` names in ``nested`` (``"rendezvous.master_port"`` -> ``nested["rendezvous"]
    ["master_port"]``); ``missing`` when a step is absent or not a mapping, KeyError when ``missing``
    is not given."""
    node: Any = nested
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            if missing is MISSING:
                raise KeyError(dotted)
            return missing
        node = node[part]
    return node
