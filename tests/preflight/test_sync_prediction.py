"""The sync-cost model's one home (islab.spec.sync_cost) and the pre-flight's prediction from it
(islab.preflight.prediction), against the numbers docs/scaling.md states. Pure arithmetic on the
repository's agent configs: no processes (the line in a real launch: tests/preflight/test_preflight_launch.py)."""

from __future__ import annotations

import pytest

from islab.preflight.prediction import predict, prediction_line
from islab.spec import sync_cost
from islab.spec.agent_config import load_agent_config
from islab.spec.run_spec import RunSpec
from islab.tasks import TASKS

CARTPOLE = "Islab-Cartpole-v0"
NVLINK_ALPHA_S, NVLINK_BUSBW = 12.5e-6, 370e9  # docs/scaling.md's parameters table
IB_BUSBW = 46e9


def _work(lib: str, framework: str = "torch", num_envs: int = 4096, overrides: tuple[str, ...] = ()):
    info = TASKS[CARTPOLE]
    cfg = load_agent_config(lib, CARTPOLE, overrides)
    return sync_cost.sync_work(lib, framework, cfg, observation_size=info.observation_size,
                               action_size=info.action_size, num_envs=num_envs)  # fmt: skip


def test_updates_and_gradient_sizes_are_those_of_docs_scaling_md():
    """U: 20 (5 x 4), 128 (8 x 16 at 4096 envs), 64 (8 x 8); Cartpole's actor-critic has 1,283
    (rl_games, skrl: shared trunk) to 2,499 (rsl_rl: separate networks) parameters -- the counts torch
    reports for the models the adapters build (checked by hand when this was written, Quadcopter too)."""
    works = {name: _work(lib, fw) for name, lib, fw in
             [("rsl_rl", "rsl_rl", "torch"), ("rl_games", "rl_games", "torch"), ("skrl-torch", "skrl", "torch"),
              ("skrl-jax", "skrl", "jax")]}  # fmt: skip
    assert {name: w.updates for name, w in works.items()} == {
        "rsl_rl": 20, "rl_games": 128, "skrl-torch": 64, "skrl-jax": 64,
    }  # fmt: skip
    assert works["rsl_rl"].grad_floats == (2499,)
    assert works["rl_games"].grad_floats == works["skrl-torch"].grad_floats == (1283,)
    assert len(works["skrl-jax"].grad_floats) == 2  # JAX builds two models, reduced one by one in stock
    assert {w.lib for w in works.values()} == set(works)
    # fused: one all-reduce per update (gradients + KL + a loss statistic), 2 small ones per iteration
    assert works["rsl_rl"].fused() == [(20, 2499 + 2), (2, 9)]
    # rl_games' minibatches follow num_envs (the minibatch size fitted as the adapter fits it)
    assert _work("rl_games", num_envs=1024).updates == 32
    assert _work("rl_games", num_envs=300).updates == 8 * 2  # 4800 steps: 2 minibatches of 2400
    assert _work("rsl_rl", overrides=("algorithm.num_mini_batches=8",)).updates == 40


def test_the_ring_formula_and_the_efficiency_budget_reproduce_docs_scaling_md():
    """t(S, n) = alpha + 2 (n - 1) / n S / busbw: 10 KB take 0.05 us over NVLink and 0.4 us over a
    400 Gb/s IB NIC (8 GPUs); the budget per update for E >= 0.95 (rsl_rl: 252 ms / 20 updates -> 663 us,
    rl_games 252 ms / 128 -> 104 us, skrl 504 ms / 64 -> 415 us)."""
    grads = 2499 * sync_cost.FLOAT_BYTES
    assert sync_cost.allreduce_s(grads, 8, 0.0, NVLINK_BUSBW) * 1e6 == pytest.approx(0.05, abs=0.005)
    assert sync_cost.allreduce_s(grads, 8, 0.0, IB_BUSBW) * 1e6 == pytest.approx(0.4, abs=0.05)
    assert sync_cost.allreduce_s(grads, 1, 1.0, 1.0) == 0.0  # one rank reduces nothing
    assert sync_cost.allreduce_s(1e9, 2, 1e-5, 1e9) == pytest.approx(1e-5 + 1.0)  # 2 (n-1)/n = 1 at n = 2
    for compute_ms, updates, budget_us in ((252, 20, 663), (252, 128, 104), (504, 64, 415)):
        needed = sync_cost.compute_for_efficiency(updates * budget_us * 1e-6, 0.95)
        assert needed * 1e3 == pytest.approx(compute_ms, rel=0.005)


