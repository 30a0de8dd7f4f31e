"""The bytes side of a trace writer: blocks framed onto an open file, and the summary's counts.
One thread (the writer's) uses it at a time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np
import zstandard

from katra_trace.errors import ConfigError
from katra_trace.io import blosc2_events as b2ev
from katra_trace.io import format as fmt
from katra_trace.jsontext import JsonObject, JsonValue
from katra_trace.schema import EVENT_DTYPE, SCHEMA_VERSION


class BlockFile:
    """Frames blocks onto ``file`` and counts them (codec 2: other blocks use zstd)."""

    def __init__(
        self, file: BinaryIO, codec: fmt.Codec, compression_level: int, blosc2: Any = None
    ) -> None:
        self.file = file
        self.codec = codec
        self.other_codec = fmt.Codec.ZSTD if codec == fmt.Codec.BLOSC2 else codec
        self.blosc2 = blosc2
        self.compressor = zstandard.ZstdCompressor(level=compression_level)
        self.seq = 0
        self.pos = 0
        self.blocks = 0
        self.event_blocks = 0
        self.written_events = 0

    def start(self, header_json: bytes) -> None:
        """Write the preamble, HEADER and the STRINGS block of id 0, flushed."""
        self.write_raw(fmt.encode_preamble())
        self.write_block(fmt.BlockType.HEADER, header_json)
        self.write_block(fmt.BlockType.STRINGS, fmt.encode_strings(0, [""]))
        self.file.flush()

    def write_events(self, first_id: int, strings: list[str], batch: np.ndarray | None) -> None:
        """Write the new strings, then the batch as one EVENTS block (codec 2: encoded in place);
        ConfigError for an event the format cannot hold."""
        if strings:
            self.write_block(fmt.BlockType.STRINGS, fmt.encode_strings(first_id, strings))
        if batch is None or not len(batch):
            return
        if self.codec == fmt.Codec.BLOSC2:
            problem = fmt.check_events(batch, fmt.FORMAT_MINOR)
            if problem is not None:  # once written, no reader would read past it
                raise ConfigError(f"append: {problem}")
            n_events = len(batch)
            stored = b2ev.encode_events_blosc2(batch, self.blosc2, in_place=True)
            raw_len = fmt.EVENTS_HEAD.size + n_events * EVENT_DTYPE.itemsize
            self.write_framed(
                fmt.frame_block(
                    fmt.BlockType.EVENTS,
                    stored,
                    raw_len,
                    seq=self.seq,
                    codec=self.codec,
                    schema=SCHEMA_VERSION,
                )
            )
        else:
            payload = fmt.encode_events(batch)
            problem = fmt.check_payload(payload, batch["start_ns"], fmt.FORMAT_MINOR)
            if problem is not None:
                raise ConfigError(f"append: {problem}")
            self.write_block(fmt.BlockType.EVENTS, payload, schema=SCHEMA_VERSION)
        self.written_events += len(batch)
        self.event_blocks += 1

    def write_summary(
        self,
        status: str,
        *,
        dropped_events: int,
        dropped_batches: int,
        strings: int,
        end_host_ns: int,
        user: Mapping[str, JsonValue],
    ) -> None:
        summary_offset = self.pos
        summary: JsonObject = {
            "status": status,
            "events": self.written_events,
            "dropped_events": dropped_events,
            "dropped_batches": dropped_batches,
            "strings": strings,
            "blocks": self.blocks + 1,
            "event_blocks": self.event_blocks,
            "end_host_ns": end_host_ns,
            "user": user,
        }
        self.write_block(fmt.BlockType.SUMMARY, fmt.encode_json(summary))
        self.write_raw(fmt.encode_footer(summary_offset))

    def write_block(
        self, btype: int, payload: bytes, schema: int = 0, codec: fmt.Codec | None = None
    ) -> None:
        """Write one block (``codec`` None: that of non-EVENTS blocks)."""
        self.write_framed(
            fmt.encode_block(
                btype,
                payload,
                seq=self.seq,
                codec=self.other_codec if codec is None else codec,
                schema=schema,
                compressor=self.compressor,
            )
        )

    def write_framed(self, framed: tuple[bytes, bytes]) -> None:
        head, stored = framed
        self.write_raw(head)
        self.write_raw(stored)
        self.seq += 1
        self.blocks += 1

    def write_raw(self, data: bytes) -> None:
        self.file.write(data)
        self.pos += len(data)


__all__ = ["BlockFile"]
