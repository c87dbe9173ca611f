"""What ``islab-train sky`` asks beyond a launch's options, and what SkyPilot refuses in it.

SkyPilot checks a task file when it is launched, after the user has typed ``sky launch`` and maybe
waited for a cloud quota; here the same mistakes are one line on stderr before any file is written:
an accelerator type without which a GPU job gets CPUs only, a cluster or job name SkyPilot refuses,
a secret's value typed on the command line (it would land in the task file and the shell history),
``--spot`` without storage that outlives the node (a preempted node takes its run directory, and
the checkpoint a recovery needs, with it). Pure functions; nothing here reads the machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from islab.sky.names import DEFAULT_FORMAT, FORMATS
from islab.spec.issues import Issue, is_secret_name, suggest

# SkyPilot's cluster names (sky/skylet/constants.py CLUSTER_NAME_VALID_REGEX; a managed job's name names its
# cluster): a letter first, then letters, digits, '-', '_', '.', ending on a letter or digit.
NAME = re.compile(r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?")
# An accelerator name as `sky gpus list` lists it (H100, A100-80GB, L40S, tpu-v5p-8 ...); we add ":<count>".
ACCELERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # SkyPilot's task schema: envs keys
BUCKET_URL = re.compile(r"[a-z0-9]+://\S+")  # s3://, gs://, r2://, https://<account>.blob... : an existing bucket


@dataclass(frozen=True)
class SkyOptions:
    """The SkyPilot side of a job: how it runs, on what, and where its runs live."""

    name: str
    format: str = DEFAULT_FORMAT
    gpus_type: str | None = None  # accelerators: <gpus_type>:<ranks per node>
    cloud: str | None = None  # resources.infra
    spot: bool = False
    bucket: str | None = None  # a bucket name (SkyPilot creates it) or URL (an existing one), mounted at RUNS_PATH
    volume: str | None = None  # a SkyPilot volume (sky volumes apply), mounted at RUNS_PATH
    image: str | None = None  # resources.image_id: docker:<image>
    workdir: str | None = "."
    setup: str | None = None  # None: install the workdir's islab-train
    envs: tuple[str, ...] = ()  # NAME=VALUE as typed
    secrets: tuple[str, ...] = field(default_factory=tuple)  # NAME, the value given at launch

    @property
    def storage(self) -> str | None:
        return self.bucket or self.volume


def parsed_envs(options: SkyOptions) -> dict[str, str]:
    """``--env NAME=VALUE`` items (checked by :func:`option_issues` first)."""
    return dict(item.split("=", 1) for item in options.envs if "=" in item)


def option_issues(
    options: SkyOptions, *, device: str | None = None, min_nnodes: int | None = None, clouds: tuple[str, ...] = ()
) -> list[Issue]:
    """Everything wrong with the options, one issue per field; the accelerator only once the spec's
    ``device`` is known. ``clouds``: the cloud names SkyPilot knows (empty: not checked)."""
    issues: list[Issue] = []
    if options.format not in FORMATS:
        hint = suggest(options.format, FORMATS)
        issues.append(Issue("--format", f"{options.format!r} is not a format islab-train writes",
                            f"Use one of {', '.join(FORMATS)}{f' ({hint})' if hint else ''}"))  # fmt: skip
    if not NAME.fullmatch(options.name):
        issues.append(Issue("--name", f"{options.name!r} is not a name SkyPilot accepts",
                            "Start with a letter; use letters, digits, '-', '_' and '.', ending on a letter or digit, "
                            "e.g. --name cartpole-2x8"))  # fmt: skip
    if options.gpus_type is not None and not ACCELERATOR.fullmatch(options.gpus_type):
        issues.append(Issue("--gpus-type", f"{options.gpus_type!r} is not an accelerator name",
                            "Give the type alone, as 'sky gpus list' lists it (e.g. --gpus-type H100); the count "
                            "follows the ranks per node (--gpus N)"))  # fmt: skip
    if device == "cuda" and options.gpus_type is None:
        issues.append(Issue("--gpus-type", "is required for GPU ranks: without it SkyPilot starts nodes without GPUs",
                            "Name the accelerator, e.g. --gpus-type H100 ('sky gpus list' lists them), or train on "
                            "CPUs with --device cpu --nproc N"))  # fmt: skip
    if device == "cpu" and options.gpus_type is not None:
        issues.append(Issue("--gpus-type", f"asks for {options.gpus_type} GPUs for CPU ranks (--device cpu)",
                            "Drop --gpus-type, or train on GPUs with --gpus N"))  # fmt: skip
    if clouds and options.cloud is not None and options.cloud.lower() not in clouds:
        hint = suggest(options.cloud.lower(), clouds)
        issues.append(Issue("--cloud", f"{options.cloud!r} is not a cloud SkyPilot knows",
                            f"Use one of {', '.join(clouds)}{f' ({hint})' if hint else ''}, or leave it out and let "
                            "SkyPilot choose the cheapest"))  # fmt: skip
    if options.bucket and options.volume:
        issues.append(Issue("--bucket / --volume", "both would hold the run directory",
                            "Keep one of them: a bucket (any cloud) or a SkyPilot volume"))  # fmt: skip
    if options.spot and not options.storage:
        issues.append(Issue("--spot", "a preempted spot node takes its disk with it, and so the run directory and "
                            "the checkpoint a recovery resumes from",
                            "Keep the run directory on storage that outlives the node: --bucket NAME (or s3://..., "
                            "gs://...) or --volume NAME"))  # fmt: skip
    if min_nnodes is not None:
        issues.append(Issue("--nnodes", "SkyPilot starts a fixed number of nodes (num_nodes), not a range",
                            "Give one count, e.g. --nnodes 2"))  # fmt: skip
    issues += env_issues(options)
    return issues


def env_issues(options: SkyOptions) -> list[Issue]:
    """``--env NAME=VALUE`` and ``--secret NAME``: names SkyPilot accepts, and no secret's value typed
    here (never echoed: the message names the variable only)."""
    issues: list[Issue] = []
    for item in options.envs:
        name, has_value, _ = item.partition("=")
        if not ENV_NAME.fullmatch(name) or not has_value:
            field_name = f"--env {name}" if ENV_NAME.fullmatch(name) else "--env"  # never the value: it may be secret
            issues.append(Issue(field_name, "takes NAME=VALUE, NAME a variable name (letters, digits, _)",
                                "Write e.g. --env NCCL_DEBUG=WARN"))  # fmt: skip
        elif is_secret_name(name):
            issues.append(Issue(f"--env {name}", "looks secret, and its value would be written into the task file "
                                "(and stay in your shell history)",
                                f"Pass the name only, --secret {name}: the file then says 'secrets: {name}: null' "
                                f"and 'sky launch --secret {name}' sends the value from your environment at "
                                "launch"))  # fmt: skip
    for name in options.secrets:
        if not ENV_NAME.fullmatch(name):
            problem = "holds a value" if "=" in name else "is not a valid variable name"
            head = name.split("=", 1)[0]
            issues.append(Issue(f"--secret {head}" if ENV_NAME.fullmatch(head) else "--secret", problem,
                                "Give the variable's name only (--secret WANDB_API_KEY); its value is read from your "
                                "environment at launch"))  # fmt: skip
    return issues
