"""From the sources a user gives (command line, SLURM, ``ISLAB_*``, cluster YAML, defaults) to a ``RunSpec``.

:mod:`~islab.resolve.resolve` merges the sources and applies the rules that read the disk;
:mod:`~islab.resolve.presets` and :mod:`~islab.resolve.isaaclab` turn ``--isaaclab``/``--mjlab`` into
entry points; :mod:`~islab.resolve.resumed` reads a resumed run's record; :mod:`~islab.resolve.slurm`
reads a SLURM allocation as one more source.
"""
