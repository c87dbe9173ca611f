"""Every ``islab-train`` command in README.md's code blocks runs, in its harmless form, so the
README cannot rot (issue 14 item 7).

The rule, for whoever edits README.md:
- A command is a line of a code block (indented four spaces, or fenced) starting ``islab-train``;
  its trailing ``# comment`` is dropped.
- Harmless forms (``--gpus all`` sees two GPUs through CUDA_VISIBLE_DEVICES): training commands
  get ``--dry-run`` (when absent) and must exit 0; ``tasks``
  runs as is; ``sbatch`` writes the script to stdout (a ``> file`` redirect is dropped); ``doctor``
  runs as written (its output parsed as JSON when the command has ``--json``) and may report
  failing checks (exit 1) but never a usage error (exit 2); ``k8s``
  prints the manifest (a ``| kubectl apply -f -`` pipe is dropped), ``sky`` the task (its ``-o FILE``
  dropped). docs/KUBERNETES.md's and docs/CLOUD.md's commands follow the same rule.
- Prose that says a command prints JSON ("as JSON" in the lines just above it) is true of the
  command: it has ``--json``.
- Not run: templates holding ``...`` or ``<placeholder>``, and commands whose trailing comment
  says ``needs: <setup>`` (an installed example, a module in the working directory, a real run
  directory); the test that builds that setup covers them (tests/tasks/test_task_plugins.py, test_resume.py).
"""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest
from paths import REPO

README = REPO / "README.md"


