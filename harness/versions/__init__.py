"""Capturing versions of the user's code: the one capture service of ``ab``, ``bisect`` and
``ci/``."""
