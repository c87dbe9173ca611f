"""islab checkpoints: one file format for every library, written atomically, read by rank 0 only.

Why our own format
------------------
Each library writes checkpoints of its own (rsl_rl ``model_<it>.pt``, rl_games ``nn/*.pth``, skrl
``checkpoints/agent_*``); they stay as they are. None of them holds everything needed to *continue*
a run exactly: the RNG states of every rank, the iteration counter the way we count it, the run's
spec, or (for skrl-JAX) the optimizer state. So rank 0 also writes, every ``interval`` iterations
and after the last one::

    <run_dir>/checkpoints/latest.pt      the newest checkpoint (what --resume RUN_DIR reads)
    <run_dir>/checkpoints/iter_<N>.pt    history, the newest ``keep`` are kept

each a dict that loads with ``torch.load(path, weights_only=True)`` (tensors, numbers, strings,
None, lists, tuples and dicts only; nothing is unpickled)::

    {"format": "islab-checkpoint/1",
     "lib": "rsl_rl", "ml_framework": "torch", "task": "Islab-Cartpole-v0",
     "observation_shape": [4], "action_shape": [1],
     "iteration": N,                 # training iterations completed (1-based count)
     "job_env_steps": S,             # env steps of all ranks since the run began, across resumes
     "policy_sha256": "...",         # state_digest(policy_state()) of rank 0 when written
     "spec": {...},                  # the worker's arguments, world_size, start/target iteration, job_id
     "rng": {"world_size": W, "ranks": [<rank 0 RNG>, ..., <rank W-1 RNG>]},
     "rank_state": {"world_size": W, "ranks": [<rank 0 env state and episode statistics>, ...]},
     "library": {...}}               # the adapter's library_state(): model, optimizer, normalizers,
                                     # the library's own counters and learning-rate state

A rank's RNG state is ``{"torch": uint8 tensor, "cuda": uint8 tensor | None, "numpy": {...},
"python": {...}, "env": uint8 tensor (the env's torch.Generator), "library": {...}}`` (numpy's and
Python's states converted to tensors and numbers). Every rank's state is gathered to rank 0 as
bytes over the job's collective; on resume rank ``r`` restores entry ``r``. A resumed job with a
different world size restores the entries that exist and keeps fresh seeds for the others.

A rank's ``rank_state`` (``LibraryAdapter.rank_state``) travels the same way, in the same gather:
``{"env": env.state_dict(), "episodes": adapter.episode_stats()}``, so a resumed rank's envs go on
mid-episode and its reported mean return goes on from the saved window of finished episodes
instead of starting empty (the curves continue). mjlab envs save no physics state (they start from a
reset); their episode statistics are restored.

Atomic writes
-------------
Every file goes through ``atomic_torch_save`` (temporary file in the same directory, flush, fsync,
rename over), and ``latest.pt`` is replaced by a rename too, so a rank killed with SIGKILL while
writing leaves the previous ``latest.pt`` intact, never a truncated one.

Reading without a shared filesystem
-----------------------------------
Only rank 0 opens the file (``load_checkpoint_for_rank``): it reads the bytes and broadcasts them
over the job's collective (:mod:`islab.worker.collectives`). Every rank then
``torch.load``s the same bytes with ``weights_only=True``. A failure on rank 0 (missing file,
unreadable file) is broadcast too, so every rank stops with the same message instead of hanging.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from islab import rundir
from islab.libs.base import atomic_torch_save, state_digest
from islab.spec.worker_args import default_of
from islab.worker.collectives import Collective
from islab.worker.preemption import Preempted, StopRequest

if TYPE_CHECKING:
    from islab.libs.base import LibraryAdapter

FORMAT = "islab-checkpoint/1"
LATEST = rundir.LATEST_CHECKPOINT
HISTORY_FILE = rundir.history_checkpoint("", "<N>").name  # iter_<N>.pt, for messages
# Iterations between checkpoints (the last iteration is always checkpointed): the worker option's default.
DEFAULT_INTERVAL: int = default_of("checkpoint_interval")
DEFAULT_KEEP: int = default_of("keep_checkpoints")  # iter_<N>.pt files kept beside latest.pt


class CheckpointError(Exception):
    """A checkpoint cannot be used for this run; the message says why and what to do."""


# -- (de)serialization -------------------------------------------------------------------------


def to_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes, source: str) -> dict[str, Any]:
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for a corrupt or foreign file
        raise CheckpointError(f"resume: cannot read checkpoint {source}: {error}") from error
    if not isinstance(obj, dict):
        raise CheckpointError(f"resume: {source} is not an islab checkpoint (no dict inside)")
    return obj


# -- RNG state -------------------------------------------------------------------------------


def capture_rng(env_generator: torch.Generator | None, library: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """This process's RNG states as tensors and numbers (``weights_only``-loadable)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    py_version, py_internal, py_gauss_next = random.getstate()
    # The device is the env generator's (the rank's device): a CPU run on a GPU machine never
    # touches torch.cuda's RNG state.
    device = env_generator.device if env_generator is not None else torch.device("cpu")
    on_cuda = device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if on_cuda else None,
        "device": str(device),
        "numpy": {
            "kind": str(np_kind),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_cached),
        },
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss_next,
        },
        "env": env_generator.get_state() if env_generator is not None else None,
        "library": dict(library or {}),
    }


