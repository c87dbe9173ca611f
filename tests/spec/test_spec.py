"""spec.py: precedence, the schema, and the human error messages."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from islab.resolve.resolve import Provided, Source, resolve_spec
from islab.spec.addresses import is_valid_host, split_host_port
from islab.spec.fields import DEFAULT_TASK, FALLBACK_NUM_ENVS
from islab.spec.issues import SpecError, mask_env
from islab.spec.run_spec import RunSpec
from islab.tasks import TASKS, default_num_envs


def cli(**values: object) -> dict[str, Provided]:
    return {name.replace("__", "."): Provided(value, f"--{name}") for name, value in values.items()}


def env(**values: object) -> dict[str, Provided]:
    return {name.replace("__", "."): Provided(value, f"ISLAB_{name.upper()}") for name, value in values.items()}


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def errors_of(**kwargs: object) -> str:
    with pytest.raises(SpecError) as caught:
        resolve_spec(**kwargs)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "pydantic" not in text.lower() and "validation error" not in text.lower()
    for line in text.splitlines():
        assert line.startswith("error: ")
    return text


# ----------------------------------------------------------------------------------------------
# Defaults and precedence
# ----------------------------------------------------------------------------------------------


def test_defaults():
    resolved = resolve_spec()
    spec = resolved.spec
    assert (spec.lib, spec.ml_framework, spec.task) == ("rsl_rl", "torch", "Islab-Cartpole-v0")
    assert (spec.num_envs, spec.seed, spec.max_iterations) == (4096, 42, 150)
    assert (spec.nnodes, spec.nproc_per_node, spec.device, spec.max_restarts) == (1, 1, "cuda", 0)
    assert spec.rendezvous.backend == "static" and spec.rendezvous.master_port is None
    assert spec.log_dir == "logs" and spec.node_rank is None
    assert all(source is Source.DEFAULT for _, _, source in resolved.explain())


def test_precedence_cli_over_env_over_file_over_default(tmp_path):
    path = write(tmp_path, "num_envs: 32\nseed: 7\nmax_iterations: 9\n")
    resolved = resolve_spec(cli(num_envs=16), env(num_envs=64, seed=8), path)
    spec = resolved.spec
    assert (spec.num_envs, spec.seed, spec.max_iterations, spec.nnodes) == (16, 8, 9, 1)
    assert resolved.sources["num_envs"] is Source.CLI
    assert resolved.sources["seed"] is Source.ENV
    assert resolved.sources["max_iterations"] is Source.FILE
    assert "nnodes" not in resolved.sources
    rows = {name: source for name, _, source in resolved.explain()}
    assert rows["nnodes"] is Source.DEFAULT and rows["num_envs"] is Source.CLI


def test_rendezvous_is_merged_field_by_field(tmp_path):
    path = write(tmp_path, "nnodes: 2\nrendezvous: {master_addr: 10.0.0.1, master_port: 5555}\n")
    resolved = resolve_spec(cli(rendezvous__master_port=6000), cluster_file=path)
    assert resolved.spec.rendezvous.master_addr == "10.0.0.1"
    assert resolved.spec.rendezvous.master_port == 6000
    assert resolved.sources["rendezvous.master_addr"] is Source.FILE
    assert resolved.sources["rendezvous.master_port"] is Source.CLI


# A task whose default env count is not the schema's fallback: a default of 24 can only come from it.
SMALL_TASK_MODULE = """
import gymnasium as gym


class SmallCfg:
    num_envs = 24


gym.register(id="Small-Cartpole-v0", entry_point="islab.tasks.cartpole.cartpole_env:CartpoleEnv",
             kwargs={"env_cfg_entry_point": "small_tasks:SmallCfg",
                     "rsl_rl_cfg_entry_point": "islab.tasks.cartpole.agents:rsl_rl_ppo_cfg.yaml"})
