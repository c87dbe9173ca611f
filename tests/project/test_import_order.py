"""Every islab module imports when it is the first islab module a process imports.

An import cycle between islab modules works or fails depending on which module a process imports
first: ``python -m islab.cli`` entered the cycle from one side and worked, while a sweep's trial
process, whose first import was ``islab.sweep.trials``, died on ``cannot import name ... from
partially initialized module``. Here each module is imported with no other islab module loaded
(third-party modules stay cached, so the whole walk takes seconds). A module that needs an extra
this environment lacks (mjlab, ...) is skipped by name.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import SRC

WALK = """
import importlib, json, pkgutil, sys
import islab
names = sorted(info.name for info in pkgutil.walk_packages(islab.__path__, "islab.")
               if not info.name.endswith("__main__"))
failures = {}
for name in names:
    for loaded in [key for key in sys.modules if key == "islab" or key.startswith("islab.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] == "islab":
            failures[name] = repr(error)
    except Exception as error:
        failures[name] = f"{type(error).__name__}: {error}"
print(json.dumps({"modules": len(names), "failures": failures}))
"""


@pytest.mark.slow
def test_every_module_imports_first():
    import json

    done = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300,
                          cwd=SRC, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["modules"] > 100
    assert not result["failures"], result["failures"]
