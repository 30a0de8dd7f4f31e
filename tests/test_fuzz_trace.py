"""Structure-aware fuzzing of the reader and the reading commands.

Unlike byte flips (which the CRCs catch), these mutations decode a valid trace, change the
*decoded* content of its blocks (event columns, JSON values, string tables, block order, the
format minor, kept frames: their records and PNGs, large all-zero frames, many IMAGE blocks, IMAGE
blocks packed with zstd) and re-seal the CRCs, sequence numbers and footer. Every result must either
read or fail with a KatraError, and every reading command (validate, info, stats, compare with
``--image-diff``) must end with an exit code, never a traceback.

Bounded: about KATRA3D_FUZZ_SECONDS seconds (default 3) in the normal test run; ``make bench``
can run it longer, e.g. ``KATRA3D_FUZZ_SECONDS=300 pytest tests/test_fuzz_trace.py``. A failure
names the iteration's seed: ``reproduce(seed)`` rebuilds the file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import random
import shutil
import struct
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra3d.harness.cli import main as cli_main
from katra_trace import KatraError, TraceRecoveryWarning, open_trace
from katra_trace.io import format as fmt
from katra_trace.io.images import frame_record
from katra_trace.schema import EVENT_DTYPE
from tests.hostile_images import (
    KEY,
    mutate_image,
    picture_frame,
    seal_with_images,
    write_frames_trace,
)
from tests.trace_helpers import frame_zone_stream, seal_blocks, split_blocks, write_trace

DATA = Path(__file__).parent / "data"
FUZZ_SECONDS = float(os.environ.get("KATRA3D_FUZZ_SECONDS", "3"))
HAVE_BLOSC2 = importlib.util.find_spec("blosc2") is not None
Blocks = list[tuple[int, bytes, int]]

INTERESTING_INTS = [
    0,
    1,
    -1,
    2,
    3,
    4,
    5,
    9,
    31,
    32,
    63,
    64,
    255,
    256,
    65535,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**62,
    2**63 - 1,
    -(2**63),
    -(2**31),
]
WEIRD_JSON: list[Any] = [
    None,
    True,
    0,
    -1,
    10**40,
    -(10**40),
    1.5,
    float("nan"),
    float("inf"),
    "",
    "x" * 300,
    "\udc80",
    "a\ud800b",
    "\ud83d\ude00",
    [],
    [1, [2, [3]]],
    {},
    {"a": {"b": [None]}},
    {"\udc80": 1},
]


def _base_traces(tmp: Path) -> list[bytes]:
    small = tmp / "small.katra"
    write_trace(
        small,
        frame_zone_stream(12, zones=2),
        ["", "scene", "frame", "pass-a", "pass-b", "pass-c"],
        batch_events=8,
        annotations=[{"scene": "scene", "last_frame_sha256": "0" * 64}],
        header={
            "capture_options": {"timing_mode": "sync", "resolved": {"frames": 12}},
            "host_info": {"gl": {"renderer": "llvmpipe"}, "software_renderer": True},
        },
    )
    kept = write_frames_trace(
        tmp / "kept.katra", {"s": picture_frame("s", 1), "t": picture_frame("t", 2, 5, 3)}
    )
    rgb = frame_record(
        "u", 4, 4 / 60, np.random.default_rng(3).integers(0, 256, (7, 9, 3), dtype=np.uint8), KEY
    )
    kept_rgb = write_frames_trace(
        tmp / "kept-rgb.katra", {"u": rgb, "v": picture_frame("v", 4, 1, 1)}, codec=0
    )
    bases = [
        small.read_bytes(),
        (DATA / "golden-v1.1.katra").read_bytes(),
        (DATA / "golden-v1.0.katra").read_bytes(),
        kept.read_bytes(),
        kept_rgb.read_bytes(),
    ]
    if HAVE_BLOSC2:
        bases.append((DATA / "golden-v1.1-blosc2.katra").read_bytes())
    return bases


def _blosc2_edit(rng: random.Random) -> Callable[[bytearray], None] | None:
    """Most codec-2 files keep their chunks; some get a chunk-header field or a chunk byte changed
    (the CRC is re-sealed, so only the reader's own checks and blosc2 stand between it and a crash).
    """
    if rng.random() < 0.6:
        return None
    field = rng.choice(
        ["version", "versionlz", "flags", "typesize", "nbytes", "blocksize", "cbytes", "byte", "n"]
    )
    value = rng.choice(INTERESTING_INTS)
    where = rng.random()

    def edit(stored: bytearray) -> None:
        head = fmt.EVENTS_HEAD.size
        if len(stored) < head + fmt.BLOSC2_MIN_HEADER:
            return
        if field == "n":
            struct.pack_into("<I", stored, 0, value & 0xFFFFFFFF)
        elif field == "byte":
            i = head + int(where * (len(stored) - head))
            stored[i] ^= 1 + (value & 0x7F)
        else:
            at, code = {
                "version": (0, "<B"),
                "versionlz": (1, "<B"),
                "flags": (2, "<B"),
                "typesize": (3, "<B"),
                "nbytes": (4, "<I"),
                "blocksize": (8, "<I"),
                "cbytes": (12, "<I"),
            }[field]
            struct.pack_into(
                code, stored, head + at, value & (0xFF if code == "<B" else 0xFFFFFFFF)
            )

    return edit


def _mutate_events(rng: random.Random, raw: bytes) -> bytes:
    try:
        ev = fmt.decode_events(raw, 0)
    except KatraError:
        return raw
    if len(ev) == 0:
        return raw
    col = rng.choice(EVENT_DTYPE.names)
    info = np.iinfo(ev[col].dtype) if ev[col].dtype.kind in "iu" else None
    for _ in range(rng.randint(1, 3)):
        row = rng.randrange(len(ev))
        if info is None:
            ev[col][row] = rng.choice([0.0, -1.0, 1e308, float("nan"), float("inf"), -float("inf")])
        else:
            v = rng.choice(INTERESTING_INTS + [rng.randint(int(info.min), int(info.max))])
            ev[col][row] = (
                int(np.array(v).astype(np.int64).astype(ev[col].dtype))
                if info.min <= v <= info.max
                else int(info.max)
            )
    if rng.random() < 0.1:
        ev = ev[rng.randrange(len(ev)) :]
    out = fmt.encode_events(ev)
    if rng.random() < 0.05:  # a count that does not match the payload
        out = (
            fmt.EVENTS_HEAD.pack(rng.choice(INTERESTING_INTS) & 0xFFFFFFFF, 0)
            + out[fmt.EVENTS_HEAD.size :]
        )
    return out


def _mutate_value(rng: random.Random, obj: Any, depth: int = 0) -> Any:
    if isinstance(obj, dict) and obj and depth < 4 and rng.random() < 0.7:
        key = rng.choice(list(obj))
        out = dict(obj)
        r = rng.random()
        if r < 0.15:
            del out[key]
        else:
            out[key] = _mutate_value(rng, obj[key], depth + 1)
        return out
    if isinstance(obj, list) and obj and depth < 4 and rng.random() < 0.5:
        i = rng.randrange(len(obj))
        return obj[:i] + [_mutate_value(rng, obj[i], depth + 1)] + obj[i + 1 :]
    return rng.choice(WEIRD_JSON)


def _mutate_json(rng: random.Random, raw: bytes) -> bytes:
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw
    if rng.random() < 0.05:
        return json.dumps(rng.choice(WEIRD_JSON)).encode()
    return json.dumps(_mutate_value(rng, obj)).encode()


def _mutate_strings(rng: random.Random, raw: bytes) -> bytes:
    try:
        first, names = fmt.decode_strings(raw, 0)
    except KatraError:
        return raw
    r = rng.random()
    if r < 0.3:
        first = rng.choice(INTERESTING_INTS) & 0xFFFFFFFF
    elif r < 0.6 and names:
        names[rng.randrange(len(names))] = rng.choice(
            ["\udc80", "a\ud800", "", "x" * 1000, "\x00", "\u202e"]
        )
    elif r < 0.8:
        names.append(rng.choice(["new", "\ud83d\ude00"]))
    blobs = [n.encode("utf-8", "surrogatepass") for n in names]
    if rng.random() < 0.2 and blobs:
        blobs[0] = b"\xff\xfe" + blobs[0]  # invalid UTF-8
    lengths = np.array([len(b) for b in blobs], dtype="<u4")
    if rng.random() < 0.1 and len(lengths):
        lengths[0] += 1
    return fmt.STRINGS_HEAD.pack(first, len(blobs)) + lengths.tobytes() + b"".join(blobs)


def _mutate_structure(rng: random.Random, blocks: Blocks) -> None:
    if not blocks:
        return
    r = rng.random()
    i = rng.randrange(len(blocks))
    if r < 0.25:
        # duplicate (a second HEADER, SUMMARY, ...)
        blocks.insert(rng.randrange(len(blocks) + 1), blocks[i])
    elif r < 0.45:
        del blocks[i]
    elif r < 0.65:
        j = rng.randrange(len(blocks))
        blocks[i], blocks[j] = blocks[j], blocks[i]
    elif r < 0.7:
        # an unknown type (7 is IMAGE since format 1.2)
        blocks.insert(i, (rng.choice([0, 8, 200, 255]), b"payload of an unknown type", 0))
    elif r < 0.8:
        images = [b for b in blocks if b[0] == fmt.BlockType.IMAGE]
        # many kept frames: one IMAGE block repeated (a scene kept again reads as its last)
        if images:
            for _ in range(rng.choice([2, 10, 60])):
                blocks.insert(rng.randrange(1, len(blocks) + 1), rng.choice(images))
    else:
        btype, raw, _ = blocks[i]
        blocks[i] = (btype, raw, rng.choice([0, 1, 2, 65535]))


def build(seed: int, bases: list[bytes]) -> tuple[bytes, str]:
    """The mutated file for ``seed`` and a description of what was changed."""
    rng = random.Random(seed)
    blocks = split_blocks(rng.choice(bases))
    done = []
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(blocks))
        images = [k for k, b in enumerate(blocks) if b[0] == fmt.BlockType.IMAGE]
        # a trace that keeps frames: its IMAGE blocks half of the time
        if images and rng.random() < 0.5:
            i = rng.choice(images)
        btype, raw, schema = blocks[i]
        what = rng.random()
        if what < 0.15:
            _mutate_structure(rng, blocks)
            done.append("structure")
            continue
        if btype == fmt.BlockType.EVENTS:
            raw = _mutate_events(rng, raw)
        elif btype == fmt.BlockType.IMAGE:
            raw = mutate_image(rng, raw)
        elif btype in fmt.JSON_BLOCKS:
            raw = _mutate_json(rng, raw)
        elif btype == fmt.BlockType.STRINGS:
            raw = _mutate_strings(rng, raw)
        blocks[i] = (btype, raw, schema)
        done.append(f"block {i} type {btype}")
    minor = rng.choice([None, None, None, 0, 1, 2, 9])
    # kept frames: codec 0 as written, or packed with zstd
    if any(b[0] == fmt.BlockType.IMAGE for b in blocks):
        image_codec = 0 if rng.random() < 0.85 else 1
        data = seal_with_images(
            blocks,
            minor=minor,
            codec=rng.choice([0, 1]),
            image_codec=image_codec,
            footer=rng.random() < 0.9,
        )
        done.append(f"IMAGE codec {image_codec}")
    else:
        codec = rng.choice([0, 1, 2] if HAVE_BLOSC2 else [0, 1])
        data = seal_blocks(
            blocks,
            minor=minor,
            codec=codec,
            footer=rng.random() < 0.9,
            blosc2_edit=_blosc2_edit(rng) if codec == 2 else None,
        )
    return data, f"seed {seed}: {', '.join(done)}, minor {minor}"


def reproduce(seed: int, out: Path) -> Path:
    """Write the file of a failing iteration (for a bug report or a debugger)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out.write_bytes(build(seed, _base_traces(Path(tmp)))[0])
    return out


def _run_cli(*args: str) -> int:
    """A reading command in this process, with stdout/stderr that refuse unencodable text like a
    terminal.
    """
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(list(args))
        out.flush()
        err.flush()
    return rc


COMMANDS: list[Callable[[str], tuple[str, ...]]] = [
    lambda p: ("validate", p),
    lambda p: ("info", p),
    lambda p: ("info", "--json", p),
    lambda p: ("stats", p),
    lambda p: ("stats", "--format", "json", p),
    lambda p: ("compare", p, p),
    lambda p: ("compare", p, p, "--image-diff", p + ".diff"),
]


def test_structure_aware_fuzz_parses_or_raises_katra_error(tmp_path: Path) -> None:
    bases = _base_traces(tmp_path)
    path = tmp_path / "fuzz.katra"
    failures: list[str] = []
    deadline = time.monotonic() + FUZZ_SECONDS
    seed = int(os.environ.get("KATRA3D_FUZZ_SEED", "0"))
    iterations = 0
    while time.monotonic() < deadline or iterations < 20:
        data, what = build(seed, bases)
        path.write_bytes(data)
        readable = False
        for strict in (False, True):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", TraceRecoveryWarning)
                    open_trace(path, strict=strict)
                readable = True
            except KatraError:
                pass
            except Exception as exc:  # noqa: BLE001 - the finding
                failures.append(f"{what}: open_trace(strict={strict}): {type(exc).__name__}: {exc}")
        if readable:
            shutil.rmtree(f"{path}.diff", ignore_errors=True)
            for command in COMMANDS:
                args = command(str(path))
                try:
                    rc = _run_cli(*args)
                    if rc not in (0, 1, 2):
                        failures.append(f"{what}: {' '.join(args[:-1])}: exit {rc}")
                except Exception as exc:  # noqa: BLE001 - the finding
                    failures.append(f"{what}: katra3d {args[0]}: {type(exc).__name__}: {exc}")
        seed += 1
        iterations += 1
    print(
        f"structure-aware fuzz: {iterations} files in {FUZZ_SECONDS:g} s, {len(failures)} failures"
    )
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzz_builds_are_reproducible(tmp_path: Path, seed: int) -> None:
    bases = _base_traces(tmp_path)
    assert build(seed, bases) == build(seed, bases)
