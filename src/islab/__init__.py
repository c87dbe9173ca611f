"""islab-train: launch and supervise distributed RL training for Isaac-style tasks.

The package has two halves that never import each other's heavy parts:

* the launcher turns a command line and a YAML cluster spec into torchrun / skrl-JAX commands and
  supervises them: ``islab.cli`` -> ``islab.resolve`` (sources -> ``islab.spec.RunSpec``) ->
  ``islab.plan`` (pure command building) -> ``islab.run`` (processes, supervision), with
  ``islab.doctor`` beside it. It must stay importable without torch so that ``--help`` and
  ``--dry-run`` are instant;
* the rank side (``islab.worker``, ``islab.libs``, ``islab.envs``, ``islab.tasks``) is what every
  rank runs.

Both read the torch-free registries and layout: ``islab.libs.registry``, ``islab.tasks``,
``islab.rundir``. docs/ARCHITECTURE.md has the picture and one line per module.
"""

__version__ = "0.1.0"
