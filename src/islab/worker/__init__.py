"""What every rank runs: ``python -m islab.worker`` (under torchrun, and after ``--`` of skrl's JAX
launcher, whose parser takes ``-m`` as the script).

This package's ``__init__`` must stay free of torch imports. ``ENTRY_SCRIPT`` is the worker as a
script path, for tests that start skrl's JAX launcher by hand the way its docs show it.
"""

from pathlib import Path

# __main__.py uses absolute imports only, so it also runs as a plain script.
ENTRY_SCRIPT = Path(__file__).resolve().with_name("__main__.py")
