"""``islab-train sweep``: many islab-train runs (seeds, hyper-parameter searches) on Ray Tune.

A sweep is a base run (any cluster-spec field) plus agent-config overrides to search over, every
configuration repeated with every seed. Each *trial* is an ordinary ``islab-train`` command line,
started as a subprocess by a Ray Tune trainable, so ``best.command`` in ``sweep.json`` reproduces it
and a trial may itself be a multi-rank torchrun job. The package is split by concept:

* :mod:`islab.sweep.schema` -- SWEEP.yaml: the strict schema (unknown keys are errors);
* :mod:`islab.sweep.load` -- reading SWEEP.yaml, checking it against the disk and this machine;
* :mod:`islab.sweep.trials` -- the trial plan (pure): configurations x seeds -> trials and their argv;
* :mod:`islab.sweep.dry_run` -- printing the plan, paste-safe (``--dry-run [--json]``);
* :mod:`islab.sweep.trial_process` -- one trial's islab-train process: start, stream metrics, stop;
* :mod:`islab.sweep.trainable` -- the Ray Tune trainable around it (needs the ``[sweep]`` extra);
* :mod:`islab.sweep.driver` -- Ray (embedded, or ``--ray-address``), Tune, Ctrl-C and ``--resume``;
* :mod:`islab.sweep.live` -- the live table on the terminal;
* :mod:`islab.sweep.summary` / :mod:`islab.sweep.curves` -- sweep.json, summary.md, curves.png;
* :mod:`islab.sweep.command` -- the ``islab-train sweep`` command.

Everything up to the dry run is torch-free and Ray-free: a bad SWEEP.yaml is refused (exit 2)
before Ray is imported, and the dry run works without the extra.
"""
