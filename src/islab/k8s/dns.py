"""Inside a pod, before the pre-launch check: wait for node 0's name to appear in the cluster DNS.

A pod's name under a headless Service (and a PyTorchJob's per-pod Service) resolves only a few
seconds after the pod is created, so a pod that starts before pod 0 is known would fail
islab-train's pre-launch check (a name that does not resolve is an error: exit 2) and use up one of
the job's restarts. An edge (it probes DNS), kept apart from the pure allocation reader
:mod:`islab.k8s.allocation`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from islab.doctor import probes

DNS_POLL_S = 1.0


def wait_for_dns(
    host: str,
    timeout_s: float,
    *,
    resolve: Callable[[str], tuple[tuple[str, ...], str | None]] = probes.resolve,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until node 0's DNS name resolves, at most ``timeout_s``; whether it does. The pre-launch
    check still reports a name that never appears."""
    deadline = clock() + timeout_s
    told = False
    while True:
        addresses, _ = resolve(host)
        if addresses:
            return True
        if clock() >= deadline:
            return False
        if not told:
            print(f"islab-train: waiting for node 0's name {host} to resolve (Kubernetes DNS)", file=sys.stderr)
            told = True
        sleep(DNS_POLL_S)
