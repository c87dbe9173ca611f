"""islab-train: launch and supervise distributed RL training for Isaac-style tasks.

The package has two halves that never import each other's heavy parts:

* the launcher (``islab.cli``, ``islab.spec``, ``islab.plan``, ``islab.supervise``) turns a
  command line and a YAML cluster spec into torchrun / skrl-JAX commands and supervises them.
  It must stay importable without torch so that ``--help`` and ``--dry-run`` are instant;
* the worker (``islab.worker``, ``islab.envs``, ``islab.libs``) is what every rank runs.
"""

__version__ = "0.1.0"
