"""Trace writer/reader throughput, each as a ratio to a baseline timed in the same run.

Run: make bench   (or .venv/bin/pytest bench -o testpaths=bench --benchmark-only -k trace -s)
Targets (issue 2): per-event append >= 1/3 of a tuple-into-list loop; bulk write >= 50% of
ndarray.tofile; read >= 25% of np.fromfile; <= 16 bytes/event on a frame+zone stream with zstd.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _ratio import interleaved_seconds  # noqa: E402

from katra_trace import EVENT_DTYPE, Clock, Kind, TraceWriter, open_trace  # noqa: E402
from tests.trace_helpers import frame_zone_stream  # noqa: E402

N_APPEND = 200_000
N_BULK = 2_000_000


def _report(benchmark, name: str, ratio: float, target: float, **extra: float) -> None:  # noqa: ANN001
    benchmark.extra_info.update({"ratio": round(ratio, 3), "target": target, **extra})
    print(f"\n{name}: ratio {ratio:.3f} (target >= {target}) " + " ".join(f"{k}={v:.4g}" for k, v in extra.items()))


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    """A realistic frame + 3 zones stream, tiled to N_BULK events with increasing times."""
    base = frame_zone_stream(5000, zones=3)
    reps = -(-N_BULK // len(base))
    out = np.tile(base, reps)[:N_BULK]
    span = int(base["start_ns"].max()) + 20_000_000
    out["start_ns"] += np.repeat(np.arange(reps, dtype=np.int64) * span, len(base))[:N_BULK]
    out["frame"] += np.repeat(np.arange(reps, dtype=np.uint32) * 5000, len(base))[:N_BULK]
    return out


def test_append_per_event(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "append.katra"
    frame, wall = int(Kind.FRAME), int(Clock.WALL)

    def baseline() -> None:
        rows = []
        append = rows.append
        for i in range(N_APPEND):
            append((frame, wall, 1, 2, i, 0, i * 1000, 900, 0.0, 0))

    def katra() -> None:
        w = TraceWriter(path)
        append = w.append
        for i in range(N_APPEND):
            append(frame, wall, 1, 2, i, 0, i * 1000, 900, 0.0, 0)
        w.finish()  # until the events are on disk

    t_base, t_new = interleaved_seconds(baseline, katra, rounds=5)
    benchmark.pedantic(katra, rounds=3, iterations=1)
    _report(benchmark, "append per event", t_base / t_new, 1 / 3,
            katra_events_per_s=N_APPEND / t_new, list_events_per_s=N_APPEND / t_base)


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_bulk_write(benchmark, tmp_path: Path, stream: np.ndarray, codec: str) -> None:  # noqa: ANN001
    raw, path = tmp_path / "raw.bin", tmp_path / "bulk.katra"

    def baseline() -> None:
        stream.tofile(raw)

    def katra() -> None:
        w = TraceWriter(path, codec=codec, batch_events=65536)
        w.append_array(stream)
        w.finish()

    t_base, t_new = interleaved_seconds(baseline, katra, rounds=5)
    benchmark.pedantic(katra, rounds=3, iterations=1)
    _report(benchmark, f"bulk write ({codec})", t_base / t_new, 0.5, katra_events_per_s=N_BULK / t_new,
            bytes_per_event=path.stat().st_size / N_BULK)


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_read(benchmark, tmp_path: Path, stream: np.ndarray, codec: str) -> None:  # noqa: ANN001
    raw, path = tmp_path / "raw.bin", tmp_path / "read.katra"
    stream.tofile(raw)
    w = TraceWriter(path, codec=codec, batch_events=65536)
    w.append_array(stream)
    w.finish()

    def baseline() -> None:
        np.fromfile(raw, dtype=EVENT_DTYPE)

    def katra() -> None:
        assert len(open_trace(path).events) == N_BULK

    t_base, t_new = interleaved_seconds(baseline, katra, rounds=5)
    benchmark.pedantic(katra, rounds=3, iterations=1)
    _report(benchmark, f"read ({codec})", t_base / t_new, 0.25, katra_events_per_s=N_BULK / t_new)


def test_bytes_per_event(benchmark, tmp_path: Path) -> None:  # noqa: ANN001
    """A 20 000-frame capture with 3 zones per frame, appended per event as the harness does."""
    events = frame_zone_stream(20_000, zones=3)
    path = tmp_path / "size.katra"

    def katra() -> None:
        w = TraceWriter(path)
        w.append_array(events)
        w.finish()

    benchmark.pedantic(katra, rounds=3, iterations=1)
    per_event = path.stat().st_size / len(events)
    benchmark.extra_info["bytes_per_event"] = per_event
    print(f"\nbytes per event (zstd, frame+3 zones): {per_event:.2f} (target <= 16)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_trace(path, strict=True).events.tobytes() == events.tobytes()
