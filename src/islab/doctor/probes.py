"""Machine probes: what this machine is, asked without importing torch.

Free ports, the GPUs a rank could use, this machine's address towards a peer, what a host name
resolves to, whether a port can be bound or answers, the text of ``nvidia-smi``, and a short probe
run with the *ranks'* interpreter (``--python``) for library versions, torch's CUDA build, NCCL and
gloo. Everything that touches the machine for the launcher is here, so that the plan and the
doctor's checks stay pure functions of the facts these return.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islab.libs.registry import LIBRARIES

CONNECT_TIMEOUT_S = 2.0
PROBE_TIMEOUT_S = 120.0
# Distributions whose versions the probe reports (importlib.metadata names): ours and every
# library's, framework's and their common torch's, from the library registry.
VERSION_DISTRIBUTIONS = (
    "islab-train",
    *dict.fromkeys(dist for lib in LIBRARIES.values() for fw in lib.frameworks for dist in lib.distributions(fw)),
)


def find_free_port(host: str = "") -> int:
    """A TCP port the OS reports free right now (bind to port 0 and read back the choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def local_address_towards(host: str, port: int) -> str | None:
    """This machine's address on the route to ``host`` -- what the other nodes can reach it at.
    A UDP "connect" sends nothing; it only asks the kernel to pick the route and source address."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_UDP)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            return str(sock.getsockname()[0])
    except (OSError, IndexError):
        return None


def visible_gpu_count(
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., Any] = subprocess.run,
) -> int:
    """GPUs a rank could use, without importing torch (which would cost seconds).

    CUDA_VISIBLE_DEVICES wins when set (empty or "-1" hides every GPU; CUDA stops at the first
    invalid entry); otherwise count the lines of ``nvidia-smi -L``; no nvidia-smi means 0.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = 0
        for entry in (part.strip() for part in visible.split(",")):
            if not entry or entry.startswith("-"):
                break
            count += 1
        return count
    nvidia_smi = which("nvidia-smi")
    if nvidia_smi is None:
        return 0
    try:
        listing = run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if listing.returncode != 0:
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def resolve(host: str) -> tuple[tuple[str, ...], str | None]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        return (), str(exc)
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos)), None


def bind_state(address: str, port: int) -> str:
    """Can this machine listen on ``address:port``? "free", "busy", or "not-local" (the address
    belongs to another machine)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "busy"
            if exc.errno == errno.EADDRNOTAVAIL:
                return "not-local"
            return f"cannot bind ({exc.strerror or exc})"
    return "free"


def connect_state(address: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return "open"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def nearest_existing(path: Path) -> Path:
    """The log directory, or its closest existing parent (it is created at launch)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def read_nvidia_smi(which: Callable[[str], str | None] = shutil.which) -> str | None:
    binary = which("nvidia-smi")
    if binary is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        result = subprocess.run([binary], capture_output=True, text=True, timeout=15, check=False)
        if result.returncode == 0:
            return result.stdout
    return None


@dataclass(frozen=True)
class Runtime:
    """What the ranks' interpreter reports (the probe); ``error`` when it could not run."""

    python: str | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    torch_cuda: str | None = None  # torch.version.cuda; None for a CPU-only build
    nccl: str | None = None  # "2.21.5", None when torch has no NCCL
    gloo: bool | None = None
    # torch.cuda.device_count() in the ranks' interpreter and environment: the runtime's view, which
    # applies CUDA_VISIBLE_DEVICES (absent GPUs named there are not counted) and MIG (nvidia-smi -L
    # lists physical GPUs; CUDA shows one device per MIG instance it may use). None: not probed.
    cuda_devices: int | None = None
    # jax.default_backend() ("gpu", "cpu", ...) when JAX was probed (skrl-JAX runs); None otherwise
    # or when jax could not be imported.
    jax_backend: str | None = None
    error: str | None = None


PROBE = r"""
import importlib.metadata as md, json, sys
out = {"python": sys.version.split()[0], "versions": {}, "torch_cuda": None, "nccl": None, "gloo": None,
       "cuda_devices": None, "jax_backend": None, "error": None}
for name in DISTRIBUTIONS:
    try:
        out["versions"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["versions"][name] = None
try:
    import torch
    import torch.distributed as dist
    out["torch_cuda"] = torch.version.cuda
    out["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
    out["cuda_devices"] = torch.cuda.device_count()
    if dist.is_available() and dist.is_nccl_available():
        version = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
if PROBE_JAX:
    try:
        import jax
        out["jax_backend"] = jax.default_backend()
    except Exception:
        pass
print(json.dumps(out))
"""


def probe_runtime(
    python: str,
    run: Callable[..., Any] = subprocess.run,
    environ: Mapping[str, str] | None = None,
    *,
    jax: bool = False,
) -> Runtime:
    """Run :data:`PROBE` with the ranks' interpreter (it may be Isaac Sim's, not ours) in the ranks'
    environment (``environ``: the spec's env over this shell's; None: this shell's). ``jax``: also
    import jax and report its backend (a second or two; only skrl-JAX runs need it)."""
    script = f"DISTRIBUTIONS = {VERSION_DISTRIBUTIONS!r}\nPROBE_JAX = {jax!r}\n{PROBE}"
    env = None if environ is None else dict(environ)
    try:
        result = run(
            [python, "-c", script], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False, env=env
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Runtime(error=f"cannot run {python}: {exc}")
    if result.returncode != 0:
        last = (result.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return Runtime(error=f"{python} exited with code {result.returncode}: {last[0]}")
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Runtime(error=f"{python} printed no probe result")
    return Runtime(
        python=data.get("python"),
        versions=data.get("versions") or {},
        torch_cuda=data.get("torch_cuda"),
        nccl=data.get("nccl"),
        gloo=data.get("gloo"),
        cuda_devices=data.get("cuda_devices"),
        jax_backend=data.get("jax_backend"),
        error=data.get("error"),
    )
