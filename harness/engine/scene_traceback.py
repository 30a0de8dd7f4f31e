"""A scene's own traceback: its exception's frames without katra3d's. Library frames stay (they say
what raised); :func:`location` is the deepest frame of scene code."""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path

import katra_trace
from katra3d import scenes

_OWN = (
    # already loaded: importing katra3d here would be a cycle
    os.path.realpath(Path(str(sys.modules["katra3d"].__file__)).parent) + os.sep,
    os.path.realpath(Path(str(katra_trace.__file__)).parent) + os.sep,
    os.path.realpath(Path(__file__).parents[1]) + os.sep,
    os.path.realpath(Path(str(scenes.__file__)).parent) + os.sep,
)
_BUILTIN = os.path.realpath(Path(str(scenes.__file__)).parent / "builtin") + os.sep
_LIBRARY = tuple(
    sorted(
        {
            os.path.realpath(p) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := sysconfig.get_paths().get(key))
        }
    )
)


def _kind(filename: str) -> str:
    if filename.startswith("<"):
        return "library"  # <frozen importlib._bootstrap>, <string>
    path = os.path.realpath(filename)
    if path.startswith(_BUILTIN):
        return "scene"
    if path.startswith(_OWN):
        return "own"
    if path.startswith(_LIBRARY):
        return "library"
    return "scene"


def scene_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """``exc``'s traceback frames that are not katra3d's own, outermost first."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if _kind(f.filename) != "own"]


def _shown_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(os.pardir + os.sep) else rel


def location(exc: BaseException) -> str:
    """``spin.py:42`` of the deepest frame of scene code ("" when none)."""
    frames = [f for f in scene_frames(exc) if _kind(f.filename) == "scene"]
    if not frames:
        return ""
    return f"{_shown_path(frames[-1].filename)}:{frames[-1].lineno}"


def scene_traceback(exc: BaseException) -> str:
    """``exc``'s traceback cut to the scene's frames ("" when none)."""
    frames = scene_frames(exc)
    if not frames:
        return ""
    lines = ["Traceback of the scene (most recent call last; katra3d's own frames left out):\n"]
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def describe(exc: BaseException | None) -> str:
    """``Type: text`` in one line of at most ~400 characters ("" for None)."""
    if exc is None:
        return ""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): scene code called sys.exit()"
    lines = [" ".join(line.split()) for line in str(exc).splitlines()]
    text = " | ".join(line for line in lines if line and set(line) - set("=-~"))
    if len(text) > 400:
        text = text[:397] + "..."
    return f"{type(exc).__name__}: {text}".rstrip(": ")


__all__ = ["describe", "location", "scene_frames", "scene_traceback"]
