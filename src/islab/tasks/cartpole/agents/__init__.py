"""Agent configs of the Cartpole task, one YAML per library in its own format."""
