"""Trace writer and reader throughput, each against the plain-numpy (or plain-list) equivalent.

Targets: per-event ``append`` >= 1/3 of the rate of appending tuples to a list; read >= 0.25 of
``np.fromfile`` (0.5 with blosc2); <= 6 bytes per event on a frame + 3 zones stream (16 in
``trace-size``); blosc2's writer-thread CPU <= 1/3 of zstd's. Bulk write against
``ndarray.tofile`` has no target (at ~15 M events/s it is far beyond any capture's rate): its rows
and the writer CPU per million events are reported for information.
Every codec is measured in the same interleaved rounds, so the codecs' ratios compare with each
other. Each ratio is (baseline time) / (katra3d time) for the same events, i.e. katra3d's rate
as a fraction of the baseline's rate (higher is better).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench._core import (
    BenchContext,
    Row,
    at_least,
    at_most,
    bench,
    interleave,
    pair_ratios,
    ratio_row,
)
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
        (np.zeros((n_frames, 1), np.int64), np.cumsum(zone_ns, axis=1)[:, :-1]), axis=1
    )
    for z in range(zones):
        rows = out[z::per]
        rows["kind"], rows["clock"], rows["depth"], rows["scene"] = (
            int(Kind.ZONE),
            int(Clock.WALL),
            1,
            1,
        )
        rows["name"], rows["frame"] = 3 + z, idx
        rows["start_ns"], rows["dur_ns"] = zone_start[:, z], zone_ns[:, z]
    frames = out[zones::per]
    frames["kind"], frames["clock"], frames["scene"], frames["name"] = (
        int(Kind.FRAME),
        int(Clock.WALL),
        1,
        2,
    )
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
        w = TraceWriter(path, overwrite=True)
        add = w.append
        for i in range(n):
            add(frame, wall, 1, 2, i, 0, i * 1000, 900, 0.0, 0)
        w.finish()  # until every event is on disk

    samples = interleave(
        {"list": baseline, "katra": katra}, rounds=ctx.scale(9, 3), progress=ctx.log
    )
    rate = n / float(np.median(samples["katra"]))
    return [
        ratio_row(
            "append per event",
            "events/s: TraceWriter.append / list.append",
            pair_ratios(samples, "list", "katra"),
            target=at_least(1 / 3),
            notes=f"{n} events, until on disk; ~{rate / 1e6:.2f} M/s here",
        )
    ]


def _bulk_stream(ctx: BenchContext) -> np.ndarray:
    n = ctx.scale(2_000_000, 100_000)
    base = frame_zone_stream(5000)
    reps = -(-n // len(base))
    out = np.tile(base, reps)[:n]
    span = int(base["start_ns"].max()) + 20_000_000
    out["start_ns"] += np.repeat(np.arange(reps, dtype=np.int64) * span, len(base))[:n]
    out["frame"] += np.repeat(np.arange(reps, dtype=np.uint32) * 5000, len(base))[:n]
    return out


def _codecs() -> tuple[str, ...]:
    """The trace codecs this machine can write: blosc2 only when python-blosc2 is installed."""
    try:
        import blosc2  # noqa: F401
    except ImportError:
        return ("zstd", "none")
    return ("zstd", "blosc2", "none")


def _write(path: object, stream: np.ndarray, codec: str) -> None:
    w = TraceWriter(path, codec=codec, batch_events=65536, overwrite=True)  # type: ignore[arg-type]
    w.append_array(stream)
    w.finish()


@bench(
    "trace-write",
    about="TraceWriter.append_array per codec vs ndarray.tofile; writer-thread CPU and "
    "bytes per event per codec",
)
def trace_write(ctx: BenchContext) -> list[Row]:
    stream = _bulk_stream(ctx)
    raw = ctx.tmp / "raw.bin"
    codecs = _codecs()
    #: per codec, per round: CPU seconds spent outside the calling thread (the writer thread, and
    #: any thread a codec starts), which is what a capture takes from the render threads
    writer_cpu_s: dict[str, list[float]] = {c: [] for c in codecs}
    sizes: dict[str, int] = {}

    def baseline() -> None:
        stream.tofile(raw)

    def variant(codec: str) -> Callable[[], None]:
        path = ctx.tmp / f"bulk-{codec}.katra"

        def katra() -> None:
            proc0, own0 = time.process_time(), time.thread_time()
            _write(path, stream, codec)
            writer_cpu_s[codec].append((time.process_time() - proc0) - (time.thread_time() - own0))
            sizes[codec] = path.stat().st_size

        return katra

    variants: dict[str, Callable[[], None]] = {"tofile": baseline}
    variants.update({c: variant(c) for c in codecs})
    rounds = ctx.scale(9, 3)
    samples = interleave(variants, rounds=rounds, progress=ctx.log)
    rows: list[Row] = []
    for codec in codecs:
        rows.append(
            ratio_row(
                f"bulk write ({codec})",
                "events/s: append_array / ndarray.tofile",
                pair_ratios(samples, "tofile", codec),
                notes=f"{len(stream)} events (tiled: sizes here flatter zstd; see the "
                "bytes-per-event rows); "
                f"{sizes[codec] / len(stream):.2f} bytes/event",
            )
        )
    for codec in codecs:
        cpu = writer_cpu_s[codec][-rounds:]  # the warmup round is not kept by interleave either
        per_m_ms = [1e3 * c * 1e6 / len(stream) for c in cpu]
        rows.append(
            ratio_row(
                f"writer CPU ({codec})",
                "writer-thread CPU ms per 1 M events",
                per_m_ms,
                unit="ms/M events",
                notes="process CPU minus the appending thread's",
            )
        )
    realistic = frame_zone_stream(ctx.scale(20_000, 2_000))
    for codec in codecs:
        if codec != "none":
            rows.append(
                Row(
                    f"bytes per event ({codec})",
                    "file size / events (frame + 3 zones, default batches)",
                    _size_per_event(ctx.tmp / f"size-{codec}.katra", realistic, codec),
                    unit="bytes/event",
                    target=at_most(6),
                    notes=f"{len(realistic)} events, read back exactly",
                )
            )
    if "blosc2" in codecs:
        zstd_cpu = writer_cpu_s["zstd"][-rounds:]
        rows.append(
            ratio_row(
                "writer CPU blosc2 / zstd",
                "writer-thread CPU: blosc2 / zstd, per round",
                [b / z for b, z in zip(writer_cpu_s["blosc2"][-rounds:], zstd_cpu, strict=True)],
                target=at_most(1 / 3),
            )
        )
    return rows


@bench("trace-read", about="open_trace per codec vs np.fromfile")
def trace_read(ctx: BenchContext) -> list[Row]:
    stream = _bulk_stream(ctx)
    raw = ctx.tmp / "raw.bin"
    stream.tofile(raw)
    codecs = _codecs()

    def baseline() -> None:
        np.fromfile(raw, dtype=EVENT_DTYPE)

    def variant(codec: str) -> Callable[[], None]:
        path = ctx.tmp / f"read-{codec}.katra"
        _write(path, stream, codec)

        def katra() -> None:
            got = len(open_trace(path).events)
            if got != len(stream):
                raise RuntimeError(f"open_trace read {got} events of {len(stream)}")

        return katra

    variants: dict[str, Callable[[], None]] = {"fromfile": baseline}
    variants.update({c: variant(c) for c in codecs})
    samples = interleave(variants, rounds=ctx.scale(9, 3), progress=ctx.log)
    return [
        ratio_row(
            f"read ({codec})",
            "events/s: open_trace / np.fromfile",
            pair_ratios(samples, "fromfile", codec),
            target=at_least(0.5 if codec == "blosc2" else 0.25),
            notes=f"{len(stream)} events",
        )
        for codec in codecs
    ]


@bench("trace-size", about="bytes per event of a frame + 3 zones capture with zstd")
def trace_size(ctx: BenchContext) -> list[Row]:
    events = frame_zone_stream(ctx.scale(20_000, 2_000))
    path = ctx.tmp / "size.katra"
    per_event = _size_per_event(path, events, "zstd")
    return [
        Row(
            "bytes per event (zstd)",
            "file size / events (frame + 3 zones)",
            per_event,
            unit="bytes/event",
            target=at_most(16),
            notes=f"{len(events)} events, read back exactly",
        )
    ]


def _size_per_event(path: Path, events: np.ndarray, codec: str) -> float:
    """Write ``events`` with ``codec`` and the default batches, check they read back; bytes per
    event.
    """
    w = TraceWriter(path, codec=codec, overwrite=True)
    w.append_array(events)
    w.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = open_trace(path, strict=True).events
    if back.tobytes() != events.tobytes():
        raise RuntimeError(f"the {codec} trace did not read back the events written")
    return path.stat().st_size / len(events)
