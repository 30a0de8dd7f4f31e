"""Progress of a run: a rich bar on a terminal, one plain line per step otherwise.

The engine reports to any :class:`harness.engine.results.Progress`; this is the display ``katra3d run`` and
:func:`harness.run.runner.run` use by default.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    """A rich progress bar on a TTY, plain lines otherwise (both on ``stream``, stderr by default)."""

    def __init__(self, total_scenes: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.total = total_scenes
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.tty:
            # deferred: rich's live display loads only on a terminal
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn
            from rich.progress import Progress as RichProgress
            from rich.progress import TextColumn, TimeElapsedColumn

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=Console(file=self.stream), transient=True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(f"katra3d: {text}", file=self.stream, flush=True)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(f"[{index}/{self.total}] {label}", total=total_frames)
        else:
            self.line(f"[{index}/{self.total}] {label}: running")

    def advance(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: object = None, line: str | None = None) -> None:
    """A ``warnings.showwarning`` that prints one ``katra3d: warning: ...`` line on stderr (no source line)."""
    print(f"katra3d: warning: {message}", file=sys.stderr)


__all__ = ["Progress", "show_warning"]
