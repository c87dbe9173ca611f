"""Where a sweep's Ray runs: an embedded one, or an existing cluster it joins.

* Embedded (the default): started with this machine's cores and visible GPUs, no dashboard, a
  small object store (trials pass no data through Ray), stopped at the end; whatever it leaves
  below the sweep's process is killed (:func:`kill_descendants`).
* Joined (``--ray-address HOST:PORT``, ``ray: {address: ...}``): nodes started with ``ray
  start``, a SLURM job, KubeRay. Before Ray is asked: is anything listening there
  (:func:`unreachable`; Ray's own connect waits minutes on a dead address), and does the driver
  send the cluster's token (:func:`send_token_if_available`)? Once joined: does one trial fit on a
  node (:func:`cluster_fit_issues`)? What cannot be joined is a :class:`SpecError` (exit 2).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import MutableMapping
from pathlib import Path

from islab.doctor.probes import visible_gpu_count
from islab.run.process_tree import process_tree
from islab.spec.issues import Issue, SpecError
from islab.sweep.load import LoadedSweep, fit_issues

EMBEDDED_OBJECT_STORE_BYTES = 100 * 1024 * 1024  # trials pass no data through Ray: keep /dev/shm free
JOIN_CONNECT_S = 5.0  # a dead --ray-address is named this soon


def unreachable(address: str) -> str | None:
    """Why nothing answers at ``HOST:PORT`` (None: something listens there, or a form such as
    ``auto`` that Ray resolves itself). Ray's own connect waits minutes on a dead address."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=JOIN_CONNECT_S):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def send_token_if_available(environ: MutableMapping[str, str], home: Path) -> None:
    """Ray (2.59+) turns token authentication on by itself for a cluster ``ray start --head``
    starts where a token exists (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ~/.ray/auth_token) and
    ``RAY_AUTH_MODE`` is unset, but a driver joining by ``HOST:PORT`` never does, and is refused. A
    driver that sends the token joins a cluster without authentication just as well, so with a
    token at hand and no mode chosen, it is sent. Ray reads the mode when it is imported: call this
    before."""
    if "RAY_AUTH_MODE" in environ:
        return
    if environ.get("RAY_AUTH_TOKEN") or environ.get("RAY_AUTH_TOKEN_PATH") or (home / ".ray" / "auth_token").is_file():
        environ["RAY_AUTH_MODE"] = "token"


def join_issue(address: str, problem: str) -> Issue:
    return Issue(
        "--ray-address",
        f"cannot join the Ray cluster at {address}: {problem}",
        "Give the address its head printed (ray start --head prints ray start --address='HOST:PORT'), check that "
        "this machine reaches it, and if the cluster uses token authentication give this driver its token "
        "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)",
    )


def start_ray(address: str | None, attempts: int = 3) -> None:
    """Start the embedded Ray, or connect to ``address`` (a :class:`SpecError` when that cannot be
    joined). Ray gives a starting node a fixed 30 s to register with its GCS; on a machine under
    heavy load that can pass, so it is tried again."""
    import ray

    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
    if address is not None:
        why = unreachable(address)
        if why is not None:
            raise SpecError(join_issue(address, f"nothing answers there ({why})"))
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, ray.exceptions.AuthenticationError) as exc:  # a refused token, not a Ray head
            ray.shutdown()
            raise SpecError(join_issue(address, str(exc))) from None
        return
    # RayConfig entries, which Ray's processes read from RAY_<name> as they start. The raylet starts
    # one idle Python worker per CPU for the first driver, but Tune gives its trial actors a
    # runtime_env (env_vars) those workers lack: never used, ~1.5 CPU s while Ray starts.
    # Metrics: nothing scrapes an embedded Ray without a dashboard.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    os.environ.setdefault("RAY_enable_metrics_collection", "0")
    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=os.cpu_count() or 1, num_gpus=visible_gpu_count(), include_dashboard=False,
                     object_store_memory=EMBEDDED_OBJECT_STORE_BYTES, **quiet)  # fmt: skip
            return
        except Exception as exc:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            ray.shutdown()
            print(f"islab-train sweep: Ray did not start in time (attempt {attempt}); trying again", file=sys.stderr)


def kill_descendants() -> None:
    """What the embedded Ray left running below this process (a GCS server of a start attempt that
    timed out survives ray.shutdown()): nothing the sweep started may outlive it."""
    for pid in process_tree([os.getpid()]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def cluster_fit_issues(loaded: LoadedSweep) -> list[Issue]:
    """Against a running cluster: does one trial fit on at least one of its nodes?"""
    import ray

    nodes = [node for node in ray.nodes() if node.get("Alive")]
    best: list[Issue] | None = None
    for node in nodes:
        resources = node.get("Resources", {})
        issues = fit_issues(
            loaded.resources,
            nproc_per_node=loaded.base.nproc_per_node,
            device=loaded.base.device,
            cpus=resources.get("CPU", 0),
            gpus=resources.get("GPU", 0),
            where=f"Ray node {node.get('NodeManagerAddress')}",
        )
        if not issues:
            return []
        best = issues if best is None or len(issues) < len(best) else best
    return best or [Issue("--ray-address", "the Ray cluster has no live node", "Start its nodes with ray start")]
