"""The SkyPilot task YAML of ``islab-train sky``, and the commands that launch it.

One task, two ways to run it (SkyPilot's task schema, sky/utils/schemas.py ``get_task_schema``):

============  ===========================  ==================================================
format        launched with                when a node is lost
============  ===========================  ==================================================
``job``       ``sky launch -c NAME``       the job fails; the cluster stays yours (``sky down``)
``managed``   ``sky jobs launch -n NAME``  SkyPilot's jobs controller relaunches the nodes and
                                           runs setup and run again (``resources.job_recovery``);
                                           the same task id names the same run directory on
                                           the bucket or volume, so training resumes from
                                           ``checkpoints/latest.pt``
============  ===========================  ==================================================

What the file holds: ``resources`` (``accelerators: TYPE:<ranks per node>``, ``infra``, ``use_spot``,
``image_id``), ``num_nodes``, ``workdir`` (synced to every node; setup and run start there),
``setup`` (installs islab-train from the workdir into the ranks' interpreter), ``run`` (islab-train
on every node: it reads its place from SkyPilot's variables, :mod:`islab.sky.allocation`), ``envs``
(the run's plain settings), ``secrets`` (the names of secret-looking variables, each ``null``: the
value comes with ``--secret NAME`` at launch and never stands in the file), and the run
directories' storage at :data:`~islab.sky.names.RUNS_PATH` -- a bucket in ``file_mounts``
(``MOUNT_CACHED``) or a SkyPilot volume in ``volumes``. Pure functions: a :class:`SkyJob` in, a
dict and its YAML out.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from islab.sky.names import RUNS_PATH, RUNS_STORAGE_MODE
from islab.sky.options import BUCKET_URL, SkyOptions, parsed_envs
from islab.spec.issues import is_secret_name
from islab.spec.stopping import PREEMPTED_EXIT_CODE

# Isaac Lab's and our own trainers write W&B with this key (--logger wandb): always a secret.
WANDB_KEY = "WANDB_API_KEY"
Task = dict[str, Any]


@dataclass(frozen=True)
class SkyJob:
    """What every node of the task runs, and on what."""

    options: SkyOptions
    command: tuple[str, ...]  # islab-train's argv on each node
    nnodes: int
    nproc_per_node: int
    device: str
    python: str = "python"  # the ranks' interpreter: setup installs islab-train into it
    extras: tuple[str, ...] = ()  # islab-train's extras the run needs (jax, wandb)
    env: Mapping[str, str] = field(default_factory=dict)  # the spec's env (the cluster file's)
    wandb: bool = False

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret-looking variable the nodes need, by name only."""
        found = {name for name in self.env if is_secret_name(name)} | set(self.options.secrets)
        return tuple(sorted(found | ({WANDB_KEY} if self.wandb else set())))

    @property
    def envs(self) -> dict[str, str]:
        """The plain variables: the cluster file's env, then ``--env`` (secret-looking ones excluded)."""
        given = {**self.env, **parsed_envs(self.options)}
        return {name: str(value) for name, value in given.items() if not is_secret_name(name)}


def resources(job: SkyJob) -> Task:
    found: Task = {}
    if job.device == "cuda" and job.options.gpus_type:
        found["accelerators"] = f"{job.options.gpus_type}:{job.nproc_per_node}"  # one rank per GPU
    if job.options.cloud:
        found["infra"] = job.options.cloud.lower()
    if job.options.spot:
        found["use_spot"] = True
    if job.options.image:
        found["image_id"] = f"docker:{job.options.image}"
    if job.options.format == "managed":
        # islab-train stopped by a preemption notice (SIGTERM) writes its checkpoint and exits 75: a
        # recovery, not a failure of the job (recovered from the checkpoint either way).
        found["job_recovery"] = {"recover_on_exit_codes": [PREEMPTED_EXIT_CODE]}
    return found


def storage(job: SkyJob) -> tuple[str, Task] | None:
    """(task key, its entry) holding the run directories, or None (the node's own disk)."""
    options = job.options
    if options.volume:
        return "volumes", {RUNS_PATH: options.volume}
    if options.bucket:
        where = "source" if BUCKET_URL.fullmatch(options.bucket) else "name"  # an existing bucket, or a new one
        return "file_mounts", {RUNS_PATH: {where: options.bucket, "mode": RUNS_STORAGE_MODE}}
    return None


def setup_script(job: SkyJob) -> str:
    """The given ``--setup``, or: islab-train installed from the workdir into the ranks' interpreter."""
    if job.options.setup is not None:
        return job.options.setup
    target = f".[{','.join(job.extras)}]" if job.extras else "."
    return shlex.join([job.python, "-m", "pip", "install", "-e", target]) + "\n"


def build(job: SkyJob) -> Task:
    """The task as a dict, keys in the order a reader expects them."""
    task: Task = {"name": job.options.name}
    if job.options.workdir:
        task["workdir"] = job.options.workdir
    task["resources"] = resources(job)
    task["num_nodes"] = job.nnodes
    if job.envs:
        task["envs"] = job.envs
    if job.secrets:
        task["secrets"] = {name: None for name in job.secrets}  # null: required, passed with --secret at launch
    held = storage(job)
    if held is not None:
        task[held[0]] = held[1]
    task["setup"] = setup_script(job)
    task["run"] = shlex.join(job.command) + "\n"
    return task


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (setup, run) as YAML block literals, as people write them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _text)


def render(task: Task, header: str = "") -> str:
    return header + yaml.dump(task, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


def launch_commands(job: SkyJob, path: str) -> list[str]:
    """What the user runs next: launch (secrets by name), follow the logs, stop paying."""
    name, secrets = job.options.name, [arg for secret in job.secrets for arg in ("--secret", secret)]
    if job.options.format == "managed":
        return [shlex.join(["sky", "jobs", "launch", "-n", name, path, *secrets]),
                shlex.join(["sky", "jobs", "logs", "-n", name]), "sky jobs queue",
                shlex.join(["sky", "jobs", "cancel", "-n", name])]  # fmt: skip
    return [shlex.join(["sky", "launch", "-c", name, path, *secrets]), shlex.join(["sky", "logs", name]),
            shlex.join(["sky", "down", name])]  # fmt: skip


def header(job: SkyJob, path: str) -> str:
    launch = launch_commands(job, path)[0]
    return f"# Written by `islab-train sky --format {job.options.format}`; launch with: {launch}\n"