def test_fused_sync_time_is_docs_scaling_md_nccl_row():
    """The nccl model's fused rows at 2 GPUs: rsl_rl 22 collectives 0.3 ms, rl_games 130 1.6 ms,
    skrl-torch 66 0.8 ms."""
    for lib, fw, collectives, ms in (("rsl_rl", "torch", 22, 0.3), ("rl_games", "torch", 130, 1.6),
                                     ("skrl", "torch", 66, 0.8)):  # fmt: skip
        work = _work(lib, fw)
        assert sum(count for count, _ in work.fused()) == collectives
        assert sync_cost.fused_sync_s(work, 2, NVLINK_ALPHA_S, NVLINK_BUSBW) * 1e3 == pytest.approx(ms, abs=0.05)


REPORT = {
    "ok": True, "world_size": 2, "nodes": 1, "seconds": 2.4, "problems": [],
    "all_reduce": [{"bytes": 4, "median_us": 240.0, "busbw_gbps": 3.3e-05},
                   {"bytes": 67108864, "median_us": 207220.0, "busbw_gbps": 0.324}],
}  # fmt: skip


def test_the_prediction_from_a_report_and_its_line():
    """rsl_rl at 2 CPU ranks: 22 all-reduces of 240 us plus 20 x 10 KB at 0.324 GB/s = 5.9 ms; 0.95
    needs 19 x that of compute."""
    predicted = predict(_work("rsl_rl"), REPORT)
    assert predicted is not None
    expected_s = 22 * 240e-6 + 20 * (2501 * 4) / 0.324e9 + 2 * 9 * 4 / 0.324e9
    assert predicted["sync_ms"] == pytest.approx(expected_s * 1e3, abs=1e-3)
    assert predicted["compute_ms_needed"] == pytest.approx(19 * expected_s * 1e3, abs=0.1)
    assert predicted["updates_per_iteration"] == 20 and predicted["all_reduces_per_iteration"] == 22
    assert predicted["gradient_params"] == 2499 and predicted["speedup"] == 1.9
    assert prediction_line(predicted) == (  # issue 30 item 10: what is predicted, what to do, in plain words
        "pre-flight: predicted: syncing the ranks costs >= 5.9 ms per training iteration (22 all-reduces of "
        "9.76 KB of gradients: 20 updates + 2); 2 ranks train 1.9x as fast as one if an iteration computes for "
        ">= 112 ms, so give each rank enough envs (--num-envs) for that"
    )
    eight = predict(_work("rsl_rl"), {**REPORT, "world_size": 8})
    assert eight is not None and eight["speedup"] == 7.6 and eight["sync_ms"] > predicted["sync_ms"]
    assert predict(_work("rsl_rl"), {**REPORT, "all_reduce": []}) is None  # nothing measured
    assert predict(_work("rsl_rl"), {**REPORT, "world_size": 1}) is None


def test_only_our_worker_with_fused_sync_gets_a_prediction(monkeypatch):
    from islab.cli.launch_checks import sync_work_of

    worker = RunSpec(device="cpu", nproc_per_node=2, num_envs=64)
    assert sync_work_of(worker, {}) == _work("rsl_rl", num_envs=64)
    assert sync_work_of(worker, {"ISLAB_SYNC": "stock"}) is None  # stock counts are measured, not derived
    assert sync_work_of(worker.model_copy(update={"env": {"ISLAB_SYNC": "stock"}}), {}) is None
    script = RunSpec(device="cpu", nproc_per_node=2, entrypoint={"script": "train.py"})
    assert sync_work_of(script, {}) is None  # a user's entry point: its update loop is unknown


def test_a_config_the_model_cannot_read_is_named():
    with pytest.raises(sync_cost.ConfigShapeError, match=r"algorithm\.num_mini_batches"):
        sync_cost.sync_work("rsl_rl", "torch", {"num_steps_per_env": 16, "algorithm": {"num_learning_epochs": 5}},
                            observation_size=4, action_size=1, num_envs=16)  # fmt: skip
    with pytest.raises(sync_cost.ConfigShapeError, match="no sync model"):
        sync_cost.updates_per_iteration("sb3", {}, 16)
