"""The text dry run is pasted into shells: hostile values must never produce a line that is not a
comment or the quoted command (issue 14 item 1).

The cases are generated, not listed: every option of the option table that takes a value (given on
the command line and as its ``ISLAB_*`` variable), every field of the spec's schema (given in a
cluster file), and the entry point's arguments after ``--``. Each gets a value that the launcher
accepts, then the same value carrying a line separator or an escape sequence. A value is either
refused (exit 2, one ``error:`` line) or printed so that every line of the output is a comment, blank
or one complete command which bash reads back as exactly the planned argv.
"""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import FIXTURES

from islab.cli.options import OPTIONS
from islab.spec.issues import mask_env
from islab.spec.run_spec import FIELDS
from islab.spec.text import comment, shell_join, unsafe_character
from islab.tasks import TASKS

HOSTILE = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x1b[31m", "\x00"]
# The generated cases run each of these (the unit tests below take every character of HOSTILE).
SEPARATORS = ["\n", "\r", "\u2028", "\x1b[31m"]
TREE = FIXTURES / "isaaclab_tree"
TASK_MODULE = """
import gymnasium as gym
gym.register(id="My-Cartpole-v0", entry_point="islab.tasks.cartpole.cartpole_env:CartpoleEnv",
             kwargs={"env_cfg_entry_point": "islab.tasks.cartpole.cartpole_env:CartpoleEnvCfg",
                     "rsl_rl_cfg_entry_point": "islab.tasks.cartpole.agents:rsl_rl_ppo_cfg.yaml"})
"""
BASE = ["--device", "cpu", "--nproc", "2"]
SCRIPT = ["--script", "train.py"]
C10D = ["--rdzv-backend", "c10d"]
JAX = ["--lib", "skrl", "--ml-framework", "jax", "--device", "cpu", "--coordinator-address", "127.0.0.1:5000"]

# A value each spec field accepts (the hostile variant appends to its text), and what else the
# command line needs for that value to be valid. A field of the schema missing here fails
# test_every_field_has_a_sample: new fields are covered, not skipped.
SAMPLES: dict[str, Any] = {
    "lib": "rl_games", "ml_framework": "torch", "task": "Islab-Cartpole-v0", "task_module": "my_tasks",
    "num_envs": 64, "seed": 1, "max_iterations": 2, "total_env_steps": 1000, "nnodes": 1, "nproc_per_node": 2,
    "node_rank": 0, "device": "cpu", "max_restarts": 0, "coordinator_address": "127.0.0.1:5000",
    "env": {"NCCL_DEBUG": "INFO"}, "run_name": "r1", "log_dir": "logs", "python": "python3",
    "overrides": ["algorithm.clip_param=0.2"], "resume": "RESUME", "checkpoint_interval": 5, "hang_timeout_s": 60,
    "logger": "tensorboard", "keep_checkpoints": 2, "video_interval": 5,
    "entrypoint": {"script": "train.py"}, "args": ["--flag", "v"], "isaaclab": str(TREE), "mjlab": False,
    "rendezvous.backend": "c10d", "rendezvous.master_addr": "10.0.0.1", "rendezvous.master_port": 29555,
    "rendezvous.endpoint": "127.0.0.1:29400", "rendezvous.id": "job-1", "rendezvous.timeout_s": 60,
    "rendezvous.last_call_s": 5, "virtual_local_rank": True, "monitor_interval_s": 0.5, "start_method": "spawn",
}  # fmt: skip
CONTEXT: dict[str, list[str]] = {
    "coordinator_address": JAX, "rendezvous.endpoint": C10D, "rendezvous.id": C10D,
    "rendezvous.last_call_s": C10D, "args": SCRIPT,
    "isaaclab": ["--task", "Isaac-Cartpole-v0", "--nproc", "1"], "task_module": ["--task", "My-Cartpole-v0"],
    "gpus": [],
}  # fmt: skip
# Options that set no spec field, with their sample values.
OPTION_SAMPLES = {
    "gpus": "2", "script": "train.py", "module": "pkg.train", "command": "train", "preflight": "on",
    "preflight_timeout": "30",
}  # fmt: skip


def _hostile(value: Any, bad: str) -> Any:
    """``value`` with ``bad`` + a payload in every piece of text it holds (a mapping's values; its
    keys are a case of their own)."""
    payload = f"{bad}touch PWNED #"
    if isinstance(value, dict):
        return {key: f"{item}{payload}" for key, item in value.items()}
    if isinstance(value, list):
        return [f"{item}{payload}" for item in value]
    return f"{value}{payload}"


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` less ``flag`` and its value (the command line would beat the ISLAB_* variable)."""
    at = argv.index(flag) if flag in argv else None
    return argv if at is None else [*argv[:at], *argv[at + 2 :]]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def cases(tmp_path: Path, bad: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv, ISLAB_* variables) for every way a value reaches the dry run."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    samples = {name: (str(run) if value == "RESUME" else value) for name, value in SAMPLES.items()}

    def value_of(field: str) -> Any:
        value = samples[field]
        return _hostile(value, bad) if bad else value

    found: dict[str, tuple[list[str], dict[str, str]]] = {}
    for option in OPTIONS:
        if option.is_flag or option.train_only:
            continue
        field = option.field
        if option.name == "cluster":
            # The cluster file's own path is printed in the comment block.
            named = tmp_path / f"c{bad.replace(chr(0), '')}touch PWNED #.yaml"
            named.write_text(yaml.safe_dump({"device": "cpu"}))
            found["--cluster path"] = ([*BASE, "--cluster", str(named)], {})
            continue
        sample = OPTION_SAMPLES.get(option.name) or samples[field]
        value = _text(_hostile(sample, bad) if bad else sample)
        context = CONTEXT.get(option.name, CONTEXT.get(field or "", []))
        # --gpus and --coordinator-address replace the CPU base (--gpus sets the device itself).
        base, extra = (context, []) if option.name == "gpus" or context == JAX else (BASE, context)
        found[option.flag] = ([*base, *extra, option.flag, value], {})
        if "\x00" not in value:  # no environment variable can hold NUL
            found[option.envvar] = (_without([*base, *extra], option.flag), {option.envvar: value})
    for field in FIELDS:
        section, _, key = field.rpartition(".")
        value = value_of(field)
        data: dict[str, Any] = {"device": "cpu", "nproc_per_node": 2}
        if section:
            data[section] = {key: value, **({"backend": "c10d"} if key in ("endpoint", "id") else {})}
        else:
            data[key] = value
        context = CONTEXT.get(field, [])
        if context == SCRIPT:
            data["entrypoint"] = {"script": "train.py"}
            context = []
        if context == JAX:
            data.update(lib="skrl", ml_framework="jax")
            context = []
        file = tmp_path / f"{field}.yaml"
        file.write_text(yaml.safe_dump(data, allow_unicode=True))
        found[f"cluster file: {field}"] = ([*context, "--cluster", str(file)], {})
    names = tmp_path / "env-names.yaml"
    name = f"NCCL_DEBUG{bad}touch PWNED #" if bad else "NCCL_DEBUG"
    names.write_text(yaml.safe_dump({"device": "cpu", "env": {name: "INFO"}}))
    found["cluster file: env names"] = ([*BASE, "--cluster", str(names)], {})
    # The entry point's arguments after `--`.
    found["-- ARGS"] = ([*BASE, *SCRIPT, "--", *value_of("args")], {})
    return found


@pytest.fixture
def dry_run(islab, clean_environment, monkeypatch, tmp_path):
    """(code, out, err, plan) of ``islab-train ARGV --dry-run`` with the plan it printed."""
    (tmp_path / "my_tasks.py").write_text(TASK_MODULE)
    monkeypatch.chdir(tmp_path)
    # --task-module adds the working directory to sys.path and its task to the registry: undone after.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(TASKS, "_entries", dict(TASKS.entries))
    monkeypatch.setattr(TASKS, "_modules", list(TASKS._modules))
    built = []
    app = importlib.import_module("islab.cli.app")  # the module (islab.cli.app is also the Typer app's name)
    real = app.launch_for  # the launch whose plan the dry run prints (islab.plan.launch.plan_launch)

    def recording(*args, **kwargs):
        launch = real(*args, **kwargs)
        built.append(launch.plan)
        return launch

    monkeypatch.setattr(app, "launch_for", recording)

    def invoke(argv: list[str], env: dict[str, str]):
        built.clear()
        with monkeypatch.context() as scoped:
            for name, value in env.items():
                scoped.setenv(name, value)
            code, out, err = islab("--dry-run", *argv)  # before `--`: after it, an argument
        return code, out, err, built[-1] if built else None

    return invoke


def _bash_words(lines: list[str], cwd: Path) -> list[list[str]]:
    """What bash makes of each line as the words of one command (``set --`` runs nothing)."""
    script = "".join(f"set -- {line}\nprintf '%s\\0' \"$@\"; printf '\\1'\n" for line in lines)
    syntax = subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True)
    assert syntax.returncode == 0, syntax.stderr.decode()
    done = subprocess.run(["bash"], input=script.encode(), capture_output=True, cwd=cwd, env={"LANG": "C"})
    assert done.returncode == 0, done.stderr.decode()
    return [record.split("\0")[:-1] for record in done.stdout.decode("utf-8").split("\1")[:-1]]


def assert_paste_safe(code: int, out: str, err: str, plan: Any, cwd: Path) -> None:
    """Refused in ``error:`` lines (one per problem), or: every line (as str.splitlines, the strictest reader, cuts
    them) is a comment, blank, or one complete command that reads back as the planned argv."""
    if code == 2:
        assert out == "", out
        lines = err.strip().splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), err
        return
    assert code == 0, err
    assert unsafe_character(err.replace("\n", "")) is None, repr(err)
    lines = out.splitlines()
    assert "\n".join(lines) == out.rstrip("\n"), "a line separator other than \\n"
    commands = [line for line in lines if line.strip() and not line.startswith("#")]
    for line in lines:
        assert unsafe_character(line) is None, repr(line)
    expected = [[*(f"{name}={value}" for name, value in mask_env(node.env).items()), *node.argv] for node in plan.nodes]
    assert _bash_words(commands, cwd) == expected
    for line, words in zip(commands, expected, strict=True):
        if "$'" not in line:  # shlex cannot read bash's $'...' quoting; bash did above
            assert shlex.split(line) == words


# Where a line break is a legitimate value: the arguments of the user's own program (rendered in
# $'...' quoting) and the cluster file's name (only printed in a comment). Every other value is
# refused where it enters; the rendering is the second line of defence.
ACCEPTED = {"-- ARGS", "cluster file: args", "--cluster path"}


@pytest.mark.parametrize("bad", SEPARATORS, ids=[repr(ch) for ch in SEPARATORS])
def test_no_value_escapes_the_dry_run(dry_run, tmp_path, bad):
    failures = []
    for name, (argv, env) in cases(tmp_path, bad).items():
        code, out, err, plan = dry_run(argv, env)
        try:
            assert_paste_safe(code, out, err, plan, tmp_path)
            assert code == (0 if name in ACCEPTED else 2), f"exit {code}"
        except AssertionError as failure:
            failures.append(f"{name}: {failure}")
    assert not failures, "\n".join(failures)
    assert not (tmp_path / "PWNED").exists()


def test_every_case_is_accepted_without_the_hostile_text(dry_run, tmp_path):
    """The samples are valid, so the hostile runs test each field's own handling of the text."""
    failures = []
    for name, (argv, env) in cases(tmp_path, "").items():
        code, out, err, plan = dry_run(argv, env)
        if code != 0:
            failures.append(f"{name}: {err.strip()}")
        else:
            assert_paste_safe(code, out, err, plan, tmp_path)
    assert not failures, "\n".join(failures)


def test_every_field_has_a_sample():
    assert set(FIELDS) <= set(SAMPLES), set(FIELDS) - set(SAMPLES)


def test_entry_point_arguments_with_line_breaks_are_printed_on_one_line(dry_run, tmp_path):
    """Arguments of the user's program may hold line breaks (``python -c`` code): they are
    passed on verbatim and printed in $'...' quoting."""
    argument = "import sys\nprint(sys.argv) # \u2028 it's \\ done"
    code, out, err, plan = dry_run([*BASE, "--command", "python", "--", "-c", argument], {})
    assert code == 0, err
    assert plan.nodes[0].argv[-2:] == ("-c", argument)
    assert "$'import sys\\x0aprint(sys.argv) # \\xe2\\x80\\xa8 it\\'s \\\\ done'" in out
    assert_paste_safe(code, out, err, plan, tmp_path)


@pytest.mark.parametrize("bad", HOSTILE, ids=[repr(ch) for ch in HOSTILE])
def test_every_unsafe_character_is_rendered_on_one_line(bad):
    word = f"a{bad}b'\\"
    assert comment(word).splitlines() == [comment(word)]
    line = shell_join(["cmd", word])
    assert line.splitlines() == [line] and unsafe_character(line) is None
    if bad != "\x00":  # bash words are C strings
        assert _bash_words([line], Path.cwd()) == [["cmd", word]]


def test_comment_renders_every_separator_as_an_escape():
    rendered = comment("a" + "".join(HOSTILE) + "b")
    assert rendered.splitlines() == [rendered]
    assert rendered.startswith("# a") and rendered.endswith("b")
    assert "\\n" in rendered and "\\u2028" in rendered and "\\x1b" in rendered
