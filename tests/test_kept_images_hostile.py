"""Kept frames that are hostile or damaged: huge, packed or damaged frames, FLIP's pixel cap, and
one scan a trace, no GL.

The reader keeps each kept frame's facts and PNG during its one scan and decodes pixels only on
demand, inside the trace's reading budget (10 x its size + 64 MiB), one frame at a time; IMAGE
blocks of another codec than 0 are refused; FLIP has a pixel cap; a damaged kept frame makes its
scene's image verdict *incomparable* with the trace file's name while the timing verdict stands. The
crafted traces are tests/hostile_images.py's.
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace import TraceFormatError, TraceRecoveryWarning, TraceTooLargeError, open_trace
from katra_trace.analysis import images as image_rule
from katra_trace.analysis.images import ImageRef, image_verdict, side_images
from katra_trace.io import images as kept
from katra_trace.io.images import image_checksum
from tests.cli_helpers import katra_main
from tests.hostile_images import (
    DAMAGES,
    big_frame_traces,
    one_8192_trace,
    picture_frame,
    write_frames_trace,
    zero_frame,
    zstd_packed_trace,
)

# What these tests check is named through its module (``kept.frame_pixels``,
# ``image_rule.FLIP_MAX_PIXELS``), so that each test, run against code that lacks it, fails on its
# own assertion rather than the whole file failing to import.

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three crafted traces of :func:`big_frame_traces` and a small valid one (``small``)."""
    root = tmp_path_factory.mktemp("big")
    out = big_frame_traces(root)
    out["small"] = write_frames_trace(root / "small.katra", {"s": picture_frame("s")})
    return out


@pytest.fixture(scope="module")
def one_big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return one_8192_trace(tmp_path_factory.mktemp("one") / "one-8192.katra")


@pytest.fixture(scope="module")
def zstd_packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zstd_packed_trace(tmp_path_factory.mktemp("zstd") / "zstd.katra")


