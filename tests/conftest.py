"""Shared test fixtures. The one place that creates GL contexts for tests.

GL tests are marked ``gl`` and render on a real context (Mesa llvmpipe via
EGL in CI). If no context can be created at all, they are skipped with the
reason computed once here; CI installs Mesa, so there they always run.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import katra

REPO = Path(__file__).resolve().parent.parent

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started in the background by a shell without job control (`make test &`, `nohup ... &`),
    # which ignores SIGINT; children inherit that, and Python then installs no KeyboardInterrupt
    # handler in them. The tests that interrupt a child need it to react like one started from a
    # terminal, so catch SIGINT here: a caught signal is reset to its default in exec'd children.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@functools.lru_cache(maxsize=1)
def _egl_context() -> tuple[Any, str]:
    """A process-wide standalone EGL context, or (None, why not)."""
    import os
    import sys

    if "OpenGL" not in sys.modules:
        # as katra3d.harness.gl.backends does for EGL: PyOpenGL's raw calls (timers, probe) must go
        # through EGL too
        os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    try:
        import moderngl

        ctx = moderngl.create_standalone_context(backend="egl")
    except Exception as exc:  # noqa: BLE001 - any failure means "no GL here"
        return None, f"no EGL context: {type(exc).__name__}: {exc}"
    return ctx, ""


@pytest.fixture
def gl_ctx() -> Iterator[Any]:
    """A moderngl context on EGL; fails the test if it leaves a GL error behind."""
    ctx, why = _egl_context()
    if ctx is None:
        pytest.skip(why)
    with ctx:  # current again, whatever contexts in-process runs opened and closed since
        assert ctx.error == "GL_NO_ERROR", "GL error left by an earlier test"
        assert not _released(ctx.fbo), "an earlier test left a released framebuffer bound"
        yield ctx
        err = ctx.error
        left_bound = _released(ctx.fbo)
    assert err == "GL_NO_ERROR", f"test left GL error {err}"
    # bound but released: moderngl binds it again after creating any framebuffer, and GL reports
    # GL_INVALID_OPERATION for binding a deleted name, in whatever test comes next
    assert not left_bound, "test left a released framebuffer bound"


def _released(glo_object: Any) -> bool:
    return glo_object is not None and type(glo_object.mglo).__name__ == "InvalidObject"


@pytest.fixture
def katra_cli(tmp_path: Path) -> Any:
    """Run the ``katra3d`` command in a subprocess: ``katra_cli(*args)``, in tmp_path unless ``cwd``
    says.

    Returns the CompletedProcess (text mode, stdout/stderr captured): tests.cli_helpers.katra.
    """

    def run(
        *args: str, timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return katra(*args, cwd=cwd or tmp_path, env=env, timeout=timeout)

    return run


# --- harness helper's fixtures ---------------------------------------------------------


@pytest.fixture
def harness_session() -> Iterator[Any]:
    """``harness_session(backend=None, **kw)`` opens a harness GLSession in this process.

    Sessions are closed after the test, and the shared ``gl_ctx`` context is made
    current again (opening and closing a context changes the current one).
    """
    from katra3d.harness.gl.backends import open_session

    opened: list[Any] = []

    def open_(backend: str | None = "egl", **kwargs: Any) -> Any:
        session = open_session(backend, **kwargs)
        opened.append(session)
        return session

    yield open_
    for session in opened:
        session.close()
    ctx, _ = _egl_context()
    if ctx is not None:
        ctx.__enter__()


# --- the pytester fixture, for tests/test_plugin.py -----------------------------------------
pytest_plugins = ["pytester"]


# --- scenes helper's fixtures -----------------------------------------------------------


@pytest.fixture
def installed_user_scene_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real installed distribution (a ``.dist-info`` on sys.path, no mocking) whose
    ``katra3d.scenes`` entry points are ``user-stripes`` (tests/data/user_scene_pkg)
    and ``user-broken`` (a module that does not exist). Yields the site directory."""
    dist = tmp_path / "katra3d_user_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: katra3d-user-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[katra3d.scenes]\nuser-stripes = katra3d_user_demo:Stripes\n"
        "user-broken = katra3d_user_demo_missing:Nope\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(REPO / "tests" / "data" / "user_scene_pkg"))
    yield tmp_path
    sys.modules.pop("katra3d_user_demo", None)
