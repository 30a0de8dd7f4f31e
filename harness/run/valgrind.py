"""What counting needs: valgrind (found once at planning) and a software renderer. No GL."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

from katra_trace.errors import ConfigError, ToolUnavailable
from katra_trace.io.header import GLInfo
from katra_trace.metrics import is_count

VALGRIND_INSTALL_LINE = "apt-get install -y valgrind"


@dataclasses.dataclass(frozen=True)
class Counting:
    """``mode`` (instructions | cycles), valgrind's path and ``version``."""

    mode: str
    valgrind: str
    version: str


def find_valgrind() -> tuple[str, str]:
    """(path, version) of valgrind; ToolUnavailable with the install line when missing."""
    path = shutil.which("valgrind")
    if path is None:
        how = VALGRIND_INSTALL_LINE if os.geteuid() == 0 else f"sudo {VALGRIND_INSTALL_LINE}"
        raise ToolUnavailable(
            f"--measure instructions/cycles needs valgrind, which is not on PATH; install it: {how}"
        )
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolUnavailable(f"valgrind at {path} does not run: {exc}") from None
    version = out.stdout.strip().removeprefix("valgrind-")
    if out.returncode != 0 or not version:
        raise ToolUnavailable(f"valgrind at {path} does not run (exit {out.returncode})")
    return path, version


def counting(measure: str) -> Counting | None:
    """None for ``time``."""
    if not is_count(measure):
        return None
    return Counting(measure, *find_valgrind())


def check_renderer(measure: str, gl: GLInfo) -> None:
    """ConfigError unless the renderer is a software one (valgrind counts CPU work)."""
    if is_count(measure) and not gl.software_renderer:
        renderer = gl.renderer or "this renderer"
        raise ConfigError(
            f"--measure {measure} needs a software renderer such as llvmpipe; '{renderer}' is a "
            "hardware "
            "renderer: instructions would count only the CPU side of a GPU frame, and GPU drivers "
            "do not run "
            "under valgrind. Use --measure time"
        )


__all__ = [
    "Counting",
    "ToolUnavailable",
    "VALGRIND_INSTALL_LINE",
    "check_renderer",
    "counting",
    "find_valgrind",
]
