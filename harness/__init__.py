"""katra3d's harness: GL contexts, host probe, timing, the runner and the CLI.

``harness.capture(ctx, path, ...)`` times your own moderngl code into a trace
(see :mod:`harness.capture`). Importing :mod:`harness` loads no GL module.
"""

from __future__ import annotations

import os as _os
import signal as _signal
import sys as _sys

if _os.path.basename(_sys.argv[0] if _sys.argv else "") == "katra3d" and \
        _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    # The katra3d command: a Ctrl-C while it is still importing ends it quietly (no traceback).
    # harness.cli.main restores Python's handler before doing anything else. Applications that
    # import harness keep their own handlers.
    def _quiet_exit(signum: int, _frame: object) -> None:
        _os.write(2, b"katra3d: interrupted\n")
        _os._exit(128 + signum)

    _signal.signal(_signal.SIGINT, _quiet_exit)

# Imported eagerly so that the name ``harness.capture`` stays this function (a lazy
# ``import harness.capture`` would rebind it to the submodule).
from harness.capture import Capture, capture

__all__ = ["Capture", "capture"]
