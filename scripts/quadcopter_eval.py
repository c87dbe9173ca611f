"""Median final distance to the goal of an rsl_rl Islab-Quadcopter-v0 checkpoint, beside a random
policy's (the learning figure's metric; see docs/quadcopter.md).

    python scripts/quadcopter_eval.py RUN_DIR/model_149.pt [--num-envs 1024]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tensordict import TensorDict

from islab.envs import make_env
from islab.libs import load_adapter
from islab.spec.agent_config import load_agent_config
from islab.tasks.quadcopter.quadcopter_env import median_final_distance
from islab.worker.context import RankContext

TASK = "Islab-Quadcopter-v0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="an rsl_rl model_<iteration>.pt")
    parser.add_argument("--num-envs", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = make_env(TASK, args.num_envs, seed=0)
    generator = torch.Generator().manual_seed(0)
    random = median_final_distance(env, lambda obs: torch.rand(len(obs), 4, generator=generator) * 2 - 1)
    ctx = RankContext.from_environ("cpu", 0, environ={})
    run_dir = args.checkpoint.parent / "eval"
    adapter = load_adapter("rsl_rl", "torch")(ctx, env, load_agent_config("rsl_rl", TASK, ()), run_dir)
    adapter.load(args.checkpoint)
    actor = adapter.runner.get_inference_policy("cpu")
    trained = median_final_distance(env, lambda obs: actor(TensorDict({"policy": obs}, batch_size=[len(obs)])))
    print(f"median final distance to goal over {args.num_envs} envs: random {random:.3f} m, trained {trained:.3f} m")


if __name__ == "__main__":
    main()
