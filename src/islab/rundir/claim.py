"""Claiming a new directory atomically, so that two launches never write into one.

A run directory of one node is named after the launch time, to the second, and a sweep directory
too: two identical launches started in the same second (a script starting two seeds, two terminals)
would plan the same name. Checking "does it exist?" and then creating it is a race both launches
win. :func:`claim_new_dir` lets the file system decide instead: ``mkdir`` without ``exist_ok`` fails
for all but one of them (also over NFS, where ``mkdir`` is atomic on the server), and a launch that
loses tries the next name, ``<name>-2``, ``<name>-3``, ... The winner of a name owns it alone.

Only a directory nobody else may share is claimed this way. The nodes of a multi-node job, a SLURM
or Kubernetes job's requeue and ``--resume`` all *join* a directory they agree on by its name
(:func:`islab.plan.plan.run_dir_for`): a suffix chosen on one node would split them.
"""

from __future__ import annotations

from pathlib import Path

MAX_CLAIMS = 1000  # names tried before giving up (a thousand launches in one second is a bug elsewhere)


def claim_new_dir(path: str | Path) -> Path:
    """Create ``path`` (its parents as needed) and return it; when another process already made it,
    the first of ``<path>-2``, ``<path>-3``, ... that this call creates. ``FileExistsError`` after
    :data:`MAX_CLAIMS` names."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for number in range(1, MAX_CLAIMS + 1):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path} and {MAX_CLAIMS - 1} numbered variants of it already exist")
