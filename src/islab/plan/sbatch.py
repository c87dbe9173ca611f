"""SLURM batch scripts: ``islab-train sbatch`` writes a script that runs one islab-train per node with ``srun``.

Each node's islab-train then reads its place from the allocation (:mod:`islab.resolve.slurm`).
Pure: a function of the options and the node command, every value shell-quoted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from islab.spec.issues import Issue
from islab.spec.stopping import PREEMPTED_EXIT_CODE
from islab.spec.text import shell_join

_SBATCH_VALUE = re.compile(r"[^\n\r\0]+")
# --requeue: SIGUSR1 this long before the time limit, so the ranks can checkpoint (islab.spec.stopping)
DEFAULT_SIGNAL_BEFORE_S = 120


@dataclass(frozen=True)
class BatchOptions:
    """What goes into the ``#SBATCH`` header."""

    nodes: int
    job_name: str
    output: str  # file pattern, e.g. logs/slurm-%x-%j.out
    cpus_per_task: int
    gpus_per_node: int = 0
    partition: str | None = None
    time: str | None = None
    requeue: bool = False  # requeue on preemption or node failure; SIGUSR1 before --time runs out
    signal_before_s: int = DEFAULT_SIGNAL_BEFORE_S


def batch_option_issues(options: BatchOptions) -> list[Issue]:
    """Values that would break the ``#SBATCH`` header (line breaks) or ask for nothing."""
    issues = []
    for name, value in (("--job-name", options.job_name), ("--partition", options.partition),
                        ("--time", options.time), ("--log-dir", options.output)):  # fmt: skip
        if value is not None and not _SBATCH_VALUE.fullmatch(value):
            issues.append(Issue(name, f"{value!r} is empty or contains a line break", "Give a one-line value"))
    if options.signal_before_s < 1:
        issues.append(Issue("--signal-before", f"must be at least 1 second, got {options.signal_before_s}",
                            f"Give e.g. {DEFAULT_SIGNAL_BEFORE_S}"))  # fmt: skip
    if options.cpus_per_task < 1:
        issues.append(Issue("--cpus-per-task", f"must be at least 1, got {options.cpus_per_task}", "Give e.g. 8"))
    return issues


def requeue_lines(options: BatchOptions) -> list[str]:
    """``--requeue``: SLURM may requeue the job (preemption, node failure, ``scontrol requeue``:
    SIGTERM to every process of the step), and SIGUSR1 reaches the batch shell ``signal_before_s``
    before the time limit; the script passes it to srun, which forwards it to every process of the
    step, and requeues the job itself once they stopped. Either way the ranks checkpoint and
    stop (exit 75), and the requeued job (same job id, same run directory) resumes by itself."""
    if not options.requeue:
        return []
    return ["#SBATCH --requeue", f"#SBATCH --signal=B:USR1@{options.signal_before_s}"]


def sbatch_script(options: BatchOptions, node_command: Sequence[str]) -> str:
    """A batch script that runs ``node_command`` once per node with ``srun``.

    ``node_command`` is the per-node islab-train command (it should contain ``--slurm``). Every
    value is shell-quoted; sbatch reads ``#SBATCH`` lines with the same quoting rules.
    """
    quote = shlex.quote
    header = [
        f"#SBATCH --job-name={quote(options.job_name)}",
        f"#SBATCH --nodes={options.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={options.cpus_per_task}",
        f"#SBATCH --output={quote(options.output)}",
    ]
    if options.partition:
        header.append(f"#SBATCH --partition={quote(options.partition)}")
    if options.time:
        header.append(f"#SBATCH --time={quote(options.time)}")
    if options.gpus_per_node:
        header.append(f"#SBATCH --gres=gpu:{options.gpus_per_node}")
    header += requeue_lines(options)
    srun = [
        "srun", "--nodes", str(options.nodes), "--ntasks-per-node=1", f"--cpus-per-task={options.cpus_per_task}",
        "--kill-on-bad-exit=1",
    ]  # fmt: skip
    lines = [
        "#!/bin/bash",
        *header,
        "# Written by `islab-train sbatch`; submit with: sbatch <this file>",
        "# One islab-train per node; each takes nnodes, its node rank, node 0's address and a",
        "# job-derived port from SLURM (--slurm), then starts its node's ranks.",
        "set -euo pipefail",
        'echo "islab-train job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
    ]
    command = f"{shlex.join(srun)} \\\n    {shell_join(node_command)}"
    if not options.requeue:
        return "\n".join([*lines, f"exec {command}"]) + "\n"
    return "\n".join([*lines, *_REQUEUE_ON_USR1.format(command=command).splitlines()]) + "\n"


# SIGUSR1 (--signal=B:USR1@N, the time limit is near) reaches this shell only: pass it to srun, which
# forwards it to every process of the step (SIGTERM would make srun cancel the step at once). Once
# every node's islab-train checkpointed and stopped (exit 75), requeue the job, which then resumes by
# itself. SLURM requeues a preempted job (SIGTERM to every process) on its own.
_REQUEUE_ON_USR1 = """\
time_limit_near=0 srun_pid=
trap 'time_limit_near=1; kill -USR1 "$srun_pid" 2>/dev/null || true' USR1
{command} &
srun_pid=$!
status=0
while :; do
    wait "$srun_pid" && status=0 || status=$?
    kill -0 "$srun_pid" 2>/dev/null || break  # wait also returns when the trap ran
done
if [ "$time_limit_near" = 1 ] && [ "$status" = {code} ]; then
    echo "islab-train: checkpointed before the time limit; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
""".replace("{code}", str(PREEMPTED_EXIT_CODE))
