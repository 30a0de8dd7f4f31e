"""A fixed draw timed inside every run: frame time / reference time cancels most of a busy
neighbour's drift (``compare --normalize``; docs/timing.md). 256x256 px spans 16 llvmpipe tiles, so
its threads share it as they share a frame (a one-tile draw did not slow with the neighbour)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from katra_trace.jsontext import JsonObject
from katra_trace.schema import REFERENCE_NAME, Clock, Flag, Kind

REFERENCE_SIZE = (256, 256)
# about 0.9 ms a draw on llvmpipe, 2 cores
REFERENCE_STEPS = 8

# changing it changes every run's reference times
VERTEX_SHADER = """
#version 330
in vec2 in_pos;
void main() { gl_Position = vec4(in_pos, 0.0, 1.0); }
"""

FRAGMENT_SHADER = """
#version 330
uniform int u_steps;
out vec4 f_color;
void main() {
    vec2 p = gl_FragCoord.xy * 0.013;
    float acc = 0.0;
    for (int i = 0; i < u_steps; ++i) {
        p = vec2(sin(p.y * 1.7 + 0.3), cos(p.x * 1.1 - 0.2)) * 1.01;
        acc += p.x * p.y;
    }
    f_color = vec4(fract(acc), p * 0.5 + 0.5, 1.0);
}
"""

FULL_SCREEN_TRIANGLE: bytes = np.array([-1, -1, 3, -1, -1, 3], dtype="f4").tobytes()

_pc = time.perf_counter_ns


def make_program(ctx: Any, steps: int) -> Any:
    program = ctx.program(vertex_shader=VERTEX_SHADER, fragment_shader=FRAGMENT_SHADER)
    try:
        program["u_steps"].value = steps
    except BaseException:
        program.release()
        raise
    return program


class ReferenceDraw:
    def __init__(self, ctx: Any, timer: Any) -> None:
        self.ctx = ctx
        self.timer = timer
        self.add = timer.add
        self.name_id = timer.name_id(REFERENCE_NAME)
        made: list[Any] = []
        try:
            self.program = make_program(ctx, REFERENCE_STEPS)
            made.append(self.program)
            self.vbo = ctx.buffer(FULL_SCREEN_TRIANGLE)
            made.append(self.vbo)
            self.vao = ctx.vertex_array(self.program, [(self.vbo, "2f", "in_pos")])
            made.append(self.vao)
            self.color = ctx.renderbuffer(REFERENCE_SIZE, 4)
            made.append(self.color)
            self.fbo = ctx.framebuffer(color_attachments=[self.color])
            made.append(self.fbo)
        except BaseException:
            for obj in reversed(made):
                obj.release()
            raise
        self._objects = made
        self.count = 0

    def run(self, frame: int) -> None:
        """Time one reference draw after ``frame``, then rebind the previous framebuffer."""
        ctx = self.ctx
        timer = self.timer
        previous = ctx.fbo
        self.fbo.use()
        ctx.finish()  # the frame's own work is not the reference's
        t0 = _pc()
        self.vao.render()
        t_sub = _pc()
        ctx.finish()
        t1 = _pc()
        if previous is not None:
            previous.use()
        start = t0 - timer.origin_ns
        flags = int(Flag.REFERENCE)
        self.add(
            (
                int(Kind.MARKER),
                int(Clock.CPU),
                flags,
                0,
                timer.scene_id,
                self.name_id,
                frame,
                start,
                t_sub - t0,
                0.0,
            )
        )
        self.add(
            (
                int(Kind.MARKER),
                int(Clock.WALL),
                flags,
                0,
                timer.scene_id,
                self.name_id,
                frame,
                start,
                t1 - t0,
                0.0,
            )
        )
        self.count += 1

    def options(self, every: int) -> JsonObject:
        return {
            "every_frames": every,
            "size": list(REFERENCE_SIZE),
            "steps": REFERENCE_STEPS,
            "draw": "full-screen triangle, fixed fragment loop, glFinish before and after, host "
            "clock",
            "event": f"MARKER '{REFERENCE_NAME}', flag REFERENCE, clocks cpu and wall",
        }

    def release(self) -> None:
        for obj in reversed(self._objects):
            obj.release()
        self._objects = []


__all__ = [
    "FRAGMENT_SHADER",
    "FULL_SCREEN_TRIANGLE",
    "REFERENCE_SIZE",
    "REFERENCE_STEPS",
    "ReferenceDraw",
    "VERTEX_SHADER",
    "make_program",
]
