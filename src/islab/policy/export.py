"""``python -m islab.policy.export RUN_DIR``: the trained policy as deployable files.

What ``islab-train export`` runs (in a process of its own). It writes, into ``RUN_DIR/exported/``::

    policy.pt     TorchScript: torch.jit.load(path)(obs) -> actions; no islab, no RL library needed
    policy.onnx   the same graph as ONNX (opset 17), for onnxruntime, TensorRT, ... -- written when
                  the [onnx] extra (onnx, onnxruntime) is installed; TorchScript needs neither
    policy.json   inputs and outputs (names, shapes, dtype), the observation order when the task
                  names it, the action scaling, library, task, checkpoint and its iteration

Both files map *raw* observations ``[batch, obs] float32`` to the actions ``env.step`` receives
``[batch, act] float32``, deterministically (the mean action): observation clipping and the
observation normalizer with its statistics at the checkpoint are folded in, as are the library's
own action clamp and rescale (rl_games). The task's own action scaling (Cartpole multiplies by
``action_scale`` newtons in ``_pre_physics_step``) is the env's, not the policy's; policy.json
says so. ``batch`` is dynamic in both files.

How: the adapter's ``inference_module()`` (``islab.policy.modules.DeterministicPolicy``) is
traced once with ``torch.jit.trace`` and exported with torch's TorchScript-based ONNX exporter
(``dynamo=False``: the same trace; the torch.export-based one took ~40x longer for this graph).
Before anything is written, both are checked against the library's own deterministic inference
on 1,000 random observations; the largest difference goes into policy.json and an export off by
more than ``TOLERANCE`` fails. Every file is written to a temporary name and renamed, so a reader
never sees a half-written policy.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from islab import rundir
from islab.policy.source import resolve_source
from islab.spec.issues import Issue, SpecError

TOLERANCE = 1e-5
CHECK_SAMPLES = 1000
OPSET = 17
INPUT_NAME, OUTPUT_NAME = "obs", "actions"
FORMAT = "islab-policy/1"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m islab.policy.export", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoint", default="latest", help="latest | best | PATH")
    return parser.parse_args(argv)


def random_observations(count: int, size: int, seed: int = 0) -> Any:
    """Observations spread well past typical values (+-3 sigma ~ 6), so clips and clamps are exercised."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, size, generator=generator) * 2.0


