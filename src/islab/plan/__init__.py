"""Pure command building: a resolved ``RunSpec`` -> one command and environment per node.

:mod:`~islab.plan.plan` builds the ``LaunchPlan`` (the launcher chosen once, from the library
registry); :mod:`~islab.plan.torchrun` and :mod:`~islab.plan.skrl_jax` write each launcher's argv
and per-rank environment; :mod:`~islab.plan.sbatch` the SLURM batch script; :mod:`~islab.plan.dry_run`
what ``--dry-run`` prints. Nothing here imports ``subprocess`` or torch, directly or through what it
imports (``tests/project/test_import_graph.py`` holds it to that): running the plan is :mod:`islab.run`'s job.
"""
