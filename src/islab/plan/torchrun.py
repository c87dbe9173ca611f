"""torchrun: the command that starts a node's ranks (rl_games, rsl_rl, skrl-torch), pure.

**The command.** ``python -m torch.distributed.run`` with the node layout and the rendezvous
(:func:`node_argv`), then ``-m islab.worker`` and the worker's arguments. With the *static*
rendezvous node 0 listens on ``--master_addr:--master_port`` and every node is told its
``--node_rank``; ``--rdzv_conf timeout=`` bounds how long node 0's store waits for the others.
With *c10d* the nodes meet at ``--rdzv_endpoint`` under ``--rdzv_id``, torchrun assigns the node
ranks itself, and ``join_timeout=`` bounds the wait. :func:`with_c10d_node_facts` adds what only
the launching node knows (``is_host=1``, ``--local_addr``).

**At launch** (:func:`supervised_argv`, not shown by ``--dry-run``): ``--tee 3`` makes every line
of a rank arrive prefixed ``[default<local_rank>]:`` so the console can attribute it, and
``--log-dir`` points torchrun's per-rank directories at a folder of the supervisor's own.

**Forked ranks** (:func:`forked_argv`; at launch for our worker on CPU ranks, always for the
pre-flight's probe). torchrun's agent imports torch before it starts the ranks; by default each
rank is a new interpreter that imports torch again (~2 s of every core of a 2-core machine, at
every launch). ``--run-path --start-method fork`` (torchrun's own options) forks every rank from
the agent instead and runs the program's *file* there (:func:`runpy.run_path`): rendezvous,
environment, devices and world size stay the same, and a forked rank ends without the
interpreter's teardown (multiprocessing leaves with ``os._exit``). The agent itself runs under
:data:`QUICK_EXIT_MODULE`, which ends it without tearing torch down once torchrun's ``main``
returns (~1-3 s the launcher would otherwise wait after the last rank is gone), and imports the
RL library's adapter before it forks (``LaunchPlan.rank_imports``: 1.5-4.5 s of CPU per rank at
every launch, once instead). Only where the
ranks' interpreter is the launcher's: the program's file is found in this interpreter. Not for
GPU ranks yet: the agent never touches CUDA, so each forked rank would initialise its own, but
that path has not run on a GPU (scripts/gpu_acceptance.sh is where it will be tried).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from islab.plan.launch_plan import LaunchPlan
    from islab.spec.run_spec import RunSpec

NAME = "torchrun"
WORKER_MODULE = "islab.worker"
MODULE = "torch.distributed.run"  # what `python -m` runs as torchrun
QUICK_EXIT_MODULE = "islab.preflight.quick_exit"  # torchrun, ended without the interpreter's teardown
FORKED_RANKS = ("--run-path", "--start-method", "fork")  # torchrun: ranks forked from its agent, run_path


def node_argv(spec: RunSpec, node_rank: int, derived: Mapping[str, str], program: Sequence[str]) -> tuple[str, ...]:
    """torchrun's options for ``node_rank``, then ``program``: ``-m islab.worker ARGS`` or the user's
    entry point (:func:`islab.plan.plan.program_of`)."""
    argv = [
        spec.python, "-m", MODULE,
        "--nproc_per_node", str(spec.nproc_per_node),
        "--nnodes", spec.nnodes_text,
    ]  # fmt: skip
    timeout = spec.rendezvous.timeout_s  # None: torchrun's own default, so no rdzv_conf entry
    if spec.rendezvous.backend == "c10d":
        # c10d: join_timeout bounds the wait for the rendezvous to complete (torchrun default 600 s);
        # last_call_timeout, the wait for more nodes once the minimum has joined (default 30 s).
        conf = [f"join_timeout={timeout}"] if timeout is not None else []
        if spec.rendezvous.last_call_s is not None:
            conf.append(f"last_call_timeout={spec.rendezvous.last_call_s}")
        argv += [
            "--rdzv_backend", "c10d",
            "--rdzv_endpoint", derived["rendezvous.endpoint"],
            "--rdzv_id", derived["rendezvous.id"],
            *(["--rdzv_conf", ",".join(conf)] if conf else []),
        ]  # fmt: skip
    else:
        # static: "timeout" is the TCPStore's timeout, i.e. how long node 0's store waits for the
        # other nodes' agents to connect (static_tcp_rendezvous.py; torchrun default 900 s).
        argv += [
            "--node_rank", str(node_rank),
            "--master_addr", derived["rendezvous.master_addr"],
            "--master_port", derived["rendezvous.master_port"],
            *(["--rdzv_conf", f"timeout={timeout}"] if timeout is not None else []),
        ]  # fmt: skip
    argv += ["--max_restarts", str(spec.max_restarts)]
    # the agent's own options, when given, in the order Isaac Lab's train_multigpu passes them
    if spec.monitor_interval_s is not None:
        argv += ["--monitor_interval", f"{spec.monitor_interval_s:g}"]
    if spec.start_method is not None:
        argv += ["--start_method", spec.start_method]
    if spec.virtual_local_rank:
        argv.append("--virtual_local_rank")
    return (*argv, *program)


def with_c10d_node_facts(
    plan: LaunchPlan, node_rank: int, *, hosts_store: bool, local_addr: str | None = None
) -> LaunchPlan:
    """``plan`` with what only the launching node knows added to its c10d torchrun command.

    torchrun guesses two things from the machine's host name, and both guesses miss an address on
    a second network card (a cluster fabric, a network namespace), making nodes wait until they
    time out:

    * which node hosts the c10d store: the one whose host name or name-resolved addresses match
      the endpoint -- ``hosts_store`` (this node can bind the endpoint's address) adds
      ``is_host=1`` to ``--rdzv_conf``;
    * the address the ranks use to reach the group's rank-0 node (``MASTER_ADDR``), by default
      ``socket.getfqdn()`` -- ``local_addr`` (this node's address on the route to the endpoint)
      becomes ``--local_addr``.

    Plans that are not c10d are returned unchanged."""
    node = plan.node(node_rank)
    argv = list(node.argv)
    if "--rdzv_backend" not in argv or "c10d" not in argv:
        return plan
    if hosts_store and "--rdzv_conf" not in argv:  # torchrun's default timeouts: no conf yet
        at = argv.index("--rdzv_id") + 2
        argv[at:at] = ["--rdzv_conf", "is_host=1"]
    index = argv.index("--rdzv_conf") + 1 if "--rdzv_conf" in argv else argv.index("--rdzv_id") + 1
    if hosts_store and "is_host=" not in argv[index]:
        argv[index] = f"{argv[index]},is_host=1"
    if local_addr is not None and "--local_addr" not in argv:
        argv[index + 1 : index + 1] = ["--local_addr", local_addr]
    nodes = tuple(replace(item, argv=tuple(argv)) if item.node_rank == node_rank else item for item in plan.nodes)
    return replace(plan, nodes=nodes)


def supervised_argv(argv: Sequence[str], log_dir: str | None = None) -> tuple[str, ...]:
    """torchrun's argv with ``--tee 3`` (each worker line arrives as ``[default<L>]:…``) and, given
    ``log_dir``, ``--log-dir`` (where torchrun tells each rank to write its error file). Options
    already present are kept; any other command is returned unchanged."""
    argv = tuple(argv)
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == MODULE:
            added: list[str] = []
            if "--tee" not in argv and "-t" not in argv:
                added += ["--tee", "3"]
            if log_dir is not None and not {"--log-dir", "--log_dir"} & set(argv):
                added += ["--log-dir", log_dir]
            return (*argv[: index + 2], *added, *argv[index + 2 :])
    return argv


def module_file(module: str) -> str:
    """A module's source file, which torchrun's ``--run-path`` runs in each forked rank (absolute, as
    torchrun asks; found without importing the module)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{module} is not installed with islab-train")
    return spec.origin


def swap_program(argv: Sequence[str], program: Sequence[str], replacement: Sequence[str]) -> tuple[str, ...]:
    """``argv``, which ends with ``program``, ending with ``replacement`` instead."""
    argv, program = tuple(argv), tuple(program)
    if argv[len(argv) - len(program) :] != program:
        raise ValueError(f"the plan's command does not end with its program {program!r}: {argv!r}")
    return (*argv[: len(argv) - len(program)], *replacement)


def forked_argv(
    argv: Sequence[str], program: Sequence[str], script: Sequence[str], imports: Sequence[str] = ()
) -> tuple[str, ...]:
    """torchrun's ``argv`` (ending with ``program``) run under :data:`QUICK_EXIT_MODULE`, its ranks
    forked from the agent (:data:`FORKED_RANKS`), each running ``script`` (a file and its
    arguments) in place of ``program``; the agent imports ``imports`` first, for every rank."""
    swapped = list(swap_program(argv, program, script))
    preloads = [word for module in imports for word in ("--import", module)]
    for index in range(len(swapped) - 1):
        if swapped[index : index + 2] == ["-m", MODULE]:
            swapped[index : index + 2] = ["-m", QUICK_EXIT_MODULE, *preloads, "-m", MODULE, *FORKED_RANKS]
            return tuple(swapped)
    raise ValueError(f"not a torchrun command: {argv!r}")


def worker_script(program: Sequence[str]) -> tuple[str, ...] | None:
    """Our worker's ``-m islab.worker ARGS`` as its file and the same arguments (for
    :func:`forked_argv`), or None for any other program."""
    if tuple(program[:2]) != ("-m", WORKER_MODULE):
        return None
    return (module_file(f"{WORKER_MODULE}.__main__"), *program[2:])


def nproc_of(argv: Sequence[str]) -> int:
    """``--nproc_per_node N`` of a torchrun argv (1 when absent or not a number)."""
    argv = list(argv)
    with contextlib.suppress(ValueError, IndexError):
        return int(argv[argv.index("--nproc_per_node") + 1])
    return 1


def ranks_env(env: Mapping[str, str], nproc: int, cores: int | None = None) -> dict[str, str]:
    """The node's env plus ``OMP_NUM_THREADS``: the ranks on a node share its cores, ``cores // N``
    each (what islab.worker.context.cpu_threads_per_rank gives torch). Setting it ourselves also
    stops torchrun's "Setting OMP_NUM_THREADS ... to 1" banner on every run; a value the user set
    (in the spec's env or the shell) wins."""
    if "OMP_NUM_THREADS" in env or "OMP_NUM_THREADS" in os.environ:
        return dict(env)
    cores = (os.cpu_count() or 1) if cores is None else cores
    return {**env, "OMP_NUM_THREADS": str(max(1, cores // max(1, nproc)))}
