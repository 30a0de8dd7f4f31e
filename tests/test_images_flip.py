"""FLIP runs once a pair of frames (katra_trace/analysis/flip.py): the verdict keeps its errors as
the colour map's levels and the error map of ``compare --image-diff`` and the report is drawn from
them, with FLIP's own colours (learnt from FLIP at run time), equal to FLIP's own magma pass byte
for byte."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from katra_trace.analysis import flip as flip_rule
from katra_trace.analysis import images as image_rule
from katra_trace.analysis.flip import LEVELS, flip_error_map, levels_picture, magma_colours
from katra_trace.analysis.images import ImageRef, image_verdict
from katra_trace.io.images import image_checksum, load_png
from tests.cli_helpers import katra_main
from tests.test_images import nudged, picture, recoloured, write_capture

pytest.importorskip("flip_evaluator")


def flips_own_map(base: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The error map as FLIP colours it itself (``applyMagma=True``), tile by tile, as picture
    bytes.
    """
    return flip_rule._picture_bytes(flip_rule._flip_tiles(base, new, magma=True))


def pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pairs whose errors spread over many levels: a colour moved everywhere, three pixels a level
    off, and noise against other noise (FLIP's full range) over two tiles' width (600 pixels: a
    seam)."""
    base = picture()
    rng = np.random.default_rng(7)
    noise = rng.integers(0, 256, size=(40, 600, 4), dtype=np.uint8)
    blend = noise.copy()
    blend[:, :, :3] = noise[:, :, :3] // 2 + rng.integers(0, 128, size=(40, 600, 3), dtype=np.uint8)
    return {
        "recoloured": (base, recoloured(base)),
        "nudged": (base, nudged(base)),
        "noise": (noise, blend),
    }


def test_the_learnt_colours_are_flips_own() -> None:
    table = magma_colours()
    assert table is not None and table.shape == (LEVELS, 3) and table.dtype == np.uint8
    assert tuple(table[0]) != tuple(table[-1])  # black to yellow
    for name, (base, new) in pairs().items():
        own = flips_own_map(base, new)
        assert np.array_equal(flip_error_map(base, new), own), name
        v = image_verdict(ImageRef(image_checksum(base), base), ImageRef(image_checksum(new), new))
        assert v.error_levels is not None and v.error_levels.dtype == np.uint8, name
        kept = levels_picture(v.error_levels)
        assert kept is not None and np.array_equal(kept, own), name
    # a wide test
    assert len(np.unique(flip_rule.flip_levels(flip_rule.flip_errors(*pairs()["noise"])))) > 100


def test_a_colour_map_that_cannot_be_learnt_takes_flips_own_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A FLIP whose colours the table cannot hold: the verdict keeps no levels and the picture is
    FLIP's own.
    """
    monkeypatch.setattr(flip_rule, "magma_colours", lambda: None)
    monkeypatch.setattr(image_rule, "magma_colours", lambda: None)
    base, new = pairs()["recoloured"]
    v = image_verdict(ImageRef(image_checksum(base), base), ImageRef(image_checksum(new), new))
    assert v.verdict == "changed" and v.error_levels is None
    assert np.array_equal(flip_error_map(base, new), flips_own_map(base, new))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, ...]]:
    """Every FLIP evaluation from now on, by the shape of its input (the
    colours are learnt first)."""
    import flip_evaluator

    magma_colours()  # learnt once a process, on a pair of another shape; not counted
    calls: Counter[tuple[int, ...]] = Counter()
    evaluate = flip_evaluator.evaluate

    def counting(reference: np.ndarray, test: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        calls[reference.shape] += 1
        return evaluate(reference, test, *args, **kwargs)

    monkeypatch.setattr(flip_evaluator, "evaluate", counting)
    return calls


def test_compare_image_diff_and_the_report_run_flip_once_a_scene(
    tmp_path: Path, counted: Counter[tuple[int, ...]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, FLIP ran twice on each measured scene: once for the verdict,
    once for the error map."""
    frames = {"fill": picture(), "mesh": picture()[::-1].copy()}
    new_frames = {"fill": nudged(frames["fill"]), "mesh": recoloured(frames["mesh"])}
    base = write_capture(tmp_path / "base.katra", frames, seed=1)
    new = write_capture(tmp_path / "new.katra", new_frames, seed=2)
    out = tmp_path / "diff"
    code, stdout, stderr = katra_main(
        capsys, "compare", str(base), str(new), "--image-diff", str(out)
    )
    assert code == 1, stdout + stderr
    assert "image within tolerance" in stdout and "image changed" in stdout
    assert counted == Counter({(64, 96, 3): 2}), counted  # one tile a scene, once
    for scene in frames:
        assert np.array_equal(
            load_png(out / f"{scene}.flip.png"), flips_own_map(frames[scene], new_frames[scene])
        )
    counted.clear()
    code, _, stderr = katra_main(
        capsys, "report", str(new), "--baseline", str(base), "-o", str(tmp_path / "r.html")
    )
    assert code == 0, stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8").count('data-kind="flip"') == 2
    assert counted == Counter({(64, 96, 3): 2}), counted
