"""Several traces written as one: the one definition ``katra3d merge`` (:mod:`katra_trace.io.merge`)
and a counted run's join of its children's parts (:mod:`katra3d.harness.run.parts`) both write
through.

A :class:`Concatenation` writes a HEADER the caller made, then takes the input traces one at a time,
each as the reading service opened it (:func:`~katra_trace.io.tracesets.open_quietly`, within its
file's budget; a damaged one as far as it is intact), so that no more than one input is in memory at
once. Of each it writes:

- its strings, into one table (each input numbers its strings from 1: every event's scene and name
  id is renumbered onto the joined table, an id its table lacks becomes ``?<id>``, as
  :meth:`Trace.name` reads it);
- its events, in blocks of :data:`BLOCK_EVENTS`, their times moved by the caller's shift (an input's
  start after the joined trace's start);
- its annotations (one copy of those that name no scene and are alike in several inputs: a fact of
  the run, not of one input);
- its clock pairs (CLOCK_SYNC), their host times moved with its events; or, where the caller says
  the inputs' GPU clocks are not one clock, as ANNOTATIONs that say whose they are, so that no
  timeline maps one GPU's times through another's pairs;
- its kept frames (an IMAGE block per scene, the PNG byte for byte);
- its instruction profiles (PROFILE blocks), and those the caller adds.

The summary's own counts add up (dropped events and batches; the end is the latest moved end); what
the producer keeps in the summary's ``user`` part is the caller's to join
(:meth:`Concatenation.finish`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from katra_trace.io import format as fmt
from katra_trace.io.blockfile import BlockFile
from katra_trace.io.image_block import IMAGE_ENCODING, KeptFrame, encode_image_payload
from katra_trace.io.reader import Trace
from katra_trace.profile.model import ProfileRecord
from katra_trace.schema import EVENT_DTYPE

#: Events in each EVENTS block written (the writer's default batch).
BLOCK_EVENTS = 4096


class Concatenation:
    """One trace written to ``dst`` from several (module docstring): ``header``, the HEADER block's
    JSON object; ``codec``, the trace's codec by name (None: zstd). Add the inputs in order
    (:meth:`add`), then :meth:`finish`."""

    def __init__(
        self, dst: BinaryIO, header: Mapping[str, Any], *, codec: str | None = None
    ) -> None:
        name = codec or "zstd"
        blosc2 = (
            fmt.load_blosc2("writing a trace with codec 'blosc2'") if name == "blosc2" else None
        )
        self.blocks = BlockFile(dst, fmt.CODEC_NAMES[name], 2, blosc2)
        self.blocks.start(fmt.encode_json(dict(header)))
        # the joined table; id 0 ("") is written with the header
        self._ids: dict[str, int] = {"": 0}
        self._new: list[str] = []  # its names not written yet
        self._seen_notes: set[bytes] = set()
        #: kept frames written
        self.images = 0
        self.dropped_events = 0
        self.dropped_batches = 0
        #: the latest end of an input (its summary's ``end_host_ns`` moved by its shift)
        self.end_host_ns = 0

    @property
    def events(self) -> int:
        """Events written so far."""
        return self.blocks.written_events

    def add(
        self,
        trace: Trace,
        shift_ns: int,
        *,
        clock_note: Mapping[str, Any] | None = None,
        profiles: Sequence[ProfileRecord] = (),
    ) -> int:
        """Write ``trace`` (its events' times moved by ``shift_ns``) after the inputs added before;
        its events written. ``clock_note``: its clock pairs are written as ANNOTATIONs ``{"type":
        "clock_sync", **clock_note, **pair}`` (None: as CLOCK_SYNC blocks). ``profiles``: PROFILE
        records written after its own."""
        written = self._events(trace, shift_ns)
        for record in [*trace.profiles, *(p.as_json() for p in profiles)]:
            self.blocks.write_block(fmt.BlockType.PROFILE, fmt.encode_json(record))
        for note in trace.annotations:
            text = fmt.encode_json(note)
            if isinstance(note, Mapping) and "scene" not in note:
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
        self.dropped_events += _count(trace.summary.get("dropped_events"))
        self.dropped_batches += _count(trace.summary.get("dropped_batches"))
        end = trace.summary.get("end_host_ns")
        if isinstance(end, int) and not isinstance(end, bool):
            self.end_host_ns = max(self.end_host_ns, end + shift_ns)
        return written

    def finish(self, status: str, user: dict[str, Any]) -> None:
        """The last strings, the SUMMARY block (``status``; ``user``: the producer's part) and the
        footer.
        """
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
        """Write the strings ``trace`` names and its events, renumbered and moved; how many."""
        ev = trace.events
        used_max = int(max(ev["scene"].max(), ev["name"].max())) if len(ev) else 0
        lookup = self._lookup(trace.strings, used_max)
        self.blocks.write_events(len(self._ids) - len(self._new), self._take(), None)
        for at in range(0, len(ev), BLOCK_EVENTS):
            # the writer's own
            batch = np.array(ev[at : at + BLOCK_EVENTS], dtype=EVENT_DTYPE, copy=True)
            batch["scene"] = lookup[batch["scene"]]
            batch["name"] = lookup[batch["name"]]
            batch["start_ns"] += np.int64(shift_ns)
            self.blocks.write_events(0, [], batch)
        return len(ev)

    def _lookup(self, strings: Sequence[str], used_max: int) -> np.ndarray:
        """The joined id of each of an input's ids 0..max(len(strings), used_max + 1) - 1."""
        size = max(len(strings), used_max + 1)
        out = np.empty(size, dtype=np.uint32)
        for sid in range(size):
            name = strings[sid] if sid < len(strings) else f"?{sid}"
            if name not in self._ids:
                self._ids[name] = len(self._ids)
                self._new.append(name)
            out[sid] = self._ids[name]
        return out

    def _take(self) -> list[str]:
        names, self._new = self._new, []
        return names


def _kept_meta(kept: KeptFrame) -> dict[str, Any]:
    """The facts of a kept frame's IMAGE block, as
    :func:`~katra_trace.io.image_block.encode_image_payload` takes them."""
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


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


__all__ = ["BLOCK_EVENTS", "Concatenation"]
