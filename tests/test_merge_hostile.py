"""merge on shards that ``validate`` passes but that no run writes: every one is refused in one
line (exit 2) or merged into a trace that validates, within a memory bound set by the file."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace.io.merge import parse_shard
from katra_trace.io.reader import open_trace
from tests.cli_helpers import katra
from tests.test_shards import _edited, _shard
from tests.trace_helpers import frame_zone_stream, wall_frames, write_trace

REPO = Path(__file__).resolve().parent.parent
#: The address space a merge of these small shards may take (the interpreter and numpy included).
AS_CAP = 1 << 30


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_CAP, AS_CAP))


def _merge(tmp_path: Path, *shards: Path) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "m.katra"
    return subprocess.run(
        [sys.executable, "-m", "katra3d", "merge", *map(str, shards), "-o", str(out), "--quiet"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        preexec_fn=_cap,
    )


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    return (
        _shard(tmp_path / "s1.katra", "1/2", ["a", "c"]),
        _shard(tmp_path / "s2.katra", "2/2", ["b"]),
    )


def _options(**changes: Any) -> Any:
    return lambda h: h["capture_options"].update(changes)


def test_ids_at_the_top_of_uint32_are_mapped_not_allocated(tmp_path: Path) -> None:
    s1, s2 = _pair(tmp_path)
    events, strings = wall_frames(["b"], 20)
    events["name"][3] = 2**32 - 1
    events["scene"][4] = 2**32 - 2
    header = open_trace(s2).header.as_dict()
    odd = tmp_path / "odd.katra"
    write_trace(odd, events, strings, header=header)
    proc = _merge(tmp_path, s1, odd)
    # the stray scene id reads as '?4294967294', a scene the shard's header does not name
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds scene '?4294967294'" in proc.stderr
    events["scene"][4] = events["scene"][5]
    write_trace(odd, events, strings, header=header)
    proc = _merge(tmp_path, s1, odd)
    assert proc.returncode == 0, proc.stderr
    merged = open_trace(tmp_path / "m.katra", strict=True)
    assert "?4294967295" in merged.strings and len(merged.strings) < 10


def test_a_huge_shard_count_is_refused_and_missing_shards_are_counted(tmp_path: Path) -> None:
    s1, s2 = _pair(tmp_path)
    for shard, message in [
        ("1/99999999999", "bad shard in"),
        ("1/" + "9" * 5000, "bad shard in"),
        ("²/²", "expected I/N"),
        ("١/٢", "expected I/N"),
        ("1/1001", "N must be in 1..1000"),
    ]:
        odd = _edited(s2, tmp_path / "odd.katra", _options(shard=shard))
        proc = _merge(tmp_path, odd)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert message in proc.stderr and len(proc.stderr) < 300
    odd = _edited(s1, tmp_path / "odd.katra", _options(shard="1/1000"))
    proc = _merge(tmp_path, odd)
    assert proc.returncode == 2 and proc.stderr.endswith(
        "shards 2/1000, 3/1000, 4/1000 and 996 more of this run are missing: merge needs all 1000\n"
    ), proc.stderr


@pytest.mark.parametrize("text", ["²/²", "١/٢", "1/" + "9" * 5000, "1 /2\n"])
def test_one_strict_shard_parser(text: str) -> None:
    with pytest.raises(Exception) as caught:
        parse_shard(text)
    assert type(caught.value).__name__ == "ConfigError"
    assert len(str(caught.value)) < 120


def test_run_shard_takes_ascii_digits_only(tmp_path: Path) -> None:
    for shard in ["1/" + "9" * 5000, "١/٢"]:
        proc = katra(
            "run", "triangle", "--frames", "1", "--shard", shard, "-o", str(tmp_path / "t")
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "expected I/N" in proc.stderr and len(proc.stderr) < 200
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_options(scenes=5), "capture_options.scenes is not a list"),
        (_options(replay={"replayers": 5}), "capture_options.replay.replayers is not an object"),
        (_options(replay={"traces": [1]}), "capture_options.replay.traces is not an object"),
        (_options(replay=[]), "capture_options.replay is not an object"),
    ],
)
def test_odd_header_shapes_are_one_line(tmp_path: Path, edit: Any, message: str) -> None:
    s1, s2 = _pair(tmp_path)
    odd = _edited(s2, tmp_path / "odd.katra", edit)
    for shards in [(s1, odd), (odd, s1)]:
        proc = _merge(tmp_path, *shards)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and not (tmp_path / "m.katra").exists()


def test_nan_scenes_and_a_clock_label_past_ascii_are_one_line_or_merged(tmp_path: Path) -> None:
    s1, s2 = _pair(tmp_path)
    odd = _edited(s2, tmp_path / "odd.katra", _options(scenes=[float("nan")]))
    proc = _merge(tmp_path, s1, odd)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr

    def label(h: dict[str, Any]) -> None:
        h["workload"] = "other"
        h["capture_options"]["resolved"]["scenes"][0]["label"] = "b#²"

    odd = _shard(tmp_path / "b.katra", "2/2", ["b#²"])
    odd = _edited(odd, tmp_path / "odd.katra", label)
    proc = _merge(tmp_path, s1, odd)
    assert proc.returncode == 0, proc.stderr
    merged = open_trace(tmp_path / "m.katra", strict=True)
    assert [e["label"] for e in merged.header.capture_options.resolved.scenes or ()] == [
        "a",
        "c",
        "b#²",
    ]


@pytest.mark.parametrize("starts", [(0, 2**63 - 1), (2**63 - 1, 0), (2**63 - 1, 2**63 - 1), (0, 0)])
def test_starts_out_of_range_are_refused_or_give_a_trace_that_validates(
    tmp_path: Path, starts: tuple[int, int]
) -> None:
    s1, s2 = _pair(tmp_path)
    a = _edited(s1, tmp_path / "a.katra", lambda h: h.update(start_wall_ns=starts[0]))
    b = _edited(s2, tmp_path / "b.katra", lambda h: h.update(start_wall_ns=starts[1]))
    proc = _merge(tmp_path, a, b)
    assert proc.returncode in (0, 2) and proc.stderr.count("\n") <= 1, proc.stderr
    if proc.returncode == 0:
        check = katra("validate", str(tmp_path / "m.katra"))
        assert check.returncode == 0, check.stdout + check.stderr
    else:
        assert "would end past 2**63-1 ns" in proc.stderr
        assert not (tmp_path / "m.katra").exists()


def test_a_shard_that_claims_other_scenes_than_it_holds_is_refused(tmp_path: Path) -> None:
    s1 = _shard(tmp_path / "s1.katra", "1/2", ["a", "b"])
    s2 = _shard(tmp_path / "s2.katra", "2/2", ["b"])
    liar = _edited(
        s2,
        tmp_path / "liar.katra",
        lambda h: h["capture_options"]["resolved"]["scenes"][0].update(label="x"),
    )
    proc = _merge(tmp_path, s1, liar)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds scene 'b', which its header does not name (it names 'x')" in proc.stderr
    assert not (tmp_path / "m.katra").exists() and not list(tmp_path.glob(".m.katra*"))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_while_an_output_is_written_removes_its_temporary_file(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    events = frame_zone_stream(1, zones=0)
    events["flags"] = 0
    events = np.repeat(events, 1_000_000)
    events["frame"] = np.arange(events.size)
    events["start_ns"] = np.arange(events.size) * 17_000_000
    trace = tmp_path / "long.katra"
    write_trace(trace, events, ["", "scene", "frame"], batch_events=65536)
    out = tmp_path / "out.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "katra3d", "export", str(trace), "--to", "csv", "-o", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not list(tmp_path.glob(".out.csv.*.tmp")):
            assert proc.poll() is None, "the export ended before its temporary file was seen"
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code and err == "katra3d: interrupted\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.katra"]
