"""Isaac Lab's spellings typed to islab-train: ``--num_gpus 4``, ``--rl_library skrl``, ``--headless`` ...

A user coming from ``isaaclab train_multigpu`` (Isaac Lab 3, ``isaaclab/cli/multigpu.py``) or from the
2.x multi-GPU guide types its options; click would answer "No such option ... did you mean --help".
:func:`isaaclab_spelling_issue` names islab-train's option instead (exit 2, nothing launched):
:data:`LAUNCHER_FLAGS` holds every option of ``train_multigpu`` that islab-train spells otherwise (or
does itself), :data:`PRESET_FLAGS` / :data:`MAPPED_FLAGS` the trainer's flags the ``--isaaclab`` preset
writes, :data:`ISAACLAB_SCRIPT_FLAGS` the trainer's other flags, which go after ``--``.
docs/ISAACLAB.md has the same mapping as a table.
"""

from __future__ import annotations

from collections.abc import Sequence

from islab.rundir.layout import rank_log
from islab.spec.issues import Issue

RANK_LOGS = (
    f"islab-train writes every rank's output to {rank_log('<run dir>', '<R>')} and shows rank 0's on the console "
    "(--all-ranks: every rank's, prefixed [rank R]); a failing rank's traceback is shown either way"
)
# train_multigpu's options (3.0.0: build_parser) -> islab-train's, where the spelling differs.
LAUNCHER_FLAGS: dict[str, str] = {
    "rl_library": "islab-train's option is --lib {rl_games|rsl_rl|skrl} (default rsl_rl, as Isaac Lab's)",
    "num_gpus": "islab-train's option is --gpus N (N GPU ranks on this node; --gpus all: every visible GPU)",
    "nproc_per_node": "islab-train's options are --gpus N (GPU ranks) or --device cpu --nproc N (CPU ranks)",
    "node_rank": "islab-train's option is --node-rank R",
    "master_addr": "islab-train's option is --master-addr HOST",
    "master_port": "islab-train's option is --master-port PORT",
    "rdzv_backend": "islab-train's option is --rdzv-backend {static|c10d}",
    "rdzv_endpoint": "islab-train's option is --rdzv-endpoint HOST:PORT",
    "rdzv_id": "islab-train's option is --rdzv-id ID",
    "max_restarts": "islab-train's option is --max-restarts N",
    "coordinator_address": "islab-train's option is --coordinator-address HOST:PORT",
    "monitor_interval": "islab-train's option is --monitor-interval SECONDS",
    "start_method": "islab-train's option is --start-method {spawn|fork|forkserver}",
    "role": (
        "islab-train keeps torchrun's role name ('default'): its console and rank logs tell the ranks apart by "
        "torchrun's [default<local rank>] prefix; the role only names the worker group in torchrun's own messages"
    ),
    "virtual_local_rank": "islab-train's option is --virtual-local-rank (torchrun's)",
    "log_all_ranks": "islab-train's option is --all-ranks",
    "local_ranks_filter": f"{RANK_LOGS}",
    "tee": f"{RANK_LOGS}",
    "redirects": f"{RANK_LOGS}",
    "log_dir": f"{RANK_LOGS}; --log-dir DIR chooses where run directories go",
    "dry_run": "islab-train's option is --dry-run (--json for machines)",
}
# Flags of Isaac Lab's trainers that the --isaaclab preset passes itself when they are needed.
PRESET_FLAGS: dict[str, str] = {
    "distributed": "The --isaaclab preset passes --distributed to Isaac Lab's trainer itself (not for one CPU rank)",
    "headless": (
        "islab-train needs none: Isaac Lab 3 (--isaaclab auto) runs without a window unless asked with -- --viz "
        "NAME, and for a 2.x checkout (--isaaclab DIR) the preset passes --headless itself"
    ),
}
# The trainer's own options that islab-train maps from its own (the preset writes them).
MAPPED_FLAGS: dict[str, str] = {
    "num_envs": "--num-envs N",
    "max_iterations": "--max-iterations N",
    "ml_framework": "--ml-framework {torch|jax}",
}
# Flags of Isaac Lab's trainers (2.x train.py scripts, 3.x's unified trainer) and AppLauncher that
# users paste next to ours: they belong to the trainer, after `--`.
ISAACLAB_SCRIPT_FLAGS = frozenset({
    "distributed", "headless", "video", "video_length", "video_interval", "enable_cameras", "num_envs",
    "max_iterations", "ml_framework", "livestream", "experiment_name", "run_name", "checkpoint", "algorithm",
    "agent", "viz", "run_timestamp", "load_run", "resume", "export_io_descriptors",
})  # fmt: skip


def isaaclab_spelling_issue(args: Sequence[str], islab_flags: set[str]) -> Issue | None:
    """The first argument (before ``--``) that is Isaac Lab's spelling of something islab-train
    spells otherwise, as an Issue naming islab-train's option; None when there is none."""
    for arg in args:
        if not arg.startswith("--") or arg.split("=")[0] in islab_flags:
            continue
        name = arg[2:].split("=")[0]
        flag = f"--{name}"
        if name in LAUNCHER_FLAGS:
            return Issue(flag, "is how isaaclab train_multigpu spells it; islab-train has no such option",
                         LAUNCHER_FLAGS[name])  # fmt: skip
        if name in PRESET_FLAGS:
            return Issue(flag, "is a flag of Isaac Lab's trainer, not of islab-train", PRESET_FLAGS[name])
        if name in MAPPED_FLAGS:
            fix = f"islab-train's option is {MAPPED_FLAGS[name]} (with --isaaclab it becomes {flag})"
            return Issue(flag, "is how Isaac Lab's trainer spells it; islab-train has no such option", fix)
        if name in ISAACLAB_SCRIPT_FLAGS:
            fix = f"Put it after --, e.g. islab-train --isaaclab auto --task Isaac-Cartpole -- {arg}"
            return Issue(flag, "is a flag of Isaac Lab's trainer, not of islab-train", fix)
    return None
