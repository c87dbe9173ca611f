"""``islab-train scale``: the same job at 1, 2, ..., N ranks on this node, a few iterations each, to
show how it scales and what limits it (docs/SCALE.md).

Launcher side and torch-free: every run goes through the launch path (plan + supervise), the
numbers come from the files the worker writes (``progress.jsonl``) and the pre-flight's
``preflight.json``. :mod:`islab.scale.table` is pure; :mod:`islab.scale.plot` draws ``scale.png``.
"""
