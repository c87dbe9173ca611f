"""Pre-flight: the job's collective path tested in seconds, before training starts.

* :mod:`islab.preflight.probe` -- what every rank runs (rank side: torch or JAX);
* :mod:`islab.preflight.report` -- identities and timings -> problems, ``preflight.json``, one line (pure);
* :mod:`islab.preflight.triage` -- known failures: a symptom in a rank's output -> cause and fix (pure).
"""
