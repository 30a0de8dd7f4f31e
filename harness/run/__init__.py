"""A run: config and plan, the runner, the counted parent side, the offscreen helper."""
