"""The tests' two ways to run the ``katra3d`` command: as a process of its own (:func:`katra`) and
in this process (:func:`katra_main`). conftest's ``katra_cli`` fixture is :func:`katra` run in the
test's tmp_path.

A test that signals a command while it runs starts it with ``subprocess.Popen`` itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest


def katra(
    *args: str | bytes | os.PathLike[str],
    cwd: str | Path | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 600,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:  # noqa: A002 - subprocess.run's name
    """``python -m katra3d ARGS`` in a process of its own: text mode, stdout and stderr captured.

    The process gets this one's environment without ``KATRA3D_BACKEND`` (a command picks its own GL
    backend, as for a user), then ``env``'s entries (a value of None removes that variable).
    ``timeout`` is a guard: a regression that hangs fails the test instead of stalling the suite."""
    full = dict(os.environ)
    full.pop("KATRA3D_BACKEND", None)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    return subprocess.run(
        [sys.executable, "-m", "katra3d", *args],
        cwd=cwd,
        env=full,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def katra_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``katra3d ARGS`` in this process (``katra3d.harness.cli.main``): its exit code, stdout and
    stderr.

    An argparse exit (a usage error, ``--help``) gives its exit code too."""
    from katra3d.harness.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err
