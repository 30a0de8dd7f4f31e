"""A scene's own traceback: the frames of its exception that are the scene's code, not katra3d's.

When a scene raises, the error line names the scene's file and line of the failing frame
(:func:`location`), and ``katra3d --traceback`` (or ``KATRA3D_DEBUG=1``) prints the traceback cut to
the scene's frames (:func:`scene_traceback`). katra3d's own frames (``katra3d``,
``katra3d.harness``, ``katra_trace``, the Scene API's helpers in ``scenes``) are left out; a
library's frames (moderngl, numpy) are kept in the traceback, since they say what raised, but the
location is the deepest frame of scene code: a file outside katra3d and outside the Python
installation, or a built-in scene (``scenes/builtin``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path

import katra_trace
from katra3d import scenes

#: Directories of katra3d's own code: their frames are never the scene's (the Scene API's helpers
#: included).
_OWN = (
    # katra3d's package itself: loaded before any of its modules (importing it here would be a
    # circle through its facade)
    os.path.realpath(Path(str(sys.modules["katra3d"].__file__)).parent) + os.sep,
    os.path.realpath(Path(str(katra_trace.__file__)).parent) + os.sep,
    os.path.realpath(Path(__file__).parents[1]) + os.sep,
    os.path.realpath(Path(str(scenes.__file__)).parent) + os.sep,
)
#: The built-in scenes: scene code, though katra3d's.
_BUILTIN = os.path.realpath(Path(str(scenes.__file__)).parent / "builtin") + os.sep
#: The Python installation (standard library, site-packages): library code.
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
    """``own`` (katra3d's machinery), ``scene`` (scene code) or ``library`` (Python's,
    site-packages).
    """
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
    """The frames of ``exc``'s traceback that are not katra3d's own, outermost first."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if _kind(f.filename) != "own"]


def _shown_path(filename: str) -> str:
    """``filename`` relative to the working directory when it is inside it, else as it is."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(os.pardir + os.sep) else rel


def location(exc: BaseException) -> str:
    """``spin.py:42``: the scene's file and line of the deepest frame of scene code ("" when
    none)."""
    frames = [f for f in scene_frames(exc) if _kind(f.filename) == "scene"]
    if not frames:
        return ""
    return f"{_shown_path(frames[-1].filename)}:{frames[-1].lineno}"


def scene_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` cut to the scene's frames, as Python prints one ("" when it has
    none).
    """
    frames = scene_frames(exc)
    if not frames:
        return ""
    lines = ["Traceback of the scene (most recent call last; katra3d's own frames left out):\n"]
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def describe(exc: BaseException | None) -> str:
    """An exception as one line of at most ~400 characters: ``Type: text`` ("" for None)."""
    if exc is None:
        return ""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): scene code called sys.exit()"
    # one line, whatever the exception's text (a GLSL compiler log has many)
    lines = [" ".join(line.split()) for line in str(exc).splitlines()]
    text = " | ".join(line for line in lines if line and set(line) - set("=-~"))
    if len(text) > 400:
        text = text[:397] + "..."
    return f"{type(exc).__name__}: {text}".rstrip(": ")


__all__ = ["describe", "location", "scene_frames", "scene_traceback"]