def readme_commands(text: str) -> list[tuple[int, str, str]]:
    """(line number, command without comment, comment) for each islab-train line in a code block."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not (fenced or line.startswith("    ")) or not re.match(r"islab-train(\s|$)", line.strip()):
            continue
        command, _, comment = line.strip().partition(" #")
        found.append((number, command.strip(), comment.strip()))
    return found


def is_runnable(command: str, comment: str) -> bool:
    return "..." not in command and not re.search(r"<[^>]+>", command) and not comment.startswith("needs:")


COMMANDS = readme_commands(README.read_text())
# docs/KUBERNETES.md's, docs/ISAACLAB.md's and docs/CLOUD.md's commands are README-style too: every one runs
DOCS = (REPO / "docs" / "KUBERNETES.md", REPO / "docs" / "ISAACLAB.md", REPO / "docs" / "CLOUD.md")
DOC_COMMANDS = [(f"{path.name}:{n}", c) for path in DOCS for n, c, note in readme_commands(path.read_text())
                if is_runnable(c, note)]  # fmt: skip
ISAACLAB_FIXTURE = REPO / "tests" / "fixtures" / "isaaclab_tree"
# `--isaaclab auto` finds Isaac Lab 3 in the ranks' interpreter: the 3.x fixture tree, as a checkout
# installed in editable mode, stands for it; the docs' `~/isaaclab3/bin/python` is this interpreter.
ISAACLAB3_SOURCE = REPO / "tests" / "fixtures" / "isaaclab3_tree" / "source"
ISAACLAB3_EDITABLE = [str(ISAACLAB3_SOURCE / name) for name in ("isaaclab", "isaaclab_rl", "isaaclab_tasks")]


def test_the_extractor_finds_the_readme_commands():
    runnable = [c for _, c, note in COMMANDS if is_runnable(c, note)]
    assert len(runnable) >= 8, COMMANDS
    assert any(c.startswith("islab-train doctor") for c in runnable)
    assert any(c.startswith("islab-train sbatch") for c in runnable)
    # every skipped command says why: a template or a named setup
    for _, command, comment in COMMANDS:
        if not is_runnable(command, comment):
            assert "..." in command or "<" in command or comment.startswith("needs:"), command


@pytest.mark.parametrize(
    "line, command",
    [(f"README.md:{n}", c) for n, c, note in COMMANDS if is_runnable(c, note)] + DOC_COMMANDS,
    ids=lambda v: str(v)[:60],
)
def test_readme_command_runs(islab, monkeypatch, line, command):
    monkeypatch.chdir(REPO)
    # README's Isaac Lab commands name a checkout at ~/IsaacLab; the fixture tree mirrors its scripts
    argv = [str(ISAACLAB_FIXTURE) if arg == "~/IsaacLab" else arg for arg in shlex.split(command)[1:]]
    argv = [sys.executable if arg == "~/isaaclab3/bin/python" else arg for arg in argv]
    if "auto" in argv:
        monkeypatch.setenv("PYTHONPATH", ":".join(ISAACLAB3_EDITABLE))
    for redirect in (">", "|"):  # `> job.sh`, `| kubectl apply -f -`: stdout is checked here instead
        if redirect in argv:
            argv = argv[: argv.index(redirect)]
    sub = argv[0] if argv else ""
    if sub == "sky" and ("-o" in argv or "--output" in argv):  # the task goes to stdout, checked here
        at = argv.index("-o") if "-o" in argv else argv.index("--output")
        argv = argv[:at] + argv[at + 2 :]
    if sub == "doctor":
        code, out, err = islab(*argv)
        assert code in (0, 1) and out.strip(), f"{line}: {err}"
        if "--json" in argv:
            json.loads(out)
        return
    if "all" in argv:  # --gpus all counts the visible GPUs: plan for two on a CPU-only machine
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    ours = argv[: argv.index("--")] if "--" in argv else argv  # what follows -- belongs to the entry point
    if sub not in ("tasks", "sbatch", "k8s", "sky") and "--dry-run" not in ours:
        argv.insert(len(ours), "--dry-run")
    code, out, err = islab(*argv)
    assert code == 0, f"{line}: {command}\n{err}"
    assert out.strip()


def test_a_command_said_to_print_json_asks_for_it():
    """Issue 30 item 10: README said ``doctor --collectives ... --preflight-timeout 30`` printed JSON,
    which it does only with ``--json`` (the check above added it, so it could not tell)."""
    lines = README.read_text().splitlines()
    claimed = [(number, command) for number, command, _ in COMMANDS
               if any("as JSON" in text for text in lines[max(0, number - 4) : number - 1])]  # fmt: skip
    assert claimed, "the README no longer says of any command that it prints JSON"
    for number, command in claimed:
        assert "--json" in shlex.split(command), f"README.md:{number}: {command}"


def test_the_install_section_says_setup_sh_installed_every_extra_it_lists():
    """Issue 30 item 10: the Install section read as if its extras were still to be installed after
    the quick start; it says scripts/setup.sh installed them, and each one it lists is in setup.sh's."""
    install = README.read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "`scripts/setup.sh` has already installed all of this, every extra included" in install
    listed = set(re.findall(r'-e "\.\[([a-z0-9-]+)\]"', install))
    setup = re.search(r'install_venv \.venv "([^"]+)"', (REPO / "scripts" / "setup.sh").read_text())
    assert setup and listed and listed <= set(setup.group(1).split(",")), (listed, setup)


def test_the_isaac_lab_section_is_steps():
    """Issue 30 item 10: the Isaac Lab section was one paragraph; it is numbered steps, from
    installing into Isaac Sim's Python to following the run, each with its command."""
    section = README.read_text().split("\n## Use it with Isaac Lab\n", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^(\d)\. \*\*", section, flags=re.MULTILINE)
    assert steps == ["1", "2", "3", "4", "5"], steps
    assert "ISAACSIM_PYTHON_EXE" in section.split("\n2. ", 1)[0]  # step 1: the interpreter


def test_quick_start_puts_islab_train_on_path():
    """The demo prints ``islab-train ... --resume``: the quick start must say how to get the
    command in a new shell (issue 14 item 8). scripts/setup.sh makes the venv that holds it."""
    quick_start = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "    source .venv/bin/activate" in quick_start
    assert ".venv" in (REPO / "scripts" / "setup.sh").read_text()
