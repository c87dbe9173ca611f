"""``islab-train fit``: how many envs fit on one rank's device, measured (docs/FIT.md).

* :mod:`islab.fit.table` -- pure: rows, when to stop, the recommendation and the knee, table and JSON;
* :mod:`islab.fit.memory` -- torch-free edge: the memory one CPU rank may use (RAM, cgroup limit);
* :mod:`islab.fit.search` -- torch-free edge: one child per size, doubling, peak RSS from ``wait4``;
* :mod:`islab.fit.child` -- rank side: one rank of the job's worker, timed, GPU memory from torch and NVML;
* :mod:`islab.fit.cache` -- ``--num-envs auto``: a recommendation kept per task, library, device and versions.
"""
