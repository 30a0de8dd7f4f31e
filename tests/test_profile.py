"""Instruction profiles: callgrind dumps read into functions and groups (real callgrind output of a
small Python program), bounded rows, and the PROFILE block through a trace and a join."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from katra_trace.io.concat import Concatenation
from katra_trace.io.reader import open_trace
from katra_trace.profile.callgrind import (
    KEPT_DIR,
    MIN_ROWS,
    Folder,
    bounded_rows,
    kept_dump,
    read_dump,
    write_index,
)
from katra_trace.profile.groups import GROUPS, JIT, JIT_OBJECT, LIBC, MESA, NUMPY, PYTHON, group_of
from katra_trace.profile.model import (
    REST,
    Profile,
    ProfileRecord,
    profile_delta,
    trace_profiles,
)

PROGRAM = """
import os, numpy as np
def steps(n):
    s = 0
    for i in range(n):
        s += i
    return s
np.ones(10).sum()
os.getppid()
steps(STEPS); np.arange(NUMS).sum()
os.getppid()
"""


def _dump(tmp_path: Path, steps: int, nums: int) -> Path:
    """Part 2 of callgrind's dumps of :data:`PROGRAM`: the work between its two getppid calls."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    out = tmp_path / f"cg-{steps}-{nums}"
    code = PROGRAM.replace("STEPS", str(steps)).replace("NUMS", str(nums))
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "-q",
            "--dump-before=getppid",
            "--dump-instr=no",
            "--dump-line=yes",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            code,
        ],
        check=True,
        timeout=300,
    )
    return out.with_name(out.name + ".2")


def _summary(path: Path) -> int:
    line = next(x for x in path.read_text().splitlines() if x.startswith("summary:"))
    return int(line.split()[1])


@pytest.mark.slow  # runs a Python program under callgrind
def test_a_real_dump_adds_up_and_groups_python_and_numpy(tmp_path: Path) -> None:
    small, large = _dump(tmp_path, 1000, 1000), _dump(tmp_path, 21000, 401000)
    a, b = read_dump(small), read_dump(large)
    # every instruction is some function's own: self costs add up to the dump's summary
    assert sum(v[0] for v in a.values()) == _summary(small)
    assert sum(v[0] for v in b.values()) == _summary(large)
    # the interpreter loop holds nearly everything below it
    ev = [v for (obj, fn), v in b.items() if fn == "_PyEval_EvalFrameDefault"]
    assert ev and ev[0][1] > 0.9 * _summary(large) and ev[0][0] < ev[0][1]
    groups: dict[str, int] = {}
    base = {k: v[0] for k, v in a.items()}
    for (obj, fn), (own, _) in b.items():
        g = group_of(obj)
        groups[g] = groups.get(g, 0) + own - base.get((obj, fn), 0)
    added = _summary(large) - _summary(small)
    assert groups[PYTHON] > 0.5 * added and groups[NUMPY] > 0.1 * added
    assert groups[PYTHON] + groups[NUMPY] > 0.95 * added


def test_groups_place_each_object_once() -> None:
    assert group_of(JIT_OBJECT) == JIT
    assert group_of("/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so") == MESA
    assert group_of("/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1") == "LLVM"
    assert group_of("/usr/lib/x86_64-linux-gnu/libc.so.6") == LIBC
    assert group_of("/x/lib/libpython3.11.so.1.0") == PYTHON
    assert group_of("/x/site-packages/numpy/_core/_multiarray_umath.cpython-311.so") == NUMPY
    assert group_of("/x/site-packages/moderngl/mgl.cpython-311-x86_64-linux-gnu.so") == "moderngl"
    assert group_of("/opt/thing/libfoo.so") == "other"
    assert set(GROUPS) >= {group_of(p) for p in ("a", JIT_OBJECT, "/libc.so.6")}


def test_rows_are_bounded_and_each_objects_rest_is_one_row() -> None:
    costs = {("/l/libc.so.6", f"f{i:03}"): [1, 1] for i in range(500)}
    costs[("/l/libc.so.6", "big")] = [100_000, 100_050]
    rows = bounded_rows(costs)
    assert rows[0] == ("/l/libc.so.6", "big", 100_000, 100_050)
    assert len(rows) == MIN_ROWS + 1 and rows[-1] == ("/l/libc.so.6", REST, 401, 401)
    assert sum(r[2] for r in rows) == 100_500


