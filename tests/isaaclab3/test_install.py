"""``--isaaclab auto`` against the real install: the probe of Isaac Lab's interpreter, its registered
task ids and the rename table read from its changelog."""

from __future__ import annotations

import os
import re
import sys

from isaaclab3_venv import ISAACLAB_PYTHON

from islab.resolve.isaaclab_install import IsaacLabReader, registered_ids
from islab.resolve.isaaclab_renames import RENAMES, renamed_task

# The changelog's renames whose target Isaac Lab 3.0.0 registers under no id any more (removed later).
GONE = {"Isaac-Cart-Double-Pendulum-Direct-v0"}


def test_auto_finds_isaac_lab_3_and_its_tasks_without_importing_it(isaaclab_site):
    install = IsaacLabReader(os.environ).locate("auto", str(ISAACLAB_PYTHON), {})
    assert install is not None and install.version == "3.0.0"
    assert install.entry == (isaaclab_site / "isaaclab_rl" / "entrypoints" / "multigpu.py").resolve()
    ids = registered_ids(install)
    assert {"Isaac-Cartpole", "Isaac-Cartpole-Direct", "IsaacContrib-Cartpole-Showcase-Direct"} <= set(ids)
    assert not any(id_.endswith("-v0") and id_.startswith("Isaac-Cartpole") for id_ in ids)
    assert "isaaclab" not in sys.modules and "warp" not in sys.modules


def test_the_rename_table_is_the_installed_changelogs(isaaclab_site):
    changelog = (isaaclab_site / "isaaclab" / "source" / "isaaclab_tasks" / "docs" / "CHANGELOG.rst").read_text()
    listed: dict[str, str] = {}
    for old, new in re.findall(r"``(Isaac[\w-]*)``\s*→\s*``(Isaac[\w-]*)``", changelog):
        listed.setdefault(old, new)  # newest first: a later rename of the same id wins
    assert listed == RENAMES
    install = IsaacLabReader(os.environ).locate("auto", str(ISAACLAB_PYTHON), {})
    assert install is not None
    ids = registered_ids(install)
    unresolved = {old for old in RENAMES if old not in GONE and renamed_task(old, ids) is None}
    assert not unresolved
