"""Several traces written as one (``katra3d merge`` and a counted run's join of its parts): one
input in memory at a time, strings renumbered onto one table, events shifted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import BinaryIO

import numpy as np

from katra_trace.errors import ConfigError
from katra_trace.io import format as fmt
from katra_trace.io.blockfile import BlockFile
from katra_trace.io.image_block import (
    IMAGE_ENCODING,
    ImageMeta,
    KeptFrame,
    encode_image_payload,
)
from katra_trace.io.reader import Trace
from katra_trace.jsontext import JsonValue
from katra_trace.profile.model import ProfileRecord
from katra_trace.schema import EVENT_DTYPE
from katra_trace.text import shown

BLOCK_EVENTS = 4096  # the writer's default batch
INT64_MAX = 2**63 - 1


class Concatenation:
    """One trace written to ``dst``: :meth:`add` each input in order, then :meth:`finish`."""

    def __init__(
        self, dst: BinaryIO, header: Mapping[str, JsonValue], *, codec: str | None = None
    ) -> None:
        name = codec or "zstd"
        blosc2 = (
            fmt.load_blosc2("writing a trace with codec 'blosc2'") if name == "blosc2" else None
        )
        self.blocks = BlockFile(dst, fmt.CODEC_NAMES[name], 2, blosc2)
        self.blocks.start(fmt.encode_json(header))
        self._ids: dict[str, int] = {"": 0}
        self._new: list[str] = []  # not written yet
        self._seen_notes: set[bytes] = set()
        self.images = 0
        self.dropped_events = 0
        self.dropped_batches = 0
        self.end_host_ns = 0

    @property
    def events(self) -> int:
        return self.blocks.written_events

    def add(
        self,
        trace: Trace,
        shift_ns: int,
        *,
        clock_note: Mapping[str, JsonValue] | None = None,
        profiles: Sequence[ProfileRecord] = (),
    ) -> int:
        """Write ``trace`` shifted by ``shift_ns``; returns its events written. ``clock_note``:
        its clock pairs go as ``clock_sync`` ANNOTATIONs carrying it."""
        written = self._events(trace, shift_ns)
        for record in [*trace.profiles, *(p.as_json() for p in profiles)]:
            self.blocks.write_block(fmt.BlockType.PROFILE, fmt.encode_json(record))
        for note in trace.annotations:
            text = fmt.encode_json(note)
            if "scene" not in note:
                if text in self._seen_notes:
                    continue
                self._seen_notes.add(text)
            self.blocks.write_block(fmt.BlockType.ANNOTATION, text)
        for pair in trace.clock_syncs:
            host = pair.get("host_ns")
            moved = (
                {**pair, "host_ns": host + shift_ns}
                if isinstance(host, int) and not isinstance(host, bool)
                else pair
            )
            if clock_note is None:
                self.blocks.write_block(fmt.BlockType.CLOCK_SYNC, fmt.encode_json(moved))
            else:
                self.blocks.write_block(
                    fmt.BlockType.ANNOTATION,
                    fmt.encode_json({"type": "clock_sync", **clock_note, **moved}),
                )
        for kept in trace.kept_frames.values():
            self.blocks.write_block(
                fmt.BlockType.IMAGE,
                encode_image_payload(_kept_meta(kept), kept.png),
                codec=fmt.Codec.NONE,
            )
            self.images += 1
        self.dropped_events += trace.summary.dropped_events or 0
        self.dropped_batches += trace.summary.dropped_batches or 0
        end = trace.summary.end_host_ns
        if end is not None:
            self.end_host_ns = max(self.end_host_ns, end + shift_ns)
        return written

    def finish(self, status: str, user: Mapping[str, JsonValue]) -> None:
        """Write the last strings, the SUMMARY (``user``: the producer's part), the footer."""
        self.blocks.write_events(len(self._ids) - len(self._new), self._take(), None)
        self.blocks.write_summary(
            status,
            dropped_events=self.dropped_events,
            dropped_batches=self.dropped_batches,
            strings=len(self._ids),
            end_host_ns=self.end_host_ns,
            user=user,
        )

    def _events(self, trace: Trace, shift_ns: int) -> int:
        ev = trace.events
        if len(ev) and int((ev["start_ns"] + ev["dur_ns"]).max()) > INT64_MAX - shift_ns:
            raise ConfigError(
                f"{shown(trace.path)} starts {shift_ns} ns after the first input: its events would "
                "end past 2**63-1 ns; its start_wall_ns is not of this run"
            )
        table = np.fromiter(map(self._join, trace.strings), np.uint32, len(trace.strings))
        # only the ids used, not an array over every id
        used = np.unique(np.concatenate([ev["scene"], ev["name"]]))
        beyond = used[used >= len(table)]
        joined = np.fromiter((self._join(f"?{i}") for i in beyond), np.uint32, len(beyond))

        def renumber(ids: np.ndarray) -> np.ndarray:
            inside = ids < len(table)
            out = np.empty_like(ids)
            out[inside] = table[ids[inside]]
            out[~inside] = joined[np.searchsorted(beyond, ids[~inside])]
            return out

        self.blocks.write_events(len(self._ids) - len(self._new), self._take(), None)
        for at in range(0, len(ev), BLOCK_EVENTS):
            batch = np.array(ev[at : at + BLOCK_EVENTS], dtype=EVENT_DTYPE, copy=True)
            batch["scene"] = renumber(batch["scene"])
            batch["name"] = renumber(batch["name"])
            batch["start_ns"] += np.int64(shift_ns)
            self.blocks.write_events(0, [], batch)
        return len(ev)

    def _join(self, name: str) -> int:
        sid = self._ids.get(name)
        if sid is None:
            sid = self._ids[name] = len(self._ids)
            self._new.append(name)
        return sid

    def _take(self) -> list[str]:
        names, self._new = self._new, []
        return names


def _kept_meta(kept: KeptFrame) -> ImageMeta:
    return {
        "scene": kept.scene,
        "frame_index": kept.frame_index,
        "time_s": kept.time_s,
        "width": kept.width,
        "height": kept.height,
        "channels": kept.channels,
        "sha256": kept.sha256,
        "key": dict(kept.key),
        "encoding": IMAGE_ENCODING,
    }


__all__ = ["BLOCK_EVENTS", "Concatenation"]
