"""``islab-train k8s``: print the Kubernetes job that runs this training, as ``sbatch`` prints a batch
script (registered with the other subcommands in :mod:`islab.cli.commands`).

It takes everything a launch takes and resolves the same spec -- with a *planned* Kubernetes
allocation standing in for the one each pod will read, so a cluster spec without a rendezvous
section is complete here -- and writes the manifest(s) of :mod:`islab.k8s.manifests`. Each pod
runs ``python -m islab.cli`` with the options given here, flattened: the command line, the
``ISLAB_*`` variables and the cluster file (which do not reach the pod) become options of the
pod's command, except what the controller provides (nnodes, node rank, node 0's address) and the
run directories' root (the volume at :data:`~islab.k8s.names.RUNS_MOUNT`); the cluster file's
``env`` becomes the container's env, secret-looking values as secretKeyRef.
"""

from __future__ import annotations

import functools
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import typer

from islab.cli.options import field_argv, own_option, signature
from islab.cli.spec_layers import apply_gpus, fail, option_layers, resolve
from islab.k8s import manifests
from islab.k8s.allocation import KubernetesAllocation, job_run_leaf
from islab.k8s.names import DEFAULT_FORMAT, DEFAULT_RUNTIME, FORMATS, RENDEZVOUS_PORT, RUNS_MOUNT
from islab.k8s.options import DEFAULT_SECRET, K8sOptions, option_issues
from islab.k8s.pod import PodJob
from islab.plan.plan import run_dir_for
from islab.resolve.resolve import Provided, load_cluster_file
from islab.spec.issues import Issue, SpecError, is_secret_name

PANEL_K8S = "Kubernetes"
# Given by the controller in each pod (islab.k8s.allocation), or by the manifest (the volume's path).
PLACEMENT_FIELDS = frozenset({
    "nnodes", "node_rank", "rendezvous.master_addr", "rendezvous.master_port", "rendezvous.endpoint",
    "coordinator_address", "log_dir",
})  # fmt: skip
EXCLUDED_OPTIONS = ("slurm", "k8s", "sky", "node_rank", "master_addr", "master_port", "rdzv_endpoint",
                    "coordinator_address", "log_dir")  # fmt: skip


_own = functools.partial(own_option, PANEL_K8S)


K8S_OPTIONS = (
    _own(
        "image",
        str | None,
        None,
        "Container image with islab-train installed (required; docs/KUBERNETES.md).",
        metavar="IMAGE",
    ),
    _own("format", str, DEFAULT_FORMAT, f"Which controller runs the job: {' | '.join(FORMATS)}.", metavar="FORMAT"),
    _own(
        "name",
        str | None,
        None,
        "The job's name (DNS-1123). Applying the same name again resumes its run. Default: islab-<date>-<time>.",
        metavar="NAME",
    ),
    _own("namespace", str | None, None, "metadata.namespace. Default: kubectl's current namespace."),
    _own(
        "logs_pvc",
        str | None,
        None,
        f"PersistentVolumeClaim mounted at {RUNS_MOUNT}, where the run directory "
        "lives (ReadWriteMany for several pods). Without it: an emptyDir, lost with the pod.",
        metavar="NAME",
    ),
    _own("runtime", str, DEFAULT_RUNTIME, "TrainJob only: runtimeRef.name (a ClusterTrainingRuntime).", metavar="NAME"),
    _own("cpu", str | None, None, "CPU request per pod, e.g. 8 or 500m.", metavar="QUANTITY"),
    _own("memory", str | None, None, "Memory request per pod, e.g. 32Gi.", metavar="QUANTITY"),
    _own(
        "secret",
        str,
        DEFAULT_SECRET,
        "The Secret holding secret-looking env values (WANDB_API_KEY, *_TOKEN ...), one key per variable.",
        metavar="NAME",
    ),
    _own(
        "gpus_per_pod",
        int | None,
        None,
        "nvidia.com/gpu limit per pod. Default: the ranks per node (it must equal them: one rank per GPU).",
        metavar="N",
    ),
    _own(
        "output", Path | None, None, "Write the manifest to FILE instead of stdout.", "-o", "--output", metavar="FILE"
    ),
)

K8S_EPILOG = """\
[bold]Examples[/bold]

  [dim]# Kubeflow Trainer: 2 pods x 4 GPUs, runs on the claim 'runs'[/dim]
  islab-train k8s --nnodes 2 --gpus 4 --image ghcr.io/you/islab-train:0.1 --logs-pvc runs | kubectl apply -f -

  [dim]# no operator installed: an Indexed Job + headless Service[/dim]
  islab-train k8s --format job --device cpu --nproc 2 --nnodes 2 --image ghcr.io/you/islab-train:0.1 -o job.yaml

Every pod runs `python -m islab.cli` with these options; nnodes, its node rank and node 0's
address come from the controller (docs/KUBERNETES.md). Secret-looking env values are read from
the Secret --secret: kubectl create secret generic islab-train-secrets --from-literal=WANDB_API_KEY=...
"""


