"""The scaling report's arithmetic, pure: efficiency against n x one rank, the modelled sync share,
which of the three causes limits scaling, and the sync model's prediction at 8, 16, 64 ranks."""

from __future__ import annotations

import json

import pytest

from islab.scale.table import Collective, RankRun, limit, measured_run, predict, rows_of, to_json
from islab.spec.sync_cost import SyncWork, fused_sync_s

WORK = SyncWork("rsl_rl", rollout=16, updates=20, grad_floats=(2500,), small_floats=9)  # Cartpole's small policy
# gloo on a shared CPU: ~300 us per call, 0.5 GB/s; 22 all-reduces an iteration ~ 6.9 ms of sync
CPU_GLOO = Collective(alpha_s=300e-6, busbw_bytes_per_s=0.5e9, ranks=2)


def runs(one_rank_iteration_s: float, two_rank_rate: float) -> list[RankRun]:
    return [RankRun(1, 10_000.0, one_rank_iteration_s, 2), RankRun(2, two_rank_rate, 0.0, 2)]


def with_iteration(run_list: list[RankRun], iteration_s: float) -> list[RankRun]:
    return [run_list[0], RankRun(2, run_list[1].env_steps_per_s, iteration_s, 2)]


def test_progress_records_after_the_warmup_give_steps_per_second_and_the_iteration_time() -> None:
    records = [
        {"iteration": 1, "env_steps": 1000, "time_s": 5.0},  # start-up in it
        {"iteration": 2, "env_steps": 2000, "time_s": 5.5},
        {"iteration": 3, "env_steps": 3000, "time_s": 6.0},
    ]
    run = measured_run(records, 2, warmup=1)
    assert run == RankRun(2, 2000.0, 0.5, 2)
    assert measured_run(records, 2, warmup=0).env_steps_per_s == pytest.approx(500.0)
    assert measured_run(records[:1], 2, warmup=1) is None  # nothing measured after the warm-up


def test_efficiency_is_against_n_times_one_rank_and_the_sync_share_is_the_model_over_the_iteration() -> None:
    rows = rows_of(with_iteration(runs(0.1, 15_000.0), 0.2), WORK, CPU_GLOO)
    assert [row.efficiency for row in rows] == [1.0, 0.75]
    assert rows[0].sync_share == 0.0  # one rank syncs nothing
    assert rows[1].sync_ms == pytest.approx(fused_sync_s(WORK, 2, 300e-6, 0.5e9) * 1e3)
    assert rows[1].sync_share == pytest.approx(rows[1].sync_ms / 1e3 / 0.2)
    assert rows_of(runs(0.1, 15_000.0), WORK, None)[1].sync_share is None  # no pre-flight: no share


def test_good_scaling_names_nothing() -> None:
    rows = rows_of(with_iteration(runs(0.5, 19_500.0), 0.51), WORK, CPU_GLOO)
    assert limit(rows, WORK, CPU_GLOO, num_envs=4096).kind == "none"


def test_a_sync_of_mostly_latency_asks_for_more_envs_per_rank() -> None:
    # 10 ms iterations, ~7 ms of sync (all latency): efficiency ~0.6
    rows = rows_of(with_iteration(runs(0.010, 12_000.0), 0.0167), WORK, CPU_GLOO)
    found = limit(rows, WORK, CPU_GLOO, num_envs=64)
    assert found.kind == "too few envs per rank", found
    needed = fused_sync_s(WORK, 2, 300e-6, 0.5e9) * 0.95 / 0.05  # ~133 ms of compute per iteration for 0.95
    assert "--num-envs 1024" in found.line and f">= {needed * 1e3:.0f} ms" in found.line  # 64 x 13.1 -> 1024


def test_a_sync_of_mostly_bytes_names_the_sync() -> None:
    big = SyncWork("rsl_rl", rollout=24, updates=20, grad_floats=(5_000_000,), small_floats=9)  # 20 MB gradients
    fast_latency = Collective(alpha_s=20e-6, busbw_bytes_per_s=5e9, ranks=2)
    rows = rows_of(with_iteration(runs(0.1, 12_000.0), 0.17), big, fast_latency)
    found = limit(rows, big, fast_latency, num_envs=4096)
    assert found.kind == "sync" and "fewer updates per iteration" in found.line


def test_a_loss_the_sync_does_not_explain_names_stragglers_and_crowded_cores() -> None:
    rows = rows_of(with_iteration(runs(0.5, 12_000.0), 0.83), WORK, CPU_GLOO)  # 7 ms of sync in 830 ms: not it
    assert limit(rows, WORK, CPU_GLOO, num_envs=4096).kind == "stragglers"
    rows = rows_of(with_iteration(runs(0.010, 12_000.0), 0.0167), WORK, CPU_GLOO)
    crowded = limit(rows, WORK, CPU_GLOO, num_envs=64, cpu_cores=1)  # 2 ranks on 1 core: the machine first
    assert crowded.kind == "stragglers" and "2 ranks on 1 cores" in crowded.line


def test_the_prediction_is_the_sync_model_at_8_16_64_ranks_with_the_one_rank_iteration() -> None:
    one = RankRun(1, 10_000.0, 0.1, 2)
    predicted = predict(WORK, CPU_GLOO, one)
    assert [p["ranks"] for p in predicted] == [8, 16, 64]
    for p in predicted:
        sync = fused_sync_s(WORK, p["ranks"], 300e-6, 0.5e9)
        assert p["efficiency"] == pytest.approx(0.1 / (0.1 + sync), abs=1e-3)
        assert p["env_steps_per_s"] == pytest.approx(p["efficiency"] * p["ranks"] * 10_000.0, rel=1e-3)
    assert predicted[0]["efficiency"] > predicted[-1]["efficiency"]  # more ranks: the ring's bytes grow
    assert predict(WORK, None, one) == []


def test_the_json_has_the_issues_fields() -> None:
    rows = rows_of(with_iteration(runs(0.1, 15_000.0), 0.2), WORK, CPU_GLOO)
    found = limit(rows, WORK, CPU_GLOO, num_envs=64)
    document = json.loads(to_json(rows, found, predict(WORK, CPU_GLOO, runs(0.1, 1)[0]), CPU_GLOO, {}))
    assert {"ranks", "env_steps_per_s", "efficiency", "sync_share"} <= set(document["rows"][0])
    assert document["limit"] == found.kind and document["limit_line"] == found.line
    assert [p["ranks"] for p in document["prediction"]] == [8, 16, 64]
    assert document["all_reduce"]["alpha_us"] == 300.0