def _open(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(path)


# --------------------------------------------------------------------------- the reader


def test_the_reader_keeps_facts_and_png_and_decodes_on_demand(tmp_path: Path) -> None:
    frames = {"a": picture_frame("a", 1), "b": picture_frame("b", 2, width=5, height=3)}
    trace = open_trace(write_frames_trace(tmp_path / "t.katra", frames))
    assert sorted(trace.kept_frames) == ["a", "b"]
    a = trace.kept_frames["a"]
    assert (a.width, a.height, a.channels, a.sha256, a.damage) == (
        24,
        16,
        4,
        frames["a"][0]["sha256"],
        "",
    )
    assert a.png == frames["a"][1] and a.path == tmp_path / "t.katra" and a.offset > 0
    assert trace.budget is not None and trace.budget.left is not None
    before = trace.budget.left
    pixels = kept.frame_pixels(a)
    assert pixels.shape == (16, 24, 4) and image_checksum(pixels) == a.sha256
    assert trace.budget.left == before - a.pixel_bytes  # held pixels count against the budget
    view = pixels[:, :, :3]
    del pixels
    assert trace.budget.left == before - a.pixel_bytes  # a view keeps them alive, and counted
    del view
    assert trace.budget.left == before


def test_a_frame_too_large_for_the_budget_is_refused_before_it_is_decoded(one_big: Path) -> None:
    trace = open_trace(one_big)
    frame = trace.kept_frames["triangle"]
    assert (frame.width, frame.height, frame.damage) == (8192, 8192, "")
    left = trace.budget.left
    with pytest.raises(TraceTooLargeError, match="KATRA3D_MAX_RATIO=0") as caught:
        kept.frame_pixels(frame)
    assert str(caught.value).startswith(f"'{one_big}': kept frame of scene 'triangle' at offset ")
    assert trace.budget.left == left


def test_frames_held_together_count_together(tmp_path: Path) -> None:
    """Each 2048x2048 frame fits the 64 MiB allowance alone; the budget refuses the one that would
    not fit beside those still held, and gives it room once they are dropped."""
    path = write_frames_trace(
        tmp_path / "t.katra", {f"s{i}": zero_frame(f"s{i}", 2048) for i in range(4)}
    )
    trace = open_trace(path)
    frames = list(trace.kept_frames.values())
    held = []
    with pytest.raises(TraceTooLargeError):
        for frame in frames:
            held.append(kept.frame_pixels(frame))
    assert 1 <= len(held) < len(frames)
    held.clear()
    assert kept.frame_pixels(frames[-1]).shape == (2048, 2048, 4)


def test_image_blocks_of_another_codec_are_refused(zstd_packed: Path) -> None:
    trace = _open(zstd_packed)
    assert trace.truncated and trace.kept_frames == {}
    assert "corrupt IMAGE block" in trace.stop_reason and "codec 1" in trace.stop_reason
    assert trace.status == "incomplete" and len(trace.events) > 0  # the events before it are kept
    with pytest.raises(TraceFormatError, match="codec 1; kept frames are stored with codec 0"):
        open_trace(zstd_packed, strict=True)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_frame_names_its_file(tmp_path: Path, damage: str) -> None:
    path = write_frames_trace(tmp_path / "d.katra", {"s": DAMAGES[damage](picture_frame("s"))})
    trace = open_trace(path)  # the trace itself is intact: only the frame's content is wrong
    assert not trace.truncated
    frame = trace.kept_frames["s"]
    with pytest.raises(kept.KeptFrameError) as caught:
        kept.frame_pixels(frame)
    message = str(caught.value)
    assert message.startswith(f"'{path}': kept frame of scene 's' at offset {frame.offset}: ")
    assert "BytesIO" not in message and "\n" not in message
    # all but the checksum show in the PNG's chunks
    assert (frame.damage != "") == (damage != "wrong-sha256")


# --------------------------------------------------------------------------- one open per trace


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The .katra paths opened for reading in this process, by os.open (the reader's door) or
    open().
    """
    seen: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".katra") and not flags & (os.O_WRONLY | os.O_RDWR):
            seen.append(str(path))
        return real_os_open(path, flags, *args, **kwargs)

    def py_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and str(file).endswith(".katra") and "r" in mode:
            seen.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", py_open)
    yield seen


def test_compare_and_report_open_each_trace_once(
    tmp_path: Path, opens: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_frames_trace(
        tmp_path / "a.katra", {"fill": picture_frame("fill", 1), "mesh": picture_frame("mesh", 2)}
    )
    b = write_frames_trace(
        tmp_path / "b.katra",
        {"fill": picture_frame("fill", 1), "mesh": picture_frame("mesh", 3)},
        seed=2,
    )
    opens.clear()
    code, out, _ = katra_main(
        capsys, "compare", str(a), str(b), "--image-diff", str(tmp_path / "diff")
    )
    assert code in (0, 1)
    assert "mesh  image changed" in out
    assert sorted(opens) == sorted([str(a), str(b)])
    opens.clear()
    code, _, _ = katra_main(
        capsys, "report", str(b), "--baseline", str(a), "-o", str(tmp_path / "r.html")
    )
    assert code == 0
    assert sorted(opens) == sorted([str(a), str(b)])


# --------------------------------------------------------------------------- the verdict


def test_flip_has_a_pixel_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over FLIP_MAX_PIXELS the verdict rests on the checksums and says why; FLIP never runs."""

    def no_flip(*_: Any) -> np.ndarray:
        raise AssertionError("FLIP ran on a frame over its cap")

    monkeypatch.setattr(image_rule, "flip_errors", no_flip)
    monkeypatch.setattr(image_rule, "flip_error_map", no_flip)
    base = np.zeros((2048, 2049, 4), np.uint8)  # one column over the cap
    assert image_rule.FLIP_MAX_PIXELS == 2048 * 2048
    new = base.copy()
    new[0, 0, 0] = 1
    v = image_verdict(ImageRef(image_checksum(base), base), ImageRef(image_checksum(new), new))
    assert v.verdict == "changed" and v.checksum_only and v.is_regression
    assert (
        v.reason
        == "checksums differ (2049x2048 is over FLIP's cap of 4194304 pixels: no tolerance "
        "measured)"
    )
    assert set(image_rule.diff_pngs(base, new)) == {"base", "new"}  # no error map either


def test_a_side_with_an_undamaged_frame_is_preferred(tmp_path: Path) -> None:
    bad = write_frames_trace(tmp_path / "bad.katra", {"s": DAMAGES["not-png"](picture_frame("s"))})
    good = write_frames_trace(tmp_path / "good.katra", {"s": picture_frame("s")})
    side = side_images([open_trace(bad), open_trace(good)])
    assert side["s"].damage == ""  # type: ignore[union-attr]


# --------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_kept_frame_leaves_the_timing_verdict_standing(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_frames_trace(
        tmp_path / "good.katra", {"s": picture_frame("s"), "t": picture_frame("t", 5)}
    )
    bad = write_frames_trace(
        tmp_path / "bad.katra",
        {"s": DAMAGES[damage](picture_frame("s")), "t": picture_frame("t", 5)},
        seed=2,
    )
    rc, out, err = katra_main(capsys, "compare", str(good), str(bad))
    assert rc == 0, out + err
    line = next(ln for ln in out.splitlines() if ln.startswith("s ") and "image" in ln)
    assert f"image incomparable: damaged: '{bad}': kept frame of scene 's' at offset " in line
    assert "images (gate): 1 incomparable, 1 identical" in out  # the other scene is judged
    assert "BytesIO" not in out + err and "Traceback" not in err
    rc, out, err = katra_main(capsys, "compare", str(good), str(bad), "--format", "json")
    result = json.loads(out)
    assert (
        rc == 0 and result["exit_code"] == 0 and result["images"]["s"]["verdict"] == "incomparable"
    )
    # every scene's timing verdict stands
    timing = {name: s["verdict"] for name, s in result["scenes"].items()}
    assert sorted(timing) == ["s", "t"] and "incomparable" not in timing.values()
    rc, out, err = katra_main(
        capsys, "report", str(bad), "--baseline", str(good), "-o", str(tmp_path / "r.html")
    )
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "damaged: &#x27;" in page and "BytesIO" not in page
    rc, out, err = katra_main(capsys, "validate", str(bad))
    assert rc == 2 and err.count("\n") == 1 and f"'{bad}': kept frame of scene 's'" in err
    rc, out, _ = katra_main(capsys, "info", "--json", str(bad))
    images = {i["scene"]: i for i in json.loads(out)["images"]}
    assert rc == 0 and sorted(images) == ["s", "t"] and images["t"]["damage"] is None
    # what only decoding finds is validate's to say; info decodes nothing
    if damage != "wrong-sha256":
        assert images["s"]["damage"]
        rc, out, _ = katra_main(capsys, "info", str(bad))
        assert "DAMAGED:" in out


#: A child process runs one command on the small trace (its baseline: imports and caches), then on a
#: crafted trace, and prints the exit code and peak RSS (ru_maxrss, a high-water mark) after each.
#: One child per command, so that no command's peak hides another's.
CHILD = r"""
import contextlib, io, json, resource, sys
from katra3d.harness.cli import main
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps({"argv": argv, "rc": rc, "peak": peak, "err": err.getvalue()[-400:]}),
        flush=True,
    )
"""

COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "validate": lambda t, d: ["validate", str(t)],
    "info": lambda t, d: ["info", str(t)],
    "info --json": lambda t, d: ["info", "--json", str(t)],
    "compare --image-diff": lambda t, d: [
        "compare",
        str(t),
        str(t),
        "--image-diff",
        str(d / "diff"),
    ],
    "report": lambda t, d: ["report", str(t), "--baseline", str(t), "-o", str(d / "r.html")],
}