def k8s_command(ctx: typer.Context, **options: Any) -> None:
    fmt = options["format"]
    name = options["name"] or f"islab-{datetime.now():%Y%m%d-%H%M%S}"
    issues = option_issues(_k8s_options(options, name))  # the planned allocation needs a valid format and name
    if issues:
        fail(SpecError(issues))

    def planned_allocation(chosen: Any) -> Any:
        nnodes = chosen.get("nnodes", 1)
        valid = (isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 0) or isinstance(nnodes, str)
        origin = f"the {fmt} controller"
        origins = {key: origin for key in ("nnodes", "node_rank", "nproc_per_node", "master", "port", "backend", "id")}
        elastic = isinstance(nnodes, str) and ":" in nnodes
        master = manifests.master_host(fmt, name)
        return KubernetesAllocation(fmt, name, nnodes if valid else 1, None if elastic else 0, master,
                                    RENDEZVOUS_PORT, origins).layer(chosen)  # fmt: skip

    resolved = resolve(
        ctx, {**options, "slurm": None, "k8s": None, "sky": None}, slurm_layer=planned_allocation, elsewhere=True
    )
    spec = resolved.spec
    k8s = _k8s_options(options, name)
    try:
        command = pod_command(ctx, options, spec.python)
    except SpecError as exc:
        fail(exc)
    job = PodJob(k8s, command, spec.nnodes, spec.nproc_per_node, spec.device, spec.lib, spec.task,
                 spec.env, spec.min_nnodes)  # fmt: skip
    issues = option_issues(k8s, nnodes=spec.nnodes, device=spec.device, nproc_per_node=spec.nproc_per_node)
    elastic = manifests.elastic_issue(fmt, job)
    if issues or elastic:
        fail(SpecError([*issues, *([elastic] if elastic else [])]))
    text = manifests.render(manifests.build(fmt, job), header=_header(fmt, job))
    if options["output"] is not None:
        options["output"].write_text(text)
        print(f"islab-train: wrote {options['output']}; apply with: kubectl apply -f {options['output']}",
              file=sys.stderr)  # fmt: skip
    else:
        print(text, end="", flush=True)
    pod_spec = spec.model_copy(update={"log_dir": RUNS_MOUNT, "resume": None})
    run_dir = run_dir_for(pod_spec, datetime.now(), job_leaf=job_run_leaf(name))  # as each pod will name it
    print(f"islab-train: {fmt} '{name}': {spec.nnodes} pod(s) x {spec.nproc_per_node} rank(s) on {spec.device}; "
          f"run directory in the pods: {run_dir}", file=sys.stderr)  # fmt: skip
    if not k8s.logs_pvc:
        print("islab-train: warning: no --logs-pvc: the run directory is an emptyDir, lost with its pod (a new "
              "pod cannot resume, and you cannot read the run afterwards)", file=sys.stderr)  # fmt: skip


k8s_command.__signature__ = signature(  # type: ignore[attr-defined]
    train=False, exclude=EXCLUDED_OPTIONS, own=K8S_OPTIONS
)
K8S_HELP = (
    "Print the Kubernetes manifest that runs this training (Kubeflow TrainJob, PyTorchJob, JobSet, or an "
    "Indexed Job + headless Service; one islab-train per pod). Usage: islab-train k8s ... | kubectl apply -f -"
)


def _k8s_options(options: dict[str, Any], name: str) -> K8sOptions:
    return K8sOptions(
        name=name, image=options["image"], format=options["format"], namespace=options["namespace"],
        logs_pvc=options["logs_pvc"], runtime=options["runtime"], cpu=options["cpu"], memory=options["memory"],
        secret=options["secret"], gpus_per_pod=options["gpus_per_pod"],
    )  # fmt: skip


def _header(fmt: str, job: PodJob) -> str:
    lines = [f"# Written by `islab-train k8s --format {fmt}`; apply with: kubectl apply -f <this file>"]
    secrets = sorted(name for name in job.env if is_secret_name(name))
    if secrets:
        literals = " ".join(f"--from-literal={name}=..." for name in secrets)
        lines.append(f"# Needs the Secret first: kubectl create secret generic {job.options.secret} {literals}")
    return "\n".join(lines) + "\n"


def given_fields(ctx: typer.Context, options: dict[str, Any]) -> dict[str, Any]:
    """What this command line, the ISLAB_* variables and the cluster file set, merged by precedence
    (none of the three reaches the pod by itself)."""
    cli_layer, env_layer = option_layers(ctx, options)
    apply_gpus(ctx, options.get("gpus"), cli_layer, env_layer)
    file_layer: dict[str, Provided] = load_cluster_file(options["cluster"]) if options.get("cluster") else {}
    given: dict[str, Any] = {}
    for layer in (file_layer, env_layer, cli_layer):
        given.update({field: provided.value for field, provided in layer.items()})
    return given


def pod_command(
    ctx: typer.Context, options: dict[str, Any], python: str, log_dir: str | None = RUNS_MOUNT
) -> tuple[str, ...]:
    """The container's command: ``python -m islab.cli`` + the given fields as options (their env
    becomes the container's env instead). ``log_dir``: the run directories' root on the node (the
    volume's path); None keeps the one given (a SkyPilot node without storage: its own disk)."""
    given = given_fields(ctx, options)
    placement = PLACEMENT_FIELDS - ({"log_dir"} if log_dir is None else set())  # None: keep the given log_dir
    try:
        args = field_argv({field: value for field, value in given.items() if field not in placement})
    except KeyError as exc:
        fix = "Remove it from the cluster file, or run islab-train in the pod yourself"
        raise SpecError(Issue(str(exc.args[0]), "cannot be passed to the pods as an option", fix)) from None
    args += [*(["--log-dir", log_dir] if log_dir is not None else []), *given.get("overrides", ())]
    if given.get("args") is not None:
        args += ["--", *given["args"]]
    head = python if "python" in given else "python"
    return (head, "-m", "islab.cli", *args)
