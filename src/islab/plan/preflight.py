"""The pre-flight plan: the job's own plan with the probe as every rank's program (pure).

A pre-flight check is only worth its seconds if it tests what the training will use. So the probe
(:mod:`islab.preflight.probe`) is not started by a plan of its own: :func:`probe_plan` takes the
job's :class:`~islab.plan.launch_plan.LaunchPlan` -- same launcher (torchrun or skrl-JAX's ranks),
rendezvous, environment, devices and world size, node by node -- and replaces only

* the program after the launcher's options: the probe (``--run-dir D --device X --timeout S``)
  instead of ``-m islab.worker ...`` or the user's entry point;
* under torchrun, how a rank starts: ``--run-path --start-method fork`` (torchrun's own options)
  forks every rank from torchrun's agent, which has imported torch already, and runs the probe's
  file there (:func:`runpy.run_path`), instead of starting a new interpreter per rank that imports
  torch again (~1.9 s of both cores of a 2-core machine, a third of the pre-flight). Rendezvous,
  store, backend, environment, devices and world size stay the job's; the agent has not touched
  CUDA, so each forked rank initialises its own. skrl-JAX's ranks are started directly
  (``-m islab.preflight.probe``), as its training ranks are;
* torchrun's rendezvous wait (``--rdzv_conf timeout=`` / ``join_timeout=``) and restarts: the
  pre-flight timeout and none, so a node that never comes is named in seconds, not after the
  training's rendezvous timeout; a c10d rendezvous id gets ``-preflight`` (same endpoint, a
  rendezvous of its own);
* torchrun runs under :mod:`islab.preflight.quick_exit` (``python -m islab.preflight.quick_exit -m
  torch.distributed.run ...``): the same torchrun with the same options, which ends without the
  interpreter's teardown of torch once its ``main`` returns (seconds the pre-flight would wait);
* the environment gains ``NCCL_DEBUG=INFO`` (``INIT,NET``: the interface and transport NCCL chose,
  its warnings) and ``ISLAB_PREFLIGHT_FIELDS``, the JSON of the fields every node must agree on
  (:func:`islab.plan.plan.shared_values`), which the probe compares across nodes.

Each node's islab-train runs its own node's part, as it will for the training.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from islab.plan import skrl_jax
from islab.plan.launch_plan import LaunchPlan, NodePlan
from islab.plan.plan import shared_values
from islab.plan.torchrun import forked_argv, module_file, swap_program
from islab.preflight.report import FIELDS_VARIABLE
from islab.spec.run_spec import RunSpec

PROBE_MODULE = "islab.preflight.probe"
DEFAULT_PREFLIGHT_TIMEOUT_S = 60
# The probe's hard wall-clock limit is its timeout plus this: every probe process is killed then.
KILL_AFTER_S = 5
MODES = ("on", "off", "only")
RDZV_ID_SUFFIX = "-preflight"
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
_RDZV_WAIT = re.compile(r"(join_timeout|timeout)=\d+")


def wants_preflight(spec: RunSpec, mode: str) -> bool:
    """A job of more than one rank is checked first, unless ``--preflight off``. Not an elastic one
    (``--nnodes MIN:MAX``): its nodes may arrive minutes apart and join a job already training, so
    there is no moment when every node could take part in one probe."""
    elastic = spec.min_nnodes is not None and spec.min_nnodes < spec.nnodes
    return mode != "off" and spec.nnodes * spec.nproc_per_node > 1 and not elastic


def probe_file() -> str:
    """The probe's source file, which torchrun's ``--run-path`` runs in each forked rank."""
    return module_file(PROBE_MODULE)


def probe_args(spec: RunSpec, run_dir: str, timeout_s: int) -> tuple[str, ...]:
    """The probe's options (after its file, or ``-m islab.preflight.probe`` for skrl-JAX's ranks)."""
    return ("--run-dir", run_dir, "--device", spec.device, "--timeout", str(timeout_s))


def probe_env(spec: RunSpec) -> dict[str, str]:
    return {**NCCL_DEBUG_ENV, FIELDS_VARIABLE: json.dumps(shared_values(spec), sort_keys=True)}


def _bounded_torchrun(
    argv: Sequence[str], program: Sequence[str], probe: Sequence[str], timeout_s: int
) -> tuple[str, ...]:
    """torchrun's rendezvous wait set to ``timeout_s`` (``join_timeout`` for c10d, the store's
    ``timeout`` for a static rendezvous: added when the job leaves torchrun's default), no restarts,
    ranks forked (:data:`FORKED_RANKS`) running the probe's file, run under :data:`QUICK_EXIT_MODULE`."""
    argv = list(forked_argv(argv, program, (probe_file(), *probe)))
    c10d = "--rdzv_backend" in argv and argv[argv.index("--rdzv_backend") + 1] == "c10d"
    wait = f"{'join_timeout' if c10d else 'timeout'}={timeout_s}"
    if "--rdzv_conf" not in argv:
        argv[argv.index("--max_restarts") : argv.index("--max_restarts")] = ["--rdzv_conf", wait]
    for index, item in enumerate(argv[:-1]):
        if item == "--rdzv_conf":
            entries = [e for e in argv[index + 1].split(",") if e and not _RDZV_WAIT.fullmatch(e)]
            argv[index + 1] = ",".join([wait, *entries])
        elif item == "--max_restarts":
            argv[index + 1] = "0"
        elif item == "--rdzv_id":  # a rendezvous of its own: a late probe agent never meets the job's
            argv[index + 1] = f"{argv[index + 1]}{RDZV_ID_SUFFIX}"
    return tuple(argv)


def _added(env: Mapping[str, str], extra: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType({**env, **extra})


def probe_plan(plan: LaunchPlan, spec: RunSpec, timeout_s: int) -> LaunchPlan:
    """``plan`` with the probe in place of every rank's program (see the module docstring)."""
    program = plan.program
    probe = probe_args(spec, plan.run_dir, timeout_s)
    extra = probe_env(spec)
    nodes = []
    for node in plan.nodes:
        if plan.launcher == skrl_jax.NAME:
            module_probe = ("-m", PROBE_MODULE, *probe)
            ranks = tuple(
                replace(rank, argv=(*swap_program(rank.argv, program, module_probe),), env=_added(rank.env, extra))
                for rank in node.ranks
            )
            argv = swap_program(node.argv, program, module_probe)
            nodes.append(NodePlan(node.node_rank, argv, _added(node.env, extra), ranks))
        else:
            argv = _bounded_torchrun(node.argv, program, probe, timeout_s)
            nodes.append(NodePlan(node.node_rank, argv, _added(node.env, extra)))
    return replace(
        plan, nodes=tuple(nodes), rendezvous_timeout_s=timeout_s, budget=None, entrypoint=True, events_root=None,
        events_library=None, events_not_before=None, hang_timeout_s=0, forked_ranks=False,
    )  # fmt: skip
