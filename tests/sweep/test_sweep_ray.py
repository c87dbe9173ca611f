"""``islab-train sweep`` for real: Ray, Tune, and trials that are real islab-train runs (our worker
training rsl_rl Cartpole on CPU ranks over gloo), driven as a user would, in a subprocess -- so
Ctrl-C is a real SIGINT and "no process left behind" is checked on the real process tree (psutil).

Time is the budget here (issue 20: the Ray tests add at most ~3 minutes to CI), and most of it is
starting things: ~15 s of a trial is starting islab-train, torchrun and the worker (its training
is a second or two: 16 envs, a few iterations), ~10-20 s of a sweep is starting Ray and Tune. So:

* each sweep runs as few trials as its claims need, and a claim rides in a sweep another claim
  needs anyway: the grid sweep has the failing configuration, is interrupted and resumed, and its
  resumed trials run on a two-node Ray cluster; the Optuna sweep runs ASHA and is interrupted and
  resumed;
* the first attempt of the grid sweep starts its own embedded Ray (what "Ctrl-C leaves nothing
  behind, Ray included" is about); the other attempts join one Ray cluster started once for this
  module with ``--ray-address``, as a user joins a cluster: two nodes in two network namespaces
  (docs/SWEEPS.md's ``ray start`` recipe; needs root, which CI has), else one local Ray.

``ray stop`` is never used: it stops every Ray process of the host, including other sweeps'. The
namespaces' processes are killed when the namespaces are deleted (tests/netns.py), and each node
has its own Ray temp directory.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml
from netns import Node, alive, collect_tree, kill_all, namespace_pids, two_nodes, unavailable_reason, wait_until
from paths import FIXTURES, SRC
from prerequisites import AS_ROOT_IN_CI

pytestmark = [pytest.mark.slow, pytest.mark.needs("ray", "optuna", "psutil"), pytest.mark.xdist_group("ray")]

RAY = str(Path(sys.executable).parent / "ray")
GCS_PORT = 6379  # each namespace has its own ports
RUN = {"lib": "rsl_rl", "device": "cpu", "nproc_per_node": 1, "num_envs": 16, "max_iterations": 12}
# Ctrl-C comes while a trial has trained at most this many of its iterations: the rest is time for
# SIGINT to reach it through Tune (its SIGTERM checkpoints the iteration it is at).
CTRL_C_BY = 4
TRIAL_FIELDS = {"id", "config", "seed", "status", "metric", "run_dir", "log", "start", "end", "node"}
CONFIG_FIELDS = {"config", "metric_mean", "metric_std", "seeds", "finished"}
SEARCH = {"algorithm.learning_rate": {"loguniform": [1.0e-4, 1.0e-2]}, "algorithm.entropy_coef": [0.0, 0.01]}
LOCAL_RAY = """
import sys
import ray
from islab.sweep.ray_cluster import start_ray
start_ray(None)
print("ADDRESS", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test module is done with it
ray.shutdown()
"""


@functools.cache
def auth_token_file() -> Path:
    path = Path(tempfile.mkdtemp(prefix="islab-ray-token-")) / "auth_token"
    path.write_text(secrets.token_hex(32), encoding="utf-8")
    return path


def environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)  # the sweep starts or joins the Ray each test says
    # As Ray (2.59+) goes: a token at hand. The clusters started here use token authentication (the
    # embedded Ray turns it on by itself, ray_start sets RAY_AUTH_MODE=token on each node), and a
    # sweep joining one by address, no mode chosen, must send the token
    # (islab.sweep.ray_cluster.send_token_if_available).
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_AUTH_TOKEN", None)
    env["RAY_AUTH_TOKEN_PATH"] = str(auth_token_file())
    return env


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster the sweeps join: ``address``; where its driver runs (the head's namespace);
    ``nodes``, the two nodes' addresses (None: one local Ray, no network namespaces here)."""

    address: str
    head: Node | None = None
    worker: Node | None = None
    unavailable: str | None = None  # why there are no two nodes

    def command(self, argv: Sequence[str]) -> list[str]:
        return self.head.command(argv) if self.head else list(argv)

    @property
    def nodes(self) -> set[str] | None:
        return {self.head.address, self.worker.address} if self.head and self.worker else None


def ray_start(node: Node, *args: str) -> None:
    """``ray start`` in the node's namespace; again when Ray's fixed 30 s for a node to register
    ran out (a loaded machine), after killing what the failed attempt left in the namespace."""
    for attempt in range(3):
        temp_dir = tempfile.mkdtemp(prefix=f"islab-ray-{node.namespace}-")
        result = subprocess.run(
            node.command([RAY, "start", *args, "--node-ip-address", node.address, "--num-cpus", "1", "--num-gpus",
                          "0", "--temp-dir", temp_dir, "--disable-usage-stats"]),
            # Ray's advice: the mode set on every node (`ray start --address` never turns it on)
            capture_output=True, text=True, env={**environment(), "RAY_AUTH_MODE": "token"}, timeout=180,
        )  # fmt: skip
        if result.returncode == 0 or "timed out during startup" not in result.stderr or attempt == 2:
            break
        for pid in namespace_pids(node.namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(2)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


@contextlib.contextmanager
def local_ray() -> Iterator[str]:
    """The sweep's own embedded Ray (``start_ray``), started once in a helper process, for sweeps
    that join it; stopped, and every process of it killed, at the end."""
    helper = subprocess.Popen(
        [sys.executable, "-c", LOCAL_RAY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=environment(), start_new_session=True,
    )  # fmt: skip
    seen: dict[int, psutil.Process] = {}
    try:
        address = ""
        for line in helper.stdout:  # type: ignore[union-attr]
            if line.startswith("ADDRESS "):
                address = line.split()[1]
                break
        assert address, f"the local Ray did not start (exit {helper.wait()})"
        yield address
    finally:
        collect_tree(helper.pid, seen)
        with contextlib.suppress(OSError):
            helper.stdin.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.wait(timeout=60)
        kill_all(seen)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """One Ray cluster for this module's sweeps that join one: two one-core nodes in two network
    namespaces (``ray start --head`` in one, ``ray start --address`` in the other, as
    docs/SWEEPS.md says), started once. Without root (a developer's machine) one local Ray instead;
    CI runs as root, so there it must be the two nodes."""
    unavailable = unavailable_reason()
    if unavailable is None:
        with two_nodes() as (head, worker):
            ray_start(head, "--head", "--port", str(GCS_PORT), "--include-dashboard", "false")
            ray_start(worker, "--address", f"{head.address}:{GCS_PORT}")
            yield Cluster(f"{head.address}:{GCS_PORT}", head, worker)
        return
    if AS_ROOT_IN_CI:
        pytest.fail(f"{unavailable} -- CI runs as root with iproute2, so the two-node cluster must start here")
    with local_ray() as address:
        yield Cluster(address, unavailable=unavailable)


def write_sweep(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"run": RUN, "cpus_per_trial": 1, **fields}), encoding="utf-8")
    return path


def sweep_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "islab.cli", "sweep", *args]


