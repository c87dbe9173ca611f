"""Acme's tasks for islab-train: one sub-package per task (``acme_tasks.<name>``), each registering
its gymnasium id the way Isaac Lab does. Nothing is imported here, so listing tasks stays cheap."""
