"""Pre-flight checks: will this node's part of the job start, and will it meet the others?

Most failed multi-node launches are not bugs in training code but facts about the machines: the
wrong number of GPUs, a driver older than the CUDA torch was built for, a master address that does
not resolve, a port already taken, a typo in ``NCCL_SOCKET_IFNAME``, different library versions
on two nodes. ``islab-train doctor`` checks them and prints one row per check with the fix.

The module has two halves, so that every decision is unit-testable without the machine:

* **facts** (:class:`~islab.doctor.facts.Facts`) are gathered at the edge by :mod:`islab.doctor.probes` --
  ``socket.if_nameindex()``, the text of ``nvidia-smi``, ``shutil.disk_usage``, DNS, a bind or a
  TCP connect, and a probe run with the *ranks'* interpreter -- with the rendezvous the plan chose;
* **checks** are pure functions ``facts -> Check(name, status, detail, fix)``.

``islab-train`` runs the checks marked ``before_launch`` (:class:`CheckDef`: no interpreter probe,
no connects, nothing the plan already refuses) before a real launch; ``islab-train doctor`` runs
everything. Statuses: ``pass``, ``warn`` (worth knowing, does not fail), ``fail``, ``skip`` (does
not apply). ``doctor`` exits 0 when nothing failed.

No torch import in this module: the probe runs in a child interpreter, the one the ranks use.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from islab.doctor.facts import Facts, Rendezvous
from islab.doctor.probes import (
    Runtime,
)
from islab.libs.registry import LIBRARIES, jax_backend_fix, jax_backend_problem
from islab.plan.launch_issues import gpu_issue, platform_issue
from islab.spec.run_spec import RunSpec

Status = Literal["pass", "warn", "fail", "skip"]
GIB = 1024**3
DISK_FAIL_BYTES = 1 * GIB
DISK_WARN_BYTES = 5 * GIB
_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*(\d+)\.(\d+)")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


# ----------------------------------------------------------------------------------------------
# Checks (pure)
# ----------------------------------------------------------------------------------------------


def check_os(platform: str, device: str = "cuda") -> Check:
    issue = platform_issue(device, platform)
    if issue is not None:
        return Check("operating system", "fail", f"{platform}: {issue.problem}", issue.fix)
    if platform.startswith("linux"):
        return Check("operating system", "pass", "Linux")
    return Check(
        "operating system", "fail", f"{platform}: NCCL and POSIX process groups need Linux",
        "Run on Linux or in WSL2 (CPU ranks over gloo work there)",
    )  # fmt: skip


def check_gpus(spec: RunSpec, visible_gpus: int, runtime: Runtime | None = None) -> Check:
    """``visible_gpus`` is the launcher's torch-free count (CUDA_VISIBLE_DEVICES entries, else the
    GPUs of ``nvidia-smi -L``); when the ranks' interpreter was probed, its own count decides, as a
    rank resolves its GPU from that view (absent GPUs named in CUDA_VISIBLE_DEVICES, MIG)."""
    name = "GPUs vs processes"
    runtime_count = runtime.cuda_devices if runtime is not None else None
    if spec.device == "cuda" and runtime_count is not None and runtime_count != visible_gpus:
        checked = check_gpus(spec, runtime_count)
        note = (
            f" (torch in the ranks' interpreter sees {runtime_count}; "
            f"CUDA_VISIBLE_DEVICES / nvidia-smi -L suggest {visible_gpus})"
        )
        return Check(name, checked.status, checked.detail + note, checked.fix)
    if spec.device == "cpu":
        return Check(name, "pass", f"{spec.nproc_per_node} CPU process(es) per node; {visible_gpus} GPU(s) visible")
    issue = gpu_issue(spec, visible_gpus)
    if issue is not None:
        return Check(name, "fail", issue.problem, issue.fix)
    spare = f" ({visible_gpus - spec.nproc_per_node} unused)" if visible_gpus > spec.nproc_per_node else ""
    return Check(name, "pass", f"{spec.nproc_per_node} GPU process(es) per node, {visible_gpus} visible{spare}")


def check_backend(spec: RunSpec, runtime: Runtime | None) -> Check:
    if spec.launcher != "torchrun":
        return Check("collective backend", "skip", "skrl-JAX uses jax.distributed, not NCCL/gloo process groups")
    wanted = "NCCL" if spec.device == "cuda" else "gloo"
    name = f"collective backend ({wanted})"
    if runtime is None:
        return Check(name, "skip", "not probed")
    if runtime.error and runtime.gloo is None:
        return Check(name, "fail", f"torch could not be imported: {runtime.error}", "Install torch for --python")
    if spec.device == "cuda":
        if runtime.nccl is None:
            return Check(
                name, "fail", "this torch has no NCCL (a CPU-only build?)",
                "Install a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu1XX)",
            )  # fmt: skip
        return Check(name, "pass", f"NCCL {runtime.nccl}")
    if not runtime.gloo:
        return Check(name, "fail", "torch.distributed has no gloo backend", "Install an official torch build")
    return Check(name, "pass", "gloo available")


def _ifname_matches(entry: str, interfaces: Sequence[str], *, prefix: bool) -> bool:
    exact = entry.startswith("=")
    name = entry.lstrip("=")
    if prefix and not exact:
        return any(interface.startswith(name) for interface in interfaces)
    return name in interfaces


def check_ifnames(socket_env: Mapping[str, str], interfaces: Sequence[str]) -> Check:
    """NCCL_SOCKET_IFNAME entries are prefixes (``eth`` matches eth0; ``=eth0`` exact; ``^docker``
    excludes); GLOO_SOCKET_IFNAME entries are exact names. Each must name an existing interface."""
    name = "socket interfaces"
    if not socket_env:
        return Check(name, "pass", "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME not set (the libraries pick one)")
    problems, fine = [], []
    for variable, value in socket_env.items():
        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        nccl = variable.startswith("NCCL")
        wanted = [entry for entry in entries if not (nccl and entry.startswith("^"))]
        missing = [entry for entry in wanted if not _ifname_matches(entry, interfaces, prefix=nccl)]
        if missing or not entries:
            problems.append(f"{variable}={value} names no interface here ({', '.join(missing) or 'empty'})")
        else:
            fine.append(f"{variable}={value}")
    if problems:
        return Check(
            name, "fail", "; ".join(problems),
            f"Use one of this node's interfaces: {', '.join(interfaces) or 'none found'} (ip -br addr)",
        )  # fmt: skip
    return Check(name, "pass", ", ".join(fine))


def check_resolves(rdzv: Rendezvous | None) -> Check:
    name = "rendezvous address"
    if rdzv is None:
        return Check(name, "skip", "no rendezvous address in this plan")
    if rdzv.resolve_error or not rdzv.addresses:
        return Check(
            name, "fail", f"{rdzv.kind} {rdzv.host!r} does not resolve ({rdzv.resolve_error or 'no address'})",
            "Use node 0's IP address, or a name every node resolves (check /etc/hosts or DNS)",
        )  # fmt: skip
    return Check(name, "pass", f"{rdzv.kind} {rdzv.host} -> {', '.join(rdzv.addresses)}")


def check_port(rdzv: Rendezvous | None) -> Check:
    name = "rendezvous port"
    if rdzv is None or not rdzv.addresses:
        return Check(name, "skip", "no address to check")
    where = f"{rdzv.host}:{rdzv.port}"
    if rdzv.listens is None:
        return Check(name, "skip", f"{where}: which node hosts it is unknown", "Pass --node-rank to check it")
    state = rdzv.port_state
    if rdzv.listens:
        if state == "free":
            return Check(name, "pass", f"this node hosts the {rdzv.kind}; port {rdzv.port} is free")
        if state == "busy":
            return Check(
                name, "fail", f"port {rdzv.port} is already in use on this node (the {rdzv.kind} must listen on it)",
                "Choose another port (--master-port / --rdzv-endpoint / --coordinator-address), or stop its user",
            )  # fmt: skip
        if state == "not-local":
            return Check(
                name, "warn", f"this node hosts the {rdzv.kind}, but {rdzv.host} ({rdzv.addresses[0]}) is not one "
                "of its addresses; the other nodes will connect elsewhere",
                "Give node 0's own address (hostname -I) as the master address",
            )  # fmt: skip
        return Check(name, "fail", f"port {rdzv.port}: {state}", "Choose another port")
    if state is None:
        return Check(name, "skip", f"{where}: connect test not run (node 0 may not be up yet)")
    if state == "open":
        return Check(name, "pass", f"{where} accepts connections")
    return Check(
        name, "fail", f"cannot connect to {where}: {state}",
        "Start node 0 first (doctor on node 0 checks the port is free), and check firewalls between the nodes",
    )  # fmt: skip


def check_exposure(rdzv: Rendezvous | None) -> Check:
    """torchrun's TCPStore and the JAX coordinator accept anyone who can reach the port: no
    authentication, no encryption. A public address exposes the job to the internet."""
    name = "rendezvous exposure"
    if rdzv is None or not rdzv.addresses:
        return Check(name, "skip", "no address to check")
    public = []
    for address in rdzv.addresses:
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(address.split("%")[0])
            if not (ip.is_private or ip.is_loopback or ip.is_link_local):
                public.append(address)
    if public:
        return Check(
            name, "warn", f"{rdzv.host} resolves to the public address {', '.join(public)}; the rendezvous store "
            "has no authentication, anyone who can reach the port can join or disrupt the job",
            "Use a private-network address (10.x, 172.16-31.x, 192.168.x) or firewall the port to the cluster",
        )  # fmt: skip
    return Check(name, "pass", f"{', '.join(rdzv.addresses)} is private or loopback")


def check_versions(spec: RunSpec, runtime: Runtime | None) -> Check:
    name = "versions"
    if runtime is None:
        return Check(name, "skip", "not probed")
    if runtime.python is None:
        return Check(name, "fail", runtime.error or "the interpreter probe failed", "Check --python")
    versions = runtime.versions
    needed = ["islab-train", *LIBRARIES[spec.lib].distributions(spec.ml_framework)]
    shown = [f"python {runtime.python}"] + [
        f"{dist} {version}" for dist, version in versions.items() if version is not None
    ]
    missing = [dist for dist in needed if not versions.get(dist)]
    if missing:
        return Check(
            name, "fail", f"missing for {spec.lib}/{spec.ml_framework}: {', '.join(missing)} ({'; '.join(shown)})",
            f"pip install {' '.join(missing)} into {spec.python}",
        )  # fmt: skip
    return Check(name, "pass", ", ".join(shown), "Compare this row across nodes: versions must match")


def check_jax_backend(spec: RunSpec, runtime: Runtime | None) -> Check:
    """skrl-JAX: the backend JAX trains on in the ranks' interpreter; a cuda run needs ``gpu``."""
    name = "JAX backend"
    if spec.ml_framework != "jax":
        return Check(name, "skip", f"{spec.lib}/{spec.ml_framework} does not use JAX")
    if runtime is None:
        return Check(name, "skip", "not probed")
    problem = jax_backend_problem(spec.device, runtime.jax_backend)
    if problem is not None:
        return Check(name, "fail", problem, jax_backend_fix(spec.python))
    if runtime.jax_backend is None:
        return Check(name, "fail", "the ranks' interpreter cannot import jax", f"pip install jax into {spec.python}")
    return Check(name, "pass", f"jax.default_backend() = {runtime.jax_backend!r}")


