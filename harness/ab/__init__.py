"""Interleaved A/B rounds: the loop ``katra3d ab`` runs and bisect's time mode reuses
(:mod:`katra3d.harness.ab.rounds`)."""
