"""katra3d's harness: GL contexts, host probe, timing, the runner and the CLI.

``harness.capture(ctx, path, ...)`` times your own moderngl code into a trace
(see :mod:`harness.capture`). Importing :mod:`harness` loads no GL module.
"""

from __future__ import annotations

# Imported eagerly so that the name ``harness.capture`` stays this function (a lazy
# ``import harness.capture`` would rebind it to the submodule).
from harness.capture import Capture, capture

__all__ = ["Capture", "capture"]
