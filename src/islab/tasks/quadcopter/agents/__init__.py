"""Agent configs of the Quadcopter task, one YAML per library in its own format (from Isaac Lab's)."""
