#!/usr/bin/env bash
# Set up (first time only) and run the whole test suite, slow end-to-end tests included, as CI's three
# jobs, one after the other (the CI machine has 2 cores; the jobs would only slow each other down):
#   main   .venv: rsl-rl-lib 5.5.x, no mjlab (tests/tasks/test_mjlab.py runs its mjlab-free tests, skips the rest);
#   mjlab  .venv-mjlab: the [mjlab] extra (mjlab 1.6 pins rsl-rl-lib 5.4.2) running tests/tasks/test_mjlab.py
#          and the rsl_rl adapter, resume and fused-sync tests, so rsl-rl-lib 5.4.2 is tested too. In
#          this job a missing mjlab fails the mjlab tests instead of skipping them (ISLAB_TEST_JOB=mjlab).
#   isaaclab  .venv-isaaclab: Isaac Lab 3.0 (Python 3.12; built once per set of pins into a cache
#          directory, see scripts/setup.sh) for its ranks, islab-train from .venv: tests/isaaclab3 (the
#          conformance test against Isaac Lab's own launcher, Isaac-Cartpole trained on one CPU process
#          with each library). A missing venv fails them here (ISLAB_TEST_JOB=isaaclab).
# ISLAB_TEST_JOB=main, mjlab or isaaclab runs one job. Arguments go to pytest in every job.
# Each job runs its tests on ISLAB_TEST_WORKERS pytest-xdist workers (default 2; 0: in this process):
# most slow tests wait as much as they compute (process starts, rendezvous, daemons, Ray), so two at
# a time fill a 2-core machine. Tests that share a machine-wide resource (the SLURM cluster, Ray) are
# marked xdist_group and run on one worker (docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
job=${ISLAB_TEST_JOB:-all}
workers=(-n "${ISLAB_TEST_WORKERS:-2}" --dist loadgroup)
status=0
if [ "$job" = all ] || [ "$job" = main ]; then
    bash scripts/setup.sh
    # The SLURM cluster's tests run alone, after the rest. Beside other tests a job's torchrun died at
    # start: every test cluster numbered its jobs from 1, so each job 1 listened on port 20001 while the
    # previous test's job could still hold it (EADDRINUSE). Each cluster now starts at a free port's number
    # (FirstJobId, tests/e2e/test_slurm.py), which passed beside other tests 2 runs of 2; they stay alone
    # until a whole main job has run them among the others.
    # Test paths given to this script run as given, in one pytest run.
    slurm_tests=tests/e2e/test_slurm.py
    for arg in "$@"; do [[ "$arg" != -* && -e "${arg%%::*}" ]] && slurm_tests=; done
    if [ -n "$slurm_tests" ]; then
        ISLAB_TEST_JOB=main .venv/bin/python -m pytest "${workers[@]}" --ignore="$slurm_tests" "$@" || status=$?
        slurm_args=()  # the same options, a JUnit file of its own
        for arg in "$@"; do
            [[ "$arg" == --junitxml=*.xml ]] && arg="${arg%.xml}-slurm.xml"
            slurm_args+=("$arg")
        done
        ISLAB_TEST_JOB=main .venv/bin/python -m pytest -p no:xdist "${slurm_args[@]}" "$slurm_tests" || status=$?
    else
        ISLAB_TEST_JOB=main .venv/bin/python -m pytest "${workers[@]}" "$@" || status=$?
    fi
fi
if [ "$job" = all ] || [ "$job" = mjlab ]; then
    ISLAB_EXTRAS=mjlab bash scripts/setup.sh
    # Warp compiles mjlab's kernels once per job (Go1: ~25 s on CPU), then reads them from here.
    ISLAB_TEST_JOB=mjlab WARP_CACHE_PATH=${WARP_CACHE_PATH:-$PWD/.venv-mjlab/warp-cache} \
        .venv-mjlab/bin/python -m pytest "${workers[@]}" "$@" tests/tasks/test_mjlab.py tests/run/test_entrypoint.py tests/libs/test_lib_rsl_rl.py tests/worker/test_resume.py \
        tests/libs/test_fused_sync.py \
        -k "mjlab or rsl_rl" || status=$?
fi
if [ "$job" = all ] || [ "$job" = isaaclab ]; then
    bash scripts/setup.sh
    ISLAB_EXTRAS=isaaclab bash scripts/setup.sh
    # Warp compiles Isaac Lab's CPU kernels once (~53 s), then reads them from here (kept with the cached venv).
    ISLAB_TEST_JOB=isaaclab WARP_CACHE_PATH=${WARP_CACHE_PATH:-$PWD/.venv-isaaclab/warp-cache} \
        .venv/bin/python -m pytest "$@" tests/isaaclab3 || status=$?
fi
exit "$status"
