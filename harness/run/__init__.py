"""A run as data: the validated config and the resolved plan, the runner that drives the engine with
it, the counted (``--measure instructions|cycles``) parent side, and the offscreen helper."""
