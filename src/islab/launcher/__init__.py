"""The launcher: from a resolved spec to supervised processes, torch-free.

Read it in the order a launch goes through it:

* :mod:`~islab.launcher.spec` -- the schema of a launch (no I/O); :mod:`~islab.launcher.resolve` --
  where each value comes from (command line > SLURM > ``ISLAB_*`` > cluster YAML > defaults) and
  the rules that read the disk; :mod:`~islab.launcher.issues`, :mod:`~islab.launcher.addresses`;
* :mod:`~islab.launcher.plan` -- the spec as one command per node (pure), the launcher chosen once
  from the library registry; :mod:`~islab.launcher.torchrun` and :mod:`~islab.launcher.skrl_jax`
  write their commands and read their failures;
* :mod:`~islab.launcher.doctor` (checks over facts from :mod:`~islab.launcher.probes`) before a
  launch, :mod:`~islab.launcher.slurm` for SLURM allocations and batch scripts;
* :mod:`~islab.launcher.supervise` runs a node's plan through the one poll loop of
  :mod:`~islab.launcher.processes`, names failures (:mod:`~islab.launcher.failures`) and draws the
  console (:mod:`~islab.launcher.console`).

Nothing here imports torch, numpy, gymnasium, jax or an RL library, nor the rank side
(``islab.worker``, the adapters, ``islab.envs``); ``tests/test_torch_free.py`` holds it to that.
"""