def restore_rng(state: Mapping[str, Any], env_generator: torch.Generator | None) -> None:
    """Inverse of ``capture_rng`` (the ``library`` entry is the adapter's to restore)."""
    torch.set_rng_state(state["torch"])
    here = env_generator.device if env_generator is not None else torch.device("cpu")
    if state.get("cuda") is not None and here.type == "cuda" and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = state["python"]
    random.setstate((python_state["version"], tuple(python_state["internal"].tolist()), python_state["gauss_next"]))
    if env_generator is not None and state.get("env") is not None:
        _restore_env_generator(env_generator, state["env"], state.get("device", str(env_generator.device)))


def _restore_env_generator(generator: torch.Generator, saved: torch.Tensor, saved_device: str) -> None:
    """The env stream where it stopped; across device types (a GPU run resumed on CPU, or back)
    the states have different kinds (Philox vs Mersenne Twister) and cannot be converted, so the
    stream goes on from a seed derived from the saved state: deterministic, but another stream."""
    if torch.device(saved_device).type == generator.device.type:
        try:
            generator.set_state(saved)
            return
        except RuntimeError as error:
            raise CheckpointError(
                f"resume: the env generator state saved on {saved_device} does not fit this rank's: {error}"
            ) from None
    digest = hashlib.sha256(saved.cpu().numpy().tobytes()).digest()
    generator.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def to_cpu(obj: Any) -> Any:
    """A copy of nested dicts/lists/tuples with every tensor on the CPU: a checkpoint written on a
    GPU loads with ``torch.load(path, weights_only=True)`` on a machine without one."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, Mapping):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_cpu(value) for value in obj)
    return obj


# -- identity: which run a checkpoint belongs to ----------------------------------------------


def identity(lib: str, ml_framework: str, task: str, observation_shape: Any, action_shape: Any) -> dict[str, Any]:
    return {
        "lib": lib,
        "ml_framework": ml_framework,
        "task": task,
        "observation_shape": [int(n) for n in observation_shape],
        "action_shape": [int(n) for n in action_shape],
    }


def _describe(ident: Mapping[str, Any]) -> str:
    lib = ident["lib"] if ident.get("ml_framework", "torch") == "torch" else f"{ident['lib']} ({ident['ml_framework']})"
    obs = "x".join(str(n) for n in ident["observation_shape"])
    act = "x".join(str(n) for n in ident["action_shape"])
    return f"{lib} for {ident['task']} (obs {obs}, act {act})"


def _plain(value: Any) -> Any:
    """Shapes may come back as lists or tuples; compare them as lists."""
    return list(value) if isinstance(value, (list, tuple)) else value


def check_compatible(checkpoint: Mapping[str, Any], run: Mapping[str, Any], source: str) -> None:
    """Refuse, with a message a user can act on, a checkpoint of another library, task or shape
    (loading it would end in a tensor-shape traceback deep inside the library)."""
    if checkpoint.get("format") != FORMAT:
        raise CheckpointError(
            f"resume: {source} is not an islab checkpoint (format {checkpoint.get('format')!r}, expected "
            f"{FORMAT!r}); pass a run directory or a {rundir.CHECKPOINTS_DIR}/{LATEST} or {HISTORY_FILE} file"
        )
    keys = ("lib", "ml_framework", "task", "observation_shape", "action_shape")
    if any(_plain(checkpoint.get(key)) != _plain(run[key]) for key in keys):
        raise CheckpointError(
            f"resume: checkpoint {source} was written by {_describe(checkpoint)}; this run is {_describe(run)}. "
            "Start a new run or resume with the same --lib/--task."
        )


# -- reading: rank 0 reads, everyone receives -------------------------------------------------

_OK, _NONE, _ERROR = b"C", b"N", b"E"


def load_checkpoint_for_rank(
    collective: Collective, path: Path | None, *, missing_ok: bool = False, read: Callable[[Path], bytes] | None = None
) -> tuple[dict[str, Any] | None, str]:
    """Rank 0 resolves ``path`` (run directory -> its latest.pt), reads it and broadcasts the
    bytes; ranks != 0 never touch ``path``. Returns (checkpoint or None when ``missing_ok`` and
    there is none, the resolved path as text, for messages). Collective: every rank calls it."""
    if collective.rank == 0:
        resolved = rundir.resume_source(path) if path is not None else None
        try:
            if resolved is None or not resolved.is_file():
                if not missing_ok:
                    raise CheckpointError(f"resume: there is no checkpoint at {resolved or path}")
                header = _NONE
            else:
                header = _OK + (read or Path.read_bytes)(resolved)
        except (OSError, CheckpointError) as error:
            message = str(error) if isinstance(error, CheckpointError) else f"resume: cannot read {resolved}: {error}"
            header = _ERROR + message.encode()
        # The resolved name travels with the payload so every rank's message names the same file.
        payload = str(resolved).encode() + b"\0" + header
    else:
        payload = None
    received = collective.broadcast_bytes(payload)
    name, _, body = received.partition(b"\0")
    source = name.decode()
    kind, data = body[:1], body[1:]
    if kind == _ERROR:
        raise CheckpointError(data.decode())
    if kind == _NONE:
        return None, source
    return from_bytes(data, source), source


# -- writing ------------------------------------------------------------------------------------


class Checkpointer:
    """Writes islab checkpoints from ``LibraryAdapter.report_iteration`` (every rank calls it after
    every iteration, so the RNG gather, a collective, is safe there). Rank 0 writes the file.

    With a ``stop`` request (:mod:`islab.worker.preemption`) the ranks also agree there, once per
    iteration, whether a preempting signal arrived; if so, every rank checkpoints this iteration
    and raises :class:`~islab.worker.preemption.Preempted` (unless it was the last one anyway)."""

    def __init__(
        self,
        collective: Collective,
        run_dir: Path,
        run_identity: Mapping[str, Any],
        spec: Mapping[str, Any],
        *,
        interval: int = DEFAULT_INTERVAL,
        keep: int = DEFAULT_KEEP,
        stop: StopRequest | None = None,
    ) -> None:
        self.collective = collective
        self.run_dir = Path(run_dir)
        self.directory = rundir.checkpoint_dir(run_dir)
        self.identity = dict(run_identity)
        self.spec = dict(spec)
        self.interval = interval
        self.keep = keep
        self.stop = stop
        self.last_written: Path | None = None
        self.last_iteration: int | None = None

    def due(self, iteration: int, final_iteration: int) -> bool:
        return iteration == final_iteration or (self.interval > 0 and iteration % self.interval == 0)

    def on_iteration(self, adapter: LibraryAdapter, iteration: int, final_iteration: int) -> None:
        stopping = self.stop.agreed(self.collective) if self.stop is not None else 0
        if self.due(iteration, final_iteration) or stopping:
            self.write(adapter, iteration)
        if stopping and iteration < final_iteration:
            raise Preempted(stopping, iteration)

    def write(self, adapter: LibraryAdapter, iteration: int) -> Path | None:
        """Collective: gathers every rank's RNG; rank 0 writes ``iter_<N>.pt`` and ``latest.pt``."""
        local = {"rng": capture_rng(adapter.env.generator, adapter.extra_rng_state()), "state": adapter.rank_state()}
        rows = self.collective.gather_bytes(to_bytes(to_cpu(local)))
        self.last_iteration = iteration
        if rows is None:  # ranks != 0
            return None
        gathered = [from_bytes(row, "gathered rank state") for row in rows]
        world_size = self.collective.world_size
        checkpoint = {
            "format": FORMAT,
            **self.identity,
            "iteration": iteration,
            "job_env_steps": adapter.job_env_steps,
            "policy_sha256": state_digest(adapter.policy_state()),
            "spec": self.spec,
            "rng": {"world_size": world_size, "ranks": [row["rng"] for row in gathered]},
            "rank_state": {"world_size": world_size, "ranks": [row["state"] for row in gathered]},
            "device": str(adapter.env.generator.device) if adapter.env.generator is not None else "cpu",
            "library": to_cpu(adapter.library_state()),
        }
        history = atomic_torch_save(checkpoint, rundir.history_checkpoint(self.run_dir, iteration))
        self._replace_latest(history)
        self._prune()
        self.last_written = rundir.latest_checkpoint(self.run_dir)
        return self.last_written

    def _replace_latest(self, history: Path) -> None:
        latest = rundir.latest_checkpoint(self.run_dir)
        tmp = self.directory / f".{LATEST}.tmp-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        try:
            os.link(history, tmp)  # a second name for the file just written: no second write
        except OSError:
            atomic_torch_save(torch.load(history, weights_only=True), latest)  # filesystems without links
            return
        os.replace(tmp, latest)

    def _prune(self) -> None:
        history = list(rundir.history_checkpoints(self.run_dir).values())  # oldest first
        for old in history[: max(0, len(history) - self.keep)]:
            old.unlink(missing_ok=True)  # latest.pt is another name for the newest: unaffected


