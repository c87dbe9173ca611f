"""budget.py: --total-env-steps as iterations, from each library's own agent config (with the
user's overrides), for a fixed or an elastic world size."""

from __future__ import annotations

import math

import pytest

from islab.spec.agent_config import AgentConfigError, load_agent_config
from islab.spec.budget import Budget, iterations_for, rollout_length
from islab.worker.__main__ import budget_for, parse_args

TASK = "Islab-Cartpole-v0"

# (library, the key an override sets, its value in src/islab/tasks/cartpole/agents/<lib>_ppo_cfg.yaml)
ROLLOUTS = [
    pytest.param("rsl_rl", "num_steps_per_env", 16, id="rsl_rl"),
    pytest.param("rl_games", "params.config.horizon_length", 16, id="rl_games"),
    pytest.param("skrl", "agent.rollouts", 32, id="skrl"),
]


@pytest.mark.parametrize(("lib", "key", "shipped"), ROLLOUTS)
def test_rollout_length_is_read_from_each_librarys_config_after_overrides(lib, key, shipped):
    assert rollout_length(lib, load_agent_config(lib, TASK)) == shipped
    assert rollout_length(lib, load_agent_config(lib, TASK, [f"{key}=8"])) == 8


@pytest.mark.parametrize(("lib", "key", "shipped"), ROLLOUTS)
def test_iterations_follow_the_overridden_rollout(lib, key, shipped):
    cfg = load_agent_config(lib, TASK, [f"{key}=8"])
    # 2 ranks x 64 envs x 8 steps = 1024 env steps per iteration
    budget = Budget.of(lib, cfg, num_envs=64, world_size=2, total_env_steps=5000)
    assert budget.iterations == 5 == math.ceil(5000 / 1024)
    assert budget.env_steps() == 5 * 1024 >= 5000
    shipped_budget = Budget.of(lib, load_agent_config(lib, TASK), num_envs=64, world_size=2, total_env_steps=5000)
    assert shipped_budget.iterations == math.ceil(5000 / (2 * 64 * shipped))


def test_iterations_for_is_the_ceiling_and_reaches_the_budget():
    assert iterations_for(1_000_000, world_size=2, num_envs=1024, rollout_length=16) == 31
    assert iterations_for(32768, world_size=2, num_envs=1024, rollout_length=16) == 1  # exact multiple
    assert iterations_for(32769, world_size=2, num_envs=1024, rollout_length=16) == 2
    assert iterations_for(1, world_size=4, num_envs=4096, rollout_length=32) == 1  # never 0
    for world_size in (1, 2, 3, 4, 8):
        iterations = iterations_for(1_000_000, world_size=world_size, num_envs=1000, rollout_length=16)
        per_iteration = world_size * 1000 * 16
        assert iterations * per_iteration >= 1_000_000 > (iterations - 1) * per_iteration
    with pytest.raises(ValueError):
        iterations_for(0, world_size=2, num_envs=1, rollout_length=1)


def test_adding_ranks_keeps_the_total_not_the_iterations():
    cfg = load_agent_config("rsl_rl", TASK)
    one, two = (Budget.of("rsl_rl", cfg, num_envs=1024, world_size=w, total_env_steps=1_000_000) for w in (1, 2))
    assert (one.iterations, two.iterations) == (62, 31)
    per_run = [Budget.of("rsl_rl", cfg, num_envs=1024, world_size=w, max_iterations=31) for w in (1, 2)]
    assert [b.env_steps() for b in per_run] == [507904, 1015808]  # --max-iterations: samples double


def test_describe_is_the_line_the_worker_and_dry_run_print():
    cfg = load_agent_config("rsl_rl", TASK)
    budget = Budget.of("rsl_rl", cfg, num_envs=1024, world_size=2, total_env_steps=1_000_000)
    assert budget.describe() == (
        "--total-env-steps 1000000 = 31 iterations × 2 ranks × 1024 envs × 16 steps (1015808 env steps)"
    )
    assert budget.describe(resuming=True).endswith("(1015808 env steps), counted from the resumed checkpoint")
    per_run = Budget.of("rsl_rl", cfg, num_envs=64, world_size=2, max_iterations=3)
    assert (
        per_run.describe()
        == "--max-iterations 3 (per run) = 3 iterations × 2 ranks × 64 envs × 16 steps (6144 env steps)"
    )


def test_an_elastic_world_size_leaves_the_iterations_to_the_run():
    cfg = load_agent_config("rsl_rl", TASK)
    budget = Budget.of("rsl_rl", cfg, num_envs=1024, world_size=(2, 4), total_env_steps=1_000_000)
    assert budget.iterations is None and budget.env_steps() is None
    assert (budget.iterations_at(2), budget.iterations_at(4)) == (31, 16)
    assert "31 iterations × 2 ranks" in budget.describe() and "16 iterations × 4 ranks" in budget.describe()
    plain = budget.to_plain()
    assert plain["iterations"] is None and plain["world_size"] is None and plain["world_size_range"] == [2, 4]


@pytest.mark.parametrize("value", [0, -16, "sixteen", None, True, 2.5])
def test_an_unusable_rollout_length_names_the_key(value):
    with pytest.raises(AgentConfigError) as caught:
        rollout_length("rsl_rl", {"num_steps_per_env": value})
    assert caught.value.field == "num_steps_per_env"
    with pytest.raises(AgentConfigError) as caught:
        rollout_length("rl_games", {"params": {"config": {"horizon_length": value}}})
    assert caught.value.field == "params.config.horizon_length"
    with pytest.raises(AgentConfigError):
        rollout_length("skrl", {"agent": 5})


def test_exactly_one_of_the_two_lengths():
    cfg = load_agent_config("rsl_rl", TASK)
    for kwargs in ({}, {"max_iterations": 3, "total_env_steps": 10}):
        with pytest.raises(ValueError):
            Budget.of("rsl_rl", cfg, num_envs=1, world_size=1, **kwargs)


# ----------------------------------------------------------------------------------------------
# The worker's side: its arguments, and the iterations from the world size it actually got
# ----------------------------------------------------------------------------------------------

WORKER = ["--lib", "rsl_rl", "--task", TASK, "--num-envs", "64", "--run-dir", "/tmp/x"]


def test_the_worker_takes_exactly_one_of_max_iterations_and_total_env_steps(capsys):
    assert parse_args([*WORKER, "--max-iterations", "3"]).total_env_steps is None
    args = parse_args([*WORKER, "--total-env-steps", "5000", "num_steps_per_env=8"])
    assert (args.total_env_steps, args.max_iterations) == (5000, None)
    for bad in ([], ["--max-iterations", "3", "--total-env-steps", "5000"], ["--total-env-steps", "0"]):
        with pytest.raises(SystemExit) as caught:
            parse_args([*WORKER, *bad])
        assert caught.value.code == 2
    assert "--total-env-steps" in capsys.readouterr().err


def test_the_worker_divides_by_the_world_size_it_got():
    args = parse_args([*WORKER, "--total-env-steps", "5000", "num_steps_per_env=8"])
    cfg = load_agent_config(args.lib, args.task, args.overrides)
    # 64 envs x 8 steps per rank: 1 rank -> 10 iterations, 2 -> 5, 4 -> 3 (an elastic job's sizes)
    assert [budget_for(args, cfg, world_size).iterations for world_size in (1, 2, 4)] == [10, 5, 3]
