"""Capturing versions of the user's code, for ``ab``, ``bisect`` and ``ci/``."""
