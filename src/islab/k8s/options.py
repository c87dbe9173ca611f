"""What ``islab-train k8s`` asks beyond a launch's options, and what Kubernetes refuses in it.

Names must be what the API server accepts -- object names, the namespace, the claim and the
Secret are DNS-1123 names, and the pods' host names (``<name>-<index>``, JobSet's
``<name>-node-0-<index>``) are DNS labels of at most 63 characters -- so a bad one is one line
on stderr now, not a rejected ``kubectl apply`` later. Pure functions; nothing here reads the
machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from islab.k8s.names import DEFAULT_FORMAT, DEFAULT_RUNTIME, FORMATS
from islab.spec.issues import Issue, suggest

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_SUBDOMAIN_MAX = 253
# A resource quantity (k8s.io/apimachinery resource.Quantity): 500m, 2, 1.5, 8Gi, 1e3 ...
QUANTITY = re.compile(r"(\d+(\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][-+]?\d+)?")
DEFAULT_SECRET = "islab-train-secrets"


@dataclass(frozen=True)
class K8sOptions:
    """The Kubernetes side of a job: which controller, which image, where its runs live."""

    name: str
    image: str | None
    format: str = DEFAULT_FORMAT
    namespace: str | None = None
    logs_pvc: str | None = None
    runtime: str = DEFAULT_RUNTIME
    cpu: str | None = None  # requests per pod
    memory: str | None = None
    secret: str = DEFAULT_SECRET  # holds the secret-looking env values, one key each
    gpus_per_pod: int | None = None  # None: one per rank


def pod_name_suffix(fmt: str, nnodes: int) -> str:
    """The longest suffix a pod's host name adds to the job's name (JobSet/TrainJob: ``-node-0-<i>``)."""
    last = str(max(nnodes - 1, 0))
    suffixes = {"trainjob": f"-node-0-{last}", "jobset": f"-node-0-{last}", "pytorchjob": f"-worker-{last}"}
    return suffixes.get(fmt, f"-{last}")


def option_issues(
    options: K8sOptions, *, nnodes: int = 1, device: str | None = None, nproc_per_node: int = 1
) -> list[Issue]:
    """Everything wrong with the options, one issue per field; the GPU count only once the spec's
    ``device`` is known, the pods' host names for ``nnodes`` pods."""
    issues: list[Issue] = []
    if options.format not in FORMATS:
        hint = suggest(options.format, FORMATS)
        issues.append(Issue("--format", f"{options.format!r} is not a format islab-train writes",
                            f"Use one of {', '.join(FORMATS)}{f' ({hint})' if hint else ''}"))  # fmt: skip
    if not options.image or not options.image.strip() or any(ch.isspace() for ch in options.image):
        problem = "is required" if not options.image else f"{options.image!r} is not an image reference"
        issues.append(Issue("--image", problem, "Give the container image that has islab-train installed, e.g. "
                            "--image ghcr.io/you/islab-train:0.1 (docs/KUBERNETES.md, 'The image')"))  # fmt: skip
    longest = options.name + pod_name_suffix(options.format, nnodes)
    if not DNS_LABEL.fullmatch(options.name) or len(longest) > DNS_LABEL_MAX:
        reason = (f"makes the pod host name {longest!r} longer than {DNS_LABEL_MAX} characters"
                  if DNS_LABEL.fullmatch(options.name) else "is not a DNS-1123 label")  # fmt: skip
        issues.append(Issue("--name", f"{options.name!r} {reason}",
                            "Use lower-case letters, digits and '-', starting and ending with a letter or digit, "
                            f"at most {DNS_LABEL_MAX - len(longest) + len(options.name)} characters, e.g. "
                            "--name cartpole-2x4"))  # fmt: skip
    if options.namespace is not None and not _label(options.namespace):
        issues.append(Issue("--namespace", f"{options.namespace!r} is not a DNS-1123 label",
                            "Use lower-case letters, digits and '-', e.g. --namespace research"))  # fmt: skip
    for flag, value in (("--logs-pvc", options.logs_pvc), ("--runtime", options.runtime), ("--secret", options.secret)):
        if value is not None and not _subdomain(value):
            issues.append(Issue(flag, f"{value!r} is not a DNS-1123 name",
                                "Use lower-case letters, digits, '-' and '.', as 'kubectl get' lists it"))  # fmt: skip
    for flag, value in (("--cpu", options.cpu), ("--memory", options.memory)):
        if value is not None and not QUANTITY.fullmatch(value):
            issues.append(Issue(flag, f"{value!r} is not a Kubernetes quantity",
                                "Write e.g. --cpu 8 or --cpu 500m, --memory 32Gi"))  # fmt: skip
    if device is not None:
        issues += gpu_issues(options.gpus_per_pod, device=device, nproc_per_node=nproc_per_node)
    return issues


def gpu_issues(gpus_per_pod: int | None, *, device: str, nproc_per_node: int) -> list[Issue]:
    """islab-train starts one rank per GPU: a pod's nvidia.com/gpu limit is its ranks per node."""
    if gpus_per_pod is None:
        return []
    if device == "cpu" and gpus_per_pod > 0:
        return [Issue("--gpus-per-pod", f"asks for {gpus_per_pod} GPU(s) per pod for CPU ranks (--device cpu)",
                      "Drop --gpus-per-pod, or train on GPUs with --gpus N")]  # fmt: skip
    if device == "cuda" and gpus_per_pod != nproc_per_node:
        return [Issue("--gpus-per-pod", f"is {gpus_per_pod} but each pod starts {nproc_per_node} rank(s), one per GPU",
                      f"Drop --gpus-per-pod (it follows the ranks), or start {gpus_per_pod} rank(s) per pod with "
                      f"--gpus {gpus_per_pod}")]  # fmt: skip
    return []


def _label(value: str) -> bool:
    return bool(DNS_LABEL.fullmatch(value)) and len(value) <= DNS_LABEL_MAX


def _subdomain(value: str) -> bool:
    return bool(DNS_SUBDOMAIN.fullmatch(value)) and len(value) <= DNS_SUBDOMAIN_MAX


def label_value(text: str) -> str | None:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends), or None."""
    ok = re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", text) and len(text) <= DNS_LABEL_MAX
    return text if ok else None
