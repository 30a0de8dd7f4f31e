"""An X server for a GLX trace: ``$DISPLAY``, else our own Xvfb (which picks its display number:
one chosen here could be taken before it locks it)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
from collections.abc import Iterator

from katra3d.harness.replay.tool import install_line
from katra3d.harness.supervisor import spawn
from katra_trace.errors import ToolUnavailable

START_TIMEOUT_S = 30.0
XVFB_STOP_GRACE_S = 5.0
SCREEN = "4096x4096x24"


@contextlib.contextmanager
def x_display(environ: dict[str, str]) -> Iterator[dict[str, str]]:
    """``environ`` with a ``DISPLAY``; ToolUnavailable when Xvfb is needed but will not start."""
    if environ.get("DISPLAY"):
        yield environ
        return
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        raise ToolUnavailable(
            f"a GLX trace replays on an X server: set DISPLAY, or install Xvfb for katra3d to "
            f"start one: {install_line('xvfb')}"
        )
    read_fd, write_fd = os.pipe()
    try:
        group = spawn(
            [xvfb, "-displayfd", str(write_fd), "-screen", "0", SCREEN, "-nolisten", "tcp"],
            session=False,
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        os.close(read_fd)
        raise ToolUnavailable(f"Xvfb at {xvfb} does not start: {exc}") from None
    finally:
        os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            ready, _, _ = select.select([pipe], [], [], START_TIMEOUT_S)
            number = pipe.readline().strip() if ready else b""
        if not number.isdigit():
            raise ToolUnavailable(
                f"Xvfb did not start within {START_TIMEOUT_S:.0f} s "
                f"(exit status {group.proc.poll()})"
            )
        yield {**environ, "DISPLAY": f":{number.decode()}"}
    finally:
        group.end(XVFB_STOP_GRACE_S)


__all__ = ["SCREEN", "x_display"]
