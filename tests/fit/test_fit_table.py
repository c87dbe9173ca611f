"""``islab-train fit``'s pure parts and its bad input: when the search stops, what it recommends, the
knee, the memory a CPU rank may use (cgroup files), ``--num-envs auto`` taken off the command line,
and options refused with exit 2 before any child starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from islab import cli
from islab.fit.auto import take_auto
from islab.fit.memory import cgroup_limit_bytes
from islab.fit.table import FitRow, knee, predicted_next_peak, recommend, stop_reason, to_json

MIB = 1024**2


def row(num_envs: int, peak_mib: float, rate: float | None, fits: bool = True, oom: bool = False) -> FitRow:
    return FitRow(num_envs, int(peak_mib * MIB), rate, fits=fits, out_of_memory=oom, note="" if fits else "too big")


def test_linear_memory_predicts_the_next_doubling() -> None:
    rows = [row(64, 300, 100), row(128, 340, 180)]  # 40 MiB per 64 envs: 256 envs -> 340 + 80
    assert predicted_next_peak(rows) == int(420 * MIB)
    assert stop_reason(rows, budget=int(400 * MIB), max_num_envs=10**6).startswith("256 envs are predicted")
    assert stop_reason(rows, budget=int(500 * MIB), max_num_envs=10**6) is None


def test_the_search_stops_at_a_row_that_does_not_fit_at_max_and_at_a_plateau() -> None:
    assert "do not fit" in stop_reason([row(64, 300, 100, fits=False)], 10**12, 10**6)
    assert "max-num-envs" in stop_reason([row(64, 300, 100)], 10**12, 64)
    flat = [row(64, 300, 100), row(128, 300, 105), row(256, 300, 110)]
    assert "stopped growing" in stop_reason(flat, 10**12, 10**6)


def test_recommendation_is_the_largest_fitting_size_and_the_knee_the_smallest_near_the_best() -> None:
    rows = [row(64, 300, 100), row(128, 320, 950), row(256, 360, 1000), row(512, 900, None, fits=False, oom=True)]
    chosen = recommend(rows, memory_limit_bytes=int(1000 * MIB), fraction=0.85)
    assert chosen.num_envs == 256 and "85%" in chosen.reason
    assert knee(rows).num_envs == 128
    document = json.loads(to_json("cpu", int(1000 * MIB), 0.85, rows, "stopped"))
    assert document["recommended"]["num_envs"] == 256
    assert [r["fits"] for r in document["rows"]] == [True, True, True, False]
    assert set(document["rows"][0]) >= {"num_envs", "peak_memory_bytes", "env_steps_per_s", "fits"}
    assert recommend([rows[-1]], int(1000 * MIB), 0.85).num_envs is None


def test_cgroup_limits_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "memory.max").write_text("2147483648\n")
    (tmp_path / "memory.max").write_text("max\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job\n")
    assert cgroup_limit_bytes(proc, tmp_path) == 2147483648
    (tmp_path / "memory" / "slurm").mkdir(parents=True)
    (tmp_path / "memory" / "slurm" / "memory.limit_in_bytes").write_text("1073741824\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    proc.write_text("9:memory:/slurm\n")
    assert cgroup_limit_bytes(proc, tmp_path) == 1073741824
    proc.write_text("9:memory:/\n")
    assert cgroup_limit_bytes(proc, tmp_path) is None


def test_num_envs_auto_is_taken_off_the_command_line_but_not_after_the_separator() -> None:
    assert take_auto(["--num-envs", "auto", "--nproc", "2"]) == (["--nproc", "2"], True)
    assert take_auto(["--num-envs=auto"]) == ([], True)
    assert take_auto(["--num-envs", "64", "--", "--num-envs", "auto"]) == (
        ["--num-envs", "64", "--", "--num-envs", "auto"],
        False,
    )


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--memory-fraction", "1.5"], "--memory-fraction"),
        (["--memory-limit", "0"], "--memory-limit"),
        (["--min-num-envs", "0"], "--min-num-envs"),
        (["--min-num-envs", "512", "--max-num-envs", "64"], "--max-num-envs"),
        (["--script", "train.py"], "fit"),
        (["--num-envs", "many"], "--num-envs"),
    ],
)
def test_bad_input_is_named_with_its_fix_and_exits_2(argv: list[str], field: str, capsys, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    status = cli.run(["fit", "--device", "cpu", "--log-dir", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert f"error: {field}" in err and "islab-train fit:" not in err  # named, and nothing measured


@pytest.mark.parametrize("spelling", ["flag", "environment"])
def test_num_envs_auto_without_a_cached_value_plans_the_default_and_says_so(spelling, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing cached
    argv = ["--lib", "rsl_rl", "--device", "cpu", "--dry-run"]
    if spelling == "flag":
        argv += ["--num-envs", "auto"]
    else:
        monkeypatch.setenv("ISLAB_NUM_ENVS", "auto")
    assert cli.run(argv) == 0
    out, err = capsys.readouterr()
    assert "num_envs               = 4096  (source: fit, not measured yet: a launch runs islab-train fit first" in out
    assert "--num-envs auto: nothing cached for this job yet" in err


def test_num_envs_auto_with_an_entry_point_is_refused(capsys, tmp_path):
    (tmp_path / "train.py").write_text("")
    assert cli.run(["--device", "cpu", "--num-envs", "auto", "--script", str(tmp_path / "train.py"), "--dry-run"]) == 2
    assert "error: --num-envs auto: is measured with islab's own worker" in capsys.readouterr().err


def test_a_fit_under_another_memory_budget_is_not_what_num_envs_auto_reads(capsys, monkeypatch, tmp_path):
    """`fit --memory-limit` (room left for another job) or `--memory-fraction` chose for that budget:
    a launch's --num-envs auto (the defaults' budget) must not reuse it; fit with the defaults is reused."""
    from islab.fit import cache
    from islab.spec.run_spec import RunSpec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = RunSpec(lib="rsl_rl", device="cpu", task="Islab-Cartpole-v0")
    cache.store(spec, 128, 10**9, given_memory_limit=10**9)
    cache.store(spec, 256, 10**9, memory_fraction=0.5)
    assert cache.lookup(spec) is None
    cache.store(spec, 512, 10**9)
    assert cache.lookup(spec)[0] == 512
    argv = ["--lib", "rsl_rl", "--device", "cpu", "--task", "Islab-Cartpole-v0", "--num-envs", "auto", "--dry-run"]
    assert cli.run(argv) == 0
    assert "num_envs               = 512  (source: fit, cached " in capsys.readouterr().out


def test_num_envs_auto_in_a_cluster_file_uses_the_cached_value_and_a_command_line_number_wins(capsys, monkeypatch,
                                                                                              tmp_path):  # fmt: skip
    from islab.fit import cache
    from islab.spec.run_spec import RunSpec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.store(RunSpec(lib="rsl_rl", device="cpu", task="Islab-Cartpole-v0"), 256, 10**9)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("lib: rsl_rl\ndevice: cpu\ntask: Islab-Cartpole-v0\nnum_envs: auto\n")
    assert cli.run(["--cluster", str(cluster), "--dry-run"]) == 0
    assert "num_envs               = 256  (source: fit, cached " in capsys.readouterr().out
    assert cli.run(["--cluster", str(cluster), "--num-envs", "64", "--dry-run"]) == 0
    assert "num_envs               = 64  (source: cli" in capsys.readouterr().out


def test_packed_sweep_trials_are_checked_against_what_fit_measured(monkeypatch, tmp_path):
    """trials_per_gpu: the trials' measured peaks together within fit's fraction of the GPU."""
    from islab.fit import cache
    from islab.fit.table import peak_at
    from islab.spec.run_spec import RunSpec
    from islab.sweep.load import packing_issue

    rows = [row(1024, 10 * 1024, 5e4), row(2048, 18 * 1024, 9e4), row(4096, 34 * 1024, 1.6e5)]  # MiB
    assert peak_at(rows, 2048) == 18 * 2**30
    assert peak_at(rows, 3072) == 26 * 2**30  # between two measured sizes: linear
    assert peak_at(rows, 8192) == 66 * 2**30  # beyond: the last two sizes' slope
    gpu = 70 * 2**30
    assert packing_issue(4096, 2, (rows, gpu)) is not None  # 2 x 34 GiB > 0.85 x 70 GiB
    issue = packing_issue(4096, 2, (rows, gpu))
    assert issue.field == "trials_per_gpu" and "Use trials_per_gpu: 1" in issue.fix
    assert packing_issue(2048, 3, (rows, gpu)) is None  # 3 x 18 GiB = 54 GiB fits in 59.5
    assert packing_issue(4096, 1, (rows, gpu)) is None and packing_issue(4096, 2, None) is None

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = RunSpec(lib="rsl_rl", device="cpu", task="Islab-Cartpole-v0")
    assert cache.measured(spec) is None
    cache.store(spec, 4096, gpu, rows=rows)
    assert cache.measured(spec) == (rows, gpu)
