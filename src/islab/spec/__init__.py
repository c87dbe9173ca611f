"""What a run is: the ``RunSpec`` schema and the facts it is checked against, pure and torch-free.

:mod:`~islab.spec.run_spec` is the schema of a launch (no file I/O); :mod:`~islab.spec.launch_rules`
what each launcher allows; :mod:`~islab.spec.issues` the one shape of an error line;
:mod:`~islab.spec.text` and :mod:`~islab.spec.addresses` how values are rendered and parsed;
:mod:`~islab.spec.agent_config` (with :mod:`~islab.spec.overrides`), :mod:`~islab.spec.budget` and
:mod:`~islab.spec.stopping` the agent configs, the sample budget and the preemption contract that both
the launcher and the ranks read. Nothing here imports torch, and only :mod:`~islab.spec.agent_config`
may start a process: it finds a task's agent config through the task registry, whose probe reads a
registration in a child process, so the launcher calls it at the resolve edge and the planner never
imports it.
"""
