"""The timer-query diagnostic of ``katra3d doctor``: do GL_TIMESTAMP queries time a draw?

On a real GPU a heavy draw's GPU time is close to (and at most) its wall time;
on llvmpipe, whose queries stamp one 64x64 tile, it is a small fraction of it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from harness.gl.shim import GL_TIMESTAMP, RawGL

_HEAVY_VS = """
#version 330
in vec2 in_pos;
void main() { gl_Position = vec4(in_pos, 0.0, 1.0); }
"""

_HEAVY_FS = """
#version 330
uniform int u_iters;
out vec4 f_color;
void main() {
    vec2 p = gl_FragCoord.xy * 0.001;
    float acc = 0.0;
    for (int i = 0; i < u_iters; ++i) {
        p = vec2(sin(p.x * 1.3 + p.y), cos(p.y * 0.7 - p.x)) + 0.01;
        acc += p.x * p.y;
    }
    f_color = vec4(fract(acc), p, 1.0);
}
"""


def timer_query_reliability(ctx: Any, size: tuple[int, int] = (512, 512), iters: int = 64,
                            repeats: int = 3) -> dict[str, Any]:
    """Do GL_TIMESTAMP queries time the draw? Compare a heavy draw's GPU time with its wall time.

    The draw (a full-screen quad with a long fragment loop) is bracketed by two
    timestamp queries and by ``glFinish`` + host clock. On a real GPU the GPU
    time is close to (and at most) the wall time; on llvmpipe, whose queries
    stamp one 64x64 tile, it is a small fraction of it. Returns gpu_ms,
    wall_ms (medians over ``repeats``), ratio = gpu / wall, and a verdict:
    ``reliable``, ``unreliable`` (ratio < 0.5) or ``unsupported``.
    """
    if ctx.version_code < 330 and "GL_ARB_timer_query" not in ctx.extensions:
        return {"verdict": "unsupported", "reason": "no GL_ARB_timer_query"}
    gl = RawGL()
    prog = ctx.program(vertex_shader=_HEAVY_VS, fragment_shader=_HEAVY_FS)
    vbo = ctx.buffer(np.array([-1, -1, 1, -1, -1, 1, 1, 1], dtype="f4").tobytes())
    vao = ctx.vertex_array(prog, [(vbo, "2f", "in_pos")])
    color = ctx.renderbuffer(size, 4)
    fbo = ctx.framebuffer(color_attachments=[color])
    queries = gl.gen_queries(2)
    gpu_ns: list[int] = []
    wall_ns: list[int] = []
    previous = ctx.fbo
    try:
        fbo.use()
        prog["u_iters"].value = iters
        vao.render(mode=ctx.TRIANGLE_STRIP)  # warm up (shader compile on first draw)
        ctx.finish()
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            gl.query_counter(queries[0], GL_TIMESTAMP)
            vao.render(mode=ctx.TRIANGLE_STRIP)
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
    return {
        "verdict": verdict,
        "gpu_ms": round(gpu_ms, 4),
        "wall_ms": round(wall_ms, 4),
        "ratio": round(ratio, 4),
        "draw": f"full-screen quad, {size[0]}x{size[1]}, {iters}-step fragment loop",
    }


__all__ = ["timer_query_reliability"]
