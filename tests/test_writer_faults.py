"""TraceWriter under faults: use after finish(), finish() racing appenders, and real write errors
(/dev/full, RLIMIT_FSIZE, a full tmpfs, a name too long, no permission, a closed pipe). Each ends
in a KatraError with exit code 2 and a one-line message, a joined thread and a closed file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from katra_trace import (
    Clock,
    ConfigError,
    Kind,
    TraceIOError,
    TraceRecoveryWarning,
    TraceWriter,
    WriterClosedError,
    open_trace,
)
from tests.trace_helpers import frame_zone_stream, write_trace

REPO = Path(__file__).resolve().parent.parent


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("katra-trace-writer")]


def test_every_call_after_finish_raises_at_once(tmp_path: Path) -> None:
    path = tmp_path / "done.katra"
    w = TraceWriter(path, batch_events=10, queue_batches=2, batch_ms=60_000)
    name = w.intern("frame")
    w.append(Kind.FRAME, Clock.WALL, 0, name, 0, 0, 0, 5)
    w.finish()
    data = path.read_bytes()
    # far more than the queue holds: must not block, must not be dropped silently
    for _ in range(200):
        with pytest.raises(WriterClosedError, match="already finished"):
            w.append(Kind.FRAME, Clock.WALL, 0, name, 1, 0, 1, 5)
    calls = [
        lambda: w.append_array(frame_zone_stream(30)),
        w.flush,
        lambda: w.annotate({"a": 1}),
        lambda: w.clock_sync({"host_ns": 1}),
        lambda: w.intern("new name"),
        lambda: w.intern("frame"),
    ]
    for call in calls:
        with pytest.raises(WriterClosedError):
            call()
    w.finish()  # a second finish after a successful one does nothing
    assert path.read_bytes() == data and len(open_trace(path, strict=True).events) == 1


def test_finish_while_threads_append_never_deadlocks_and_keeps_every_returned_append(
    tmp_path: Path,
) -> None:
    path = tmp_path / "race.katra"
    w = TraceWriter(path, batch_events=7, queue_batches=1, batch_ms=1)
    ok = [0] * 4
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def produce(k: int) -> None:
        name = w.intern(f"t{k}")
        started.wait()
        i = 0
        try:
            while True:
                if i % 5 == 4:
                    w.append_array(frame_zone_stream(1, zones=2))  # 3 events
                    ok[k] += 3
                else:
                    w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i, 5, value=float(k))
                    ok[k] += 1
                i += 1
        except WriterClosedError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    started.wait()
    while sum(ok) < 2000:
        threading.Event().wait(0.001)
    w.finish()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "an appender is stuck after finish()"
    assert not errors, errors
    t = open_trace(path, strict=True)
    # every append that returned is in the file
    assert len(t.events) == sum(ok) == t.summary.events
    assert not _writer_threads()


def test_invalid_rows_are_refused_not_written(tmp_path: Path) -> None:
    """The writer thread checks each batch before writing it (no reader would
    read past a bad row)."""
    w = TraceWriter(tmp_path / "bad.katra", batch_events=4, batch_ms=60_000)
    w.append_array(frame_zone_stream(2))
    w.flush()
    bad = frame_zone_stream(2)
    bad["dur_ns"][3] = -1
    w.append_array(bad)
    with pytest.raises(ConfigError, match="negative duration"):
        w.flush()
    with pytest.raises(ConfigError, match="negative duration"):
        w.finish()
    with pytest.raises(ConfigError, match="negative duration"):
        w.finish()  # the same error again: well-defined
    assert not _writer_threads()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        t = open_trace(tmp_path / "bad.katra")
    assert len(t.events) == 8 and t.truncated  # the good batches before it, nothing bad on disk
    w = TraceWriter(tmp_path / "bad2.katra", batch_ms=60_000)
    w.append(Kind.FRAME, 99, 0, 0, 0, 0, 0, 5)
    with pytest.raises(ConfigError, match="clock 99 is not defined"):
        w.finish()


@pytest.mark.parametrize(
    "column,value",
    [
        ("kind", 4),
        ("clock", 6),
        ("flags", 64),
        ("flags", 1 << 9),
        ("dur_ns", -1),
        ("dur_ns", -(2**63)),
        ("start_ns", 2**63 - 2),
        ("dur_ns", 2**62 + 1),
        ("frame", 2**32 - 1),
        ("value", -1.0),
    ],
)
def test_writer_and_reader_checks_agree(column: str, value: int) -> None:
    from katra_trace.io import format as fmt

    ev = frame_zone_stream(40)
    for row in (0, 77, len(ev) - 1):
        bad = ev.copy()
        bad[column][row] = value
        if column == "dur_ns" and value == 2**62 + 1:
            bad["start_ns"][row] = 2**62
        reader = fmt.check_events(bad, fmt.FORMAT_MINOR)
        writer = fmt.check_payload(fmt.encode_events(bad), bad["start_ns"], fmt.FORMAT_MINOR)
        assert (reader is None) == (writer is None), (column, value, reader, writer)
        assert (reader is None) == (column in ("frame", "value"))


def test_dev_full_as_the_output_is_refused_and_as_a_stream_gives_enospc(tmp_path: Path) -> None:
    for overwrite in (False, True):
        with pytest.raises(TraceIOError, match="character device, not a regular file") as info:
            TraceWriter("/dev/full", overwrite=overwrite)
        assert info.value.exit_code == 2
    assert not Path("/dev/full.part").exists()
    stream = open("/dev/full", "wb")  # noqa: SIM115 - the writer closes it
    with pytest.raises(TraceIOError, match=r"No space left on device \(ENOSPC\)") as info:
        TraceWriter(tmp_path / "full.katra", stream=stream)
    assert "\n" not in str(info.value) and stream.closed and not _writer_threads()


def test_a_name_too_long_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / ("n" * 300 + ".katra")
    with pytest.raises(TraceIOError, match=r"File name too long \(ENAMETOOLONG\)") as info:
        TraceWriter(path)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_or_a_fifo_as_the_output_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceIOError, match="directory, not a regular file"):
        TraceWriter(tmp_path, overwrite=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TraceIOError, match="pipe or FIFO, not a regular file"):
        TraceWriter(fifo, overwrite=True)  # never opened: cannot hang
    with pytest.raises(TraceIOError, match="needs a file name"):
        TraceWriter(str(tmp_path) + "/")


def _child(script: str, *args: str, preexec: object = None) -> dict:  # type: ignore[type-arg]
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        preexec_fn=preexec,
    )  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


FILL_SCRIPT = """
    import json, os, resource, sys, threading
    from katra_trace import Kind, Clock, KatraError, TraceWriter
    if sys.argv[2] != "0":
        limit = int(sys.argv[2])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    fds_before = len(os.listdir("/proc/self/fd"))
    w = TraceWriter(sys.argv[1], codec="none", batch_events=500, batch_ms=60_000)
    name = w.intern("frame")
    out = {"appended": 0}
    try:
        for i in range(2_000_000):
            w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500)
            out["appended"] += 1
    except KatraError as err:
        out["append_error"] = [type(err).__name__, err.exit_code, str(err)]
    for attempt in ("finish", "finish_again"):
        try:
            w.finish()
        except KatraError as err:
            out[attempt] = [type(err).__name__, err.exit_code, str(err)]
    out["threads"] = [
        t.name for t in threading.enumerate() if t.name.startswith("katra-trace-writer")
    ]
    out["fds_leaked"] = len(os.listdir("/proc/self/fd")) - fds_before
    print(json.dumps(out))
