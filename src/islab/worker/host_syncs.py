"""Count the host syncs of a real training rollout, and say whose code made each one.

A host sync is a point where the CPU waits for the GPU: reading a value (``.item()``, ``float(t)``,
``bool(t)``, ``if t.any():``), an op whose output size depends on the data (``nonzero``, boolean
mask indexing, ``masked_select``, ``unique``), or a device-to-host copy (``.cpu()``, ``.tolist()``,
``jax.device_get``). Once per env step, each one serializes the rollout: the GPU idles while the
CPU waits, then the CPU idles while the GPU catches up.

How they are counted: ``HostSyncCounter`` is a ``TorchDispatchMode`` that sees every aten op and
records ``_local_scalar_dense`` (what ``.item()``/``bool``/``float`` become), the data-dependent
ops above, and ``_to_copy``/``copy_`` from a non-CPU device to the CPU. On a CPU-only machine
nothing really waits, so it also counts what *would* sync on a GPU and never reaches the
dispatcher on CPU tensors: Python-level ``Tensor.cpu()``, ``.tolist()`` and ``.numpy()`` calls
(``.cpu().numpy().tolist()`` counts once), and ``jax.device_get`` (skrl-JAX, counted apart). Each
event is attributed to the innermost Python frame outside torch itself: our code (``islab``) or a
library (``rsl_rl``, ``rl_games``, ``skrl``, ...), and tagged whether it ran inside the env's
``step``. On a GPU, ``--device cuda`` also turns on ``torch.cuda.set_sync_debug_mode("warn")`` and
counts the warnings CUDA itself raises (the ground truth). A dispatch mode sees nothing under
``torch.inference_mode``, so ``measure`` runs it as ``torch.no_grad`` (``inference_mode_as_no_grad``).

Entry point (the GPU acceptance script runs it with ``--device cuda``)::

    python -m islab.worker.host_syncs --device cpu --iterations 3   # every library, a markdown table

``measure(lib, ...)`` trains the real library adapter on Islab-Cartpole-v0 in this process (one rank)
and returns counts per iteration, after the first (which includes start-up).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import islab

ISLAB_DIR = str(Path(islab.__file__).resolve().parent)
THIS_FILE = str(Path(__file__).resolve())
TORCH_DIR = str(Path(torch.__file__).resolve().parent)
LIBRARIES = ("rsl_rl", "rl_games", "skrl-torch", "skrl-jax")
TASK = "Islab-Cartpole-v0"

_aten = torch.ops.aten
# ops whose output size depends on the data: the host must read it before it can allocate
DATA_DEPENDENT = {
    _aten.nonzero.default: "nonzero",
    _aten.masked_select.default: "masked_select",
    _aten._unique2.default: "unique",
    _aten.unique_dim.default: "unique",
    _aten.unique_consecutive.default: "unique",
    _aten.repeat_interleave.Tensor: "repeat_interleave",
    _aten.equal.default: "equal",
}
BOOL_INDEXING = {_aten.index.Tensor: "bool_index", _aten.index_put.default: "bool_index_put"}
BOOL_INDEXING[_aten.index_put_.default] = "bool_index_put"
HOST_COPY_METHODS = ("cpu", "tolist", "numpy")


@dataclass
class SyncEvent:
    kind: str  # item, nonzero, bool_index, to_host, device_get, cuda_warning, ...
    origin: str  # "islab", a library's top-level package, or "other"
    where: str  # file:line of the attributed frame
    in_env_step: bool
    env_steps: int  # env steps taken before it: tells the rollout (between two steps) from the update


def origin_of(filename: str) -> str | None:
    """Whose code a frame's file is; None for frames to look past (torch, this module, stdlib)."""
    path = str(Path(filename).resolve()) if filename and not filename.startswith("<") else filename
    if path == THIS_FILE or path.startswith(TORCH_DIR) or path.startswith("<"):
        return None
    if path.startswith(ISLAB_DIR + os.sep):
        return "islab"
    for marker in ("site-packages", "dist-packages"):
        if f"{os.sep}{marker}{os.sep}" in path:
            package = path.split(f"{os.sep}{marker}{os.sep}", 1)[1].split(os.sep, 1)[0]
            return None if package in {"typing_extensions.py", "functools.py"} else package.removesuffix(".py")
    if path.startswith(os.path.dirname(os.__file__)):  # the standard library (contextlib, functools, ...)
        return None
    return "other"


