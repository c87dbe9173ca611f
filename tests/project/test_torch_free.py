"""The launcher side is torch-free: every module of it imports with torch & co. made unimportable.

``--help``, ``--dry-run``, spec errors and the supervisor must not pay seconds for ``import torch``
(CI runs them constantly, and the supervisor must stay up while ranks crash). A finder placed first
on ``sys.meta_path`` refuses the heavy packages, then every module of ``islab.cli`` and
the launcher-side packages (``islab.spec``, ``islab.resolve``, ``islab.plan``, ``islab.run``,
``islab.doctor``, ``islab.rundir``; found by walking the packages, so a new module is covered without
listing it), plus the torch-free foundations they read (``islab.libs.registry``, ``islab.tasks``), is
imported and a dry run is planned in the same process.
"""

from __future__ import annotations

import subprocess
import sys

from paths import TESTS

BLOCKED = ("torch", "numpy", "jax", "jaxlib", "flax", "optax", "gymnasium", "rl_games", "rsl_rl", "skrl")

PROBE = f"""
import importlib, pkgutil, sys

BLOCKED = {BLOCKED!r}

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"the launcher side imported {{name}}")
        return None

sys.meta_path.insert(0, Refuse())
import islab.cli, islab.spec, islab.resolve, islab.plan, islab.run, islab.doctor, islab.rundir
names = ["islab.libs.registry", "islab.tasks"]
for package in (islab.cli, islab.spec, islab.resolve, islab.plan, islab.run, islab.doctor, islab.rundir):
    names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    if not name.endswith("__main__"):  # running the program is checked below
        importlib.import_module(name)
from islab import cli
assert cli.run(["--device", "cpu", "--nproc", "2", "--dry-run", "--json"]) == 0
assert cli.run(["--lib", "skrl", "--ml-framework", "jax", "--device", "cpu", "--dry-run"]) == 0
assert cli.run(["--lib", "bogus"]) == 2
print("imported", len(names))
"""


def test_every_launcher_module_imports_with_torch_and_the_rl_libraries_blocked():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=TESTS, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    count = int(result.stdout.strip().splitlines()[-1].split()[-1])
    assert count >= 30, result.stdout  # cli (4) + the launcher-side packages (26+) + the two foundations
