"""``islab-train sky``: print the SkyPilot task that runs this training on a cloud, as ``k8s`` prints
a Kubernetes job (registered with the other subcommands in :mod:`islab.cli.commands`).

It takes everything a launch takes and resolves the same spec -- with a *planned* SkyPilot
allocation standing in for the one each node will read, so a cluster spec without a rendezvous
section is complete here -- and writes the task of :mod:`islab.sky.task`. Every node's ``run`` is
``python -m islab.cli --sky`` with the options given here, flattened as for the Kubernetes pods
(:func:`islab.cli.k8s_command.pod_command`): what SkyPilot provides (nnodes, node rank, node 0's
address) is left out, and the run directories' root is the mounted bucket or volume. The cluster
file's env becomes the task's ``envs``, secret-looking names its ``secrets`` (never their values).
"""

from __future__ import annotations

import functools
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from islab.cli.app import fail, resolve
from islab.cli.k8s_command import EXCLUDED_OPTIONS, pod_command
from islab.cli.options import own_option, signature
from islab.plan.plan import run_dir_for
from islab.sky.allocation import SkyPilotAllocation
from islab.sky.names import CLOUDS, DEFAULT_FORMAT, FORMATS, RUNS_PATH, RUNS_STORAGE_MODE, TASK_ID_VARIABLE
from islab.sky.options import SkyOptions, option_issues
from islab.sky.task import SkyJob, build, header, launch_commands, render
from islab.spec.issues import Issue, SpecError
from islab.tasks.registry import TASKS

PANEL_SKY = "SkyPilot"
# What the planned allocation calls node 0 while the file is written (each node reads the real IP).
PLANNED_HEAD = "skypilot-node-0"


_own = functools.partial(own_option, PANEL_SKY)


SKY_OPTIONS = (
    _own(
        "format",
        str,
        DEFAULT_FORMAT,
        f"How it runs: {' | '.join(FORMATS)} (sky launch | sky jobs launch: recovers from preemption).",
        metavar="FORMAT",
    ),
    _own(
        "name",
        str | None,
        None,
        "The cluster's (job) or managed job's name. Default: islab-<date>-<time>.",
        metavar="NAME",
    ),
    _own(
        "gpus_type",
        str | None,
        None,
        "The accelerator, as 'sky gpus list' lists it (H100, A100-80GB, L40S); "
        "required for GPU ranks. The count is the ranks per node.",
        metavar="TYPE",
    ),
    _own(
        "cloud",
        str | None,
        None,
        "resources.infra: aws, gcp, azure, kubernetes ... Default: SkyPilot picks the cheapest it can reach.",
        metavar="CLOUD",
    ),
    _own(
        "spot",
        bool,
        False,
        "Spot instances (resources.use_spot); needs --bucket or --volume for the run directory.",
        "--spot",
    ),
    _own(
        "bucket",
        str | None,
        None,
        f"The run directories' bucket, mounted at {RUNS_PATH} ({RUNS_STORAGE_MODE}): a "
        "name SkyPilot creates, or s3://..., gs://... of an existing one.",
        metavar="NAME|URL",
    ),
    _own(
        "volume",
        str | None,
        None,
        f"Instead of --bucket: a SkyPilot volume (sky volumes apply) mounted at {RUNS_PATH}.",
        metavar="NAME",
    ),
    _own(
        "image",
        str | None,
        None,
        "resources.image_id: a Docker image the nodes run in (e.g. nvcr.io/nvidia/isaac-lab:3.0.0).",
        metavar="IMAGE",
    ),
    _own(
        "workdir",
        str | None,
        ".",
        "Synced to every node; setup and run start there. Default: . (the islab-train checkout).",
        metavar="DIR",
    ),
    _own(
        "setup",
        str | None,
        None,
        "The setup script. Default: pip install -e . (with the extras the run needs) "
        "into the ranks' interpreter (--python).",
        metavar="SCRIPT",
    ),
    _own(
        "env",
        list[str] | None,
        None,
        "NAME=VALUE in the task's envs (repeatable; sky launch --env overrides).",
        "--env",
        metavar="NAME=VALUE",
    ),
    _own(
        "secret",
        list[str] | None,
        None,
        "A secret's NAME (repeatable): 'secrets: NAME: null' in the file, the value "
        "from your environment at launch (sky launch --secret NAME).",
        "--secret",
        metavar="NAME",
    ),
    _own("output", Path | None, None, "Write the task to FILE instead of stdout.", "-o", "--output", metavar="FILE"),
)

