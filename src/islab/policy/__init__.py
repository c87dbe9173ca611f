"""Evaluate and deploy a trained run: ``islab-train play`` and ``islab-train export``.

A run directory holds everything needed to rebuild its policy without the launcher: ``spec.yaml``
(library, learner framework, task, seed), ``agent.yaml`` (the agent config after overrides) and the
islab checkpoints (``checkpoints/latest.pt``, ``iter_<N>.pt``: every library's full state in one
``weights_only`` torch file). The modules of this package, in the order a command uses them:

* :mod:`islab.policy.source` (torch-free) -- which run and which checkpoint: ``latest``, ``best``
  or a path; bad input becomes one ``error: ...`` line and exit 2 before anything heavy starts;
* :mod:`islab.policy.cli_commands` (torch-free) -- what ``islab-train play`` / ``export`` run: a
  subprocess ``python -m islab.policy.play`` / ``python -m islab.policy.export`` with the
  library's environment fixes (the launcher side never imports torch);
* :mod:`islab.policy.loading` -- rebuild env + library adapter in one process (rank 0 of 1) and
  load the checkpoint's library state into it, checking the policy digest;
* :mod:`islab.policy.modules` -- the deployable form: ``DeterministicPolicy`` (raw observations ->
  the actions ``env.step`` receives, observation clipping and normalizer folded in) that each
  adapter builds in ``inference_module()``;
* :mod:`islab.policy.play` -- N complete episodes of the deterministic policy, ``play.json``;
* :mod:`islab.policy.evaluate` (torch-free) -- ``islab-train eval``: the kept checkpoints chosen
  (:mod:`islab.policy.eval_plan`), each evaluated as play does by evaluation processes
  (:mod:`islab.policy.eval_worker`), one checkpoint each at a time; ``eval.json`` and ``eval.png``
  (:mod:`islab.policy.eval_report`);
* :mod:`islab.policy.export` -- ``exported/policy.pt`` (TorchScript), ``policy.onnx``, ``policy.json``.
"""