@pytest.mark.slow
@pytest.mark.parametrize("crafted", ["one-8192", "24x4096", "zstd-6x8192"])
def test_crafted_frames_keep_every_command_within_the_reading_budget(
    big: dict[str, Path], crafted: str, tmp_path: Path
) -> None:
    """Through info, info --json, validate, compare --image-diff and report, none of these traces
    takes a command past 10 x its size + 64 MiB over the same command on a small trace (decoded
    whole they take 0.8 to 3.6 GB), and each ends with an exit code and a line for what it could
    not decode."""
    allowed = 10 * big[crafted].stat().st_size + 64 * MIB
    problems = []
    codes = {}
    for name, argv in COMMANDS.items():
        runs = []
        for trace in (big["small"], big[crafted]):
            scratch = tmp_path / f"{len(codes)}-{len(runs)}"
            scratch.mkdir()
            runs.append(argv(trace, scratch))
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(runs)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        baseline, hostile = (json.loads(line) for line in proc.stdout.splitlines())
        growth = hostile["peak"] - baseline["peak"]
        if growth > allowed:
            problems.append(
                f"{name}: peak RSS +{growth / MIB:.0f} MiB, allowed {allowed / MIB:.0f} MiB"
            )
        if hostile["rc"] not in (0, 1, 2) or "Traceback" in hostile["err"]:
            problems.append(f"{name}: exit {hostile['rc']}: {hostile['err']}")
        codes[name] = hostile["rc"]
    assert not problems, "\n".join(problems)
    assert codes == {
        "validate": 2,
        "info": 0,
        "info --json": 0,
        "compare --image-diff": 0,
        "report": 0,
    }
