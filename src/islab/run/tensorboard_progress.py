"""Progress records from a training script's own TensorBoard event files.

A script we did not write (Isaac Lab's ``train.py``, mjlab's ``train``, a user's) reports nothing
to ``progress.jsonl``; but rsl_rl, rl_games and skrl all write TensorBoard event files. This module
turns those files into records of the same shape as ``progress.jsonl``'s
(``{"iteration", "max_iterations", "env_steps", "steps_per_s", "mean_return", "time_s"}``, see
:mod:`islab.rundir`), so the live display, the summary and ``curves.png`` work unchanged.

How an event file is laid out (TFRecord framing, the same in every TensorBoard writer)::

    uint64 length | uint32 masked_crc32c(length) | length bytes: an Event protobuf | uint32 masked_crc32c(data)

A writer appends whole records but the reader may see the tail of one half-written, so
:class:`TensorBoardProgress` reads incrementally: it remembers the byte offset after the last
complete record and retries from there on the next :meth:`TensorBoardProgress.poll`.

Each library names its scalars differently and counts its x axis differently (iteration, env
steps, or per-env timesteps); :data:`TAGS` holds those facts, read from the installed sources
(rsl-rl-lib 5.5.1, rl-games 1.6.5, skrl 2.1.1).

Import cost: the Event protobuf comes from ``tensorboard.compat.proto`` (protobuf only: no torch,
numpy or tensorflow; ``tests/run/test_tensorboard_progress.py`` checks it), so the launcher may import
this module.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENT_FILE_MARKER = "tfevents"  # event files are named events.out.tfevents.<time>.<host>...
_HEADER = 12  # uint64 length + uint32 crc of the length
_FOOTER = 4  # uint32 crc of the data


@dataclass(frozen=True)
class LibraryTags:
    """Where one library puts the numbers a progress record needs.

    ``reward_tag``'s event step is ``reward_axis``: "iteration" (rsl_rl: 0-based ``it``; rl_games:
    1-based ``epoch_num``) or "timestep" (skrl: 1-based per-environment timestep).
    ``iteration_tag`` is written every iteration, even before the first episode ends, so the
    display moves from the start; for rl_games its value is the iteration and its step the env
    steps, for skrl its step is a timestep, as its reward's. ``rate_tag`` is the library's
    env-steps-per-second figure (same step axis as ``iteration_tag``)."""

    library: str
    reward_tag: str
    reward_axis: str
    iteration_base: int  # added to an "iteration" step to make it 1-based like ours
    iteration_tag: str | None
    rate_tag: str | None


# One home for the tag names (file:line in the installed library; docs in BYO facts).
TAGS: dict[str, LibraryTags] = {
    # rsl_rl/utils/logger.py:225 add_scalar("Train/mean_reward", mean, it), it 0-based (runner loop
    # on_policy_runner.py:79); :208 "Loss/learning_rate" and :215 "Perf/total_fps" every iteration.
    "rsl_rl": LibraryTags("rsl_rl", "Train/mean_reward", "iteration", 1, "Loss/learning_rate", "Perf/total_fps"),
    # rl_games/common/a2c_common.py:1134 add_scalar("rewards/iter", mean, epoch_num) (1-based);
    # :402 "info/epochs" (value epoch_num, step frame = env steps) and :386 fps, every epoch.
    "rl_games": LibraryTags(
        "rl_games", "rewards/iter", "iteration", 0, "info/epochs", "performance/step_inference_rl_update_fps"
    ),
    # skrl/agents/torch/base.py:389 (jax/base.py:397) tracking "Reward / Total reward (mean)",
    # written by write_tracking_data at a 1-based timestep that is a multiple of write_interval, once
    # an episode has ended; ppo/ppo.py (torch :472, jax :531) tracks "Policy / Standard deviation" at
    # every update, so it is written at every write, episodes or not (same timestep axis).
    "skrl": LibraryTags("skrl", "Reward / Total reward (mean)", "timestep", 0, "Policy / Standard deviation", None),
}


def detect_library(tag: str) -> LibraryTags | None:
    """The table that owns ``tag`` (its reward, iteration or rate tag), or None."""
    for tags in TAGS.values():
        if tag in (tags.reward_tag, tags.iteration_tag, tags.rate_tag):
            return tags
    return None


def find_event_files(root: str | Path, not_before: float | None = None) -> list[Path]:
    """Event files under ``root`` (recursively), oldest first by modification time; files last
    written before ``not_before`` (a ``time.time()``) are left out, so an earlier run's files in
    a shared log root (Isaac Lab writes under ``./logs/<lib>/...``) are never mistaken for ours."""
    found = []
    for path in Path(root).rglob(f"*{EVENT_FILE_MARKER}*"):
        try:
            mtime = path.stat().st_mtime
        except OSError:  # removed between listing and stat
            continue
        if path.is_file() and (not_before is None or mtime >= not_before):
            found.append((mtime, str(path), path))
    return [path for _, _, path in sorted(found)]


# --- TFRecord framing ------------------------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset ("masked")."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class CorruptEventFile(ValueError):
    """A complete record whose checksum does not match: not a torn tail, a broken file."""


def read_records(data: bytes, offset: int = 0) -> tuple[list[bytes], int]:
    """The complete records in ``data[offset:]`` and the offset just past the last one.

    A record cut short (the writer is mid-append) ends the scan without error; the caller reads
    again from the returned offset once more bytes exist."""
    records = []
    while len(data) - offset >= _HEADER:
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        if masked_crc32c(header) != length_crc:
            raise CorruptEventFile(f"bad length checksum at byte {offset}")
        end = offset + _HEADER + length + _FOOTER
        if end > len(data):
            break  # torn tail: wait for the rest
        payload = data[offset + _HEADER : offset + _HEADER + length]
        (data_crc,) = struct.unpack("<I", data[end - _FOOTER : end])
        if masked_crc32c(payload) != data_crc:
            raise CorruptEventFile(f"bad data checksum in the record at byte {offset}")
        records.append(payload)
        offset = end
    return records, offset


def scalars_of(payload: bytes) -> tuple[float, int, list[tuple[str, float]]]:
    """(wall_time, step, [(tag, value), ...]) of one serialized Event; non-scalars are skipped."""
    from tensorboard.compat.proto.event_pb2 import Event  # protobuf only (see module docstring)

    event = Event.FromString(payload)
    values = []
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":  # torch's and skrl's add_scalar
            values.append((value.tag, float(value.simple_value)))
        elif kind == "tensor" and _tensor_scalar(value.tensor) is not None:  # new-style scalars
            values.append((value.tag, _tensor_scalar(value.tensor)))
    return event.wall_time, event.step, values


def _tensor_scalar(tensor: Any) -> float | None:
    if tensor.float_val:
        return float(tensor.float_val[0])
    if tensor.double_val:
        return float(tensor.double_val[0])
    formats = {1: "<f", 2: "<d"}  # DT_FLOAT, DT_DOUBLE
    if tensor.tensor_content and tensor.dtype in formats:
        return float(struct.unpack_from(formats[tensor.dtype], tensor.tensor_content)[0])
    return None


# --- progress records -------------------------------------------------------------------------


@dataclass
class _Iteration:
    mean_return: float | None = None
    env_steps: int | None = None
    steps_per_s: float | None = None
    wall_time: float | None = None


class TensorBoardProgress:
    """Incremental reader: ``poll()`` returns the progress records that changed since the last poll.

    ``root`` is searched recursively; the newest event file (by modification time) is followed,
    and when a newer one appears (a restarted run) reading moves to it. Hints the events do not
    carry: ``max_iterations``; ``rollouts``, the per-environment steps of one iteration (rsl_rl's
    ``num_steps_per_env``, skrl's ``agent.rollouts``: Isaac Lab's skrl train.py sets
    ``timesteps = max_iterations * rollouts``), which turns skrl's timestep axis into iterations;
    and ``total_envs`` (num_envs × ranks), which with ``rollouts`` fills ``env_steps`` for rsl_rl
    and skrl (rl_games writes its env steps itself). Without a hint that field is None, and skrl's
    iteration is its timestep.

    ``library`` None (a ``--script`` of unknown library): the first tag that belongs to a known
    library's table decides which table is used. ``owners`` (a path -> bool), when given, keeps the
    files of other jobs writing under the same ``root`` out (:mod:`islab.run.event_owners`).

    A record may be returned again by a later poll with more fields filled (rl_games writes the
    iteration marker before the reward): keep the last record per iteration, as
    ``islab.run.console`` does."""

    def __init__(
        self,
        root: str | Path,
        library: str | None = None,
        *,
        max_iterations: int | None = None,
        rollouts: int | None = None,
        total_envs: int | None = None,
        not_before: float | None = None,
        owners: Callable[[Path], bool] | None = None,
    ) -> None:
        if library is not None and library not in TAGS:
            raise ValueError(f"no TensorBoard tag table for {library!r}; known: {', '.join(TAGS)}")
        self.root = Path(root)
        # None: a script of unknown library (--script): the first tag of a known table decides
        self.tags: LibraryTags | None = TAGS[library] if library is not None else None
        self.max_iterations = max_iterations
        self.rollouts = rollouts
        self.total_envs = total_envs
        self.not_before = not_before
        self.owners = owners
        self.path: Path | None = None
        self.offset = 0
        self._start: float | None = None
        self._iterations: dict[int, _Iteration] = {}
        self._rates: dict[int, float] = {}  # rl_games: fps by env-step, written before its iteration

    def poll(self) -> list[dict[str, Any]]:
        """New or updated records, oldest iteration first; [] when there is nothing new."""
        files = find_event_files(self.root, self.not_before) if self.root.exists() else []
        if self.owners is not None:
            files = [path for path in files if self.owners(path)]
        if files and files[-1] != self.path:
            self.path, self.offset = files[-1], 0
        if self.path is None:
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            self.path = None
            return []
        payloads, consumed = read_records(data)
        self.offset += consumed
        changed: set[int] = set()
        for payload in payloads:
            wall_time, step, values = scalars_of(payload)
            if self._start is None:
                self._start = wall_time  # the file-version event opens every file
            for tag, value in values:
                iteration = self._absorb(tag, value, step, wall_time)
                if iteration is not None:
                    changed.add(iteration)
        return [self._record(iteration) for iteration in sorted(changed)]

    def records(self) -> list[dict[str, Any]]:
        """Every record read so far (after one more poll), oldest first."""
        self.poll()
        return [self._record(iteration) for iteration in sorted(self._iterations)]

    def _absorb(self, tag: str, value: float, step: int, wall_time: float) -> int | None:
        if self.tags is None:
            self.tags = detect_library(tag)
            if self.tags is None:
                return None
        tags = self.tags
        by_env_steps = tags.library == "rl_games"  # its marker's value is the iteration, step the env steps
        if tag == tags.reward_tag:
            iteration = self._iteration_of_reward_step(step)
            entry = self._entry(iteration, wall_time)
            entry.mean_return = value
            if tags.reward_axis == "timestep" and self.total_envs:
                entry.env_steps = step * self.total_envs  # exact, even between iteration boundaries
            return iteration
        if tag == tags.iteration_tag:
            if by_env_steps:
                iteration = int(value)
            elif tags.reward_axis == "timestep":  # skrl: its marker shares the reward's timestep axis
                iteration = self._iteration_of_reward_step(step)
            else:
                iteration = step + tags.iteration_base
            entry = self._entry(iteration, wall_time)
            if tags.reward_axis == "timestep" and self.total_envs:
                entry.env_steps = step * self.total_envs
            if by_env_steps:
                entry.env_steps = step
                entry.steps_per_s = self._rates.pop(step, entry.steps_per_s)
            return iteration
        if tag == tags.rate_tag:
            if by_env_steps:
                self._rates[step] = value
                return None
            iteration = step + tags.iteration_base
            self._entry(iteration, wall_time).steps_per_s = value
            return iteration
        return None

    def _iteration_of_reward_step(self, step: int) -> int:
        if self.tags.reward_axis == "iteration":
            return step + self.tags.iteration_base
        return -(-step // self.rollouts) if self.rollouts else step  # ceil: a partial iteration counts

    def _entry(self, iteration: int, wall_time: float) -> _Iteration:
        entry = self._iterations.setdefault(iteration, _Iteration())
        entry.wall_time = wall_time
        return entry

    def _record(self, iteration: int) -> dict[str, Any]:
        entry = self._iterations[iteration]
        env_steps = entry.env_steps
        if self.rollouts and self.total_envs and self.tags.reward_axis == "iteration":
            env_steps = iteration * self.rollouts * self.total_envs  # exact from the hints
        elif self.tags.library == "rl_games" and env_steps is not None:
            env_steps = self._rl_games_env_steps(iteration, env_steps)
        return {
            "iteration": iteration,
            "max_iterations": self.max_iterations,
            "env_steps": env_steps,
            "steps_per_s": entry.steps_per_s,
            "mean_return": entry.mean_return,
            "time_s": None if entry.wall_time is None or self._start is None else entry.wall_time - self._start,
        }

    def _rl_games_env_steps(self, iteration: int, frames: int) -> int | None:
        """rl_games' "info/epochs" step is the frame count at the START of the epoch for
        a2c_continuous (a2c_common.py:1385, before :1397 adds the epoch's frames; Isaac Lab's
        configs all use it) but at the END for a2c_discrete (:1106 before :1114). Epoch 1 starting
        at frame 0 tells the first apart; frames per epoch are constant, so the end of epoch N is
        frames * N / (N - 1)."""
        first = self._iterations.get(1)
        starts_at_zero = first is None or first.env_steps == 0
        if not starts_at_zero:
            return frames
        return None if iteration == 1 else round(frames * iteration / (iteration - 1))
