"""What every rank runs: ``python -m islab.worker`` (torchrun) or ``ENTRY_SCRIPT`` (skrl-JAX launcher).

This package's ``__init__`` must stay free of torch imports: the launcher reads ``ENTRY_SCRIPT``.
"""

from pathlib import Path

# skrl's JAX launcher runs a script path, not a module; __main__.py uses absolute imports only.
ENTRY_SCRIPT = Path(__file__).resolve().with_name("__main__.py")