def test_the_profile_block_survives_a_trace_and_a_join(tmp_path: Path) -> None:
    from tests.trace_helpers import wall_frames, write_trace

    events, strings = wall_frames(["s"], 3)
    part = tmp_path / "part.katra"
    write_trace(part, events, strings)
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    (dump_dir / KEPT_DIR).mkdir()
    kept_dump(dump_dir, 2, []).write_text(
        "events: Ir\nsummary: 30\nob=(1) /l/libc.so.6\nfn=(1) memcpy\n0 10\n"
        "ob=(2) ???\nfn=(2) 0x1000\n0 5\ncob=(1)\ncfn=(1)\ncalls=1 0\n0 7\n"
    )
    kept_dump(dump_dir, 3, [7]).write_text("events: Ir\nob=(1) /l/libc.so.6\nfn=(1) memcpy\n0 20\n")
    folder = Folder(dump_dir)
    folder.fold()  # as the parent does while the child runs: each dump read once, then deleted
    assert not list((dump_dir / KEPT_DIR).iterdir())
    write_index(dump_dir, 1, {7: "pass", 8: "unused"})
    records = folder.records("s")
    joined = tmp_path / "joined.katra"
    with open(joined, "wb") as dst:
        out = Concatenation(dst, open_trace(part).header.as_dict())
        out.add(open_trace(part), 0, profiles=records)
        out.finish("complete", {})
    profiles = trace_profiles(open_trace(joined, strict=True).profiles)
    scene, zone = profiles[("s", None)], profiles[("s", "pass")]
    assert [(r.group, r.function, r.self_, r.inclusive) for r in scene.rows] == [
        (LIBC, "memcpy", 30, 30),
        (JIT, "(compiled code)", 5, 12),
    ]
    assert set(profiles) == {("s", None), ("s", "pass")}
    assert [(r.function, r.self_) for r in zone.rows] == [("memcpy", 20)]
    assert all(r.delta == 0 for r in profile_delta(scene, scene))


def test_a_foreign_profile_block_is_left_out() -> None:
    good = ProfileRecord("s", None, 2, (("/l/libc.so.6", "f", 4, 4),)).as_json()
    bad = [{"scene": "s", "rows": [[1]]}, {"x": 1}, [1]]
    assert trace_profiles([good, *bad]).keys() == {("s", None)}


def test_a_change_is_split_by_function_and_group_and_drawn() -> None:
    from katra3d.harness.cli._profile import attach
    from katra_trace.profile.diff import ProfileDelta
    from katra_trace.profile.flame import flame_svg
    from katra_trace.report.profile import profile_section

    base = parse(["/l/libc.so.6", "memcpy", 40, 40], [JIT_OBJECT, "(compiled code)", 60, 60])
    new = parse(["/l/libc.so.6", "memcpy", 30, 30], [JIT_OBJECT, "(compiled code)", 110, 110])
    rows = profile_delta(base, new)
    assert [(r.group, r.delta) for r in rows] == [(JIT, 25.0), (LIBC, -5.0)]  # a frame: 2 frames
    d = ProfileDelta("s", None, base.instructions, new.instructions, tuple(rows))
    assert d.delta == 20 and d.share(rows[0]) == 1.25 and d.groups() == {JIT: 25.0, LIBC: -5.0}
    assert "shader code (JIT)" in (d.summary() or "")
    out = {"scenes": {"s": {"verdict": "regression"}}}
    attach(out, [d])
    assert out["scenes"]["s"]["profile_delta"][0] == {
        "group": JIT,
        "object": JIT_OBJECT,
        "function": "(compiled code)",
        "base": 30.0,
        "new": 55.0,
        "delta": 25.0,
    }
    svg = flame_svg(d)
    assert svg.startswith("<svg") and "rgb(235,60,60)" in svg  # the largest growth, full red
    html = profile_section([d])
    assert "memcpy" in html and "<svg" in html
    same = ProfileDelta("s", None, 1, 1, tuple(profile_delta(base, base)))
    assert profile_section([same]) == ""


def parse(*rows: list[object]) -> Profile:
    record = ProfileRecord("s", None, 2, tuple(tuple(r) for r in rows))  # type: ignore[misc]
    return trace_profiles([record.as_json()])[("s", None)]
