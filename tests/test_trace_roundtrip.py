"""Round trips: whatever is written comes back equal."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from katra_trace import EVENT_DTYPE, Clock, ConfigError, Kind, TraceIOError, TraceWriter, open_trace
from katra_trace.io import blocks as blocks_mod
from katra_trace.io import format as fmt
from tests.trace_helpers import frame_zone_stream, write_trace

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=12,
)
#: keys whose JSON type the reader checks in a header (docs/trace-format.md): random values under
#: them would be refused, by design, so the free-form dicts below use other keys
_SHAPED_KEYS = frozenset(k for shapes in blocks_mod._HEADER_SHAPES.values() for k in shapes)
json_dicts = st.dictionaries(
    st.text(max_size=12).filter(lambda k: k not in _SHAPED_KEYS), json_values, max_size=6
)


class PipeSink:
    """A FIFO to write a trace into, drained by a thread only when asked, and then (optionally)
    slowly: a real way to make the writer thread block on I/O."""

    def __init__(self, path: Path) -> None:
        import os

        self.path = path
        os.mkfifo(path)
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets the open() for writing succeed
        #: what TraceWriter(stream=...) writes to (the writer closes it in finish())
        self.stream = open(path, "wb")  # noqa: SIM115
        self._chunks: list[bytes] = []
        self._thread: threading.Thread | None = None
        self.slow = threading.Event()

    def start_draining(self, chunk: int = 1 << 16, pause_s: float = 0.0) -> None:
        """Start reading; call it after the writer opened the FIFO (with no
        writer it reads as EOF)."""
        import os
        import time

        def drain() -> None:
            os.set_blocking(self._fd, True)
            while data := os.read(self._fd, chunk):
                self._chunks.append(data)
                if pause_s and self.slow.is_set():
                    time.sleep(pause_s)

        self._thread = threading.Thread(target=drain)
        self._thread.start()

    def read_trace(self, out: Path):  # noqa: ANN201
        """Wait for EOF (the writer closed the file) and open what came through as a trace."""
        import os

        assert self._thread is not None
        self._thread.join()
        os.close(self._fd)
        out.write_bytes(b"".join(self._chunks))
        return open_trace(out, strict=True)


def _field(typ: str) -> st.SearchStrategy:
    dt = np.dtype(typ)
    if dt.kind == "f":
        return st.floats(allow_nan=False)
    info = np.iinfo(dt)
    return st.integers(int(info.min), int(info.max))


#: any row a format 1.1 file may hold (docs/trace-format.md): defined kinds, clocks and flag bits,
#: non-negative durations, and spans that end within int64
_VALID = {
    "kind": st.integers(0, 3),
    "clock": st.integers(0, 4),
    "flags": st.integers(0, 63),
    "start_ns": st.integers(-(2**63), 2**62),
    "dur_ns": st.integers(0, 2**62),
}
event_rows = st.tuples(
    *(
        _VALID[name] if name in _VALID else _field(EVENT_DTYPE[name].str)
        for name in EVENT_DTYPE.names
    )
)
events_arrays = st.lists(event_rows, max_size=300).map(
    lambda rows: np.array(rows, dtype=EVENT_DTYPE)
)


#: any row at all, valid or not, with zeros common (all-zero byte planes are decoded apart)
any_rows = st.tuples(*(st.just(0) | _field(EVENT_DTYPE[name].str) for name in EVENT_DTYPE.names))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(event_rows | any_rows, min_size=1, max_size=30),
    n=st.integers(256, 700),
    minor=st.sampled_from([0, 1, 2]),
)
def test_large_batches_decode_exactly_and_get_the_column_checks_verdict(
    rows: list[tuple[float, ...]], n: int, minor: int
) -> None:
    """Batches of 256 events or more are decoded plane by plane, skipping all-zero planes when the
    output is zeroed, and checked by their planes' maxima first: the events and the verdict (the
    message too) must be exactly those of the records and of check_events, on both sides."""
    events = np.resize(np.array(rows, dtype=EVENT_DTYPE), n)
    payload = fmt.encode_events(events)
    expected = fmt.check_events(events, minor)
    garbage = np.frombuffer(b"\xa5" * (n * EVENT_DTYPE.itemsize), dtype=EVENT_DTYPE).copy()
    for out, zeroed in ((None, False), (np.zeros(n, dtype=EVENT_DTYPE), True), (garbage, False)):
        got, problem = fmt.decode_checked_events(payload, 0, minor, out, zeroed=zeroed)
        assert got.tobytes() == events.tobytes()
        assert problem == expected
    assert fmt.check_payload(payload, events["start_ns"], minor) == expected


@pytest.mark.parametrize(
    "column,value",
    [
        ("kind", 4),
        ("clock", 6),
        ("flags", 64),
        ("flags", 1 << 9),
        ("dur_ns", -1),
        ("dur_ns", 2**62 + 1),
        ("start_ns", 2**63 - 2),
        ("value", -1.0),
    ],
)
def test_large_batch_verdict_is_the_column_checks_verdict(column: str, value: float) -> None:
    """The edge of each rule, in a batch decoded plane by plane: the planes' maxima must not clear
    it.
    """
    events = frame_zone_stream(100)  # 400 events
    for row in (0, 201, len(events) - 1):
        bad = events.copy()
        bad[column][row] = value
        if column == "dur_ns" and value == 2**62 + 1:
            # the largest start the planes clear, and a span past int64
            bad["start_ns"][row] = 2**62
        got, problem = fmt.decode_checked_events(
            fmt.encode_events(bad),
            0,
            fmt.FORMAT_MINOR,
            np.zeros(len(bad), dtype=EVENT_DTYPE),
            zeroed=True,
        )
        assert got.tobytes() == bad.tobytes()
        assert problem == fmt.check_events(bad, fmt.FORMAT_MINOR)
        assert (problem is None) == (column == "value"), problem


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=events_arrays,
    strings=st.lists(st.text(max_size=30), max_size=20, unique=True),
    capture=json_dicts,
    host=json_dicts,
    notes=st.text(max_size=50),
    workload=st.text(max_size=20),
    codec=st.sampled_from(["zstd", "none", "blosc2"]),
    batch=st.integers(1, 200),
)
def test_any_events_strings_and_header_round_trip(
    tmp_path: Path,
    events: np.ndarray,
    strings: list[str],
    capture: dict,
    host: dict,
    notes: str,
    workload: str,
    codec: str,
    batch: int,
) -> None:
    path = tmp_path / "rt.katra"
    strings = [""] + [s for s in strings if s]
    header = {"capture_options": capture, "host_info": host, "notes": notes, "workload": workload}
    w = write_trace(
        path, events, strings, batch_events=batch, codec=codec, header=header, annotations=[capture]
    )
    t = open_trace(path, strict=True)
    assert not t.truncated
    assert t.strings == strings
    assert t.events.dtype == EVENT_DTYPE
    assert t.events.tobytes() == events.tobytes()
    assert t.header.as_dict() == w.header
    assert t.header.capture_options.as_dict() == capture and t.header.host_info.as_dict() == host
    assert t.header.notes == notes and t.header.workload == workload
    assert t.annotations == [capture]
    assert t.summary.status == "complete"
    assert t.summary.events == len(events)
    assert t.summary.user == {"note": "test"}


def test_per_event_append_and_intern(tmp_path: Path) -> None:
    path = tmp_path / "a.katra"
    with TraceWriter(path, batch_events=7) as w:
        ids = [w.intern(n) for n in ("frame", "zone-a", "frame")]
        assert ids[0] == ids[2] != ids[1] and w.intern("") == 0
        for i in range(50):
            w.append(
                Kind.FRAME,
                Clock.WALL,
                0,
                ids[0],
                i,
                0,
                1000 * i,
                500 + i,
                value=0.5 * i,
                flags=i % 2,
            )
    t = open_trace(path, strict=True)
    assert len(t.events) == 50
    assert t.events["dur_ns"].tolist() == [500 + i for i in range(50)]
    assert t.events["value"].tolist() == [0.5 * i for i in range(50)]
    assert t.events["flags"].tolist() == [i % 2 for i in range(50)]
    assert t.name(int(t.events["name"][0])) == "frame"
    assert t.summary.event_blocks == 8  # 50 events in batches of 7


def test_appends_from_many_threads_are_serialized(tmp_path: Path) -> None:
    path = tmp_path / "mt.katra"
    n_threads, per_thread = 4, 5000
    with TraceWriter(path, batch_events=333, queue_batches=2) as w:

        def produce(k: int) -> None:
            name = w.intern(f"thread-{k}")
            for i in range(per_thread):
                w.append(Kind.COUNTER, Clock.CPU, 0, name, i, 0, i, 0, value=float(k))

        threads = [threading.Thread(target=produce, args=(k,)) for k in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    t = open_trace(path, strict=True)
    assert len(t.events) == n_threads * per_thread
    for k in range(n_threads):
        mine = t.events[t.events["value"] == k]
        assert t.name(int(mine["name"][0])) == f"thread-{k}"
        assert mine["frame"].tolist() == list(range(per_thread))  # each producer's order kept


def test_exception_in_with_body_leaves_an_aborted_summary(tmp_path: Path) -> None:
    path = tmp_path / "ab.katra"
    events = frame_zone_stream(20)
    with pytest.raises(RuntimeError, match="boom"):
        with TraceWriter(path, batch_events=16) as w:
            w.append_array(events)
            raise RuntimeError("boom")
    t = open_trace(path, strict=True)
    assert t.summary.status == "aborted"
    assert "boom" in t.summary.user["error"]
    assert len(t.events) == len(events)


def test_keyboard_interrupt_marks_summary_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "ki.katra"
    with pytest.raises(KeyboardInterrupt):
        with TraceWriter(path):
            raise KeyboardInterrupt
    assert open_trace(path, strict=True).summary.status == "interrupted"


def test_drop_policy_counts_what_it_dropped(tmp_path: Path) -> None:
    """The trace goes into a pipe nobody reads yet: the writer thread blocks, batches must be
    dropped.
    """
    sink = PipeSink(tmp_path / "pipe.katra")
    w = TraceWriter(
        sink.path,
        codec="none",
        batch_events=100,
        queue_batches=1,
        drop_policy="drop",
        batch_ms=60_000,
        stream=sink.stream,
    )
    name = w.intern("x")
    total = 20_000  # 840 kB raw: far more than a pipe buffer holds
    for i in range(total):
        w.append(Kind.FRAME, Clock.CPU, 0, name, i, 0, i, 0)
    sink.start_draining()
    w.finish()
    t = sink.read_trace(tmp_path / "drained.katra")
    dropped = t.summary.dropped_events
    assert dropped > 0 and t.summary.dropped_batches == dropped // 100
    assert len(t.events) + dropped == total
    kept = t.events["frame"]
    assert (np.diff(kept.astype(np.int64)) > 0).all()  # what was kept is in order
    assert t.strings == ["", "x"]  # strings of a dropped batch are kept


def test_time_based_batches_reach_the_file_without_flush(tmp_path: Path) -> None:
    path = tmp_path / "tick.katra"
    w = TraceWriter(path, batch_events=1_000_000 // 42, batch_ms=20)
    w.append(Kind.MARKER, Clock.CPU, 0, w.intern("tick"), 0, 0, 0, 0)
    import time

    deadline = time.monotonic() + 10
    seen = 0
    while time.monotonic() < deadline and seen == 0:
        time.sleep(0.02)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the capture lives in <path>.part until finish()
            seen = len(open_trace(w.part_path).events)
    w.finish()
    assert seen == 1


def test_flush_puts_everything_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "fl.katra"
    w = TraceWriter(path, batch_events=1000, batch_ms=60_000)
    w.append_array(frame_zone_stream(10))
    w.flush()
    assert w.part_path == tmp_path / "fl.katra.part" and not path.exists()
    with pytest.warns(UserWarning, match="without a footer"):
        t = open_trace(w.part_path)
    assert len(t.events) == 40 and t.truncated and t.summary.rebuilt
    w.finish()
    assert path.exists() and not w.part_path.exists()


def test_bad_writer_options_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown codec 'lz4'"):
        TraceWriter(tmp_path / "x.katra", codec="lz4")
    with pytest.raises(ConfigError, match="drop policy"):
        TraceWriter(tmp_path / "x.katra", drop_policy="sometimes")
    with pytest.raises(
        TraceIOError, match="cannot create trace .*No such file or directory \\(ENOENT\\)"
    ):
        TraceWriter(tmp_path / "no" / "such" / "dir" / "x.katra")
    assert list(tmp_path.iterdir()) == []  # no .part left by any of them


def test_iter_batches_streams_blocks(tmp_path: Path) -> None:
    path = tmp_path / "it.katra"
    events = frame_zone_stream(100)
    write_trace(path, events, ["", "s", "frame", "a", "b", "c"], batch_events=64)
    t = open_trace(path, events=False)
    assert len(t.events) == 0 and t.summary.events == len(events)
    batches = list(t.iter_batches())
    assert [len(b) for b in batches][:-1] == [64] * (len(batches) - 1)
    assert np.concatenate(batches).tobytes() == events.tobytes()


def test_realistic_stream_is_compact(tmp_path: Path) -> None:
    path = tmp_path / "c.katra"
    events = frame_zone_stream(3000)
    write_trace(path, events, ["", "s", "frame", "a", "b", "c"], batch_events=4096)
    assert path.stat().st_size / len(events) <= 16


def test_append_array_copies_what_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "reuse.katra"
    events = frame_zone_stream(200)  # 800 events: several whole batches of 64, then a partial one
    original = events.copy()
    w = TraceWriter(path, batch_events=64, batch_ms=60_000)
    w.append_array(events)
    events["dur_ns"] = -1  # the producer reuses its array before the writer thread got to it
    w.finish()
    assert open_trace(path, strict=True).events.tobytes() == original.tobytes()


def test_mixed_appends_flushes_and_annotations_from_many_threads(tmp_path: Path) -> None:
    """The trace goes into a slowly drained pipe, with small batches and a one-batch queue, so
    hand-overs keep waiting for room while other threads append: every event must survive."""
    import random

    stream = frame_zone_stream(100)
    sink = PipeSink(tmp_path / "slow.katra")
    w = TraceWriter(
        sink.path, codec="none", batch_events=7, batch_ms=1, queue_batches=1, stream=sink.stream
    )
    sink.slow.set()
    sink.start_draining(chunk=2048, pause_s=0.0005)
    sent = [0] * 4

    def produce(k: int) -> None:
        r = random.Random(k)
        for i in range(400):
            c = r.random()
            if c < 0.6:
                w.append(
                    Kind.FRAME,
                    Clock.WALL,
                    0,
                    w.intern(f"n{r.randrange(50)}"),
                    i,
                    0,
                    i,
                    5,
                    value=float(k),
                )
                sent[k] += 1
            elif c < 0.85:
                n = r.randrange(1, 30)
                w.append_array(stream[:n])
                sent[k] += n
            elif c < 0.95:
                w.annotate({"k": k, "i": i})
            else:
                w.flush()

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sink.slow.clear()
    w.finish()
    t = sink.read_trace(tmp_path / "mixed.katra")
    assert len(t.events) == sum(sent) == t.summary.events
    singles = t.events[t.events["dur_ns"] == 5]
    for k in range(4):
        mine = singles[singles["value"] == k]
        assert (np.diff(mine["frame"].astype(np.int64)) > 0).all()  # each thread's order kept
    names = {t.name(int(i)) for i in singles["name"]}
    assert names <= {f"n{j}" for j in range(50)}