def sweep_dir_of(tmp_path: Path) -> Path:
    found = sorted((tmp_path / "logs" / "sweeps").glob("*/*"))
    assert len(found) == 1, found
    return found[0]


def overlap(a: dict, b: dict) -> bool:
    return max(a["start"], b["start"]) < min(a["end"], b["end"])


def records(sweep_dir: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sweep_dir.glob("trials/*/trial.json")}


def progress_lines(trial_dir: Path) -> int:
    """Iterations the trial's run has written (0 before its run directory exists)."""
    return max((len(path.read_text().splitlines()) for path in trial_dir.glob("*/*/*/progress.jsonl")), default=0)


def _sweep_processes(root: Path) -> list[psutil.Process]:
    """Processes whose command line names the sweep's directory (trials, ranks), wherever they are now."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(root) in " ".join(process.info["cmdline"] or []):
                found.append(process)
    return found


def interrupt_when(
    tmp_path: Path, command: list[str], ready: Callable[[Path], bool], *, embedded_ray: bool
) -> tuple[Path, dict[str, dict]]:
    """Start the sweep, wait until ``ready(sweep_dir)``, Ctrl-C it: it exits 130, says how to resume,
    and leaves no process behind -- none of its tree (trials, torchrun, ranks; an embedded Ray) and
    none naming its directory. Returns the sweep directory and the records of the trials that ended."""
    sweep = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment()
    )
    seen: dict[int, psutil.Process] = {}
    try:

        def under_way() -> bool:
            collect_tree(sweep.pid, seen)
            assert sweep.poll() is None, sweep.stdout.read()  # type: ignore[union-attr]
            found = list((tmp_path / "logs" / "sweeps").glob("*/*"))
            return len(found) == 1 and ready(found[0])

        wait_until(under_way, 600, "the sweep to get where it is interrupted", interval_s=0.2)
        collect_tree(sweep.pid, seen)
        raylet = any("raylet" in " ".join(p.cmdline()) for p in alive(seen))
        assert raylet == embedded_ray, "an embedded Ray runs under the sweep; a joined one does not"
        sweep_dir = sweep_dir_of(tmp_path)
        sweep.send_signal(signal.SIGINT)
        output, _ = sweep.communicate(timeout=120)
        assert sweep.returncode == 130, output[-4000:]
        assert f"islab-train sweep --resume {sweep_dir}" in output
        deadline = time.monotonic() + 15
        while (alive(seen) or _sweep_processes(sweep_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(seen), [" ".join(p.cmdline())[:200] for p in alive(seen)]
        assert not _sweep_processes(sweep_dir)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        kill_all(seen)
    ended = records(sweep_dir)
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert summary["interrupted"] is True
    assert {trial["id"] for trial in summary["trials"]} == set(ended)  # what had ended, nothing else
    return sweep_dir, ended


def resume(tmp_path: Path, sweep_dir: Path, cluster: Cluster, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cluster.command(sweep_command("--resume", str(sweep_dir), "--ray-address", cluster.address, *more)),
        capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=600,
    )  # fmt: skip


def assert_kept_and_continued(before: dict[str, dict], trials: dict[str, dict]) -> list[dict]:
    """The trials that had ended are kept as they were (not run again); an interrupted one that had
    trained continued from the checkpoint its SIGTERM left, up to the last iteration."""
    for ident, record in before.items():
        assert {k: trials[ident][k] for k in ("start", "end", "run_dir")} == {
            k: record[k] for k in ("start", "end", "run_dir")
        }, ident
    continued = [trial for ident, trial in trials.items() if ident not in before and trial.get("resumed_from")]
    assert continued, "an interrupted trial continues from its checkpoint"
    for trial in continued:
        assert trial["run_dir"] == trial["resumed_from"]
        progress = (Path(trial["run_dir"]) / "progress.jsonl").read_text().splitlines()
        assert json.loads(progress[-1])["iteration"] == RUN["max_iterations"]
    return continued


@pytest.mark.netns
def test_grid_sweep_two_at_a_time_a_failed_trial_ctrl_c_and_resume_on_two_nodes(tmp_path, ray_cluster):
    """2 configurations x 2 seeds train for real, 2 trials at a time, and a third configuration (the
    first in the file) whose learning rate is negative fails at run time (torch's Adam refuses it; a
    value that is not a number would be refused before anything starts): it is reported, the others
    still run. Ctrl-C while the last configuration's seeds train: nothing of the sweep is left
    running (trials, ranks, its embedded Ray); ``--resume`` on the two-node cluster keeps every
    trial that ended and continues the interrupted ones from their checkpoints, one on each node
    (sweep.json says where each ran), at the same time. Exit 1 (a trial failed)."""
    path = write_sweep(
        tmp_path,
        seeds=2,
        search={"algorithm.learning_rate": [-1.0, 1.0e-3, 3.0e-3]},
        metric={"name": "mean_return", "mode": "max", "over_last": 3},
        max_concurrent=2,
    )

    def last_configuration_trains(sweep_dir: Path) -> bool:
        ended = records(sweep_dir)
        training = [progress_lines(sweep_dir / "trials" / f"c02-s{seed}") for seed in (1, 2)]
        return len(ended) == 4 and any(1 <= lines <= CTRL_C_BY for lines in training)

    sweep_dir, before = interrupt_when(tmp_path, sweep_command(str(path)), last_configuration_trains, embedded_ray=True)
    assert {ident: record["status"] for ident, record in before.items()} == {
        "c00-s1": "failed", "c00-s2": "failed", "c01-s1": "finished", "c01-s2": "finished",
    }  # fmt: skip

    result = resume(tmp_path, sweep_dir, ray_cluster, "--json")
    assert result.returncode == 1 and result.stdout, result.stderr[-4000:]
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert json.loads(result.stdout) == summary  # --json prints sweep.json's content
    assert summary["interrupted"] is False

    trials = {trial["id"]: trial for trial in summary["trials"]}
    assert set(trials) == {f"c{c:02d}-s{s}" for c in range(3) for s in (1, 2)}
    assert_kept_and_continued(before, trials)
    for trial in trials.values():
        assert set(trial) >= TRIAL_FIELDS, trial
        assert trial["node"]
    finished = [trials[f"c{c:02d}-s{s}"] for c in (1, 2) for s in (1, 2)]
    assert all(t["status"] == "finished" and isinstance(t["metric"], float) for t in finished), finished
    for trial in finished:
        progress = [json.loads(line) for line in (Path(trial["run_dir"]) / "progress.jsonl").read_text().splitlines()]
        assert progress[-1]["iteration"] == RUN["max_iterations"]  # trained for real, to the end
        expected = sum(record["mean_return"] for record in progress[-3:]) / 3
        assert trial["metric"] == pytest.approx(expected)  # the mean of the last over_last iterations
        assert Path(trial["run_dir"]).is_relative_to(sweep_dir / "trials" / trial["id"])
    # two at a time: the trials of a pair overlap in time, and never more than two ran at once
    assert overlap(trials["c01-s1"], trials["c01-s2"]) and overlap(trials["c02-s1"], trials["c02-s2"])
    everything = list(trials.values())
    for trial in everything:
        at_once = [other for other in everything if other is not trial and overlap(trial, other)]
        assert not any(overlap(a, b) for a in at_once for b in at_once if a is not b), "3 trials at once"

    for failed in (trials["c00-s1"], trials["c00-s2"]):
        assert failed["status"] == "failed" and failed["exit_code"] not in (0, None)
        assert failed["error"] and "Invalid learning rate" in failed["error"]
        assert Path(failed["log"]).is_file()
    assert "failed" in (sweep_dir / "summary.md").read_text()

    configs = summary["configs"]
    assert all(set(config) >= CONFIG_FIELDS for config in configs)
    assert [config["finished"] for config in configs] == [2, 2, 0]  # best first; the failed one last
    assert configs[0]["metric_mean"] >= configs[1]["metric_mean"]
    assert configs[0]["seeds"] == [1, 2]
    best = summary["best"]
    assert best["config"] == configs[0]["config"] and best["metric_mean"] == configs[0]["metric_mean"]
    assert "islab-train" in best["command"] and "--seed 1" in best["command"]
    assert (sweep_dir / "summary.md").read_text().count("learning_rate=") >= 3
    assert (sweep_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # On two nodes (always in CI as root: the fixture fails there without them), one trial on each.
    # With one local Ray (no root) there is nothing to spread over: every claim above still held,
    # so the test passes rather than reporting the whole run as skipped.
    if ray_cluster.nodes is not None:
        assert {trials["c02-s1"]["node"], trials["c02-s2"]["node"]} == ray_cluster.nodes


def study_of(experiment_dir: Path):
    """The Optuna study an attempt's searcher ended with: Tune saves the searcher in its experiment
    directory (``searcher-state-*.pkl``, OptunaSearch.save); OptunaSearch.restore reads it back."""
    from ray.tune.search.optuna import OptunaSearch

    (state,) = glob.glob(str(experiment_dir / "searcher-state-*.pkl"))
    searcher = OptunaSearch()
    searcher.restore(state)
    return searcher._ot_study  # the searcher has no public accessor for its study


@pytest.mark.netns
def test_optuna_with_asha_ctrl_c_and_resume_continues_the_search(tmp_path, ray_cluster):
    """Optuna proposes 2 configurations, one trial at a time, with ASHA on (its rungs at iterations 6
    and 12, past the Ctrl-C, so that the trial Ctrl-C interrupts is not also stopped by ASHA); Ctrl-C
    once the first has ended and the second trains. ``--resume`` continues the search: the trial
    that ended is kept, the interrupted configuration is proposed again (the same trial, continued
    from its checkpoint), and the new study knows the earlier result: 2 trials in all, the first
    attempt's told with its metric -- not a fresh study's count. (That a resumed search then
    proposes new configurations, not the first attempt's again, is checked without Ray below.)"""
    path = write_sweep(
        tmp_path, seeds=1, search=SEARCH, searcher="optuna", samples=2, scheduler="asha",
        asha={"grace_period": 6, "reduction_factor": 2}, max_concurrent=1,
    )  # fmt: skip

    def one_ended_one_trains(sweep_dir: Path) -> bool:
        ended = records(sweep_dir)
        training = [progress_lines(trial) for trial in sweep_dir.glob("trials/*") if trial.name not in ended]
        return len(ended) >= 1 and any(1 <= lines <= CTRL_C_BY for lines in training)

    command = ray_cluster.command(sweep_command(str(path), "--ray-address", ray_cluster.address))
    sweep_dir, before = interrupt_when(tmp_path, command, one_ended_one_trains, embedded_ray=False)

    result = resume(tmp_path, sweep_dir, ray_cluster)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    trials = {trial["id"]: trial for trial in summary["trials"]}
    assert len(trials) == 2 and len({json.dumps(t["config"], sort_keys=True) for t in trials.values()}) == 2
    for trial in trials.values():
        assert trial["status"] == "finished"
        assert 1.0e-4 <= trial["config"]["algorithm.learning_rate"] <= 1.0e-2
        assert trial["config"]["algorithm.entropy_coef"] in (0.0, 0.01)
        assert "algorithm.learning_rate=" in trial["command"] and "algorithm.entropy_coef=" in trial["command"]
    assert summary["best"]["config"] == summary["configs"][0]["config"]
    assert "algorithm.learning_rate=" in summary["best"]["command"]
    assert len(before) == 1 and len(assert_kept_and_continued(before, trials)) == 1

    study = study_of(sweep_dir / "ray" / "tune-1")  # the resumed attempt's
    assert len(study.trials) == 2, "the resumed study continues the first one's count"
    assert sorted((repr(trial.params), trial.value) for trial in study.trials) == sorted(
        (repr(trial["config"]), trial["metric"]) for trial in trials.values()
    )  # it knows every result: the first attempt's, told, and its own


def test_a_seed_an_earlier_attempt_ended_keeps_its_record_and_starts_nothing(tmp_path):
    """A resumed Optuna sweep proposes an interrupted configuration again, every seed of it: a seed
    that had ended (its record) reports that outcome to Tune at once and runs nothing again."""
    from islab.sweep.summary import write_record
    from islab.sweep.trainable import IslabTrial, SweepContext
    from islab.sweep.trial_process import ProgressSource

    context = SweepContext(
        trials={}, cwd=str(tmp_path), metric="mean_return", over_last=3, source=ProgressSource(),
        sweep_dir=str(tmp_path), python=sys.executable, run=RUN, seeds=(1, 2), search_keys=("lr",),
    )  # fmt: skip
    kept = context.trial_for({"lr": 0.5, "__trial_index__": 0})
    write_record(tmp_path, {"id": kept.id, "config": {"lr": 0.5}, "seed": 1, "status": "finished", "metric": 7.0})
    trial = IslabTrial.__new__(IslabTrial)  # its Tune plumbing (an actor, a logger) plays no part here
    trial.context = context
    trial.begin({"lr": 0.5, "__trial_index__": 0})
    assert trial.process.pid is None and not (tmp_path / "trials" / kept.id / "islab-train.log").exists()
    assert trial.step() == {
        "trial_id_islab": kept.id, "done": True, "kept": True, "trial_status": "finished", "node": None, "metric": 7.0,
    }  # fmt: skip


def test_a_resumed_optuna_search_proposes_the_unfinished_configuration_then_new_ones(tmp_path):
    """Without Ray (Tune's searchers, as the sweep builds them): the first attempt's searcher proposed
    A and B; A ended, B was interrupted. The resumed attempt's searcher knows A's result, proposes B
    first, then configurations neither attempt proposed (its sampler is seeded anew: with the first
    attempt's seed it would draw A again)."""
    from islab.sweep.driver import search_algorithm
    from islab.sweep.load import load_sweep
    from islab.sweep.summary import write_record, write_trial_config
    from islab.sweep.trainable import SweepContext
    from islab.sweep.trial_process import ProgressSource

    loaded = load_sweep(write_sweep(tmp_path, seeds=1, search=SEARCH, searcher="optuna", samples=4))
    context = SweepContext(
        trials={}, cwd=str(tmp_path), metric="metric", over_last=3, source=ProgressSource(), sweep_dir=str(tmp_path),
        seeds=(1,), search_keys=tuple(SEARCH),
    )  # fmt: skip
    first, _, samples = search_algorithm(loaded, [], {}, str(tmp_path), 0)
    a, b = (context.trial_for(first.suggest(ident)) for ident in ("t0", "t1"))
    assert samples == 4 and a.config != b.config
    for trial in (a, b):
        write_trial_config(trial)
    write_record(tmp_path, {"id": a.id, "config": dict(a.config), "seed": 1, "status": "finished", "metric": 5.0})

    records = {a.id: json.loads((tmp_path / "trials" / a.id / "trial.json").read_text())}
    resumed, _, samples = search_algorithm(loaded, [], records, str(tmp_path), 1)
    assert samples == 3  # B and two new ones
    proposed = [dict(context.trial_for(resumed.suggest(ident)).config) for ident in ("u0", "u1", "u2")]
    assert proposed[0] == b.config
    assert all(config not in (a.config, b.config) for config in proposed[1:]), proposed
    study = resumed.searcher._ot_study  # (the Repeater's searcher; no public accessor for its study)
    assert [(trial.params, trial.value) for trial in study.trials if trial.value is not None] == [(a.config, 5.0)]


def test_an_address_where_no_ray_answers_exits_2_at_once_naming_it(tmp_path):
    """A dead ``--ray-address`` (a typo, a head that is down) is named in one paragraph within
    seconds, exit 2, no trial started -- Ray's own connect would wait minutes, then print a traceback."""
    from ports import port_for_a_child

    address = f"127.0.0.1:{port_for_a_child()}"
    started = time.monotonic()
    result = subprocess.run(
        sweep_command(str(write_sweep(tmp_path, seeds=1)), "--ray-address", address),
        capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"error: --ray-address: cannot join the Ray cluster at {address}: nothing answers there" in result.stderr
    assert "ray start --address=" in result.stderr and "Traceback" not in result.stderr
    assert "nothing was started" in result.stderr
    assert not list(tmp_path.glob("logs/sweeps/*/*/trials/*")), "no trial started"
    assert time.monotonic() - started < 60


ISAACLAB_TREE = FIXTURES / "isaaclab_tree"


def test_an_isaaclab_optuna_sweep_runs_each_trial_with_its_own_override_and_metrics(tmp_path, ray_cluster):
    """Isaac Lab's tuner's shape (Optuna over a Hydra key of Isaac Lab's train.py): two trials of the
    Isaac Lab fixture at once, each in its own working directory (Isaac Lab's logs/rsl_rl there), each
    trained with the learning rate Optuna chose for it (passed to train.py as a Hydra override) and
    scored on the rewards of its own TensorBoard events."""
    run = {"isaaclab": str(ISAACLAB_TREE), "task": "Isaac-Cartpole-v0", "device": "cpu", "num_envs": 8,
           "max_iterations": 6}  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({
        "run": run, "seeds": 1, "searcher": "optuna", "samples": 2, "max_concurrent": 2, "cpus_per_trial": 1,
        "search": {"agent.algorithm.learning_rate": {"loguniform": [1.0e-3, 1.0e-1]}},
        "metric": {"name": "mean_return", "mode": "max", "over_last": 3},
    }), encoding="utf-8")  # fmt: skip
    result = subprocess.run(
        ray_cluster.command(sweep_command(str(path), "--ray-address", ray_cluster.address, "--json")),
        capture_output=True, text=True, cwd=tmp_path, env={**environment(), "FIXTURE_ITERATION_SLEEP": "0.3"},
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    trials = json.loads(result.stdout)["trials"]
    assert len(trials) == 2 and all(trial["status"] == "finished" for trial in trials), trials
    assert overlap(*trials)
    for trial in trials:
        lr = trial["config"]["agent.algorithm.learning_rate"]
        log = (Path(trial["run_dir"]) / "logs" / "rank_0.log").read_text()
        assert f"hydra ['agent.algorithm.learning_rate={lr}']" in log  # its own override reached train.py
        rewards = [float(value) for value in re.findall(r"iteration \d+/6 mean reward (-?[\d.]+)", log)]
        assert len(rewards) == 6
        assert trial["metric"] == pytest.approx(sum(rewards[-3:]) / 3, abs=1e-3)  # its own events
        trial_dir = Path(sweep_dir_of(tmp_path), "trials", trial["id"])
        assert list((trial_dir / "logs" / "rsl_rl").rglob("model_6.pt"))  # Isaac Lab wrote in the trial's cwd
