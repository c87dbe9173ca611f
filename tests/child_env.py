"""The environment of a process a test starts.

This machine's environment, less what a developer's shell or an outer job may carry that would
change what the test runs (``ISLAB_*`` options, an outer torchrun's ``RANK``/``WORLD_SIZE``, SLURM's
variables: each test names the prefixes it drops), plus the suite's own settings.

The suite's one setting: the pre-flight collective check (on by default before every launch of
several ranks, ~5-10 s on a 2-core machine) is off for tests about something else. The pre-flight's
own tests (tests/preflight/) build their environments without it and so run the real default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SUITE_SETTINGS = {"ISLAB_PREFLIGHT": "off"}


def child_env(strip: str | tuple[str, ...] = "ISLAB_", base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without the variables starting with ``strip``,
    plus :data:`SUITE_SETTINGS`."""
    base = os.environ if base is None else base
    env = {name: value for name, value in base.items() if not name.startswith(strip)}
    return {**env, **SUITE_SETTINGS}
