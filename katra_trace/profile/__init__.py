"""Instruction profiles of counted runs: per scene and zone, grouped, and their difference."""