"""


def _check_failed_run(out: dict, errno_name: str, path: Path) -> None:  # type: ignore[type-arg]
    kind, code, message = out["append_error"]
    assert (
        kind == "TraceIOError"
        and code == 2
        and f"({errno_name})" in message
        and "\n" not in message
    )
    kind, code, message = out["finish"]
    assert kind == "TraceIOError" and code == 2 and "readable in" in message and "\n" not in message
    assert out["finish_again"] == out["finish"]
    assert out["threads"] == [] and out["fds_leaked"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        t = open_trace(path)
    assert t.truncated and 0 < len(t.events) <= out["appended"]
    assert t.events["frame"].tolist() == list(range(len(t.events)))  # an intact prefix


def test_rlimit_fsize_mid_capture(tmp_path: Path) -> None:
    path = tmp_path / "big.katra"
    out = _child(FILL_SCRIPT, str(path), str(256 * 1024))
    _check_failed_run(out, "EFBIG", path)
    assert not path.with_name("big.katra.part").exists()


def _mount_cmd() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*cmd, "true"], capture_output=True)
    return cmd if probe.returncode == 0 else None


def test_full_tmpfs_mid_capture(tmp_path: Path) -> None:
    cmd = _mount_cmd()
    if cmd is None:
        pytest.skip("cannot mount a private tmpfs here (no unshare / user namespaces)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    keep = tmp_path / "copy.katra"
    shell = (
        f'mount -t tmpfs -o size=256k tmpfs "{mnt}" && "{sys.executable}" -c "$0" "{mnt}/t.katra" '
        "0 && "
        f'cp "{mnt}/t.katra" "{keep}"'
    )
    r = subprocess.run(
        [*cmd, "sh", "-c", shell, textwrap.dedent(FILL_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    if r.returncode != 0 and "mount" in r.stderr:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    _check_failed_run(json.loads(r.stdout.strip().splitlines()[-1]), "ENOSPC", keep)


EACCES_SCRIPT = """
    import json, os, sys
    from katra_trace import KatraError, TraceWriter
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)  # root ignores permissions: drop to nobody
    try:
        TraceWriter(sys.argv[1])
        print(json.dumps({"error": None}))
    except KatraError as err:
        print(json.dumps({"error": [type(err).__name__, err.exit_code, str(err)]}))
