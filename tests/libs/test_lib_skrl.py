"""The skrl adapters (torch and JAX), built in-process with one rank and a few envs.

``import skrl`` reads WORLD_SIZE / JAX_WORLD_SIZE and joins a process group at import time, so the
in-process tests run only when neither is set; anything distributed runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from adapters import TASK, build_adapter, jax_on_cpu
from ports import port_for_a_child

from islab.envs import make_env
from islab.envs.base import EPISODES_ENDED
from islab.libs._skrl_common import pooled_moments, runner_config
from islab.libs.base import state_digest
from islab.spec.agent_config import load_agent_config
from islab.tasks.cartpole.cartpole_env import CartpoleEnv, CartpoleEnvCfg

pytestmark = pytest.mark.skipif(
    int(os.environ.get("WORLD_SIZE", "1")) > 1 or int(os.environ.get("JAX_WORLD_SIZE", "1")) > 1,
    reason="importing skrl inside a distributed launch would join that job's process group",
)
needs_jax = pytest.mark.needs("jax")


@pytest.fixture(scope="module", autouse=True)
def leaves_the_environment_as_it_found_it():
    """This module's JAX runs on the CPU through JAX's config (tests/adapters.py: ``jax_on_cpu``):
    a ``JAX_PLATFORMS`` left in ``os.environ`` would reach every process later tests start."""
    before = os.environ.get("JAX_PLATFORMS")
    yield
    assert os.environ.get("JAX_PLATFORMS") == before, "JAX_PLATFORMS leaked out of test_lib_skrl.py"


def build(framework: str, run_dir: Path, *, num_envs: int = 32, seed: int = 3, overrides: tuple[str, ...] = ()):
    return build_adapter("skrl", run_dir, framework=framework, num_envs=num_envs, seed=seed, overrides=overrides)


# -- shared logic -----------------------------------------------------------------------------


def test_runner_config_fills_in_the_run(tmp_path: Path) -> None:
    agent_cfg = load_agent_config("skrl", TASK)
    marker = type("Scaler", (), {})
    cfg = runner_config(agent_cfg, base_seed=7, run_dir=tmp_path / "run", scaler_class=marker)
    assert cfg["seed"] == 7
    experiment = cfg["agent"]["experiment"]
    assert Path(experiment["directory"]) / experiment["experiment_name"] == (tmp_path / "run").resolve()
    rollouts = agent_cfg["agent"]["rollouts"]
    assert experiment["write_interval"] == rollouts  # "auto" -> every iteration
    assert experiment["checkpoint_interval"] % rollouts == 0  # on an update boundary
    assert cfg["agent"]["observation_preprocessor"] is marker
    assert cfg["agent"]["value_preprocessor"] is marker
    assert agent_cfg["agent"]["observation_preprocessor"] == "RunningStandardScaler"  # input untouched


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_pooled_moments_equal_the_union_of_batches(library: str) -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc, 1 + loc, size=(n, 3)) for loc, n in ((0.0, 40), (2.0, 40), (-1.0, 17))]
    rows = np.stack([np.concatenate([b.mean(0), b.var(0, ddof=1), [len(b)]]) for b in batches])
    if library == "torch":
        rows = torch.as_tensor(rows)
    mean, variance, count = pooled_moments(rows)
    union = np.concatenate(batches)
    np.testing.assert_allclose(np.asarray(mean), union.mean(0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(variance), union.var(0, ddof=1), rtol=1e-12)
    assert float(count[0]) == len(union)


# -- skrl-torch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_torch(tmp_path_factory: pytest.TempPathFactory):
    run_dir = tmp_path_factory.mktemp("skrl_torch") / "run"
    adapter = build("torch", run_dir)
    env, step = adapter.env, adapter.env.step
    env.episode_returns_seen = []  # what the env reported, step by step, for finished episodes

    def recording_step(action):
        result = step(action)
        if int(result[4][EPISODES_ENDED]) > 0:  # the env logs every step; these steps ended episodes
            env.episode_returns_seen.append(float(result[4]["log"]["episode_return"]))
        return result

    env.step = recording_step
    return adapter, adapter.train(2), run_dir


def test_torch_train_reports_the_episode_returns_the_env_reported(trained_torch) -> None:
    """The result's mean return is the env's own: the mean of the per-step mean returns of the
    episodes that finished, over the last ``rollouts`` such steps (one iteration's worth), and
    progress.jsonl's last record says the same."""
    adapter, result, run_dir = trained_torch
    assert result.iterations == 2
    assert result.env_steps == 2 * adapter.steps_per_iteration * 32
    assert result.wall_s > 0
    seen = adapter.env.episode_returns_seen[-adapter.steps_per_iteration :]
    assert seen, "no episode finished in 2 iterations"
    assert result.mean_return == pytest.approx(sum(seen) / len(seen), rel=1e-6)
    last = json.loads((run_dir / "progress.jsonl").read_text().splitlines()[-1])
    assert last["iteration"] == 2 and last["mean_return"] == pytest.approx(result.mean_return, rel=1e-6)


def test_torch_writes_tensorboard_and_a_weights_only_checkpoint(trained_torch) -> None:
    adapter, result, run_dir = trained_torch
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard events in the run directory"
    checkpoint = Path(result.checkpoint)
    assert checkpoint.parent == run_dir / "checkpoints" and checkpoint.is_file()
    state = torch.load(checkpoint, weights_only=True)
    assert {"policy", "optimizer", "observation_preprocessor", "value_preprocessor"} <= set(state)
    assert torch.equal(state["policy"]["log_std_parameter"], adapter.agent.policy.state_dict()["log_std_parameter"])
    assert not list(run_dir.glob("checkpoints/.*tmp*")), "temporary checkpoint file left behind"


def test_torch_save_load_round_trips_the_policy(trained_torch, tmp_path: Path) -> None:
    adapter, _, _ = trained_torch
    path = tmp_path / "agent.pt"
    adapter.save(path)
    other = build("torch", tmp_path / "other", seed=11)
    assert state_digest(other.policy_state()) != state_digest(adapter.policy_state())
    other.load(path)
    assert state_digest(other.policy_state()) == state_digest(adapter.policy_state())
    assert any(name.startswith("observation_preprocessor.") for name in other.policy_state())


def test_torch_import_guard_keeps_the_workers_process_group(tmp_path: Path) -> None:
    """With WORLD_SIZE=2 in the environment and a gloo group already joined, skrl's import-time
    init_process_group("nccl") would raise; the adapter module imports skrl around it."""
    script = textwrap.dedent(
        f"""
        import torch.distributed as dist
        original = dist.init_process_group
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
        import islab.libs.skrl_torch
        import skrl
        assert skrl.config.torch.is_distributed  # skrl read WORLD_SIZE=2 at import
        assert dist.init_process_group is original, "patch not restored"
        assert dist.get_backend() == "gloo"
        print("ok")
        """
    )
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_torch_two_ranks_end_with_identical_policies(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
        "--standalone", "-m", "islab.worker", "--lib", "skrl", "--ml-framework", "torch", "--task", TASK,
        "--num-envs", "64", "--seed", "1", "--max-iterations", "3", "--device", "cpu",
        "--run-dir", str(run_dir), "--distributed",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    digests = {json.loads(path.read_text())["policy_sha256"] for path in run_dir.glob("digests/rank_*.json")}
    assert len(list(run_dir.glob("digests/rank_*.json"))) == 2
    assert len(digests) == 1, "ranks hold different policies (weights or normalizer)"


def trainer_first_observations(adapter) -> np.ndarray:
    """What skrl's trainer sees first: the first reset of its Isaac Lab wrapper."""
    observations, _ = adapter.runner.trainer.env.reset()
    return np.asarray(observations)


def env_reset_observations(seed: int | None = None, state: torch.Tensor | None = None) -> np.ndarray:
    env = make_env(TASK, 32, "cpu", seed=seed)
    if state is not None:
        env.generator.set_state(state)
    return env.reset()[0]["policy"].numpy()


@pytest.mark.parametrize("framework", ["torch", pytest.param("jax", marks=needs_jax)])
def test_each_rank_keeps_its_env_stream(framework: str, tmp_path: Path) -> None:
    """Ranks 0 and 1 of a job with base seed 3 build their envs with seeds 3 and 4; skrl's wrapper
    must not reseed both with its key 0 at the first reset (all ranks would draw the same)."""
    rank0 = trainer_first_observations(build(framework, tmp_path / "r0", seed=3))
    rank1 = trainer_first_observations(build(framework, tmp_path / "r1", seed=4))
    assert not np.allclose(rank0, rank1), "two ranks start from the same env states"
    np.testing.assert_allclose(rank1, env_reset_observations(seed=4), rtol=0, atol=1e-6)


@pytest.mark.parametrize("framework", ["torch", pytest.param("jax", marks=needs_jax)])
def test_resume_continues_the_stored_env_stream(framework: str, tmp_path: Path) -> None:
    """A resume restores the env generator before training (islab.worker.checkpoint.restore_rng);
    the trainer's first reset must draw from it, not from a fresh seed."""
    elsewhere = make_env(TASK, 32, "cpu", seed=99)
    elsewhere.reset()  # a stream some way along, as a checkpoint stores it
    stored = elsewhere.generator.get_state()
    adapter = build(framework, tmp_path / "run", seed=3)
    adapter.env.generator.set_state(stored)
    np.testing.assert_allclose(
        trainer_first_observations(adapter), env_reset_observations(state=stored), rtol=0, atol=1e-6
    )


# -- skrl-JAX --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_jax(tmp_path_factory: pytest.TempPathFactory):
    jax_on_cpu()
    run_dir = tmp_path_factory.mktemp("skrl_jax") / "run"
    adapter = build("jax", run_dir)
    compiled = _update_compile_counts()
    result = adapter.train(1)
    after = _update_compile_counts()
    trained_jax_compiles.update({name: after[name] - compiled[name] for name in after})
    return adapter, result, run_dir


trained_jax_compiles: dict[str, int] = {}  # per heavy jitted function, programs compiled by trained_jax


def _update_compile_counts() -> dict[str, int]:
    """How many programs skrl's jitted PPO update and Adam step hold (one per input signature)."""
    import skrl.resources.optimizers.jax.adam as adam

    from islab.libs import skrl_jax_ppo

    jitted = {
        "update_policy": skrl_jax_ppo.skrl_update_policy,
        "update_value": skrl_jax_ppo.skrl_update_value,
        "adam_step": adam._step_with_scale,
    }
    return {name: function._cache_size() for name, function in jitted.items()}


@needs_jax
def test_jax_train_writes_tensorboard_and_skrls_checkpoint(trained_jax) -> None:
    adapter, result, run_dir = trained_jax
    assert result.iterations == 1
    assert result.env_steps == adapter.steps_per_iteration * 32
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard events in the run directory"
    checkpoint = Path(result.checkpoint)
    assert checkpoint == run_dir / "checkpoints" / "agent_final.pickle" and checkpoint.is_file()


@needs_jax
def test_jax_first_update_compiles_what_every_later_one_reuses(trained_jax) -> None:
    """A fresh or restored learner state must already look like a trained one (strong types,
    committed to the device): otherwise the first minibatch compiles the update and Adam step, and
    the second compiles them all again (PPO's update: ~5 heavy XLA compiles, seconds each)."""
    assert trained_jax_compiles == {"update_policy": 1, "update_value": 1, "adam_step": 2}  # Adam: policy, value


@needs_jax
def test_jax_checkpoint_loads_back_with_skrl(trained_jax, tmp_path: Path) -> None:
    adapter, result, _ = trained_jax
    other = build("jax", tmp_path / "other", seed=11)
    assert state_digest(other.policy_state()) != state_digest(adapter.policy_state())
    other.agent.load(result.checkpoint)  # skrl's own loader reads our final checkpoint
    assert state_digest(other.policy_state()) == state_digest(adapter.policy_state())


@needs_jax
def test_jax_save_load_round_trips_the_policy(trained_jax, tmp_path: Path) -> None:
    adapter, _, _ = trained_jax
    path = tmp_path / "agent.pickle"
    adapter.save(path)
    other = build("jax", tmp_path / "other", seed=12)
    other.load(path)
    state = other.policy_state()
    assert state_digest(state) == state_digest(adapter.policy_state())
    assert all(isinstance(value, np.ndarray) for value in state.values())
    assert "observation_preprocessor.running_mean" in state


@needs_jax
@pytest.mark.slow
def test_jax_two_ranks_end_with_identical_policies(tmp_path: Path) -> None:
    from islab.worker import ENTRY_SCRIPT

    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "skrl.utils.distributed.jax", "--nnodes", "1", "--nproc_per_node", "2",
        "--node_rank", "0", "--coordinator_address", f"127.0.0.1:{port_for_a_child()}", str(ENTRY_SCRIPT),
        "--lib", "skrl", "--ml-framework", "jax", "--task", TASK, "--num-envs", "64", "--seed", "1",
        "--max-iterations", "2", "--device", "cpu", "--run-dir", str(run_dir), "--distributed",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    # skrl's launcher exits 0 even when a rank fails: the digests are the evidence.
    paths = sorted(run_dir.glob("digests/rank_*.json"))
    assert len(paths) == 2, done.stdout[-3000:] + done.stderr[-3000:]
    digests = {json.loads(path.read_text())["policy_sha256"] for path in paths}
    assert len(digests) == 1, "ranks hold different policies (weights or normalizer)"
    assert (run_dir / "checkpoints" / "agent_final.pickle").is_file()


@needs_jax
def test_jax_cuda_rank_without_a_gpu_backend_fails(tmp_path: Path) -> None:
    """A cuda rank whose JAX has no GPU backend (plain jax on Linux) must fail, not train on the CPU."""
    import dataclasses

    from adapters import single_rank

    from islab.libs import load_adapter

    jax_on_cpu()  # what plain jax gives on a GPU node: backend 'cpu'
    ctx = dataclasses.replace(single_rank(0), device="cuda:0", backend="nccl", rank=0)
    env = make_env(TASK, 8, "cpu", seed=0)  # never used: the check comes first
    with pytest.raises(RuntimeError, match=r"rank 0: .*JAX's backend is 'cpu'.*jax\[cuda12\]"):
        load_adapter("skrl", "jax")(ctx, env, load_agent_config("skrl", TASK), tmp_path / "run")


@needs_jax
def test_jax_collectives_are_compiled_once() -> None:
    """skrl builds ``jax.pmap(lambda ...)`` anew per gradient and KL reduction; ours are cached."""
    jax_on_cpu()
    import jax
    import jax.numpy as jnp

    from islab.libs import skrl_jax_collectives, skrl_jax_ppo

    ppo_jax = skrl_jax_ppo.skrl_ppo_module.jax
    kl_sum = ppo_jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
    assert kl_sum is skrl_jax_collectives.psum_across_processes()
    assert ppo_jax.pmap(lambda x: x * 2, axis_name="i") is not kl_sum  # others pass through
    assert ppo_jax.numpy is jnp
    # one process: the mean over processes of a gradient pytree is the pytree itself
    grads = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    reduced = skrl_jax_ppo.Model.reduce_parameters(None, grads)
    assert skrl_jax_ppo.Model.reduce_parameters is skrl_jax_collectives.reduce_parameters
    for name in grads:
        np.testing.assert_array_equal(np.asarray(reduced[name]), np.asarray(grads[name]))


class _ReusedRewardCartpole(CartpoleEnv):
    """Cartpole whose reward, like mjlab's, is one buffer the env overwrites at every step."""

    def _get_rewards(self) -> torch.Tensor:
        if not hasattr(self, "_reward_out"):
            self._reward_out = torch.zeros(self.num_envs, device=self.device)
        return self._reward_out.copy_(super()._get_rewards())


@needs_jax
def test_jax_wrapper_gets_copies_of_the_envs_reused_buffers() -> None:
    """skrl-JAX's wrapper shares memory with what the env returns (DLPack); the env reuses its
    done buffers (and mjlab its reward buffer). A step's JAX arrays must not change at the next."""
    jax_on_cpu()
    import jax.numpy as jnp

    from islab.libs.skrl_jax import wrap_for_jax

    env = _ReusedRewardCartpole(CartpoleEnvCfg(num_envs=16, seed=0))
    done_buffers = (env.reset_terminated, env.reset_time_outs, env.reset_buf)
    wrapped = wrap_for_jax(env)
    wrapped.reset()
    env.episode_length_buf.copy_(torch.arange(16) * (env.max_episode_length // 16))  # dones at most steps
    _, reward, terminated, truncated, _ = env.step(torch.zeros(16, 1))
    for tensor in (reward, terminated, truncated):  # what the skrl wrapper receives: the env's own?
        assert tensor.data_ptr() not in {buffer.data_ptr() for buffer in (*done_buffers, env._reward_out)}
    steps = [wrapped.step(jnp.linspace(-1.0, 1.0, 16).reshape(16, 1)) for _ in range(30)]
    kept = [[np.array(array) for array in step[1:4]] for step in steps]  # copies of each step's values
    wrapped.step(jnp.zeros((16, 1)))
    for step, values in zip(steps, kept, strict=True):
        for array, value in zip(step[1:4], values, strict=True):
            np.testing.assert_array_equal(np.asarray(array), value)
    assert any(value.any() for values in kept for value in values[1:])  # some episodes did end


@needs_jax
@pytest.mark.parametrize("time_limit_bootstrap", [False, True])
def test_jax_scanned_gae_equals_skrls_to_float32_rounding(time_limit_bootstrap: bool) -> None:
    """Our lax.scan GAE (fast to compile) gives skrl's unrolled loop's returns and advantages. Not
    bitwise: XLA fuses the two programs differently (fused multiply-adds on CPUs that have them),
    which moved results by 1-2 float32 ulps on this project's newer CI machines."""
    jax_on_cpu()
    import jax.numpy as jnp

    from islab.libs import skrl_jax_gae, skrl_jax_ppo

    rng = np.random.default_rng(0)
    steps, envs = 8, 16
    rewards, values = (jnp.asarray(rng.normal(size=(steps, envs, 1)).astype(np.float32)) for _ in range(2))
    terminated, truncated = (jnp.asarray(rng.random((steps, envs, 1)) < 0.2).astype(jnp.int8) for _ in range(2))
    last_values = jnp.asarray(rng.normal(size=(envs, 1)).astype(np.float32))
    args = dict(rewards=rewards, terminated=terminated, truncated=truncated, values=values, last_values=last_values,
                discount_factor=0.99, lambda_coefficient=0.95, time_limit_bootstrap=time_limit_bootstrap)  # fmt: skip
    for ours, skrls in zip(skrl_jax_gae.scanned_gae(**args), skrl_jax_ppo.skrl_compute_gae(**args), strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(skrls), rtol=1e-6, atol=1e-6)


@needs_jax
def test_jax_library_state_holds_the_trained_optimizer(trained_jax):
    """skrl's update replaces agent.policy_optimizer (an immutable pytree) but not the entry in
    checkpoint_modules: a checkpoint must hold the Adam moments training left, not the initial ones."""
    import jax

    adapter, _, _ = trained_jax
    state = adapter.library_state()
    for name in ("policy_optimizer", "value_optimizer"):
        if name not in state:
            continue
        leaves = [leaf for leaf in jax.tree.leaves(state[name]) if hasattr(leaf, "abs")]
        assert leaves and any(float(leaf.abs().sum()) > 0 for leaf in leaves), f"{name} is still the initial state"


@needs_jax
def test_jax_policy_noise_stream_continues_across_a_resume(trained_jax, tmp_path):
    """The Gaussian policy's own key and call counter travel with the rank's RNG state, so a resumed
    run draws the next action noise, not the first again."""
    import numpy as np

    adapter, _, _ = trained_jax
    saved = adapter.extra_rng_state()
    fresh = build("jax", tmp_path / "fresh")
    assert fresh.agent.policy._g_i != adapter.agent.policy._g_i  # training advanced the counter
    fresh.load_extra_rng_state(saved)
    assert fresh.agent.policy._g_i == adapter.agent.policy._g_i
    assert np.array_equal(np.asarray(fresh.agent.policy._g_key), np.asarray(adapter.agent.policy._g_key))


def test_skrl_logs_plain_text_into_a_pipe_and_no_false_gpu_warning_for_a_cpu_env() -> None:
    """skrl colours its lines with ANSI codes even into pipes and rank logs, and warns that 'Isaac Lab
    runs on GPU, but there is no GPU backend for JAX' for every CPU run: plain text, no false alarm."""
    import io
    import logging

    import skrl  # noqa: F401 -- makes skrl's logger and its colouring handler

    from islab.libs._skrl_common import quiet_skrl_logging

    logger = logging.getLogger("skrl")
    stream = io.StringIO()
    coloured = logging.StreamHandler(stream)
    coloured.setFormatter(logger.handlers[0].formatter)  # skrl's own formatter, as a rank's stderr has it
    logger.addHandler(coloured)
    filters = list(logger.filters)
    try:
        quiet_skrl_logging("cpu")
        logger.warning("Isaac Lab runs on GPU, but there is no GPU backend for JAX. JAX operations will run on CPU.")
        logger.warning("a real warning")
    finally:
        logger.removeHandler(coloured)
        logger.filters[:] = filters
    text = stream.getvalue()
    assert "[skrl:WARNING] a real warning" in text
    assert "\x1b[" not in text and "no GPU backend" not in text
