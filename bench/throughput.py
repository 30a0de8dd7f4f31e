"""Trace writer and reader throughput, each against the plain-numpy (or plain-list) equivalent.

Targets (from the trace-format issue): per-event ``append`` >= 1/3 of the rate
of appending tuples to a list; bulk write >= 0.5 of ``ndarray.tofile``; read
>= 0.25 of ``np.fromfile``; <= 16 bytes per event on a frame + 3 zones stream
with zstd. Each ratio is (baseline time) / (katra3d time) for the same events,
i.e. katra3d's rate as a fraction of the baseline's rate (higher is better).
"""

from __future__ import annotations

import warnings

import numpy as np

from bench._core import BenchContext, Row, at_least, at_most, bench, interleave, pair_ratios, ratio_row
from katra_trace import EVENT_DTYPE, Clock, Flag, Kind, TraceWriter, open_trace

ZONES_PER_FRAME = 3


def frame_zone_stream(n_frames: int, zones: int = ZONES_PER_FRAME, seed: int = 0) -> np.ndarray:
    """What a capture with zones writes: per frame its ``zones`` zones, then the frame, on the
    wall clock, ~16.6 ms frames with jittered durations; string ids 1 (scene) and 2.. (names)."""
    rng = np.random.default_rng(seed)
    per = zones + 1
    frame_ns = rng.normal(16_600_000, 400_000, n_frames).astype(np.int64)
    gaps = rng.integers(10_000, 50_000, n_frames)
    frame_start = np.concatenate(([0], np.cumsum(frame_ns + gaps)[:-1])).astype(np.int64)
    out = np.zeros(n_frames * per, dtype=EVENT_DTYPE)
    idx = np.arange(n_frames)
    zone_ns = (frame_ns // per)[:, None] + rng.integers(-20_000, 20_000, (n_frames, zones))
    zone_start = frame_start[:, None] + np.concatenate(
        (np.zeros((n_frames, 1), np.int64), np.cumsum(zone_ns, axis=1)[:, :-1]), axis=1)
    for z in range(zones):
        rows = out[z::per]
        rows["kind"], rows["clock"], rows["depth"], rows["scene"] = int(Kind.ZONE), int(Clock.WALL), 1, 1
        rows["name"], rows["frame"] = 3 + z, idx
        rows["start_ns"], rows["dur_ns"] = zone_start[:, z], zone_ns[:, z]
    frames = out[zones::per]
    frames["kind"], frames["clock"], frames["scene"], frames["name"] = int(Kind.FRAME), int(Clock.WALL), 1, 2
    frames["frame"], frames["start_ns"], frames["dur_ns"] = idx, frame_start, frame_ns
    frames["flags"][:3] = int(Flag.WARMUP)
    return out


@bench("trace-append", about="TraceWriter.append per event vs appending tuples to a list")
def trace_append(ctx: BenchContext) -> list[Row]:
    n = ctx.scale(200_000, 20_000)
    path = ctx.tmp / "append.katra"
    frame, wall = int(Kind.FRAME), int(Clock.WALL)

    def baseline() -> None:
        rows: list[tuple[float, ...]] = []
        add = rows.append
        for i in range(n):
            add((frame, wall, 1, 2, i, 0, i * 1000, 900, 0.0, 0))

    def katra() -> None:
        path.unlink(missing_ok=True)  # a trace is never written over an existing file
        w = TraceWriter(path)
        add = w.append
        for i in range(n):
            add(frame, wall, 1, 2, i, 0, i * 1000, 900, 0.0, 0)
        w.finish()  # until every event is on disk

    samples = interleave({"list": baseline, "katra": katra}, rounds=ctx.scale(9, 3), progress=ctx.log)
    rate = n / float(np.median(samples["katra"]))
    return [ratio_row("append per event", "events/s: TraceWriter.append / list.append",
                      pair_ratios(samples, "list", "katra"), target=at_least(1 / 3),
                      notes=f"{n} events, until on disk; ~{rate / 1e6:.2f} M/s here")]


def _bulk_stream(ctx: BenchContext) -> np.ndarray:
    n = ctx.scale(2_000_000, 100_000)
    base = frame_zone_stream(5000)
    reps = -(-n // len(base))
    out = np.tile(base, reps)[:n]
    span = int(base["start_ns"].max()) + 20_000_000
    out["start_ns"] += np.repeat(np.arange(reps, dtype=np.int64) * span, len(base))[:n]
    out["frame"] += np.repeat(np.arange(reps, dtype=np.uint32) * 5000, len(base))[:n]
    return out


@bench("trace-write", about="TraceWriter.append_array (zstd / no codec) vs ndarray.tofile")
def trace_write(ctx: BenchContext) -> list[Row]:
    stream = _bulk_stream(ctx)
    raw, path = ctx.tmp / "raw.bin", ctx.tmp / "bulk.katra"
    rows: list[Row] = []
    for codec in ("zstd", "none"):
        def baseline() -> None:
            stream.tofile(raw)

        def katra(codec: str = codec) -> None:
            path.unlink(missing_ok=True)
            w = TraceWriter(path, codec=codec, batch_events=65536)
            w.append_array(stream)
            w.finish()

        samples = interleave({"tofile": baseline, "katra": katra}, rounds=ctx.scale(9, 3), progress=ctx.log)
        per_event = path.stat().st_size / len(stream)
        rows.append(ratio_row(f"bulk write ({codec})", "events/s: append_array / ndarray.tofile",
                              pair_ratios(samples, "tofile", "katra"), target=at_least(0.5),
                              notes=f"{len(stream)} events; {per_event:.2f} bytes/event"))
    return rows


@bench("trace-read", about="open_trace (zstd / no codec) vs np.fromfile")
def trace_read(ctx: BenchContext) -> list[Row]:
    stream = _bulk_stream(ctx)
    raw = ctx.tmp / "raw.bin"
    stream.tofile(raw)
    rows: list[Row] = []
    for codec in ("zstd", "none"):
        path = ctx.tmp / f"read-{codec}.katra"
        w = TraceWriter(path, codec=codec, batch_events=65536)
        w.append_array(stream)
        w.finish()

        def baseline() -> None:
            np.fromfile(raw, dtype=EVENT_DTYPE)

        def katra(path: object = path) -> None:
            got = len(open_trace(path).events)  # type: ignore[arg-type]
            if got != len(stream):
                raise RuntimeError(f"open_trace read {got} events of {len(stream)}")

        samples = interleave({"fromfile": baseline, "katra": katra}, rounds=ctx.scale(9, 3), progress=ctx.log)
        rows.append(ratio_row(f"read ({codec})", "events/s: open_trace / np.fromfile",
                              pair_ratios(samples, "fromfile", "katra"), target=at_least(0.25),
                              notes=f"{len(stream)} events"))
    return rows


@bench("trace-size", about="bytes per event of a frame + 3 zones capture with zstd")
def trace_size(ctx: BenchContext) -> list[Row]:
    events = frame_zone_stream(ctx.scale(20_000, 2_000))
    path = ctx.tmp / "size.katra"
    w = TraceWriter(path)
    w.append_array(events)
    w.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = open_trace(path, strict=True).events
    if back.tobytes() != events.tobytes():
        raise RuntimeError("the trace did not read back the events written")
    per_event = path.stat().st_size / len(events)
    return [Row("bytes per event (zstd)", "file size / events (frame + 3 zones)", per_event,
                unit="bytes/event", target=at_most(16), notes=f"{len(events)} events, read back exactly")]
