"""Each step of resolution alone (islab/resolve): sources -> merge -> presets -> derived values ->
validation -> checks -> node agreement, over immutable values, with the machine replaced by an
in-memory edge (no file is read, nothing is probed). The whole pipeline through the real command
line is compared against recorded output in test_dry_run_golden.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from islab.resolve.agreement import node_agreement_issue
from islab.resolve.allocations import ALLOCATION_READERS, AllocationReader, active_allocations
from islab.resolve.layers import Layer, Merged, Provided, Source, chosen_values, merge
from islab.resolve.pipeline import Inputs, resolve
from islab.resolve.sources import AllocationSource, allocation_layers, cluster_layer, resume_value
from islab.resolve.steps import apply_presets, derive, disk_issue, resumed_issue, validate
from islab.spec.agent_config import AgentConfigError
from islab.spec.issues import SpecError

CPU_FILE = "lib: rsl_rl\nnnodes: 2\nnproc_per_node: 2\ndevice: cpu\nseed: 42\nrendezvous:\n  master_addr: 10.0.0.1\n"


def layer(source: Source, origin: str = "", **values: Any) -> Layer:
    return Layer(source, {name: Provided(value, origin or f"{source.value}:{name}") for name, value in values.items()})


class MemoryEdge:
    """The machine, answered from memory: every read and probe the pipeline may make."""

    isaaclab = SimpleNamespace(
        locate=lambda value, python, env: None,  # a 2.x checkout (Isaac Lab 3: tests/resolve/test_isaaclab3_preset.py)
        preset_problem=lambda directory, lib, framework: None if directory == "/isaaclab" else "no Isaac Lab. Fix it",
        unknown_task_problem=lambda task, directory: None,
        isaaclab_entry=lambda directory, lib, framework, **kw: SimpleNamespace(
            script=Path(directory, "train.py"), args=("--task", kw["task"], "--headless")
        ),
    )

    def __init__(self, **answers: Any) -> None:
        self.files: dict[str, str] = answers.get("files", {})
        self.stored: dict[str, tuple[Any, str]] = answers.get("stored", {})
        self.checkpoints: set[str] = answers.get("checkpoints", set())
        self.missing: str | None = answers.get("missing_extra")
        self.installed: set[str] = answers.get("installed", {"wandb"})
        self.configured: Sequence[str] = answers.get("configured", ("rl_games", "rsl_rl", "skrl"))
        self.rollout: AgentConfigError | None = answers.get("rollout")
        self.task_problems: dict[str, tuple[str, str]] = answers.get("task_problems", {})
        self.asked: list[str] = []

    def read_cluster_file(self, path: Path) -> str:
        self.asked.append(f"read {path}")
        return self.files[str(path)]

    def resumed_run(self, resume: Any) -> tuple[Path | None, dict[str, tuple[Any, str]]]:
        return (Path(resume), self.stored) if resume is not None and self.stored else (None, {})

    def add_task_module(self, module: str) -> None:
        self.asked.append(f"task module {module}")

    def task_ids(self) -> Sequence[str]:
        return ("Islab-Cartpole-v0", "Other-v0")

    def task_default_envs(self, task: str) -> int | None:
        return {"Islab-Cartpole-v0": 4096, "Other-v0": 7}.get(task)

    def task_problem(self, task: str) -> tuple[str, str] | None:
        return self.task_problems.get(task)

    def checkpoint_exists(self, path: str) -> bool:
        return path in self.checkpoints

    def missing_extra(self, task: str) -> str | None:
        return self.missing

    def module_installed(self, name: str) -> bool:
        return name in self.installed

    def configured_libraries(self, task: str) -> Sequence[str]:
        return self.configured

    def rollout_problem(self, lib: str, task: str, overrides: Sequence[str]) -> AgentConfigError | None:
        return self.rollout

    def rollout_length(self, lib: str, task: str, overrides: Sequence[str]) -> int:
        return 16

    def agent_config_path(self, lib: str, task: str) -> Path:
        return Path(f"/agents/{lib}.yaml")


# -- layers and merging --------------------------------------------------------------------------------


def test_merge_takes_each_field_from_the_highest_layer_with_its_source_and_origin() -> None:
    merged = merge((
        layer(Source.CLI, "--seed", seed=1),
        layer(Source.SLURM, "SLURM_NODEID", node_rank=2, seed=2),
        layer(Source.ENV, "ISLAB_NUM_ENVS", num_envs=3, node_rank=3),
        layer(Source.FILE, "c.yaml: nnodes", nnodes=4, num_envs=4),
        layer(Source.RESUMED, "launch.yaml: lib", lib="skrl", nnodes=5),
    ))  # fmt: skip
    assert merged.values == {"lib": "skrl", "nnodes": 4, "num_envs": 3, "node_rank": 2, "seed": 1}
    assert merged.sources == {"lib": Source.RESUMED, "nnodes": Source.FILE, "num_envs": Source.ENV,
                              "node_rank": Source.SLURM, "seed": Source.CLI}  # fmt: skip
    assert merged.origins["node_rank"] == "SLURM_NODEID"


def test_a_higher_layers_training_length_replaces_the_rival_field_below() -> None:
    merged = merge((layer(Source.CLI, total_env_steps=1000), layer(Source.FILE, max_iterations=5)))
    assert "max_iterations" not in merged and merged.get("total_env_steps") == 1000


def test_merged_values_are_immutable_and_changes_make_a_new_value() -> None:
    merged = merge((layer(Source.CLI, seed=1),))
    with pytest.raises(TypeError):
        merged.values["seed"] = 2  # type: ignore[index]
    changed = merged.with_changes({"seed": 2}, {"seed": Source.ENV})
    assert (merged.get("seed"), changed.get("seed"), changed.sources["seed"]) == (1, 2, Source.ENV)


# -- sources -------------------------------------------------------------------------------------------


def test_a_cluster_files_text_becomes_a_flat_layer_without_touching_the_disk() -> None:
    file = cluster_layer(CPU_FILE, Path("/nowhere/c.yaml"))
    assert file.source is Source.FILE and file.values["rendezvous.master_addr"] == Provided(
        "10.0.0.1", "c.yaml: rendezvous.master_addr"
    )
    with pytest.raises(SpecError, match="Quote it"):
        cluster_layer("nnodes: 1:2\n", Path("c.yaml"))
    with pytest.raises(SpecError, match="the file is empty"):
        cluster_layer("", Path("c.yaml"))


def test_resume_comes_from_the_highest_layer_that_gives_it() -> None:
    layers = (layer(Source.CLI), layer(Source.ENV, resume="/env-run"), layer(Source.FILE, resume="/file-run"))
    assert resume_value(layers) == "/env-run" and resume_value((layer(Source.CLI),)) is None


def test_every_allocation_reader_is_consulted_and_a_new_scheduler_is_one_more_entry() -> None:
    seen: list[dict[str, Any]] = []

    class Placement:  # what a reader returns: an allocation with .layer(chosen)
        def layer(self, chosen: dict[str, Any]) -> dict[str, Provided]:
            seen.append(dict(chosen))
            return {"node_rank": Provided(3, "POD_INDEX")}

    pods = AllocationReader("pods", Source.SLURM, lambda environ: "POD_INDEX" in environ, lambda environ: Placement())
    readers = (*ALLOCATION_READERS, pods)
    assert active_allocations({}, {}, readers) == ()  # neither srun nor a pod: no allocation
    (found,) = active_allocations({"slurm": None}, {"POD_INDEX": "3"}, readers)
    layers = allocation_layers((found,), (layer(Source.FILE, lib="skrl"), layer(Source.CLI, lib="rl_games")))
    assert layers[0].values["node_rank"].value == 3 and seen == [{"lib": "rl_games"}]  # the CLI's choice won
    assert active_allocations({"pods": False}, {"POD_INDEX": "3"}, readers) == ()  # --no-pods


def test_the_srun_reader_switches_on_under_srun_and_off_with_no_slurm() -> None:
    srun = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "gpu01"}  # fmt: skip
    (allocation,) = active_allocations({}, srun)
    assert allocation.source is Source.SLURM and allocation.build({})["node_rank"].value == 0
    assert active_allocations({"slurm": False}, srun) == ()
    assert chosen_values((layer(Source.FILE, seed=1), layer(Source.CLI, seed=2))) == {"seed": 2}


# -- presets, derived values, validation ----------------------------------------------------------------


def test_presets_rewrite_a_copy_and_leave_their_input_as_it_was() -> None:
    given = merge((layer(Source.CLI, "--mjlab", mjlab=True, task="Mjlab-Cartpole-Balance", num_envs=8),))
    merged = apply_presets(given, MemoryEdge())
    assert merged.values["entrypoint"] == {"command": "train"} and "num_envs" not in merged
    assert given.values["num_envs"] == 8 and "entrypoint" not in given
    isaac = apply_presets(merge((layer(Source.ENV, isaaclab="/isaaclab", task="Isaac-Cartpole-v0"),)), MemoryEdge())
    assert isaac.values["entrypoint"] == {"script": "/isaaclab/train.py"} and isaac.sources["args"] is Source.ENV
    with pytest.raises(SpecError, match="no Isaac Lab"):
        apply_presets(merge((layer(Source.CLI, isaaclab="/elsewhere", task="T"),)), MemoryEdge())


def test_the_default_environment_count_is_the_tasks_and_filled_only_when_not_given() -> None:
    edge = MemoryEdge()
    assert derive(Merged({"task": "Other-v0"}), edge.task_default_envs).values["num_envs"] == 7
    assert derive(Merged({}), edge.task_default_envs).values["num_envs"] == 4096  # the default task's
    assert derive(Merged({"num_envs": 3}), edge.task_default_envs).values["num_envs"] == 3
    assert "num_envs" not in derive(Merged({"entrypoint": {"script": "t.py"}}), edge.task_default_envs)
    assert "num_envs" not in derive(Merged({"task": "Unknown-v0"}), edge.task_default_envs)


def test_validation_names_the_field_as_the_user_gave_it() -> None:
    spec = validate(Merged({"num_envs": 4, "seed": 1}))
    assert (spec.num_envs, spec.seed) == (4, 1)
    with pytest.raises(SpecError) as caught:
        validate(Merged({"num_envs": -1}, {"num_envs": Source.ENV}, {"num_envs": "ISLAB_NUM_ENVS"}))
    assert caught.value.issues[0].field == "num_envs (ISLAB_NUM_ENVS)"


def test_the_task_is_checked_against_the_ids_the_edge_read() -> None:
    assert validate(Merged({"num_envs": 4, "task": "Other-v0"}), ("Islab-Cartpole-v0", "Other-v0")).task == "Other-v0"
    with pytest.raises(SpecError) as caught:
        validate(Merged({"num_envs": 4, "task": "Othr-v0"}, {}, {"task": "--task"}), ("Islab-Cartpole-v0", "Other-v0"))
    issue = caught.value.issues[0]
    assert (issue.field, issue.problem) == ("task (--task)", "unknown task 'Othr-v0'")
    assert "Other-v0" in issue.fix and "Known tasks: Islab-Cartpole-v0, Other-v0" in issue.fix
    assert validate(Merged({"num_envs": 4, "task": "Othr-v0"})).task == "Othr-v0"  # no ids: the schema cannot tell


# -- checks -------------------------------------------------------------------------------------------------


def test_a_resume_may_not_change_what_the_checkpoint_is_shaped_by() -> None:
    spec = validate(Merged({"lib": "skrl", "num_envs": 8}))
    stored = {"lib": ("rsl_rl", "launch.yaml: lib")}
    issue = resumed_issue(spec, stored, {"lib": "--lib"}, Path("/run"))
    assert issue is not None and "trained with lib 'rsl_rl'" in issue.problem
    assert resumed_issue(spec, stored, {}, None) is None  # not resuming a run directory


@pytest.mark.parametrize(
    ("spec_values", "edge", "field", "fragment"),
    [
        ({"resume": "/run"}, MemoryEdge(), "resume (--resume)", "neither a checkpoint file"),
        ({}, MemoryEdge(missing_extra="mjlab"), "task", "needs the [mjlab] extra"),
        ({"logger": "wandb"}, MemoryEdge(installed=set()), "logger", "wandb needs the [wandb] extra"),
        (
            {},
            MemoryEdge(task_problems={"Islab-Cartpole-v0": ("cannot be trained by islab", "x")}),
            "task",
            "cannot be trained",
        ),
        ({"lib": "skrl"}, MemoryEdge(configured=("rsl_rl",)), "lib", "has no skrl agent config"),
        ({}, MemoryEdge(rollout=AgentConfigError("override 'x=1'", "no key 'x'")), "override 'x=1'", "no key"),
    ],
)
def test_each_disk_rule_asks_the_edge(spec_values: dict, edge: MemoryEdge, field: str, fragment: str) -> None:
    spec = validate(Merged({"num_envs": 4, **spec_values}))
    issue = disk_issue(spec, edge, {"resume": "--resume"})
    assert issue is not None and issue.field == field and fragment in issue.problem
    assert disk_issue(validate(Merged({"num_envs": 4, "resume": "/run"})), MemoryEdge(checkpoints={"/run"}), {}) is None


def test_one_node_of_a_cluster_file_must_agree_with_it_on_shared_fields() -> None:
    file = cluster_layer(CPU_FILE, Path("c.yaml"))
    given = merge((layer(Source.CLI, "--seed", seed=7, node_rank=1), file))
    spec = validate(given.with_changes({"num_envs": 4}))
    issue = node_agreement_issue(spec, file, given, MemoryEdge().task_default_envs)
    assert issue is not None and issue.field == "seed (--seed)" and "the file's 42" in issue.problem
    same = merge((layer(Source.CLI, "--seed", seed=42, node_rank=1), file))
    assert node_agreement_issue(validate(same.with_changes({"num_envs": 4})), file, same, lambda task: 4) is None


# -- the pipeline -------------------------------------------------------------------------------------------


def test_the_pipeline_runs_from_memory_and_keeps_where_each_value_came_from() -> None:
    edge = MemoryEdge(files={"/c.yaml": CPU_FILE})
    allocation = AllocationSource(Source.SLURM, lambda chosen: {"nnodes": Provided(2, "SLURM_NNODES"),
                                                                 "node_rank": Provided(1, "SLURM_NODEID")})  # fmt: skip
    inputs = Inputs(layer(Source.CLI, "--seed", seed=7), layer(Source.ENV, "ISLAB_NNODES", nnodes=5), Path("/c.yaml"),
                    (allocation,))  # fmt: skip
    resolved = resolve(inputs, edge)
    assert (resolved.spec.seed, resolved.spec.nnodes, resolved.spec.node_rank) == (7, 2, 1)
    assert resolved.sources["nnodes"] is Source.SLURM and resolved.sources["device"] is Source.FILE
    assert resolved.origins["seed"] == "--seed" and edge.asked == ["read /c.yaml"]
    assert resolved.spec.rollout_length == 16  # the edge's, for the planner's budget
    with pytest.raises(SpecError, match="unknown task 'Nope-v0'"):  # the edge's ids
        resolve(Inputs(layer(Source.CLI, "--task", task="Nope-v0")), edge)
    script = resolve(Inputs(layer(Source.CLI, "--script", entrypoint={"script": "t.py"})), edge).spec
    assert script.rollout_length is None  # a user's entry point: no budget to count
    # without the allocation the same command line disagrees with the file: checked per node
    with pytest.raises(SpecError, match=r"every node of the c\.yaml job"):
        resolve(Inputs(layer(Source.CLI, "--seed", seed=7, node_rank=1), cluster_file=Path("/c.yaml")), edge)
