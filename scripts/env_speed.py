"""Env steps/s of one registered task alone (no policy, no library): uniformly random actions in
[-1, 1], so failing envs reset as they would early in training.

    python scripts/env_speed.py Islab-Quadcopter-v0 --num-envs 4096 --threads 1

Prints the best of ``--repeats`` timed windows of ``--steps`` steps, after 50 warm-up steps.
"""

from __future__ import annotations

import argparse
import time

import torch

from islab.envs import make_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    env = make_env(args.task, args.num_envs, args.device, seed=0)
    env.reset()
    generator = torch.Generator(device=args.device).manual_seed(0)
    shape = (args.num_envs, env.single_action_space.shape[0])
    actions = torch.rand(shape, generator=generator, device=args.device) * 2 - 1
    for _ in range(50):
        env.step(actions)
    best = 0.0
    for _ in range(args.repeats):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(args.steps):
            env.step(actions)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        best = max(best, args.steps * args.num_envs / (time.perf_counter() - started))
    print(f"{args.task}: {args.num_envs} envs, {args.threads} thread(s), {args.device}: {best:,.0f} env steps/s")


if __name__ == "__main__":
    main()