SKY_EPILOG = """\
[bold]Examples[/bold]

  [dim]# 2 nodes x 8 H100 as a managed job on spot instances: recovers from preemption[/dim]
  islab-train sky --format managed --nnodes 2 --gpus 8 --gpus-type H100 --spot --bucket islab-runs -o task.yaml

  [dim]# one cloud node, CPU ranks (try the path without GPUs)[/dim]
  islab-train sky --device cpu --nproc 2 -o task.yaml

Every node runs `python -m islab.cli --sky` with these options; nnodes, its node rank and node 0's
address come from SkyPilot (docs/CLOUD.md). Secret-looking values never enter the file: launch with
--secret NAME (sky launch --secret WANDB_API_KEY ...).
"""
SKY_HELP = (
    "Print the SkyPilot task that runs this training on a cloud (one islab-train per node; --format managed "
    "recovers from spot preemption). Usage: islab-train sky ... -o task.yaml && sky launch -c NAME task.yaml"
)


def _sky_options(options: dict[str, Any], name: str) -> SkyOptions:
    return SkyOptions(
        name=name, format=options["format"], gpus_type=options["gpus_type"], cloud=options["cloud"],
        spot=options["spot"], bucket=options["bucket"], volume=options["volume"], image=options["image"],
        workdir=options["workdir"], setup=options["setup"], envs=tuple(options["env"] or ()),
        secrets=tuple(options["secret"] or ()),
    )  # fmt: skip


def sky_command(ctx: typer.Context, **options: Any) -> None:
    name = options["name"] or f"islab-{datetime.now():%Y%m%d-%H%M%S}"
    sky = _sky_options(options, name)
    issues = option_issues(sky, clouds=CLOUDS)  # before resolving: a secret's value is refused first
    if issues:
        fail(SpecError(issues))

    def planned_allocation(chosen: Any) -> Any:
        nnodes = chosen.get("nnodes", 1)
        count = nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 0 else 1
        return SkyPilotAllocation(count, 0, (PLANNED_HEAD,) * count, None, 0).layer(chosen)

    resolved = resolve(ctx, {**options, "slurm": None, "k8s": None, "sky": None}, slurm_layer=planned_allocation,
                       elsewhere=True)  # fmt: skip
    spec = resolved.spec
    issues = option_issues(sky, device=spec.device, min_nnodes=spec.min_nnodes)
    if issues:
        fail(SpecError(issues))
    try:
        command = pod_command(ctx, options, spec.python, log_dir=RUNS_PATH if sky.storage else None)
    except SpecError as exc:
        fail(exc)
    command = (*command[:3], "--sky", *command[3:])  # python -m islab.cli --sky ...
    extras = run_extras(spec)
    job = SkyJob(sky, command, spec.nnodes, spec.nproc_per_node, spec.device, command[0], extras, spec.env,
                 wandb=spec.logger == "wandb")  # fmt: skip
    path = str(options["output"]) if options["output"] is not None else "task.yaml"
    text = render(build(job), header=header(job, path))
    if options["output"] is not None:
        try:
            options["output"].write_text(text)
        except OSError as exc:
            fail(SpecError(Issue("--output", f"cannot write {path} ({exc.strerror or exc})", "Check the path")))
        print(f"islab-train: wrote {path}", file=sys.stderr)
    else:
        print(text, end="", flush=True)
    _say_what_next(job, spec, path, written=options["output"] is not None)


sky_command.__signature__ = signature(  # type: ignore[attr-defined]
    train=False, exclude=EXCLUDED_OPTIONS, own=SKY_OPTIONS
)


def run_extras(spec: Any) -> tuple[str, ...]:
    """islab-train's extras a node needs for this run: skrl-JAX's, W&B's, the task's own (mjlab's tasks)."""
    task_extra = TASKS.entry(spec.task).extra if spec.task in TASKS.entries else ""
    wanted = (("jax", spec.ml_framework == "jax"), ("wandb", spec.logger == "wandb"), (task_extra, bool(task_extra)))
    return tuple(extra for extra, needed in wanted if needed)


def _say_what_next(job: SkyJob, spec: Any, path: str, *, written: bool) -> None:
    """The summary, the commands to run (on stderr: stdout may be the file) and the warnings."""
    root = RUNS_PATH if job.options.storage else spec.log_dir
    run_dir = run_dir_for(spec.model_copy(update={"log_dir": root, "resume": None}), datetime.now(),
                          job_leaf=f"${TASK_ID_VARIABLE}")  # as every node will name it  # fmt: skip
    accelerators = f" ({job.options.gpus_type}:{job.nproc_per_node})" if job.device == "cuda" else ""
    say = [f"islab-train: sky {job.options.format} '{job.options.name}': {job.nnodes} node(s) x {job.nproc_per_node} "
           f"rank(s) on {job.device}{accelerators}; run directory on the nodes: {run_dir}"]  # fmt: skip
    if not written:
        say.append(f"islab-train: save it as {path} (or write it with -o {path}), then:")
    else:
        say.append("islab-train: next:")
    say += [f"  {line}" for line in launch_commands(job, path)]
    if not job.options.storage:
        lost = ("a recovery starts from scratch" if job.options.format == "managed"
                else "lost with 'sky down' or a failed node")  # fmt: skip
        say.append(f"islab-train: warning: no --bucket or --volume: the run directory is on the node's disk, {lost}")
    for line in say:
        print(line, file=sys.stderr)
