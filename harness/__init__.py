"""katra3d's harness (``katra3d.harness``): GL contexts, host probe, timing, the runner and the CLI.

Users import the public API from :mod:`katra3d` (``katra3d.capture``, ``katra3d.Capture``); the
modules here are the library behind it. Importing this package loads no GL module.
"""