def restore(adapter: LibraryAdapter, checkpoint: Mapping[str, Any], rank: int) -> str:
    """Load ``checkpoint`` into a freshly built adapter on this rank: library state, iteration
    counter, this rank's RNG states. Returns the policy digest after loading, which must equal
    the one stored (rank 0's policy when written): every rank starts from the saved policy."""
    adapter.load_library_state(checkpoint["library"])
    adapter.iteration = int(checkpoint["iteration"])
    # older checkpoints lack it: the loggers' env-step axis then restarts from 0
    adapter.job_env_steps = adapter.job_env_steps_at_start = int(checkpoint.get("job_env_steps", 0))
    ranks = checkpoint["rng"]["ranks"]
    if rank < len(ranks):
        restore_rng(ranks[rank], adapter.env.generator)
        adapter.load_extra_rng_state(ranks[rank].get("library", {}))
    rank_states = checkpoint.get("rank_state", {}).get("ranks", [])  # older checkpoints have none
    if rank < len(rank_states):
        adapter.load_rank_state(rank_states[rank])
    digest = state_digest(adapter.policy_state())
    if digest != checkpoint["policy_sha256"]:
        raise CheckpointError(
            f"resume: the policy loaded from the checkpoint (sha256 {digest[:12]}) differs from the one "
            f"saved ({checkpoint['policy_sha256'][:12]}); the checkpoint or this library version is incompatible"
        )
    return digest
