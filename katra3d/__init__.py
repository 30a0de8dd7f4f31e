"""katra3d: run 3D scenes headless, time every frame and draw, and compare versions. ``harness``
and ``scenes`` install under this name only (a project's own ``scenes/`` is unaffected); public
names load on first use, so importing katra3d loads no GL module."""

# before any slow import: Ctrl-C while the command imports ends it quietly (`signal` costs 1 ms)
import _signal  # type: ignore[import-not-found]
import os as _os
import sys as _sys

_COMMAND = _os.path.basename(_sys.argv[0] if _sys.argv else "") == "katra3d"
if _COMMAND and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    # katra3d.harness.cli.main restores Python's handler
    def _quiet_exit(signum: int, _frame: object) -> None:
        _os.write(2, b"katra3d: interrupted\n")
        _os._exit(128 + signum)

    _signal.signal(_signal.SIGINT, _quiet_exit)

if "OPENBLAS_NUM_THREADS" not in _os.environ and (
    _COMMAND or _sys.orig_argv[1:3] == ["-m", "katra3d"]
):
    # no linear algebra here: OpenBLAS's threads, started at numpy's import, cost ~0.1 s of CPU
    _os.environ["OPENBLAS_NUM_THREADS"] = "1"  # numpy's import only: no child inherits it
    try:
        import numpy  # noqa: F401
    finally:
        del _os.environ["OPENBLAS_NUM_THREADS"]

from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from katra3d.harness.capture import Capture, capture
    from katra3d.harness.run.offscreen import run_offscreen
    from katra3d.scenes.api import NOMINAL_RATE_HZ, Frame, Param, Scene, SceneSkip, SimpleFrame
    from katra3d.scenes.registry import get_scene
    from katra3d.scenes.shaders import ShaderCompileError, compile_compute, compile_program
    from katra_trace.errors import SceneError

_PUBLIC: dict[str, str] = {
    "Scene": "katra3d.scenes.api",
    "Param": "katra3d.scenes.api",
    "Frame": "katra3d.scenes.api",
    "SimpleFrame": "katra3d.scenes.api",
    "SceneSkip": "katra3d.scenes.api",
    "NOMINAL_RATE_HZ": "katra3d.scenes.api",
    "SceneError": "katra_trace.errors",
    "compile_program": "katra3d.scenes.shaders",
    "compile_compute": "katra3d.scenes.shaders",
    "ShaderCompileError": "katra3d.scenes.shaders",
    "get_scene": "katra3d.scenes.registry",
    "capture": "katra3d.harness.capture",
    "Capture": "katra3d.harness.capture",
    "run_offscreen": "katra3d.harness.run.offscreen",
}

# literal, so that type checkers see the re-exports
__all__ = [
    "Capture",
    "Frame",
    "NOMINAL_RATE_HZ",
    "Param",
    "Scene",
    "SceneError",
    "SceneSkip",
    "ShaderCompileError",
    "SimpleFrame",
    "capture",
    "compile_compute",
    "compile_program",
    "get_scene",
    "run_offscreen",
]


def __getattr__(name: str) -> Any:
    module_name = _PUBLIC.get(name)
    if module_name is None:
        raise AttributeError(f"module 'katra3d' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