"""


def test_num_envs_default_follows_the_task(tmp_path, monkeypatch):
    (tmp_path / "small_tasks.py").write_text(SMALL_TASK_MODULE)
    monkeypatch.chdir(tmp_path)
    # --task-module adds the working directory to sys.path and its task to the registry: undone after.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(TASKS, "_entries", dict(TASKS.entries))
    monkeypatch.setattr(TASKS, "_modules", list(TASKS._modules))
    resolved = resolve_spec(cli(task="Small-Cartpole-v0", task_module="small_tasks"))
    assert resolved.spec.num_envs == 24 != FALLBACK_NUM_ENVS


def test_the_schemas_fallback_env_count_is_the_default_tasks():
    """The schema reads no task: where no task's default reaches ``num_envs`` (a spec built in code, a
    user's entry point) its fallback stands, and ``--help`` states it as the default task's count."""
    assert RunSpec().num_envs == FALLBACK_NUM_ENVS == default_num_envs(DEFAULT_TASK)


def test_spec_is_frozen_and_strict():
    spec = resolve_spec().spec
    with pytest.raises(ValidationError):
        spec.num_envs = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["X"] = "1"  # type: ignore[index]
    with pytest.raises(ValidationError):
        RunSpec(bogus=1)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------------------------
# The file
# ----------------------------------------------------------------------------------------------


def test_unknown_key_suggests_the_close_match(tmp_path):
    text = errors_of(cluster_file=write(tmp_path, "nnode: 2\n"))
    assert "unknown key 'nnode'" in text and "did you mean 'nnodes'?" in text


def test_unknown_nested_key_suggests_the_close_match(tmp_path):
    text = errors_of(cluster_file=write(tmp_path, "rendezvous:\n  mastr_addr: 10.0.0.1\n"))
    assert "rendezvous.mastr_addr" in text and "did you mean 'master_addr'?" in text


def test_malformed_yaml_names_the_line(tmp_path):
    text = errors_of(cluster_file=write(tmp_path, "lib: rsl_rl\nnnodes: [2\nseed: 1\n"))
    assert "malformed YAML at line" in text
    assert "cluster.yaml" in text


@pytest.mark.parametrize(("content", "words"), [("- a\n- b\n", "a list, not a mapping"), ("", "empty")])
def test_file_that_is_not_a_mapping(tmp_path, content, words):
    assert words in errors_of(cluster_file=write(tmp_path, content))


def test_missing_and_unreadable_file(tmp_path):
    assert "does not exist" in errors_of(cluster_file=tmp_path / "nope.yaml")
    assert "cannot read the file" in errors_of(cluster_file=tmp_path)  # a directory


# ----------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["num_envs", "max_iterations", "nnodes", "nproc_per_node"])
def test_counts_below_one(field):
    text = errors_of(cli=cli(**{field: 0}))
    assert f"error: {field} (--{field}): must be at least 1, got 0." in text


@pytest.mark.parametrize("value", ["64", 6.5, True])
def test_wrong_types_in_the_file(tmp_path, value):
    path = write(tmp_path, f"num_envs: {value!r}\n" if isinstance(value, str) else f"num_envs: {str(value).lower()}\n")
    text = errors_of(cluster_file=path)
    assert "cluster.yaml: num_envs: expected a whole number" in text


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_port_out_of_range(port):
    text = errors_of(cli=cli(rendezvous__master_port=port))
    assert "rendezvous.master_port" in text and "1–65535" in text


def test_node_rank_outside_nnodes():
    text = errors_of(cli=cli(nnodes=2, node_rank=2, rendezvous__master_addr="10.0.0.1"))
    assert "node_rank" in text and "outside [0, 2)" in text


def test_multinode_static_needs_master_addr_and_c10d_needs_endpoint():
    assert "--master-addr" in errors_of(cli=cli(nnodes=2))
    assert "--rdzv-endpoint" in errors_of(cli=cli(nnodes=2, rendezvous__backend="c10d"))


@pytest.mark.parametrize("lib", ["rl_games", "rsl_rl"])
def test_jax_only_with_skrl(lib):
    text = errors_of(cli=cli(lib=lib, ml_framework="jax"))
    assert f"jax only works with skrl, not {lib}" in text


@pytest.mark.parametrize(
    "extra",
    [
        {"rendezvous__backend": "c10d"},
        {"rendezvous__endpoint": "h:1"},
        {"rendezvous__id": "x"},
        {"rendezvous__master_addr": "10.0.0.1"},
        {"rendezvous__master_port": 1234},
        {"max_restarts": 1},
        {"rendezvous__last_call_s": 5},
        {"virtual_local_rank": True},
        {"monitor_interval_s": 0.5},
        {"start_method": "fork"},
    ],
)
def test_torchrun_options_are_rejected_for_jax(extra):
    text = errors_of(cli=cli(lib="skrl", ml_framework="jax", **extra))
    assert "is a torchrun option" in text
    assert "--coordinator-address" in text or "skrl's JAX launcher has no such option" in text


def test_coordinator_address_only_for_jax_and_required_multinode():
    assert "only applies to skrl with JAX" in errors_of(cli=cli(coordinator_address="10.0.0.1:5000"))
    assert "coordinator address" in errors_of(cli=cli(lib="skrl", ml_framework="jax", nnodes=2))


def test_static_and_c10d_options_do_not_mix():
    assert "only applies to the c10d rendezvous" in errors_of(cli=cli(rendezvous__endpoint="h:29400"))
    text = errors_of(cli=cli(rendezvous__last_call_s=5))
    assert "rendezvous.last_call_s" in text and "only applies to the c10d rendezvous" in text
    text = errors_of(cli=cli(rendezvous__backend="c10d", rendezvous__master_port=29500))
    assert "only applies to the static rendezvous" in text


def test_unknown_task_and_library_suggest(tmp_path):
    assert "did you mean 'Islab-Cartpole-v0'?" in errors_of(cli=cli(task="Islab-Cartpol-v0"))
    text = errors_of(cluster_file=write(tmp_path, "lib: rsl-rl\n"))
    assert "'rsl-rl' is not one of rl_games, rsl_rl, skrl" in text and "did you mean 'rsl_rl'?" in text


@pytest.mark.parametrize("name", ["a;rm -rf ~", "two words", "x\ny", "trailing\n", "$(reboot)", "..", "a/b"])
def test_run_name_rejects_shell_characters(name):
    assert "run_name" in errors_of(cli=cli(run_name=name))


def test_run_name_accepts_plain_names():
    assert resolve_spec(cli(run_name="baseline_2gpu-v1.0")).spec.run_name == "baseline_2gpu-v1.0"


@pytest.mark.parametrize("host", ["10.0.0.1", "node0", "node0.cluster.example", "::1", "fe80::1"])
def test_valid_hosts(host):
    assert is_valid_host(host)


@pytest.mark.parametrize("host", ["a b", "$(reboot)", "x;y", "host\n", "-n", "", "a..b", "x" * 64])
def test_invalid_hosts(host):
    assert not is_valid_host(host)
    assert "master_addr" in errors_of(cli=cli(nnodes=2, rendezvous__master_addr=host))


def test_host_port_parsing():
    assert split_host_port("node0:29400") == ("node0", 29400)
    assert split_host_port("[::1]:5000") == ("::1", 5000)
    for bad in ["node0", "node0:", "node0:99999", "a b:1", "::1:5000"]:
        with pytest.raises(ValueError):
            split_host_port(bad)
    assert "host:port" in errors_of(cli=cli(rendezvous__backend="c10d", rendezvous__endpoint="node0"))


def test_env_mapping(tmp_path):
    spec = resolve_spec(cluster_file=write(tmp_path, "env: {NCCL_P2P_DISABLE: 1, NCCL_DEBUG: INFO}\n")).spec
    assert dict(spec.env) == {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"}
    assert "Quote it" in errors_of(cluster_file=write(tmp_path, "env: {FLAG: yes}\n"))
    assert "set per rank by the launcher" in errors_of(cluster_file=write(tmp_path, "env: {RANK: '3'}\n"))
    assert "not a valid environment variable name" in errors_of(cluster_file=write(tmp_path, "env: {'A-B': x}\n"))


def test_overrides_must_be_key_value():
    overrides = ("algorithm.learning_rate=1e-4", "logger=x=y")
    assert resolve_spec(cli(overrides=overrides)).spec.overrides == overrides
    for bad in ["novalue", "=1", "a b=1", "--flag"]:
        assert "is not key=value" in errors_of(cli=cli(overrides=(bad,)))


def test_secrets_are_masked_in_plain_output(tmp_path):
    path = write(tmp_path, "env: {WANDB_API_KEY: abc, HF_TOKEN: t, my_password: p, NCCL_DEBUG: INFO}\n")
    spec = resolve_spec(cluster_file=path).spec
    assert spec.env["WANDB_API_KEY"] == "abc"  # the real value is kept for the launch
    plain = spec.to_plain()["env"]
    assert plain == {"WANDB_API_KEY": "****", "HF_TOKEN": "****", "my_password": "****", "NCCL_DEBUG": "INFO"}
    assert mask_env({"Secret_Thing": "s"}) == {"Secret_Thing": "****"}


def test_several_problems_are_all_reported_one_line_each(tmp_path):
    text = errors_of(cluster_file=write(tmp_path, "num_envs: 0\nseed: x\n"))
    assert len(text.splitlines()) == 2


def test_override_of_an_unknown_agent_config_key_names_it_and_the_close_match():
    message = errors_of(cli=cli(overrides=("algorithm.learnig_rate=1e-4",)))
    assert "override 'algorithm.learnig_rate=1e-4'" in message
    assert "Did you mean 'algorithm.learning_rate'?" in message


# ----------------------------------------------------------------------------------------------
# Rendezvous timeout and elastic node counts
# ----------------------------------------------------------------------------------------------


def test_rendezvous_timeout_default_layers_and_minimum(tmp_path):
    assert resolve_spec().spec.rendezvous.timeout_s is None  # the launcher's own default
    path = write(tmp_path, "rendezvous:\n  timeout_s: 60\n")
    assert resolve_spec(cluster_file=path).spec.rendezvous.timeout_s == 60
    assert resolve_spec(env=env(rendezvous__timeout_s=30), cluster_file=path).spec.rendezvous.timeout_s == 30
    both = resolve_spec(cli(rendezvous__timeout_s=9), env(rendezvous__timeout_s=30), path)
    assert both.spec.rendezvous.timeout_s == 9 and both.sources["rendezvous.timeout_s"] is Source.CLI
    assert "must be at least 1, got 0" in errors_of(cli=cli(rendezvous__timeout_s=0))
    # it applies to skrl-JAX too (the supervisor enforces it), unlike the torchrun-only fields
    jax = resolve_spec(cli(lib="skrl", ml_framework="jax", rendezvous__timeout_s=20)).spec
    assert jax.rendezvous.timeout_s == 20


def test_elastic_nnodes_range_with_c10d():
    spec = resolve_spec(
        cli(nnodes="1:3", rendezvous__backend="c10d", rendezvous__endpoint="node0:29400", node_rank=2)
    ).spec
    assert (spec.min_nnodes, spec.nnodes, spec.nnodes_text, spec.elastic) == (1, 3, "1:3", True)
    assert spec.model_dump()["nnodes"] == "1:3" and "min_nnodes" not in spec.model_dump()
    # round trip: the dump carries every input (the rollout length is the agent config's, read by resolution)
    assert RunSpec.model_validate(spec.model_dump()).model_dump() == spec.model_dump()
    fixed = resolve_spec(cli(nnodes="2:2", rendezvous__master_addr="10.0.0.1")).spec
    assert (fixed.nnodes, fixed.min_nnodes, fixed.elastic) == (2, None, False)


@pytest.mark.parametrize(
    ("value", "words"),
    [("2:1", "MIN is larger than MAX"), ("0:2", "MIN and MAX must both be at least 1"), ("1-2", "MIN:MAX")],
)
def test_bad_node_ranges(value, words):
    text = errors_of(cli=cli(nnodes=value, rendezvous__backend="c10d", rendezvous__endpoint="h:1"))
    assert words in text and "nnodes (--nnodes)" in text


def test_node_rank_is_checked_against_max_nodes():
    rdzv = {"rendezvous__backend": "c10d", "rendezvous__endpoint": "h:1"}
    assert resolve_spec(cli(nnodes="1:2", node_rank=1, **rdzv)).spec.node_rank == 1
    assert "outside [0, 2)" in errors_of(cli=cli(nnodes="1:2", node_rank=2, **rdzv))


def test_node_range_needs_c10d():
    static = errors_of(cli=cli(nnodes="1:2", rendezvous__master_addr="10.0.0.1"))
    assert "needs torchrun's c10d rendezvous" in static and "--rdzv-backend c10d" in static
    jax = errors_of(cli=cli(nnodes="1:2", lib="skrl", ml_framework="jax", coordinator_address="h:1"))
    assert "skrl's JAX launcher needs a fixed number of nodes" in jax


def test_node_range_in_yaml_must_be_quoted_and_min_nnodes_is_not_a_key(tmp_path):
    unquoted = write(tmp_path, "nnodes: 1:2\nrendezvous:\n  backend: c10d\n  endpoint: h:1\n")
    text = errors_of(cluster_file=unquoted)
    assert "read by YAML as the number 62" in text and 'nnodes: "1:2"' in text
    quoted = write(tmp_path, 'nnodes: "1:2"\nrendezvous:\n  backend: c10d\n  endpoint: h:1\n', "ok.yaml")
    assert resolve_spec(cluster_file=quoted).spec.nnodes_text == "1:2"
    assert "min_nnodes: is not a key of the spec" in errors_of(
        cluster_file=write(tmp_path, "min_nnodes: 1\n", "min.yaml")
    )


def test_command_line_node_count_replaces_a_range_from_the_file(tmp_path):
    path = write(tmp_path, 'nnodes: "1:2"\nrendezvous:\n  backend: c10d\n  endpoint: h:1\n')
    spec = resolve_spec(cli(nnodes=2), cluster_file=path).spec
    assert (spec.nnodes, spec.elastic) == (2, False)


# ----------------------------------------------------------------------------------------------
# total_env_steps: a sample budget instead of max_iterations
# ----------------------------------------------------------------------------------------------


def test_total_env_steps_defaults_to_none_and_follows_the_precedence(tmp_path):
    assert resolve_spec().spec.total_env_steps is None
    path = write(tmp_path, "total_env_steps: 3000\n")
    assert resolve_spec(cluster_file=path).sources["total_env_steps"] is Source.FILE
    resolved = resolve_spec(None, env(total_env_steps=2000), path)
    assert (resolved.spec.total_env_steps, resolved.sources["total_env_steps"]) == (2000, Source.ENV)
    resolved = resolve_spec(cli(total_env_steps=1000), env(total_env_steps=2000), path)
    assert (resolved.spec.total_env_steps, resolved.sources["total_env_steps"]) == (1000, Source.CLI)
    assert resolved.sources.get("max_iterations", Source.DEFAULT) is Source.DEFAULT
    # the iterations are the worker's to derive: the printed/recorded spec does not claim 150
    assert resolved.spec.to_plain()["max_iterations"] is None
    assert resolve_spec().spec.to_plain()["max_iterations"] == 150


@pytest.mark.parametrize(
    ("layers", "origin"),
    [
        ({"cli": {"total_env_steps": 1000, "max_iterations": 5}}, "(given by --max_iterations)"),
        ({"env": {"total_env_steps": 1000, "max_iterations": 5}}, "(given by ISLAB_MAX_ITERATIONS)"),
        ({"file": "total_env_steps: 1000\nmax_iterations: 150\n"}, "(given by cluster.yaml: max_iterations)"),
    ],
    ids=["cli", "env", "file"],
)
def test_total_env_steps_with_max_iterations_in_the_same_layer_is_an_error(tmp_path, layers, origin):
    kwargs: dict[str, object] = {}
    if "cli" in layers:
        kwargs["cli"] = cli(**layers["cli"])
    if "env" in layers:
        kwargs["env"] = env(**layers["env"])
    if "file" in layers:
        kwargs["cluster_file"] = write(tmp_path, layers["file"])
    message = errors_of(**kwargs)
    (line,) = message.splitlines()
    label, _, problem = line.removeprefix("error: ").partition(": is a sample budget")
    assert "total_env_steps" in label and "max_iterations" not in label
    assert "cannot be combined with max_iterations" in problem and origin in problem
    assert line.endswith("or max_iterations to train that many iterations on every rank.")


def test_a_higher_layer_decides_between_budget_and_iterations(tmp_path):
    # the shipped cluster files set max_iterations; --total-env-steps on the command line wins
    path = write(tmp_path, "max_iterations: 150\n")
    resolved = resolve_spec(cli(total_env_steps=1000), None, path)
    assert (resolved.spec.total_env_steps, resolved.sources["total_env_steps"]) == (1000, Source.CLI)
    assert "max_iterations" not in resolved.sources
    # ... and the other way round: an explicit --max-iterations beats a budget from the environment
    resolved = resolve_spec(cli(max_iterations=5), env(total_env_steps=1000))
    assert (resolved.spec.max_iterations, resolved.spec.total_env_steps) == (5, None)
    assert resolved.sources["max_iterations"] is Source.CLI and "total_env_steps" not in resolved.sources


def test_total_env_steps_must_be_a_positive_whole_number():
    assert "must be at least 1, got 0" in errors_of(cli=cli(total_env_steps=0))
    assert "expected a whole number" in errors_of(cli=cli(total_env_steps="1e6"))


def test_a_rollout_length_override_that_cannot_make_a_budget_is_refused():
    message = errors_of(cli=cli(total_env_steps=1000, overrides=("num_steps_per_env=0",)))
    assert message.startswith("error: num_steps_per_env: the rollout length") and "got 0" in message
    message = errors_of(cli=cli(lib="skrl", overrides=("agent.rollouts=many",)))
    assert "agent.rollouts" in message