def driver_cuda_version(nvidia_smi_text: str) -> tuple[int, int] | None:
    """The "CUDA Version: 12.4" of ``nvidia-smi``'s header: the newest CUDA the driver runs."""
    match = _CUDA_VERSION.search(nvidia_smi_text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_driver_cuda(spec: RunSpec, nvidia_smi_text: str | None, runtime: Runtime | None) -> Check:
    name = "driver vs torch CUDA"
    if spec.device == "cpu":
        return Check(name, "skip", "CPU job")
    if runtime is None:
        return Check(name, "skip", "not probed")
    if runtime.torch_cuda is None:
        return Check(
            name, "fail", "torch is a CPU-only build (torch.version.cuda is None)",
            "Install a CUDA build of torch (see pytorch.org), or use --device cpu",
        )  # fmt: skip
    if nvidia_smi_text is None:
        return Check(
            name, "fail", f"torch is built for CUDA {runtime.torch_cuda}, but nvidia-smi is missing or failed",
            "Install the NVIDIA driver (nvidia-smi must work)",
        )  # fmt: skip
    driver = driver_cuda_version(nvidia_smi_text)
    if driver is None:
        return Check(name, "warn", "could not read 'CUDA Version' from nvidia-smi", "Check nvidia-smi's output")
    built = tuple(int(part) for part in runtime.torch_cuda.split(".")[:2])
    text = f"driver supports CUDA {driver[0]}.{driver[1]}, torch built with {runtime.torch_cuda}"
    if driver[0] < built[0]:
        return Check(
            name, "fail", text,
            f"Update the NVIDIA driver to one for CUDA ≥ {runtime.torch_cuda}, or install a torch built for "
            f"CUDA ≤ {driver[0]}.{driver[1]}",
        )  # fmt: skip
    if driver < built:
        # CUDA's minor-version compatibility: a driver for 12.2 runs code built with 12.4, except
        # for features (and PTX JIT) the newer minor release added -- worth a warning, not a stop.
        return Check(
            name, "warn", f"{text} (same major version: runs by CUDA minor-version compatibility)",
            f"Update the NVIDIA driver to one for CUDA ≥ {runtime.torch_cuda} if kernels fail to load",
        )  # fmt: skip
    return Check(name, "pass", text)


def check_disk(path: str, free: int | None) -> Check:
    name = "disk space"
    if free is None:
        return Check(name, "warn", f"cannot read free space of {path}", "Check --log-dir")
    text = f"{free / GIB:.1f} GiB free at {path}"
    if free < DISK_FAIL_BYTES:
        return Check(name, "fail", text, "Free space or point --log-dir elsewhere (checkpoints and logs go there)")
    if free < DISK_WARN_BYTES:
        return Check(name, "warn", text, "Long runs write checkpoints; consider more space")
    return Check(name, "pass", text)


@dataclass(frozen=True)
class CheckDef:
    """One row of the doctor. ``before_launch``: cheap (no interpreter probe, no connects) and not
    already a launch issue of the plan (:func:`islab.plan.launch_issues.launch_issues` refuses a wrong
    platform or too few GPUs itself), so every real launch runs it first."""

    name: str
    run: Callable[[Facts], Check]
    before_launch: bool = False


CHECKS: tuple[CheckDef, ...] = (
    CheckDef("operating system", lambda facts: check_os(facts.platform, facts.spec.device)),
    CheckDef("GPUs vs processes", lambda facts: check_gpus(facts.spec, facts.visible_gpus, facts.runtime)),
    CheckDef("collective backend", lambda facts: check_backend(facts.spec, facts.runtime)),
    CheckDef("driver vs torch CUDA", lambda facts: check_driver_cuda(facts.spec, facts.nvidia_smi, facts.runtime)),
    CheckDef("rendezvous address", lambda facts: check_resolves(facts.rendezvous), before_launch=True),
    CheckDef("rendezvous port", lambda facts: check_port(facts.rendezvous), before_launch=True),
    CheckDef("rendezvous exposure", lambda facts: check_exposure(facts.rendezvous), before_launch=True),
    CheckDef("socket interfaces", lambda facts: check_ifnames(facts.socket_env, facts.interfaces), before_launch=True),
    CheckDef("versions", lambda facts: check_versions(facts.spec, facts.runtime)),
    CheckDef("JAX backend", lambda facts: check_jax_backend(facts.spec, facts.runtime)),
    CheckDef("disk space", lambda facts: check_disk(facts.disk_path, facts.disk_free), before_launch=True),
)
# The names of the checks a real launch runs first.
CHEAP = tuple(check.name for check in CHECKS if check.before_launch)


def run_checks(facts: Facts, names: Iterable[str] | None = None, *, before_launch: bool = False) -> list[Check]:
    """Every check over ``facts``; only those marked ``before_launch``, or only those named."""
    wanted = set(names) if names is not None else None
    return [
        check.run(facts)
        for check in CHECKS
        if (not before_launch or check.before_launch) and (wanted is None or check.name in wanted)
    ]


def all_passed(checks: Iterable[Check]) -> bool:
    return all(check.status != "fail" for check in checks)
