"""Instruction profiles of counted runs and their difference."""
