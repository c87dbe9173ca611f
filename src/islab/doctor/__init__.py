"""``islab-train doctor``: machine facts from :mod:`~islab.doctor.probes`, pure checks over them
(:mod:`~islab.doctor.checks`) and what is printed (:mod:`~islab.doctor.report`)."""
