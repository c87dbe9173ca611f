"""The trainer's own run folders of an islab run, and the checkpoints in them (torch-free).

Isaac Lab's train.py keeps its runs in folders of its own, under the working directory it started
in: ``logs/<lib>/<experiment>/<time>[...]``, a new one at every start, resumed runs included. The
launcher finds this launch's folder (:func:`run_folder_of_events`: where the job's own TensorBoard
events are, :mod:`islab.run.event_owners`; else :func:`announced_folder`: what rank 0 printed) and
appends it to ``trainer_runs.jsonl`` in the islab run directory, so that ``--resume RUN_DIR``,
``play`` and ``export`` find the run's checkpoints without guessing among other runs' folders.

Each library names its checkpoints its own way (the iteration in the name is what "newest" means;
skrl's is its timestep)::

    rsl_rl    <folder>/model_<iteration>.pt
    rl_games  <folder>/nn/last_<name>_ep_<epoch>_rew_<reward>.pth  (and <name>.pth, the best so far)
    skrl      <folder>/checkpoints/agent_<timestep>.pt             (and best_agent.pt)

The libraries write them with ``torch.save`` straight to their name: a process killed while saving
leaves a truncated file, and one interrupted by SIGINT (how a preemption stops Isaac Lab's ranks) a
finished archive without its pickle -- seen for real: Isaac Lab 3's rsl_rl stopped in the middle of
``model_4.pt`` left ``version``, ``byteorder`` and ``.data/serialization_id`` in it, and a resume from
it failed ("PytorchStreamReader failed locating file data.pkl"). ``torch.save`` writes a zip
archive: a file whose archive names its ``data.pkl`` and whose every entry reads back with its CRC
is complete (:func:`is_complete`); the newest *complete* checkpoint is the one to continue from.
"""

from __future__ import annotations

import json
import os
import re
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islab.rundir.layout import TRAINER_RUNS_FILE

# Isaac Lab's train.py prints these (its Ray tuner reads them to find a run's logs)
LOG_ROOT_LINE = "[INFO] Logging experiment in directory:"
RUN_NAME_LINE = "Exact experiment name requested from command line:"
ANNOUNCEMENTS = (LOG_ROOT_LINE, RUN_NAME_LINE)
EVENTS_SUBFOLDER = "summaries"  # rl_games writes its events one level down

# library -> (checkpoint files below a run folder, the number in a name)
CHECKPOINT_FILES: dict[str, tuple[str, re.Pattern[str]]] = {
    "rsl_rl": ("model_*.pt", re.compile(r"^model_(\d+)\.pt$")),
    "rl_games": ("nn/*.pth", re.compile(r"_ep_(\d+)_")),
    "skrl": ("checkpoints/*", re.compile(r"^agent_(\d+)\.\w+$")),
}
TORCH_SUFFIXES = (".pt", ".pth")  # torch.save's zip archives; other formats (skrl-JAX's) are not checked


@dataclass(frozen=True)
class TrainerCheckpoint:
    """One checkpoint file of the trainer: its folder (the trainer's run) and the number in its name."""

    path: Path
    folder: Path
    number: int | None


def trainer_runs_path(run_dir: str | Path) -> Path:
    return Path(run_dir, TRAINER_RUNS_FILE)


def record_trainer_run(run_dir: str | Path, folder: str | Path, library: str) -> None:
    """Append this launch's trainer folder (once: the last record is not repeated)."""
    folder = str(Path(folder).absolute())
    runs = trainer_runs(run_dir)
    if runs and runs[-1].get("folder") == folder:
        return
    path = trainer_runs_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"folder": folder, "library": library, "time": time.time()}) + "\n")


def trainer_runs(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every launch's trainer folder, oldest first (unreadable lines skipped)."""
    try:
        lines = trainer_runs_path(run_dir).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    runs = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("folder"), str):
            runs.append(record)
    return runs


def run_folder_of_events(event_file: str | Path) -> Path:
    """The trainer's run folder holding an event file (rl_games: the folder above ``summaries/``)."""
    folder = Path(event_file).parent
    return folder.parent if folder.name == EVENTS_SUBFOLDER else folder


def announced_folder(lines: Iterable[str]) -> Path | None:
    """The run folder Isaac Lab's train.py announced: its log root and run name (absolute in Isaac Lab
    3's rl_games), or the newest folder of the root whose name starts with the run name (rsl_rl and
    skrl add a suffix after printing it). None when the lines do not name one."""
    root = name = None
    for line in lines:
        text = line.strip()
        if text.startswith(LOG_ROOT_LINE):
            root = text[len(LOG_ROOT_LINE) :].strip()
        elif text.startswith(RUN_NAME_LINE):
            name = text[len(RUN_NAME_LINE) :].strip()
    if root is None or not name:
        return None
    folder = Path(root, name)
    if folder.is_dir():
        return folder
    try:
        candidates = [path for path in Path(root).iterdir() if path.is_dir() and path.name.startswith(name)]
    except OSError:
        return None
    return max(candidates, key=lambda path: path.stat().st_mtime) if candidates else None


def is_complete(path: Path) -> bool:
    """Written to its end: a torch checkpoint's zip archive names its ``data.pkl`` and every entry
    reads back (reads the file: ask it of the newest candidates first). Other formats: present."""
    if path.suffix not in TORCH_SUFFIXES:
        return path.is_file()
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
            return pickled and archive.testzip() is None
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
        return False


def candidates(folder: str | Path, library: str) -> list[TrainerCheckpoint]:
    """The checkpoint files of one trainer run, complete or not, oldest first: numbered ones by their
    number, after the unnumbered ones (a best-so-far copy) by their modification time."""
    pattern, number = CHECKPOINT_FILES[library]
    found = []
    for path in Path(folder).glob(pattern):
        if path.is_file():
            match = number.search(path.name)
            found.append(TrainerCheckpoint(path, Path(folder), int(match.group(1)) if match else None))
    return sorted(found, key=lambda item: (item.number is not None, item.number or 0, _mtime(item.path)))


def checkpoints(folder: str | Path, library: str) -> list[TrainerCheckpoint]:
    """The complete checkpoints of one trainer run, oldest first."""
    return [item for item in candidates(folder, library) if is_complete(item.path)]


def newest_checkpoint(run_dir: str | Path, library: str) -> TrainerCheckpoint | None:
    """The newest complete checkpoint of the run: in the newest recorded folder that holds one."""
    for record in reversed(trainer_runs(run_dir)):
        for item in reversed(candidates(record["folder"], library)):
            if is_complete(item.path):
                return item
    return None


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
