"""Progress: a rich bar on a terminal, plain lines when piped, nothing with ``--quiet``.

A counted child writes JSON lines to a file (:class:`ChildProgress`; works under valgrind); the
parent passes them on (:class:`Relay`)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from katra3d.harness.engine.results import ProgressSink


class Progress:
    """A rich bar on a TTY, else plain lines (``phase_lines``: one per phase, not per scene)."""

    def __init__(
        self,
        total_scenes: int,
        stream: TextIO | None = None,
        quiet: bool = False,
        phase_lines: bool = False,
    ) -> None:
        self.stream = stream or sys.stderr
        self.total = total_scenes
        self.quiet = quiet
        self.phase_lines = phase_lines
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self.started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        self._name = ""
        self._frames: int | None = None
        self._base = 0
        self._done = 0

    def __enter__(self) -> Progress:
        if self.tty:
            self._bar = _rich_bar(self.stream)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(f"katra3d: {text}", file=self.stream, flush=True)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        self._base = self._done = 0
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._name = f"[{index}/{self.total}] {label}"
            self._task = self._bar.add_task(self._name, total=total_frames)
        elif not self.phase_lines:
            self.line(f"[{index}/{self.total}] {label}: running")

    def phase(self, name: str, frames: int | None) -> None:
        if self.quiet:
            return
        self._base = self._done
        self._name, self._frames = name, frames
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task(name, total=None)
            self._bar.update(self._task, description=self.description(), completed=self._done)
        elif self.phase_lines:
            what = f"{name}, {frames} frame{'s' if frames != 1 else ''}" if frames else name
            self.line(f"{what} ({self.elapsed_s:.1f} s)")

    def advance(self, done: int) -> None:
        self._done = max(self._done, self._base + done)
        if self._bar is not None:
            self._bar.update(self._task, description=self.description(done), completed=self._done)

    @property
    def completed(self) -> int:
        """Frames the current scene has rendered in all its phases."""
        return self._done

    def description(self, done: int = 0) -> str:
        if not self._frames:
            return self._name
        return f"{self._name} frame {min(done + 1, self._frames)} of {self._frames}"


def _rich_bar(stream: TextIO) -> Any:
    # deferred: rich's live display loads only on a terminal
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    bar = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=True,
    )
    bar.__enter__()
    return bar


class Lane(Progress):
    """One counted child's bar of a :class:`Progress`, its ``[1/1]`` renumbered as the scene's."""

    def __init__(self, parent: Progress, index: int, label: str) -> None:
        super().__init__(parent.total, parent.stream, parent.quiet, parent.phase_lines)
        self.tty = parent.tty
        self.started = parent.started
        self._bar = parent._bar
        self.renumber = _Renumber(index, parent.total, label)

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.remove_task(self._task)
        self._task = None
        self._bar = None

    def line(self, text: str) -> None:
        super().line(self.renumber.text(text, phase=False))

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        super().scene_started(self.renumber.index, label, total_frames)

    def phase(self, name: str, frames: int | None) -> None:
        super().phase(self.renumber.text(name, phase=True), frames)


class _Renumber:
    """A one-scene child's ``[1/1] `` as the scene's place in the run."""

    def __init__(self, index: int, total: int, label: str) -> None:
        self.index, self.total = index, total
        self.prefix = f"[{index}/{total}] "
        self.named = f"{self.prefix}{label}: " if total > 1 else ""

    def text(self, text: str, *, phase: bool) -> str:
        if text.startswith("[1/1] "):
            return self.prefix + text.removeprefix("[1/1] ")
        return self.named + text if phase else text


class _RenumberedProgress:
    """:class:`Lane` for a caller's own progress sink."""

    def __init__(self, progress: ProgressSink, index: int, total: int, label: str) -> None:
        self.progress = progress
        self.tty = bool(getattr(progress, "tty", False))
        self.renumber = _Renumber(index, total, label)

    def close(self) -> None:
        pass

    def line(self, text: str) -> None:
        self.progress.line(self.renumber.text(text, phase=False))

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        self.progress.scene_started(self.renumber.index, label, total_frames)

    def phase(self, name: str, frames: int | None) -> None:
        self.progress.phase(self.renumber.text(name, phase=True), frames)

    def advance(self, done: int) -> None:
        self.progress.advance(done)


