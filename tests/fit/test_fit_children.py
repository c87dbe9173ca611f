"""``islab-train fit`` with real children on CPU: real rsl_rl training of Cartpole for one iteration
per size (4 steps per env, to keep it cheap), peak RSS from the kernel, a planted memory limit that
stops the search, children that run out of memory (a real RLIMIT_AS) or are SIGKILLed (what the OOM
killer sends) counted as rows that do not fit, and ``--num-envs auto`` reading what fit cached."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import child_env

pytestmark = pytest.mark.slow

CHEAP = ["--lib", "rsl_rl", "--device", "cpu", "--iterations", "1", "num_steps_per_env=4"]


def fit(
    tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None, preexec=None
) -> subprocess.CompletedProcess:
    env = {**child_env(), "XDG_CACHE_HOME": str(tmp_path / "cache"), **(extra_env or {})}
    argv = [sys.executable, "-m", "islab.cli", "fit", "--log-dir", str(tmp_path / "logs"), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, preexec_fn=preexec, check=False)


def test_two_sizes_measured_recommended_cached_and_used_by_num_envs_auto(tmp_path: Path) -> None:
    done = fit(tmp_path, *CHEAP, "--nproc", "2", "--min-num-envs", "32", "--max-num-envs", "64", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["device"] == "cpu"
    assert 0 < document["memory_limit_bytes"] < 10**14  # a rank's share of RAM (or of the cgroup limit)
    rows = document["rows"]
    assert [row["num_envs"] for row in rows] == [32, 64] and all(row["fits"] for row in rows)
    for row in rows:  # a real training rank: torch alone is over 100 MB resident
        assert 100e6 < row["peak_memory_bytes"] < 4e9 and row["env_steps_per_s"] > 0
    assert document["recommended"]["num_envs"] == 64 and "max-num-envs" in document["stopped"]
    assert "num_envs" in done.stderr and "recommended: num_envs = 64" in done.stderr  # the table, on stderr with --json

    env = {**child_env(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    plan = subprocess.run([sys.executable, "-m", "islab.cli", "--lib", "rsl_rl", "--device", "cpu", "--nproc", "2",
                           "--num-envs", "auto", "--dry-run", "num_steps_per_env=4"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "num_envs               = 64  (source: fit, cached " in plan.stdout
    assert "--num-envs 64 " in plan.stdout  # the ranks' command uses it


def test_a_memory_limit_stops_the_search_at_the_first_size_over_it(tmp_path: Path) -> None:
    # 200 MB: below what one training rank holds (torch alone), so 32 envs already do not fit
    done = fit(
        tmp_path, *CHEAP, "--min-num-envs", "32", "--max-num-envs", "1024", "--memory-limit", "200000000", "--json"
    )
    assert done.returncode == 1, done.stderr  # nothing fits: no recommendation
    document = json.loads(done.stdout)
    assert [row["num_envs"] for row in document["rows"]] == [32]
    assert not document["rows"][0]["fits"] and "over the budget" in document["rows"][0]["note"]
    assert document["recommended"]["num_envs"] is None and "do not fit" in document["stopped"]


def _address_space_2_gib() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


@pytest.mark.parametrize(
    ("how", "num_envs", "extra_env", "preexec", "note"),
    [
        # a real allocation failure: 4M Cartpole envs need more than 2 GiB of address space
        ("RLIMIT_AS", 4194304, {}, _address_space_2_gib, "out of memory (RuntimeError: "),
        # SIGKILL at start-up: what the kernel's OOM killer (or a cgroup's limit) does to a child
        ("SIGKILL", 32, {"ISLAB_TEST_CRASH_RANK": "0", "ISLAB_TEST_CRASH_MODE": "kill"}, None, "killed by SIGKILL"),
    ],
)
def test_a_child_out_of_memory_is_a_row_that_does_not_fit(tmp_path, how, num_envs, extra_env, preexec, note) -> None:
    done = fit(tmp_path, *CHEAP, "--min-num-envs", str(num_envs), "--max-num-envs", str(num_envs), "--json",
               extra_env=extra_env, preexec=preexec)  # fmt: skip
    assert done.returncode == 1, done.stderr  # no size fits; not a crash
    assert "Traceback" not in done.stderr
    row = json.loads(done.stdout)["rows"][0]
    assert row["num_envs"] == num_envs and row["out_of_memory"] and not row["fits"]
    assert row["note"].startswith(note), row["note"]