def attribute(frames: list[traceback.FrameSummary] | None = None) -> tuple[str, str]:
    """(origin, file:line) of the innermost frame outside torch, this module and the stdlib."""
    for frame in reversed(frames if frames is not None else traceback.extract_stack()):
        origin = origin_of(frame.filename)
        if origin is not None:
            return origin, f"{os.path.relpath(frame.filename)}:{frame.lineno}"
    return "other", "?"


def _has_bool_index(args: tuple[Any, ...]) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _to_host(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func is _aten._to_copy.default:
        source, target = args[0], kwargs.get("device")
        return (
            isinstance(source, torch.Tensor)
            and source.device.type != "cpu"
            and target is not None
            and (torch.device(target).type == "cpu")
        )
    if func is _aten.copy_.default:
        destination, source = args[0], args[1]
        return destination.device.type == "cpu" and source.device.type != "cpu"
    return False


@dataclass
class HostSyncCounter(TorchDispatchMode):
    """Records every host sync while active (module docstring). Use as a context manager; wrap the
    env with ``watch_env`` so events inside its ``step`` are tagged."""

    events: list[SyncEvent] = field(default_factory=list)
    env_steps: int = 0
    _in_step: int = 0
    _last_host_copy: int = -1  # id of the tensor the latest .cpu() returned (its .numpy/.tolist is free)

    def __post_init__(self) -> None:
        super().__init__()

    def record(self, kind: str) -> None:
        origin, where = attribute()
        self.events.append(SyncEvent(kind, origin, where, self._in_step > 0, self.env_steps))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _aten._local_scalar_dense.default:
            self.record("item")
        elif func in DATA_DEPENDENT:
            self.record(DATA_DEPENDENT[func])
        elif func in BOOL_INDEXING and _has_bool_index(args):
            self.record(BOOL_INDEXING[func])
        elif _to_host(func, args, kwargs):
            self.record("to_host")
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def python_level_host_reads(self) -> Iterator[None]:
        """Count ``Tensor.cpu/.tolist/.numpy`` calls (no dispatch on CPU tensors) and ``jax.device_get``."""
        originals = {name: getattr(torch.Tensor, name) for name in HOST_COPY_METHODS}
        counter = self

        def counted(name: str) -> Any:
            original = originals[name]

            def method(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                # CPU tensors only: from another device the copy reaches the dispatcher (counted there)
                if tensor.device.type == "cpu" and id(tensor) != counter._last_host_copy:
                    counter.record("to_host")
                result = original(tensor, *args, **kwargs)
                counter._last_host_copy = id(result) if name == "cpu" else -1
                return result

            return method

        jax_module = sys.modules.get("jax")
        device_get = getattr(jax_module, "device_get", None)
        try:
            for name in HOST_COPY_METHODS:
                setattr(torch.Tensor, name, counted(name))
            if device_get is not None:

                def counted_device_get(*args: Any, **kwargs: Any) -> Any:
                    counter.record("device_get")
                    return device_get(*args, **kwargs)

                jax_module.device_get = counted_device_get
            yield
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)
            if device_get is not None:
                jax_module.device_get = device_get

    def watch_env(self, env: Any) -> None:
        """Tag the events inside ``env.step`` and count the steps (an instance attribute)."""
        step = env.step

        def watched_step(*args: Any, **kwargs: Any) -> Any:
            self.env_steps += 1
            self._in_step += 1
            try:
                return step(*args, **kwargs)
            finally:
                self._in_step -= 1

        env.step = watched_step

    def summary(self, events: list[SyncEvent], rollouts: list[tuple[int, int]]) -> dict[str, Any]:
        """Counts by origin, by origin and kind, and those of the rollouts: inside an env step or
        between two steps of one iteration's rollout (``rollouts``: each iteration's first and last
        env step count); the rest is the update, logging and checkpointing."""

        def in_rollout(event: SyncEvent) -> bool:
            return event.in_env_step or any(first < event.env_steps < last for first, last in rollouts)

        rollout = [e for e in events if in_rollout(e)]
        return {
            "by_origin": dict(Counter(e.origin for e in events)),
            "by_kind": dict(Counter(f"{e.origin}:{e.kind}" for e in events)),
            "rollout_by_origin": dict(Counter(e.origin for e in rollout)),
            "islab_in_env_step": sum(e.origin == "islab" and e.in_env_step for e in events),
            "where": dict(
                Counter(f"{'rollout' if in_rollout(e) else 'update'} {e.origin} {e.kind} {e.where}" for e in events)
            ),
        }


@contextlib.contextmanager
def inference_mode_as_no_grad() -> Iterator[None]:
    """Within the block ``torch.inference_mode`` (rsl_rl's rollout runs under it) acts as
    ``torch.no_grad``: a dispatch mode sees no op under inference mode, so its syncs would go
    uncounted. Both skip autograd; what the rollout computes is the same."""
    mode = torch.autograd.grad_mode.inference_mode
    enter, leave = mode.__enter__, mode.__exit__

    def no_grad_enter(self: Any) -> None:
        self._islab_no_grad = torch.no_grad()
        self._islab_no_grad.__enter__()

    def no_grad_exit(self: Any, *exc: Any) -> None:
        self._islab_no_grad.__exit__(*exc)

    mode.__enter__, mode.__exit__ = no_grad_enter, no_grad_exit
    try:
        yield
    finally:
        mode.__enter__, mode.__exit__ = enter, leave


@contextlib.contextmanager
def cuda_sync_warnings(events: list[SyncEvent], counter: HostSyncCounter) -> Iterator[None]:
    """On CUDA: ``torch.cuda.set_sync_debug_mode("warn")``, each warning recorded as an event."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    show = warnings.showwarning

    def record(message: Any, category: Any, filename: str, lineno: int, *args: Any, **kwargs: Any) -> None:
        if "synchroniz" in str(message):
            origin, where = attribute([traceback.FrameSummary(filename, lineno, "?")])
            events.append(SyncEvent("cuda_warning", origin, where, counter._in_step > 0, counter.env_steps))
        else:
            show(message, category, filename, lineno, *args, **kwargs)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = record
            yield
    finally:
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode(previous)


def measure(lib: str, device: str = "cpu", iterations: int = 3, num_envs: int = 16) -> dict[str, Any]:
    """Train ``lib`` (one of ``LIBRARIES``) for ``iterations`` on ``device`` in this process, one
    rank, counting host syncs. Returns the counts per iteration over iterations 2.. (the first
    includes start-up) and the rollout length, env steps per iteration."""
    from islab.envs import make_env
    from islab.libs import load_adapter
    from islab.spec.agent_config import load_agent_config
    from islab.worker.context import RankContext, configure_process

    name, _, framework = lib.partition("-")
    framework = framework or "torch"
    if framework == "jax" and device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    ctx = RankContext.from_environ(device, 0, environ={})
    configure_process(ctx)
    torch.set_num_threads(1)
    env = make_env(TASK, num_envs, ctx.device, seed=ctx.seed)
    counter = HostSyncCounter()
    with tempfile.TemporaryDirectory(prefix="islab-host-syncs-") as run_dir:
        adapter = load_adapter(name, framework)(ctx, env, load_agent_config(name, TASK), Path(run_dir) / "run")
        counter.watch_env(env)
        marks: list[tuple[int, int]] = []  # (events, env steps) at each iteration's report
        report = adapter.report_iteration

        def reported(*args: Any, **kwargs: Any) -> Any:
            marks.append((len(counter.events), counter.env_steps))
            return report(*args, **kwargs)

        adapter.report_iteration = reported
        with contextlib.ExitStack() as stack:
            stack.enter_context(counter.python_level_host_reads())
            stack.enter_context(inference_mode_as_no_grad())
            if torch.device(device).type == "cuda":
                stack.enter_context(cuda_sync_warnings(counter.events, counter))
            stack.enter_context(counter)
            adapter.train(iterations)
    if len(marks) < 2:
        raise RuntimeError(f"{lib}: {len(marks)} iterations reported; need 2 or more")
    (first_events, first_steps), (last_events, last_steps) = marks[0], marks[-1]
    steady = counter.events[first_events:last_events]
    per = len(marks) - 1
    rollouts = [(before, after) for (_, before), (_, after) in itertools.pairwise(marks)]
    summary = counter.summary(steady, rollouts)
    return {
        "lib": lib,
        "device": device,
        "iterations_counted": per,
        "env_steps_per_iteration": (last_steps - first_steps) / per,
        "per_iteration": {origin: count / per for origin, count in summary["by_origin"].items()},
        "per_iteration_by_kind": {kind: count / per for kind, count in summary["by_kind"].items()},
        "rollout_per_iteration": {origin: count / per for origin, count in summary["rollout_by_origin"].items()},
        "islab_in_env_step": summary["islab_in_env_step"],  # all counted iterations together
        "where": summary["where"],
    }


def markdown_table(results: list[dict[str, Any]]) -> str:
    """One row per library: host syncs per iteration in the rollout and in total, ours and the
    libraries' (everything not ours: the library, tensordict, jax, ...)."""
    lines = [
        "| library | env steps / iteration | islab: rollout (inside env.step) / total "
        "| libraries: rollout / total | where the libraries' syncs are (per iteration, all phases) |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        total, rollout = result["per_iteration"], result["rollout_per_iteration"]
        ours_total, ours_rollout = total.get("islab", 0.0), rollout.get("islab", 0.0)
        theirs_total = sum(count for origin, count in total.items() if origin != "islab")
        theirs_rollout = sum(count for origin, count in rollout.items() if origin != "islab")
        kinds = ", ".join(
            f"{kind} {count:g}" for kind, count in sorted(result["per_iteration_by_kind"].items())
            if not kind.startswith("islab:")
        )  # fmt: skip
        lines.append(
            f"| {result['lib']} | {result['env_steps_per_iteration']:g} "
            f"| {ours_rollout:g} ({result['islab_in_env_step'] / result['iterations_counted']:g}) / {ours_total:g} "
            f"| {theirs_rollout:g} / {theirs_total:g} | {kinds or '-'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m islab.worker.host_syncs", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (cuda adds set_sync_debug_mode)")
    parser.add_argument("--lib", action="append", choices=LIBRARIES, help="repeatable; default: all")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--json", action="store_true", help="print the results as JSON, not a table")
    args = parser.parse_args(argv)
    libs = args.lib or list(LIBRARIES)
    if len(libs) == 1:
        results = [measure(libs[0], args.device, args.iterations, args.num_envs)]
    else:  # one process per library: their imports have process-wide side effects
        results = []
        for lib in libs:
            command = [sys.executable, "-m", "islab.worker.host_syncs", "--lib", lib, "--json", "--device", args.device]
            command += ["--iterations", str(args.iterations), "--num-envs", str(args.num_envs)]
            finished = subprocess.run(command, capture_output=True, text=True, check=False)
            if finished.returncode != 0:
                sys.stderr.write(finished.stdout + finished.stderr)
                return finished.returncode
            results += json.loads(finished.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(results))
    else:
        print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
