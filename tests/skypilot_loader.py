"""SkyPilot's own task loader over tasks given as JSON (tests only; run by .venv-sky's Python).

tests/sky/test_sky_schema.py writes tasks with `islab-train sky` and hands them here on stdin:
``{"tasks": {id: task dict}, "secrets": [names]}``. For each task this runs what ``sky launch`` and
``sky jobs launch`` run first, ``sky.Task.from_yaml_config`` (SkyPilot's JSON schemas for the task,
its resources and storage; resources and storage objects built; no cloud contacted), with the
secrets given as ``--secret NAME`` gives them, and prints one JSON object: per id either what the
loader made of it or the error it raised, and the SkyPilot constants islab-train mirrors. It
imports nothing of islab-train: SkyPilot lives in a venv of its own (scripts/setup.sh says why).
"""

from __future__ import annotations

import json
import sys


def load(task: dict) -> dict:
    import sky

    secrets = [(name, "value-given-at-launch") for name in task.get("secrets") or {}]
    try:
        loaded = sky.Task.from_yaml_config(task, secrets_overrides=secrets or None)
    except Exception as exc:  # every refusal, whatever its class: the test reads the message
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    resources = [
        {"accelerators": r.accelerators, "use_spot": r.use_spot, "cloud": str(r.cloud) if r.cloud else None}
        for r in loaded.resources
    ]
    mounts = {path: storage.mode.value for path, storage in (loaded.storage_mounts or {}).items()}
    return {"ok": True, "num_nodes": loaded.num_nodes, "resources": resources, "storage_modes": mounts,
            "secrets": sorted(loaded.secrets), "envs": dict(loaded.envs)}  # fmt: skip


def main() -> None:
    from sky.skylet import constants

    given = json.load(sys.stdin)
    results = {key: load(task) for key, task in given["tasks"].items()}
    names = ("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_NODES", "SKYPILOT_NUM_GPUS_PER_NODE",
             "TASK_ID_ENV_VAR", "CLUSTER_NAME_VALID_REGEX", "ALL_CLOUDS")  # fmt: skip
    json.dump({"results": results, "constants": {name: getattr(constants, name) for name in names}}, sys.stdout)


if __name__ == "__main__":
    main()
