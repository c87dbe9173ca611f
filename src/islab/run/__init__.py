"""Running a plan: starting the node's processes, watching them, naming failures, drawing the console.

:mod:`~islab.run.supervise` picks the node runner for the plan's launcher and runs the one poll loop
of :mod:`~islab.run.processes`; the runners for torchrun and skrl-JAX, a user's entry point
(:mod:`~islab.run.entrypoint`, progress from :mod:`~islab.run.tensorboard_progress`), the hang watch
(:mod:`~islab.run.hangs`), failure naming from plain data (:mod:`~islab.run.failures`) and the
console (:mod:`~islab.run.console`, worded by :mod:`~islab.run.formatting`, with
:mod:`~islab.run.curves`). Torch-free: the supervisor must stay up while ranks crash.
"""
