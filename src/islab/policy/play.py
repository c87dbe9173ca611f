"""``python -m islab.policy.play RUN_DIR``: run a trained policy, deterministically, and measure it.

What ``islab-train play`` runs (in a process of its own, so the launcher stays torch-free). The
policy acts with the library's own deterministic inference (the mean action; observation
normalizers frozen, ``LibraryAdapter.deterministic_actions``) in ``--num-envs`` parallel envs
until ``--episodes`` episodes have *completed*.

No bias towards short episodes: each env has a quota (``episodes / num_envs``, the remainder
spread over the first envs) and only its first ``quota`` episodes count, so a policy whose bad
episodes end early is not over-represented among the first episodes to finish. Envs that met
their quota keep stepping (the env is batched) but are ignored.

Reported: mean, std (over episodes, population), min and max of episode return and length, and
the task's own success measure when its env defines one (``episode_success(terminated,
truncated)`` -> bool per env; Cartpole: the episode reached the time limit without failing).
Written to ``RUN_DIR/play.json`` (atomically); ``--json`` prints the same object.

``--video [--video-length N] [--envs K]`` also records the first episode of K envs of this same
evaluation into ``RUN_DIR/videos/play/`` (:mod:`islab.video.play_video`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from islab import rundir
from islab.policy.source import resolve_source
from islab.spec.issues import Issue, SpecError

DEFAULT_EPISODES = 32
MAX_DEFAULT_ENVS = 1024  # --num-envs by default: --episodes, at most this


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m islab.policy.play", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoint", default="latest", help="latest | best | PATH")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES)
    parser.add_argument("--num-envs", type=int, default=None, help="default: --episodes (at most 1024)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=None, help="default: the run's seed")
    parser.add_argument("--json", action="store_true", dest="json_output")
    parser.add_argument("--video", action="store_true", help="record the first episode of --envs envs (MP4)")
    parser.add_argument("--video-length", type=int, default=None, help="at most N frames (default: the episodes)")
    parser.add_argument("--envs", type=int, default=1, help="envs in the video (tiled), default 1")
    return parser.parse_args(argv)


def spread(values: list[float]) -> dict[str, float]:
    """mean, std (population), min, max."""
    mean = sum(values) / len(values)
    return {
        "mean": mean,
        "std": math.sqrt(sum((value - mean) ** 2 for value in values) / len(values)),
        "min": min(values),
        "max": max(values),
    }


def quotas(episodes: int, num_envs: int) -> list[int]:
    return [episodes // num_envs + (index < episodes % num_envs) for index in range(num_envs)]


def run_episodes(env: Any, act: Any, episodes: int, seed: int, observer: Any = None) -> dict[str, Any]:
    """Step ``env`` with ``act(observations) -> actions`` until every env has finished its quota of
    episodes; per-episode returns, lengths, successes. The env is reset with ``seed`` first (the
    library may have drawn from its generator while it was built), so a play is reproducible.
    ``observer`` (``--video``'s recorder) sees the reset and every step's reward and flags."""
    import torch

    n = env.num_envs
    quota = torch.tensor(quotas(episodes, n), device=env.device)
    finished = torch.zeros(n, dtype=torch.long, device=env.device)
    running_return = torch.zeros(n, device=env.device)
    running_length = torch.zeros(n, dtype=torch.long, device=env.device)
    success_of = getattr(env, "episode_success", None)
    returns: list[float] = []
    lengths: list[int] = []
    successes: list[bool] = []
    step_limit = (int(quota.max()) + 1) * env.max_episode_length + 1  # a bound no correct env reaches
    obs, _ = env.reset(seed=seed)
    if observer is not None:
        observer.after_reset()
    steps = 0
    while bool((finished < quota).any()):
        if steps >= step_limit:
            raise RuntimeError(f"{episodes} episodes did not finish in {steps} steps; the env never ends its episodes")
        actions = act(obs["policy"])
        obs, reward, terminated, truncated, _ = env.step(actions)
        if observer is not None:
            observer.after_step(reward, terminated, truncated)
        steps += 1
        running_return += reward
        running_length += 1
        done = terminated | truncated
        if bool(done.any()):
            counted = done & (finished < quota)
            ids = counted.nonzero().squeeze(-1)
            returns += running_return[ids].tolist()
            lengths += running_length[ids].tolist()
            if success_of is not None:
                successes += success_of(terminated, truncated)[ids].tolist()
            finished += done.long()
            running_return[done] = 0.0
            running_length[done] = 0
    return {"returns": returns, "lengths": lengths, "successes": successes if success_of else None, "steps": steps}


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    from islab.policy.loading import load_policy

    source = resolve_source(args.run_dir, args.checkpoint)
    num_envs = args.num_envs or min(args.episodes, MAX_DEFAULT_ENVS)
    started = time.perf_counter()
    recording = video_options(args, num_envs)
    loaded = load_policy(source, device=args.device, num_envs=num_envs, seed=args.seed, **recording)
    recorder = None
    try:
        if recording:
            from islab.video.play_video import PlayRecorder

            recorder = PlayRecorder(loaded.env, max_frames=args.video_length)
        seed = loaded.adapter.ctx.seed
        played = run_episodes(loaded.env, loaded.adapter.deterministic_actions, args.episodes, seed, recorder)
    finally:
        loaded.close()
    successes = played["successes"]
    env = loaded.env
    result = {
        "run_dir": str(source.run_dir),
        "lib": source.lib,
        "ml_framework": source.ml_framework,
        "task": source.task,
        "checkpoint": str(source.checkpoint),
        "checkpoint_choice": source.choice,
        "checkpoint_note": source.note,
        "checkpoint_iteration": loaded.iteration,
        "policy_sha256": loaded.policy_sha256,
        "policy": "deterministic (mean action), the library's own inference",
        "episodes": len(played["returns"]),
        "num_envs": num_envs,
        "device": args.device,
        "seed": loaded.adapter.ctx.seed,
        "return": spread(played["returns"]),
        "length": spread([float(n) for n in played["lengths"]]),
        "success_rate": None if successes is None else sum(successes) / len(successes),
        "success_measure": getattr(env, "success_measure", None) if successes is not None else None,
        "max_episode_length": env.max_episode_length,
        "env_steps": played["steps"] * num_envs,
        "wall_s": time.perf_counter() - started,
    }
    if recorder is not None:
        result["video"] = recorder.write(source.run_dir, loaded.iteration, str(source.checkpoint))
    rundir.write_json(source.run_dir / rundir.PLAY_FILE, result)
    return result


def render(result: dict[str, Any]) -> str:
    ret, length = result["return"], result["length"]
    lines = [
        f"{result['lib']}{'' if result['ml_framework'] == 'torch' else ' (' + result['ml_framework'] + ')'} "
        f"{result['task']}, checkpoint {result['checkpoint_choice']} (iteration {result['checkpoint_iteration']}"
        + (f"; {result['checkpoint_note']}" if result["checkpoint_note"] else "")
        + ")",
        f"{result['episodes']} episodes, deterministic policy, {result['num_envs']} envs on {result['device']}",
        f"  return  mean {ret['mean']:.2f}  std {ret['std']:.2f}  min {ret['min']:.2f}  max {ret['max']:.2f}",
        f"  length  mean {length['mean']:.1f}  std {length['std']:.1f}  min {length['min']:.0f}  "
        f"max {length['max']:.0f} (limit {result['max_episode_length']})",
    ]
    if result["success_rate"] is not None:
        lines.append(f"  success {result['success_rate']:.0%} ({result['success_measure']})")
    lines.append(f"written: {Path(result['run_dir']) / rundir.PLAY_FILE}")
    if result.get("video"):
        video = result["video"]
        lines.append(f"video: {video['video']} ({video['frames']} frames, returns in {Path(video['video']).stem}.json)")
    return "\n".join(lines)


def video_options(args: argparse.Namespace, num_envs: int) -> dict[str, Any]:
    """``load_policy``'s rendering arguments for ``--video`` (none without it); checks ``--envs``
    and that an MP4 can be written before anything is built."""
    if not args.video:
        return {}
    from islab.envs.render import ViewerCfg
    from islab.video.writer import require_writer

    if args.envs > num_envs:
        raise SpecError(Issue("--envs", f"{args.envs} envs cannot be recorded out of {num_envs} (--num-envs)",
                              f"Give --envs {num_envs} or less, or --num-envs {args.envs}"))  # fmt: skip
    require_writer()
    return {"render_mode": "rgb_array", "viewer": ViewerCfg(num_envs=args.envs)}


def main(argv: list[str] | None = None) -> int:
    from islab.policy.loading import PolicyLoadError
    from islab.video.writer import VideoUnavailable

    args = parse_args(argv)
    try:
        for option, value in (("--episodes", args.episodes), ("--num-envs", args.num_envs),
                              ("--envs", args.envs), ("--video-length", args.video_length)):  # fmt: skip
            if value is not None and value < 1:
                raise SpecError(Issue(option, f"must be at least 1, got {value}", f"Give e.g. {option} 32"))
        result = evaluate(args)
    except SpecError as error:
        print(str(error), file=sys.stderr)
        return 2
    except PolicyLoadError as error:
        print(Issue(error.field, str(error), "Pick another checkpoint or device").message(), file=sys.stderr)
        return 2
    except VideoUnavailable as error:
        print(str(error), file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json_output else render(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
