"""Which glretrace replays a trace (its ``glX*``/``egl*`` calls say), its version, the trace's
facts."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

from katra_trace.errors import ConfigError, SceneError, ToolUnavailable
from katra_trace.io.inputs import open_regular
from katra_trace.jsontext import JsonObject

APT_PACKAGE = "apitrace"
SNIFF_CALLS = 2000
#: Snappy and gzip magic (a file with neither is read as brotli).
SNAPPY_OR_GZIP = (b"at", b"\x1f\x8b")
_CALL = re.compile(r"^\d+ (glX|egl|wgl|CGL)[A-Za-z]*\(", re.MULTILINE)
#: The first SwapBuffers (a context is current there), else the first MakeCurrent.
_SWAP = re.compile(r"^(\d+) (?:glX|egl)SwapBuffers\(", re.MULTILINE)
_CURRENT = re.compile(r"^(\d+) (?:glXMake(?:Context)?Current|eglMakeCurrent)\(", re.MULTILINE)


def install_line(package: str = APT_PACKAGE) -> str:
    line = f"apt-get install -y {package}"
    return line if os.geteuid() == 0 else f"sudo {line}"


@dataclasses.dataclass(frozen=True)
class Replayer:
    """glretrace or eglretrace, apitrace's ``version`` ("" when unknown), ``api`` (glx | egl)."""

    path: str
    version: str
    api: str

    @property
    def headless(self) -> bool:
        return self.api == "egl"

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "version": self.version, "api": self.api}


@dataclasses.dataclass(frozen=True)
class TraceFacts:
    """An apitrace file as the header records it; ``current_call``: one with a context current."""

    path: str
    sha256: str
    size_bytes: int
    api: str
    current_call: int | None = None

    def as_dict(self) -> JsonObject:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "api": self.api,
        }


def _which(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolUnavailable(
            f"replaying an apitrace trace needs {name}, which is not on PATH; "
            f"install it: {install_line()}"
        )
    return path


def package_version() -> str:
    """apitrace's version ("" when dpkg-query does not say)."""
    dpkg = shutil.which("dpkg-query")
    if dpkg is None:
        return ""
    try:
        out = subprocess.run(
            [dpkg, "-W", "-f=${Version}", APT_PACKAGE],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def sniff_api(path: Path) -> tuple[str, int | None]:
    """glx or egl and a call with a context current; ToolUnavailable without apitrace, SceneError
    for no GLX/EGL call or an unreadable file."""
    apitrace = _which("apitrace")
    try:
        out = subprocess.run(
            [apitrace, "dump", f"--calls=0-{SNIFF_CALLS}", "--color=never", str(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SceneError(f"apitrace cannot read trace '{path}': {exc}") from None
    found = {m.group(1) for m in _CALL.finditer(out.stdout)}
    current = _SWAP.search(out.stdout) or _CURRENT.search(out.stdout)
    call = int(current.group(1)) if current else None
    if "glX" in found:
        return "glx", call
    if "egl" in found:
        return "egl", call
    if found:
        raise SceneError(
            f"trace '{path}' is a {'/'.join(sorted(found))} trace; katra3d replays GLX and EGL "
            "traces (Linux)"
        )
    if out.returncode or out.stderr.strip():
        with open_regular(path) as fh:
            head = fh.read(2)
        if head not in SNAPPY_OR_GZIP:  # apitrace took it for brotli and could not decode it
            raise SceneError(f"'{path}' is not an apitrace trace: apitrace cannot decode it")
    why = (out.stderr.strip().splitlines() or ["no GLX or EGL call in its first calls"])[-1]
    raise SceneError(f"trace '{path}' cannot be replayed: {why[:200]}")


def trace_facts(path: Path, sha256: str, size_bytes: int) -> TraceFacts:
    return TraceFacts(os.path.abspath(path), sha256, size_bytes, *sniff_api(path))


def trim(path: str, frames: int, out: Path) -> Path:
    """``out``: the first ``frames`` frames (same call numbers); SceneError when it fails."""
    command = [_which("apitrace"), "trim", f"--frames=0-{max(0, frames - 1)}", "-o", str(out), path]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=600, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SceneError(f"apitrace trim of '{path}' failed: {exc}") from None
    if done.returncode != 0 or not out.is_file():
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SceneError(f"apitrace trim of '{path}' failed: {why[:200]}")
    return out


def find_replayer(api: str) -> Replayer:
    """The replayer of an ``api`` trace; ToolUnavailable when missing."""
    if api not in ("glx", "egl"):
        raise ConfigError(f"no replayer for a {api} trace")
    return Replayer(_which("glretrace" if api == "glx" else "eglretrace"), package_version(), api)


__all__ = [
    "APT_PACKAGE",
    "Replayer",
    "TraceFacts",
    "find_replayer",
    "install_line",
    "package_version",
    "sniff_api",
    "trace_facts",
    "trim",
]
