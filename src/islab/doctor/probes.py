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
import sys
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


@dataclass(frozen=True)
class PhysicalGpu:
    """One GPU as NVML lists it: its UUID and, when MIG mode is on, the UUIDs of its MIG instances."""

    uuid: str
    mig_uuids: tuple[str, ...] | None = None  # None: MIG mode off


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml(nvml: Any = None) -> list[PhysicalGpu] | None:
    """The GPUs and their MIG instances from NVML (nvidia-ml-py's ``pynvml``, the library behind
    nvidia-smi); None when nvidia-ml-py is not installed or NVML does not start (no driver)."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py; optional
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:  # pynvml.NVMLError: no driver, no library
        return None
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current_mode, _pending = nvml.nvmlDeviceGetMigMode(handle)
            except nvml.NVMLError:  # a GPU without MIG support
                current_mode = 0
            if current_mode != nvml.NVML_DEVICE_MIG_ENABLE:
                gpus.append(PhysicalGpu(_text(nvml.nvmlDeviceGetUUID(handle))))
                continue
            instances = []
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    instance = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except nvml.NVMLError:  # an empty slot
                    continue
                instances.append(_text(nvml.nvmlDeviceGetUUID(instance)))
            gpus.append(PhysicalGpu(_text(nvml.nvmlDeviceGetUUID(handle)), tuple(instances)))
        return gpus
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def cuda_device_count(gpus: list[PhysicalGpu], cuda_visible_devices: str | None) -> int:
    """How many devices CUDA will enumerate in a process, from NVML's view of the machine.

    A GPU in MIG mode is not a CUDA device itself: its MIG instances are, and a CUDA process can
    enumerate only ONE MIG instance (NVIDIA's MIG user guide, "CUDA device enumeration"), however
    many exist -- so a 2-instance MIG GPU gives a rank one device, not 2, and none without an
    instance. CUDA_VISIBLE_DEVICES (indices, ``GPU-``/``MIG-`` UUIDs or their prefixes) selects
    and orders; CUDA stops at the first entry that names nothing (or names a device again)."""
    if cuda_visible_devices is None:
        plain = sum(1 for gpu in gpus if gpu.mig_uuids is None)
        return plain + (1 if any(gpu.mig_uuids for gpu in gpus) else 0)
    count, migs, taken = 0, 0, set()
    for entry in (part.strip() for part in cuda_visible_devices.split(",")):
        device = _named_device(gpus, entry)
        if device is None or device[0] in taken:
            break
        taken.add(device[0])
        if device[1]:
            if migs:
                continue  # a second MIG instance: CUDA shows only the first
            migs += 1
        count += 1
    return count


def _named_device(gpus: list[PhysicalGpu], entry: str) -> tuple[str, bool] | None:
    """(UUID, is a MIG instance) of the device a CUDA_VISIBLE_DEVICES entry names, or None."""
    if entry.isdigit():
        if int(entry) >= len(gpus):
            return None
        gpu = gpus[int(entry)]
        if gpu.mig_uuids is None:
            return gpu.uuid, False
        return (gpu.mig_uuids[0], True) if gpu.mig_uuids else None
    if not entry or entry.startswith("-"):
        return None
    for gpu in gpus:
        if gpu.mig_uuids is None and gpu.uuid.startswith(entry):
            return gpu.uuid, False
        for mig in gpu.mig_uuids or ():
            if mig.startswith(entry):
                return mig, True
    return None


def listed_devices(cuda_visible_devices: str | None) -> int:
    """The entries of CUDA_VISIBLE_DEVICES up to the first invalid one (CUDA stops there); 0 unset."""
    count = 0
    for entry in (part.strip() for part in (cuda_visible_devices or "").split(",")):
        if not entry or entry.startswith("-"):
            break
        count += 1
    return count


CUDA_COUNT_PROBE = "import torch; print(torch.cuda.device_count())"


def torch_device_count(python: str, environ: Mapping[str, str], run: Callable[..., Any] = subprocess.run) -> int | None:
    """``torch.cuda.device_count()`` in a child process of ``python`` (the launcher itself stays
    torch-free), in the ranks' environment; None when it cannot tell (no torch there)."""
    try:
        done = run([python, "-c", CUDA_COUNT_PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                   check=False, env=dict(environ))  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stdout or "").strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].strip().isdigit():
        return None
    return int(lines[-1])


def nvidia_smi_count(which: Callable[[str], str | None], run: Callable[..., Any]) -> int:
    """The last resort: ``nvidia-smi -L``'s GPUs, a MIG GPU's instances as one device (see
    :func:`cuda_device_count`); 0 when nvidia-smi is missing or fails."""
    nvidia_smi = which("nvidia-smi")
    if nvidia_smi is None:
        return 0
    try:
        listing = run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if listing.returncode != 0:
        return 0
    gpus: list[PhysicalGpu] = []
    for line in listing.stdout.splitlines():
        if line.startswith("GPU "):
            gpus.append(PhysicalGpu(line))
        elif line.strip().startswith("MIG ") and gpus:
            gpus[-1] = PhysicalGpu(gpus[-1].uuid, (*(gpus[-1].mig_uuids or ()), line))
    return cuda_device_count(gpus, None)


def visible_gpu_count(
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., Any] = subprocess.run,
    *,
    nvml: Callable[[], list[PhysicalGpu] | None] = read_nvml,
    python: str = sys.executable,
    exists: Callable[[str], bool] = os.path.exists,
) -> int:
    """The CUDA devices a rank will see, counted before launch without importing torch here.

    In order: CUDA_VISIBLE_DEVICES hiding every GPU ("" or "-1") -> 0; no NVIDIA device node
    (/dev/nvidiactl, which CUDA needs) -> the entries of CUDA_VISIBLE_DEVICES, else 0, at no
    cost; NVML when nvidia-ml-py is installed
    (MIG-aware, :func:`cuda_device_count`); else ``torch.cuda.device_count()`` in a child
    process with ``python`` in ``environ`` (a second or two); else ``nvidia-smi -L``.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return 0
    if not exists("/dev/nvidiactl"):
        # Nothing to ask here. A CUDA_VISIBLE_DEVICES is then the user's word for the GPUs the ranks
        # will have (a plan made for another machine): its entries up to the first invalid one.
        return listed_devices(visible)
    gpus = nvml()
    if gpus is not None:
        return cuda_device_count(gpus, visible)
    counted = torch_device_count(python, environ, run)
    if counted is not None:
        return counted
    return nvidia_smi_count(which, run)


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
        # As torch's TCPStore (libuv) and JAX's coordinator (gRPC) bind: connections of an earlier
        # job still in TIME_WAIT on the port do not stop them listening, so they must not stop us.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
import importlib.metadata as md, importlib.util, json, os, sys
out = {"python": sys.version.split()[0], "versions": {}, "torch_cuda": None, "nccl": None, "gloo": None,
       "cuda_devices": None, "jax_backend": None, "error": None}
for name in DISTRIBUTIONS:
    try:
        out["versions"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["versions"][name] = None
build = {}
try:  # torch/version.py names the build (cuda, hip) without importing torch (~2 s)
    found = importlib.util.find_spec("torch")
    with open(os.path.join(os.path.dirname(found.origin), "version.py"), encoding="utf-8") as source:
        exec(compile(source.read(), "torch/version.py", "exec"), build)
except Exception:
    build = {}
if build and build.get("cuda") is None and build.get("hip") is None and sys.platform == "linux":
    # a CPU-only build on Linux: no CUDA device, no NCCL; gloo is built into every such wheel
    out.update(torch_cuda=None, gloo=True, cuda_devices=0, nccl=None)
else:
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
