"""Agent configs of the pendulum swing-up, one YAML per library in that library's own format."""
