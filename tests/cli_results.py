"""What a command line run in-process (the ``islab`` fixture) must give back, checked in one place:
a dry run's JSON plan, or bad input's one ``error:`` line with exit code 2 and nothing on stdout."""

from __future__ import annotations

import json
from typing import Any


def dry_run_json(islab: Any, *args: str) -> dict[str, Any]:
    """``islab-train --dry-run --json ARGS`` (before any ``--`` in ARGS), which must succeed."""
    code, out, err = islab("--dry-run", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def one_error(result: tuple[int, str, str], field: str) -> str:
    """The stderr of a refused command: exit 2, nothing on stdout, one line naming ``field`` first."""
    code, out, err = result
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {field}"), err
    return err
