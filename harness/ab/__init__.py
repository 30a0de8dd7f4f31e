"""Interleaved A/B rounds for ``katra3d ab`` and bisect's time mode."""
