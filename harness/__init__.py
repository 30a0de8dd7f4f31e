"""katra3d's harness: GL contexts, host probe, timing, the runner and the CLI.

``harness.capture(ctx, path, ...)`` times your own moderngl code into a trace
(see :mod:`harness.capture`). Importing :mod:`harness` loads no GL module.
"""

# The first statements, before any import that takes time: the window in which a Ctrl-C can still print
# a traceback from katra3d's code is the few lines up to the handler. `_signal` is the built-in module
# behind `signal` (already loaded by the interpreter), so importing it costs nothing; `signal` itself
# takes about a millisecond.
import _signal  # type: ignore[import-not-found]  # typeshed has no stub for the built-in module
import os as _os
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
