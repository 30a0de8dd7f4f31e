"""A run as data (config and plan), the runner that drives the engine with it, the counted parent
side, and the offscreen helper."""
