"""TraceWriter: streams events into a katra3d trace from any number of threads.

The producer side is cheap: :meth:`TraceWriter.append` packs one event into a
preallocated batch buffer with one ``struct.pack_into`` call under a lock (no
Python object per event is kept). Full batches — or whatever is pending every
``batch_ms`` — go to a background thread that encodes them column by column,
delta-encodes timestamps, compresses and writes them. Each block reaches the
operating system as soon as it is written, so a killed process loses only the
batch it had not yet handed over.

The output path is claimed atomically (katra_trace/io/claim.py): the trace is written to a locked
``<path>.part`` and moved into place when the capture ends, so no existing file and no other
capture is ever destroyed. Every failure reaches the caller as a KatraError (exit code 2): a write
error in the background thread is recorded and raised at the producer's next call (or by
:meth:`TraceWriter.finish`), and any call after ``finish()`` raises WriterClosedError.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import struct
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from katra_trace.errors import (
    ConfigError,
    KatraError,
    TraceIOError,
    WriterClosedError,
    write_failed,
)
from katra_trace.io import claim as claim_mod
from katra_trace.io import format as fmt
from katra_trace.io.blockfile import BlockFile
from katra_trace.io.header import CaptureOptions, HostInfo, header_part, readable_header
from katra_trace.io.image_block import encode_image_payload
from katra_trace.schema import EVENT_DTYPE, SCHEMA_VERSION, schema_hash
from katra_trace.version import __version__

#: struct layout of one packed event (matches EVENT_DTYPE field for field).
_EVENT = struct.Struct("<BBHHIIIqqd")
assert _EVENT.size == EVENT_DTYPE.itemsize

STATUSES = ("complete", "aborted", "interrupted")
DROP_POLICIES = ("block", "drop")


class TraceWriter:
    """Write a katra3d trace. Use as a context manager, or call :meth:`finish`.

    Args:
        path: the trace to create. It is written as ``<path>.part`` (:attr:`part_path`) and moved
            to ``path`` (:attr:`final_path`) by :meth:`finish`; a killed process leaves the
            readable prefix in the ``.part``.
        overwrite: replace ``path`` if it exists (else OutputExistsError). Even then, a capture
            that records no event and does not complete keeps the existing file.
        workload: what was run (suite or scene names).
        capture_options: how the capture was made (a dict, or a
            :class:`~katra_trace.io.header.CaptureOptions`, see ``build_capture_options``).
        host_info: what it ran on (the harness's host probe; a dict or a ``HostInfo``).
        notes: free-form text.
        codec: ``"zstd"`` (default), ``"blosc2"`` (EVENTS blocks as blosc2 chunks, one encoding
            thread; needs python-blosc2, else CodecUnavailableError, exit code 3) or ``"none"``.
        batch_events: events per batch handed to the background thread.
        batch_ms: a non-empty batch is handed over at least this often.
        drop_policy: ``"block"`` (default, lossless: producers wait when
            ``queue_batches`` batches are pending) or ``"drop"`` (the batch is
            dropped and counted in the summary).
        compression_level: the zstd level of codec-1 blocks. The default, 2, stored a frame + 3
        zones stream in
            5.93 bytes an event against 6.05 at level 1, for ~8 % more compression time (level 3:
            5.71, 28 %).
        start_host_ns: host-clock (``perf_counter_ns``) capture start; event
            times are relative to it. Defaults to now.
        stream: write to this open binary file instead of claiming ``path`` (a pipe, a socket): no
        ``.part``,
            nothing moved; the writer closes it in :meth:`finish`. ``path`` only names it (messages,
            thread name).
        failed_aside: a capture finished ``aborted`` never goes to ``path`` (``katra3d run``: it
        would block
            the rerun); :attr:`failed_path` says where it went
            (:func:`katra_trace.io.claim.set_aside`).
        sync: every item handed to the thread is written before the call that handed it returns, so
        the thread
            never runs beside the caller (a counted capture: its work would interleave with the
            frames').

    Raises:
        OutputExistsError, OutputBusyError: the path is taken (see katra_trace/io/claim.py).
        TraceIOError: the file cannot be created or written (disk full, file too large, ...).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        workload: str = "",
        capture_options: Mapping[str, Any] | CaptureOptions | None = None,
        host_info: Mapping[str, Any] | HostInfo | None = None,
        notes: str = "",
        codec: str = "zstd",
        batch_events: int = 4096,
        batch_ms: float = 200.0,
        drop_policy: str = "block",
        queue_batches: int = 8,
        compression_level: int = 2,
        start_host_ns: int | None = None,
        overwrite: bool = False,
        stream: BinaryIO | None = None,
        failed_aside: bool = False,
        sync: bool = False,
    ) -> None:
        if codec not in fmt.CODEC_NAMES:
            raise ConfigError(
                f"unknown codec {codec!r}; choose one of: {', '.join(fmt.CODEC_NAMES)}"
            )
        if drop_policy not in DROP_POLICIES:
            raise ConfigError(
                f"unknown drop policy {drop_policy!r}; choose one of: {', '.join(DROP_POLICIES)}"
            )
        if not 1 <= batch_events <= fmt.MAX_BLOCK_EVENTS:
            raise ConfigError(
                f"batch_events must be in 1..{fmt.MAX_BLOCK_EVENTS}, got {batch_events}"
            )
        if batch_ms <= 0 or queue_batches < 1:
            raise ConfigError("batch_ms must be > 0 and queue_batches >= 1")
        raw = os.fspath(path)
        if stream is None and (not raw or raw.endswith(os.sep)):
            raise TraceIOError(f"cannot create trace {raw!r}: the output needs a file name")
        self.path = Path(path)
        #: where the trace ends up: ``path``, or the file a symbolic link at ``path`` points to
        self.final_path = self.path
        #: where the trace is written until finish() moves it (None when writing to a ``stream``)
        self.part_path: Path | None = (
            None if stream is not None else claim_mod.part_path_for(self.path)
        )
        self.failed_aside = failed_aside
        #: where an aborted capture set aside went (None: nowhere)
        self.failed_path: Path | None = None
        self.start_host_ns = time.perf_counter_ns() if start_host_ns is None else int(start_host_ns)
        self.start_wall_ns = time.time_ns()
        blosc2: Any = (
            fmt.load_blosc2("writing a trace with codec 'blosc2'") if codec == "blosc2" else None
        )
        self._level = compression_level
        self._batch_events = batch_events
        self._batch_s = batch_ms / 1000.0
        self._sync = sync
        self._drop = drop_policy == "drop"
        self._max_pending = queue_batches

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._cap = batch_events * _EVENT.size
        #: [current batch buffer, bytes used in it]; a list so the append closure can update it
        self._slot: list[Any] = [bytearray(self._cap), 0]
        self._strings: dict[str, int] = {"": 0}
        self._new_strings: list[str] = []
        self._strings_flushed = 1  # id 0 ("") is written with the header
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self._enqueued = 0  # items handed to the thread
        self._done = 0  # items the thread has written
        self._closing = False  #: the writer thread may exit once the queue is empty
        self._closed = False  #: finish() began: every producer call raises
        self._finished = False  #: finish() completed (successfully or not)
        self._finish_lock = threading.Lock()
        self._finish_error: KatraError | None = None
        self._error: BaseException | None = None
        self._dropped_events = 0
        self._dropped_batches = 0

        self.header: dict[str, Any] = readable_header(
            {
                "format_version": f"{fmt.FORMAT_MAJOR}.{fmt.FORMAT_MINOR}",
                "schema_version": SCHEMA_VERSION,
                "schema_hash": schema_hash(),
                "tool_version": f"katra3d {__version__}",
                "capture_options": header_part(capture_options),
                "host_info": header_part(host_info),
                "start_wall_ns": self.start_wall_ns,
                "start_host_ns": self.start_host_ns,
                "pid": os.getpid(),
                "workload": workload,
                "notes": notes,
            },
            self.path,
        )
        # unencodable options fail here, before any file exists
        header_json = fmt.encode_json(self.header)
        self._claim: claim_mod.Claim | None = None
        if stream is None:
            self._claim = claim_mod.claim(self.path, overwrite)
            self.final_path, self.part_path = self._claim.final_path, self._claim.part_path
            self._file: BinaryIO = os.fdopen(self._claim.fd, "wb")
        else:
            self._file = stream
        #: the bytes side; owned by the background thread once started
        self._out = BlockFile(self._file, fmt.CODEC_NAMES[codec], compression_level, blosc2)
        try:
            self._out.start(header_json)
        except OSError as exc:
            self._abandon()
            raise TraceIOError(
                f"cannot write trace {str(self.path)!r}: {claim_mod.describe(exc)}"
            ) from None

        self.append = self._make_append()
        self._thread = threading.Thread(
            target=self._run, name=f"katra-trace-writer:{self.path.name}", daemon=True
        )
        self._thread.start()
        _OPEN_WRITERS.add(self)

    # -- producer API ------------------------------------------------------------------------

    def now_ns(self) -> int:
        """Host-clock nanoseconds since the capture start."""
        return time.perf_counter_ns() - self.start_host_ns

    def intern(self, name: str) -> int:
        """The id of ``name`` in the trace's string table (added on first use)."""
        if self._closed:
            self._raise_closed()
        sid = self._strings.get(name)
        if sid is not None:
            return sid
        with self._lock:
            self._check_open_locked()
            sid = self._strings.get(name)
            if sid is None:
                sid = len(self._strings)
                self._strings[name] = sid
                self._new_strings.append(name)
            return sid

    def _make_append(self) -> Callable[..., None]:
        """Build :meth:`append` as a closure: local names instead of attribute look-ups, and an
        explicit acquire/release, roughly double the rate of a plain method with ``with lock``.

        It checks nothing but the batch buffer being full: finish() and a failed write mark the
        buffer full, so the next append reaches the hand-over, which raises."""
        acquire, release = self._lock.acquire, self._lock.release
        pack, slot, cap, hand_over = _EVENT.pack_into, self._slot, self._cap, self._hand_over_locked

        def append(
            kind: int,
            clock: int,
            scene: int,
            name: int,
            frame: int,
            depth: int,
            start_ns: int,
            dur_ns: int,
            value: float = 0.0,
            flags: int = 0,
        ) -> None:
            """Append one event (fields as in
            :data:`katra_trace.schema.EVENT_DTYPE`). Thread-safe."""
            acquire()
            try:
                off = slot[1]
                while off == cap:
                    hand_over()  # may wait for room, letting other threads append meanwhile
                    off = slot[1]
                pack(
                    slot[0],
                    off,
                    kind,
                    clock,
                    flags,
                    depth,
                    scene,
                    name,
                    frame,
                    start_ns,
                    dur_ns,
                    value,
                )
                slot[1] = off + 42
            finally:
                release()

        return append

    def append_array(self, events: np.ndarray) -> None:
        """Append many events at once (an array of EVENT_DTYPE or a compatible structured array).

        Like :meth:`append`, rows a trace may not hold (an undefined kind, clock or flag bit, a
        negative duration) are refused by the writer thread before their batch is written: the
        ConfigError reaches the producer at its next call, or from finish()."""
        if events.dtype != EVENT_DTYPE:
            try:
                events = events.astype(EVENT_DTYPE, casting="same_kind")
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"append_array needs EVENT_DTYPE records: {exc}") from None
        events = np.ascontiguousarray(events)
        step, cap = self._batch_events, self._cap
        with self._lock:
            self._check_open_locked()
            pos = 0
            while pos < len(events):
                # Re-read the slot every time: a hand-over may wait for room, and other
                # threads may append meanwhile.
                buf, off = self._slot
                if off == cap:  # append() leaves a full buffer for the next call to hand over
                    self._hand_over_locked()
                    continue
                if off == 0 and len(events) - pos >= step:
                    # A whole batch: hand over a copy (the caller may reuse its array).
                    self._hand_over_locked(fmt.copy_events(events[pos : pos + step]))
                    pos += step
                    continue
                take = min(len(events) - pos, (cap - off) // 42)
                data = events[pos : pos + take].view(np.uint8).data
                buf[off : off + len(data)] = data
                self._slot[1] = off + len(data)
                pos += take
                if self._slot[1] == cap:
                    self._hand_over_locked()

    def clock_sync(self, record: dict[str, Any]) -> None:
        """Write a CLOCK_SYNC block (e.g. a GPU/host timestamp calibration pair)."""
        # fails early, in the caller
        self._enqueue_block(fmt.BlockType.CLOCK_SYNC, fmt.encode_json(record))

    def annotate(self, record: dict[str, Any]) -> None:
        """Write an ANNOTATION block (a JSON dict), ordered after the events appended so far."""
        # fails early, in the caller
        self._enqueue_block(fmt.BlockType.ANNOTATION, fmt.encode_json(record))

    def image(self, meta: dict[str, Any], png: bytes) -> None:
        """An IMAGE block (:mod:`katra_trace.io.image_block`) after the events so far; codec 0: PNG
        is compressed.
        """
        self._enqueue_block(fmt.BlockType.IMAGE, encode_image_payload(meta, png), fmt.Codec.NONE)

    def flush(self) -> None:
        """Return once everything appended so far has been written to the file."""
        with self._cond:
            self._check_open_locked()
            self._hand_over_pending_locked()
            target = self._enqueued
            while self._done < target and self._error is None and self._thread.is_alive():
                self._cond.wait(0.5)
            self._raise_if_failed()

    def finish(self, summary: dict[str, Any] | None = None, status: str = "complete") -> None:
        """Write everything pending, the SUMMARY block and the footer, close the file and move it
        into place (see katra_trace/io/claim.py). Whatever happens, the background thread is joined
        and the file closed before this returns or raises.

        Raises TraceIOError when a write failed (the events written before it stay readable, in
        :attr:`final_path`, or in :attr:`part_path` when the move failed too), OutputExistsError
        when the path appeared meanwhile. A later call raises the same error again; a later call
        after a successful finish does nothing. Concurrent appenders get WriterClosedError.
        """
        if status not in STATUSES:
            raise ConfigError(f"unknown status {status!r}; choose one of: {', '.join(STATUSES)}")
        user = dict(summary or {})
        with self._finish_lock:  # a second finish() waits for the first, then sees its outcome
            if self._finished:
                if self._finish_error is not None:
                    raise self._finish_error
                return
            try:
                self._finish(status, user)
            except KatraError as err:
                self._finish_error = err
                raise
            finally:
                self._finished = True
                _OPEN_WRITERS.discard(self)

    def _finish(self, status: str, user: dict[str, Any]) -> None:
        with self._cond:
            self._closed = True
            if self._error is None:
                self._hand_over_pending_locked(raise_errors=False)
            # producers now reach a hand-over (the buffer was handed over above)
            self._slot[1] = self._cap
            self._closing = True
            self._enqueue_locked(("summary", status, user))
        self._thread.join()
        failure = self._error
        published: bool | None = None
        try:
            if self._claim is not None:
                if failure is None:
                    try:
                        self._file.flush()
                    except OSError as exc:
                        failure = exc
                empty = self._out.written_events == 0 and (
                    status != "complete" or failure is not None
                )
                aside = self.failed_aside and status == "aborted" and failure is None
                published, self.failed_path = claim_mod.place(
                    self._claim, empty_failure=empty, aside=aside
                )
        finally:
            try:
                self._file.close()  # also releases the .part's lock
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            where = self.final_path if published or self._claim is None else self.part_path
            raise write_failed(
                self.path,
                failure,
                claim_mod.describe(failure),
                self._out.written_events,
                where,
                published,
            )

    @property
    def finished(self) -> bool:
        return self._finished

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._finished:
            return
        if exc_type is None:
            self.finish()
            return
        status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "aborted"
        try:
            self.finish({"error": f"{exc_type.__name__}: {exc}"}, status=status)
        except KatraError:
            pass  # the original exception matters more

    # -- internals (producer side, lock held) ------------------------------------------------

    def _raise_closed(self) -> None:
        raise WriterClosedError(f"trace writer for {str(self.path)!r} is already finished")

    def _check_open_locked(self) -> None:
        if self._closed:
            self._raise_closed()
        self._raise_if_failed()

    def _hand_over_pending_locked(self, raise_errors: bool = True) -> None:
        """Hand over the current partial batch and any new strings, without waiting for room."""
        if self._slot[1] or self._new_strings:
            self._hand_over_locked(force=True, raise_errors=raise_errors)

    def _enqueue_locked(self, item: tuple[Any, ...]) -> None:
        self._pending.append(item)
        self._enqueued += 1
        self._cond.notify_all()
        while (
            self._sync
            and self._done < self._enqueued
            and self._error is None
            and self._thread.is_alive()
        ):
            self._cond.wait(0.5)

    def _hand_over_locked(
        self, batch: np.ndarray | None = None, force: bool = False, raise_errors: bool = True
    ) -> None:
        """Queue a batch (default: the current buffer) and the new strings for the writer thread."""
        if raise_errors:
            self._check_open_locked()
        strings = self._new_strings
        first_id = self._strings_flushed
        self._new_strings = []
        self._strings_flushed += len(strings)
        if batch is None:
            buf, off = self._slot
            batch = np.frombuffer(buf, dtype=EVENT_DTYPE, count=off // 42)
            self._slot[0] = bytearray(self._cap)
            self._slot[1] = 0
        n = len(batch)
        if self._drop and len(self._pending) >= self._max_pending and not force:
            self._dropped_events += n
            self._dropped_batches += 1
            if strings:  # the names are kept even when their events are dropped
                self._enqueue_locked(("events", first_id, strings, None))
            return
        self._enqueue_locked(("events", first_id, strings, batch))
        if not self._drop and not force:
            while (
                len(self._pending) > self._max_pending
                and self._error is None
                and self._thread.is_alive()
            ):
                self._cond.wait(0.5)
        if raise_errors:
            self._raise_if_failed()

    def _enqueue_block(
        self, btype: fmt.BlockType, payload: bytes, codec: fmt.Codec | None = None
    ) -> None:
        with self._cond:
            self._check_open_locked()
            self._hand_over_pending_locked()
            self._enqueue_locked(("block", btype, payload, codec))

    def _raise_if_failed(self) -> None:
        err = self._error
        if err is None:
            return
        # an event the format cannot hold (found by the writer thread)
        if isinstance(err, ConfigError):
            raise ConfigError(f"writing trace {str(self.path)!r} stopped: {err}")
        raise TraceIOError(f"writing trace {str(self.path)!r} failed: {claim_mod.describe(err)}")

    def _abandon(self) -> None:
        """The header could not be written: remove our own empty .part (or leave a stream) and
        close.
        """
        if self._claim is not None:
            claim_mod.discard(self._claim)
        with contextlib.suppress(OSError):
            self._file.close()  # a stream too: the writer owns it
        self._finished = self._closed = True

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        """Write queued items until finish() closes the queue. Never raises: a failure is recorded
        in ``_error`` (the producers see it at their next call), and the rest of the queue is
        drained without writing so that nobody waits for room forever."""
        while True:
            with self._cond:
                if not self._pending and not self._closing:
                    self._cond.wait(self._batch_s)
                    if (
                        not self._pending
                        and self._slot[1]
                        and not self._closing
                        and self._error is None
                    ):
                        self._hand_over_locked(force=True, raise_errors=False)  # the periodic flush
                if not self._pending:
                    if self._closing:
                        return
                    continue
                item = self._pending.popleft()
            try:
                if self._error is None:
                    self._write_item(item)
            except BaseException as exc:  # noqa: BLE001 - reported to the producer
                with self._cond:
                    self._error = exc
                    self._slot[1] = self._cap  # the next append() reaches a hand-over, which raises
            with self._cond:
                self._done += 1
                self._cond.notify_all()

    def _write_item(self, item: tuple[Any, ...]) -> None:
        what = item[0]
        if what == "events":
            _, first_id, strings, batch = item
            self._out.write_events(first_id, strings, batch)
        elif what == "block":
            _, btype, payload, codec = item
            self._out.write_block(btype, payload, codec=codec)
        elif what == "summary":
            _, status, user = item
            self._out.write_summary(
                status,
                dropped_events=self._dropped_events,
                dropped_batches=self._dropped_batches,
                strings=self._strings_flushed,
                end_host_ns=time.perf_counter_ns() - self.start_host_ns,
                user=user,
            )
        self._file.flush()


_OPEN_WRITERS: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


@atexit.register
def _finish_open_writers() -> None:
    """A normal interpreter exit with a writer still open keeps its events and marks it aborted."""
    for writer in list(_OPEN_WRITERS):
        try:
            writer.finish({"error": "process exited without finish()"}, status="aborted")
        except Exception:  # noqa: BLE001 - nothing left to report to at exit
            pass