"""


def test_no_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    tmp_path.chmod(0o755)
    out = _child(EACCES_SCRIPT, str(locked / "t.katra"))
    kind, code, message = out["error"]
    assert kind == "TraceIOError" and code == 2 and "(EACCES)" in message and "\n" not in message


def test_a_write_error_in_the_periodic_flush_reaches_the_producer(tmp_path: Path) -> None:
    """The trace goes into a pipe whose reader goes away after the header: the background thread's
    time-based flush gets EPIPE. It must not die with an unhandled exception; the producer's
    next call raises TraceIOError, and finish() raises it again after joining the thread."""
    r, wfd = os.pipe()
    stream = os.fdopen(wfd, "wb")
    w = TraceWriter(tmp_path / "pipe.katra", stream=stream, batch_ms=5)
    assert os.read(r, 1 << 16)[:4] == b"\x89KTR"
    os.close(r)
    name = w.intern("frame")
    raised = None
    for i in range(100_000):
        try:
            w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i, 5)
        except TraceIOError as err:
            raised = err
            break
        if i % 1000 == 999:
            threading.Event().wait(0.01)  # let the periodic flush run
    assert raised is not None and "(EPIPE)" in str(raised)
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.flush()
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.finish()
    assert stream.closed and not _writer_threads()


def test_finish_joins_and_closes_even_when_the_summary_cannot_be_written(tmp_path: Path) -> None:
    """The error comes while finish() hands over the last batch and the summary."""
    r, wfd = os.pipe()
    stream = os.fdopen(wfd, "wb")
    w = TraceWriter(tmp_path / "p.katra", stream=stream, batch_ms=60_000)
    os.read(r, 1 << 16)
    os.close(r)
    w.append_array(frame_zone_stream(5))
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.finish()
    assert w.finished and stream.closed and not _writer_threads()
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.finish()


def test_append_speed_path_is_unchanged_for_valid_data(tmp_path: Path) -> None:
    """Sanity: the fault handling keeps ordinary captures byte-identical in content."""
    ev = frame_zone_stream(50)
    w = TraceWriter(tmp_path / "ok.katra", batch_events=16)
    for row in ev.tolist():
        kind, clock, flags, depth, scene, name, frame, start, dur, value = row
        w.append(kind, clock, scene, name, frame, depth, start, dur, value, flags)
    w.finish()
    got = open_trace(tmp_path / "ok.katra", strict=True).events
    assert got.tobytes() == np.asarray(ev).tobytes()


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_copy_with_header_replaces_only_the_header(tmp_path: Path, codec: str) -> None:
    from tests.trace_helpers import copy_with_header

    events, strings = frame_zone_stream(30), ["", "scene", "frame", "zone a", "zone b", "zone c"]
    src = tmp_path / "src.katra"
    write_trace(
        src,
        events,
        strings,
        codec=codec,
        batch_events=16,
        header={"notes": "n", "capture_options": {"output": "x.katra", "nested": ["x.katra", 1]}},
    )
    longer = {"x.katra": "a/much/longer/output/name.katra"}

    def update(h: dict) -> dict:
        return {k: longer.get(v, v) if isinstance(v, str) else v for k, v in h.items()} | {
            "capture_options": {"output": longer["x.katra"], "nested": [longer["x.katra"], 1]}
        }

    dst = tmp_path / "dst.katra"
    with open(src, "rb") as s, open(dst, "wb") as d:
        assert copy_with_header(s, d, update)
    # footer and every block still valid
    a, b = open_trace(src, strict=True), open_trace(dst, strict=True)
    assert b.header.as_dict()["capture_options"]["output"] == "a/much/longer/output/name.katra"
    assert b.header.as_dict()["capture_options"]["nested"] == ["a/much/longer/output/name.katra", 1]
    assert (
        b.summary == a.summary
        and np.array_equal(a.events, b.events)
        and list(a.strings) == list(b.strings)
    )
    # a prefix (a killed run: no summary, no footer) keeps its blocks too
    data = src.read_bytes()
    cut = tmp_path / "cut.katra"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with open(cut, "rb") as s, open(tmp_path / "cut2.katra", "wb") as d:
        assert copy_with_header(s, d, update)
    with pytest.warns(TraceRecoveryWarning):
        c1 = open_trace(cut)
    with pytest.warns(TraceRecoveryWarning):
        c2 = open_trace(tmp_path / "cut2.katra")
    assert c2.header.as_dict()["capture_options"]["output"].startswith("a/much") and np.array_equal(
        c1.events, c2.events
    )
    # not a trace: nothing copied, the caller copies the bytes as they are
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a trace at all, not even close")
    with open(junk, "rb") as s, open(tmp_path / "j2", "wb") as d:
        assert not copy_with_header(s, d, update) and s.tell() == 0


def test_a_sync_writer_writes_on_the_producers_thread_and_starts_none(tmp_path: Path) -> None:
    """Counted runs write with ``sync``: a writer thread woken beside counted frames, or a wait
    that times out when a write is slow (a loaded machine), changed their instruction counts."""
    writers: list[str] = []
    real = TraceWriter._write_item

    def recording(self: TraceWriter, item: tuple[object, ...]) -> None:
        writers.append(threading.current_thread().name)
        real(self, item)

    path = tmp_path / "sync.katra"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TraceWriter, "_write_item", recording)
        w = TraceWriter(path, batch_events=10, sync=True, batch_ms=1e9)
        assert not _writer_threads()
        w.append_array(frame_zone_stream(40))  # several batches
        w.annotate({"scene": "a"})
        w.flush()
        w.finish()
    assert len(writers) >= 5 and set(writers) == {threading.current_thread().name}
    trace = open_trace(path)
    assert len(trace.events) == len(frame_zone_stream(40)) and trace.summary.status == "complete"


def test_a_write_error_in_a_sync_writer_reaches_the_producer(tmp_path: Path) -> None:
    r, wfd = os.pipe()
    stream = os.fdopen(wfd, "wb")
    w = TraceWriter(tmp_path / "s.katra", stream=stream, batch_events=10, sync=True)
    os.read(r, 1 << 16)
    os.close(r)
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.append_array(frame_zone_stream(40))
    with pytest.raises(TraceIOError, match="EPIPE"):
        w.finish()
    assert w.finished and stream.closed and not _writer_threads()
