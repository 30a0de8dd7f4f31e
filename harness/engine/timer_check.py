"""The timer-query diagnostic of ``katra3d doctor``: do GL_TIMESTAMP queries time a draw?"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from katra3d.harness.engine.reference import FULL_SCREEN_TRIANGLE, make_program
from katra3d.harness.gl.shim import GL_TIMESTAMP, RawGL
from katra_trace.jsontext import JsonObject, record_dict


@dataclasses.dataclass(frozen=True)
class TimerCheck:
    """:func:`timer_query_reliability`'s result; ``note``: doctor's advice."""

    verdict: str
    reason: str | None = None
    gpu_ms: float | None = None
    wall_ms: float | None = None
    ratio: float | None = None
    draw: str | None = None
    note: str | None = None

    def as_dict(self) -> JsonObject:
        """The fields set."""
        return {k: v for k, v in record_dict(self).items() if v is not None}


def timer_query_reliability(
    ctx: Any, size: tuple[int, int] = (512, 512), iters: int = 64, repeats: int = 3
) -> TimerCheck:
    """The reference draw's GPU vs wall time (llvmpipe's queries stamp one 64x64 tile): gpu_ms,
    wall_ms, ratio, verdict ``reliable``, ``unreliable`` (ratio < 0.5) or ``unsupported``."""
    if ctx.version_code < 330 and "GL_ARB_timer_query" not in ctx.extensions:
        return TimerCheck("unsupported", reason="no GL_ARB_timer_query")
    gl = RawGL()
    prog = make_program(ctx, iters)
    vbo = ctx.buffer(FULL_SCREEN_TRIANGLE)
    vao = ctx.vertex_array(prog, [(vbo, "2f", "in_pos")])
    color = ctx.renderbuffer(size, 4)
    fbo = ctx.framebuffer(color_attachments=[color])
    queries = gl.gen_queries(2)
    gpu_ns: list[int] = []
    wall_ns: list[int] = []
    previous = ctx.fbo
    try:
        fbo.use()
        vao.render()  # shader compile on first draw
        ctx.finish()
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            gl.query_counter(queries[0], GL_TIMESTAMP)
            vao.render()
            gl.query_counter(queries[1], GL_TIMESTAMP)
            ctx.finish()
            t1 = time.perf_counter_ns()
            stamps = [gl.query_result_ns(q) for q in queries]
            gpu_ns.append(stamps[1] - stamps[0])
            wall_ns.append(t1 - t0)
    finally:
        gl.delete_queries(queries)
        (previous if previous is not None else ctx.detect_framebuffer(0)).use()
        for obj in (vao, vbo, prog, fbo, color):
            obj.release()
    gpu_ms = float(np.median(gpu_ns)) / 1e6
    wall_ms = float(np.median(wall_ns)) / 1e6
    ratio = gpu_ms / wall_ms if wall_ms > 0 else 0.0
    verdict = "reliable" if ratio >= 0.5 else "unreliable"
    return TimerCheck(
        verdict,
        gpu_ms=round(gpu_ms, 4),
        wall_ms=round(wall_ms, 4),
        ratio=round(ratio, 4),
        draw=f"the reference shader: full-screen triangle, {size[0]}x{size[1]}, {iters}-step "
        "fragment loop",
    )


__all__ = ["TimerCheck", "timer_query_reliability"]