def onnx_actions(path: Path, observations: Any) -> Any:
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: np.asarray(observations, dtype=np.float32)})[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def missing_onnx_modules() -> list[str]:
    """What ONNX export needs and this interpreter lacks: torch's exporter needs onnx, the check
    against the library's inference needs onnxruntime (looked up, not imported)."""
    return [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]


def onnx_skipped_note(missing: list[str]) -> str:
    from islab.resolve.resolve import install_extra_hint

    return f"policy.onnx not written: {', '.join(missing)} not installed. {install_extra_hint('onnx')}"


def export(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from islab.policy.loading import load_policy

    source = resolve_source(args.run_dir, args.checkpoint)
    with_onnx = not missing_onnx_modules()
    loaded = load_policy(source, device="cpu", num_envs=1)
    try:
        env, adapter = loaded.env, loaded.adapter
        obs_size = int(env.single_observation_space["policy"].shape[0])
        act_size = int(env.single_action_space.shape[0])
        module = adapter.inference_module().eval()
        observations = random_observations(CHECK_SAMPLES, obs_size)
        reference = adapter.deterministic_actions(observations.to(adapter.ctx.device)).detach().cpu()

        out_dir = source.run_dir / rundir.EXPORT_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        script_path, onnx_path, json_path = out_dir / "policy.pt", out_dir / "policy.onnx", out_dir / "policy.json"
        example = observations[:2]  # the batch size is not baked in: checked on 1000 below
        with torch.no_grad():
            traced = torch.jit.trace(module, example)
        written = {script_path: _temporary(script_path)}
        torch.jit.save(traced, str(written[script_path]))
        with torch.no_grad():
            script_out = torch.jit.load(str(written[script_path]))(observations)
        differences = {"torchscript": float((script_out - reference).abs().max())}
        if with_onnx:
            written[onnx_path] = _temporary(onnx_path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript-based exporter, on purpose
                torch.onnx.export(
                    module, (example,), str(written[onnx_path]), input_names=[INPUT_NAME],
                    output_names=[OUTPUT_NAME], dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
                    opset_version=OPSET, dynamo=False,
                )  # fmt: skip
            onnx_out = torch.from_numpy(onnx_actions(written[onnx_path], observations.numpy()))
            differences["onnx"] = float((onnx_out - reference).abs().max())
        if max(differences.values()) > TOLERANCE:
            for tmp in written.values():
                tmp.unlink(missing_ok=True)
            raise RuntimeError(
                f"the exported policy differs from {source.lib}'s own inference by {differences} (> {TOLERANCE})"
            )
        for path, tmp in written.items():
            os.replace(tmp, path)
        if not with_onnx:
            onnx_path.unlink(missing_ok=True)  # an older export's ONNX would no longer match policy.pt
        description = describe(loaded, module, obs_size, act_size, differences)
        description["files"] = {path.name: {"sha256": sha256(path), "bytes": path.stat().st_size} for path in written}
        rundir.write_json(json_path, description)
        return {"directory": str(out_dir), **description}
    finally:
        loaded.close()


def describe(loaded: Any, module: Any, obs_size: int, act_size: int, differences: dict[str, float]) -> dict[str, Any]:
    """``policy.json``: everything a deployment needs to feed the policy and read its output."""
    import torch

    source, env = loaded.source, loaded.env
    cfg = env.cfg
    action_scale = getattr(cfg, "action_scale", None)
    return {
        "format": FORMAT,
        "library": source.lib,
        "ml_framework": source.ml_framework,
        "task": source.task,
        "run_dir": str(source.run_dir),
        "checkpoint": str(source.checkpoint),
        "checkpoint_choice": source.choice,
        "checkpoint_iteration": loaded.iteration,
        "policy_sha256": loaded.policy_sha256,
        "inputs": [
            {
                "name": INPUT_NAME,
                "shape": ["batch", obs_size],
                "dtype": "float32",
                "order": list(getattr(env, "observation_names", ())) or None,
                "note": "raw observations as the env's get_observations()['policy'] returns them; "
                "clipping and normalization are inside the policy",
            }
        ],
        "outputs": [
            {
                "name": OUTPUT_NAME,
                "shape": ["batch", act_size],
                "dtype": "float32",
                "order": list(getattr(env, "action_names", ())) or None,
                "note": "deterministic (mean) actions, exactly what env.step() receives",
            }
        ],
        "pipeline": module.describe(),
        "action_scaling": (
            f"the env multiplies each action by cfg.action_scale = {action_scale} in _pre_physics_step "
            "(not part of the exported policy)"
            if action_scale is not None
            else "the env applies the actions as given"
        ),
        "checked": {"samples": CHECK_SAMPLES, "max_abs_difference": differences, "tolerance": TOLERANCE},
        "torch": torch.__version__,
        "onnx_opset": OPSET,
    }


def main(argv: list[str] | None = None) -> int:
    from islab.policy.loading import PolicyLoadError

    args = parse_args(argv)
    try:
        result = export(args)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    except PolicyLoadError as error:
        print(Issue(error.field, str(error), "Pick another checkpoint").message(), file=sys.stderr)
        return 2
    diff = result["checked"]["max_abs_difference"]
    names = {"torchscript": "TorchScript", "onnx": "ONNX"}
    print(
        f"exported {result['library']} {result['task']} (checkpoint iteration {result['checkpoint_iteration']}) "
        f"to {result['directory']}: {', '.join(result['files'])}, policy.json; max |difference| from "
        f"{result['library']}'s own inference on {CHECK_SAMPLES} observations: "
        + ", ".join(f"{names[kind]} {value:.1e}" for kind, value in diff.items()),
        flush=True,
    )
    missing = missing_onnx_modules()
    if missing:
        print(f"note: {onnx_skipped_note(missing)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