def lane(progress: ProgressSink, index: int, total: int, label: str) -> Lane | _RenumberedProgress:
    """Where the counted child of the ``index``-th scene reports."""
    if (
        isinstance(progress, Progress)
        and not isinstance(progress, Lane)
        and progress.total == total
    ):
        return Lane(progress, index, label)
    return _RenumberedProgress(progress, index, total, label)


class ChildProgress:
    """The counted child's sink: a JSON line a call; a failed write is ignored. ``tty`` so the
    engine reports every frame."""

    tty = True

    def __init__(self, path: Path) -> None:
        self.fd: int | None = None
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            pass

    def _send(self, *call: Any) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (json.dumps(call) + "\n").encode("utf-8", "replace"))
        except OSError:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def line(self, text: str) -> None:
        self._send("line", text)

    def scene_started(self, index: int, label: str, total_frames: int | None) -> None:
        self._send("scene_started", index, label, total_frames)

    def phase(self, name: str, frames: int | None) -> None:
        self._send("phase", name, frames)

    def advance(self, done: int) -> None:
        self._send("advance", done)


_CALLS: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "line": (str,),
    "scene_started": (int, str, (int, type(None))),
    "phase": (str, (int, type(None))),
    "advance": (int,),
}


class _Follow:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._rest = b""

    def lines(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        return lines


class Relay:
    """Passes each new :class:`ChildProgress` call on to ``progress``; ``stderr``: (the child's
    stderr file, where to copy it) or None."""

    def __init__(
        self, path: Path, progress: ProgressSink, stderr: tuple[Path, TextIO] | None = None
    ) -> None:
        self.follow = _Follow(path)
        self.progress = progress
        self.calls = 0
        self.stderr = (_Follow(stderr[0]), stderr[1]) if stderr is not None else None

    def poll(self) -> int:
        """Returns the calls passed on."""
        if self.stderr is not None:
            follow, stream = self.stderr
            for raw in follow.lines():
                print(raw.decode("utf-8", "replace"), file=stream, flush=True)
        made = 0
        for raw in self.follow.lines():
            try:
                call = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(call, list) or not call or call[0] not in _CALLS:
                continue
            types = _CALLS[call[0]]
            args = call[1:]
            if len(args) != len(types) or not all(
                isinstance(a, t) for a, t in zip(args, types, strict=True)
            ):
                continue
            getattr(self.progress, call[0])(*args)
            made += 1
        self.calls += made
        return made


class Tally:
    """Progress of work that is not a run's frames; piped, at most a line every ``every_s``."""

    def __init__(
        self,
        who: str = "katra3d",
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        every_s: float = 1.0,
    ) -> None:
        self.who = who
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self.started = time.monotonic()
        self._last = -math.inf
        self._shown = False
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Tally:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = self._task = None

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(f"{self.who}: {text}", markup=False, highlight=False)
        else:
            print(f"{self.who}: {text}", file=self.stream, flush=True)

    def update(self, what: str, done: int, total: int | None, detail: str = "") -> None:
        if self.quiet:
            return
        if self.tty:
            if self._bar is None:
                self._bar = _rich_bar(self.stream)
                self._task = self._bar.add_task(what, total=total)
            self._bar.update(
                self._task, description=f"{what} {detail}".rstrip(), completed=done, total=total
            )
            return
        now = time.monotonic()
        last = total is not None and done >= total
        if now - self.started < self.every_s or (
            now - self._last < self.every_s and not (last and self._shown)
        ):
            return
        self._last, self._shown = now, True
        count = (
            f"{min(done, total):,} of {total:,} ({100 * min(done, total) // total}%, "
            if total
            else f"{done:,} ("
        )
        self.line(f"{what}: {count}{now - self.started:.0f} s)" + (f" {detail}" if detail else ""))


def warn(message: object) -> None:
    """One ``katra3d: warning: ...`` line on stderr."""
    print(f"katra3d: warning: {message}", file=sys.stderr)


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """A ``warnings.showwarning`` printing one :func:`warn` line."""
    warn(message)


class entered:
    """Enter/exit a progress display if it is a context manager."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress

    def __enter__(self) -> Any:
        enter = getattr(self.progress, "__enter__", None)
        return enter() if enter is not None else self.progress

    def __exit__(self, *exc: object) -> None:
        leave = getattr(self.progress, "__exit__", None)
        if leave is not None:
            leave(*exc)


__all__ = [
    "ChildProgress",
    "Lane",
    "Progress",
    "Relay",
    "Tally",
    "entered",
    "lane",
    "show_warning",
    "warn",
]
