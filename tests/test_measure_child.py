"""The counted child of ``--measure instructions`` receives its plan as data and hands its results
back as data.

Pure tests: every field of RunConfig and RunPlan survives the trip through args.json (so a new run
option reaches the child without katra3d.harness.run.protocol knowing its name), and so does every
field of the child's results. One real counted run (valgrind, 16x16, 2 frames): its header records
the same capture options as a time run with the same options, the user's -o among them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from katra3d.harness.engine.results import RunResult, SceneResult
from katra3d.harness.run import measure, protocol, valgrind
from katra3d.harness.run.config import RunConfig, RunPlan, SceneEntry, plan_run
from katra3d.harness.run.parts import RunStrings
from katra3d.harness.run.protocol import ChildOrder, ChildResult, decode, encode
from katra3d.harness.run.valgrind import Counting
from katra3d.scenes.builtin.clear import ClearScene
from katra3d.scenes.builtin.triangle import TriangleScene
from katra_trace import open_trace
from katra_trace.errors import ConfigError

HAVE_VALGRIND = shutil.which("valgrind") is not None

#: The capture options a counted run records differently from a time run (on purpose).
COUNT_ONLY_OPTIONS = {"measure", "timing_mode", "timing_reason", "primary_clock"}

TINY_SCENE = """
from katra3d.scenes.builtin.clear import ClearScene


class Tiny(ClearScene):
    name = "tiny"
"""


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _full_plan() -> RunPlan:
    """A plan with every field of RunConfig and RunPlan set to something other than its default."""
    config = RunConfig(
        scenes=("clear", "sub/tiny.py:Tiny"),
        suite="ci",
        frames=7,
        duration_s=2.5,
        warmup=2,
        size=(48, 32),
        samples=4,
        backend="egl",
        device=1,
        timing="sync",
        zones="draws",
        seed=9,
        params=(("clear", "bands", "3"), ("triangle", "speed", 0.5)),
        output="out/x.katra",
        notes="a note, with ünïcode",
        screenshot_dir="shots",
        measure="instructions",
        reference_every=3,
        force=True,
        max_draw_zones=5,
        codec="none",
        keep_image=False,
        expect_images="refs",
        update_images=True,
        shard="1/2",
        jobs=2,
    )
    entries = (
        SceneEntry("clear", "clear", ClearScene, {"bands": 3}),
        SceneEntry("triangle", "triangle", TriangleScene, {"speed": 0.5}),
        SceneEntry("clear#2", "sub/tiny.py:Tiny", ClearScene, {"bands": 4}, 5),
    )
    return RunPlan(
        config,
        entries,
        frames=7,
        duration_s=2.5,
        warmup=2,
        size=(48, 32),
        output=Path("out/x.katra"),
        screenshot_dir=Path("/abs/shots"),
        workload="ci+clear+sub/tiny.py:Tiny",
        keep_images=True,
        expect_images=Path("refs"),
        counting=Counting("instructions", "/opt/bin/valgrind", "3.99.0"),
        jobs=2,
        zones="draws",
        reference_every=2,
    )


def _classes(spec: str) -> type:
    return {"clear": ClearScene, "triangle": TriangleScene, "sub/tiny.py:Tiny": ClearScene}[spec]


def _through_json(plan: RunPlan) -> RunPlan:
    return decode(RunPlan, json.loads(json.dumps(encode(plan))), _classes)


def test_every_field_of_the_plan_round_trips_through_json() -> None:
    plan = _full_plan()
    # a new option must be set here, so that this test covers it
    for field in dataclasses.fields(RunConfig):
        assert getattr(plan.config, field.name) != _default(field), (
            f"set RunConfig.{field.name} in _full_plan"
        )
    for field in dataclasses.fields(RunPlan):
        assert getattr(plan, field.name), f"set RunPlan.{field.name} in _full_plan"
    data = encode(plan)
    assert set(data) == {f.name for f in dataclasses.fields(RunPlan)}
    assert set(data["config"]) == {f.name for f in dataclasses.fields(RunConfig)}
    assert data["entries"][2] == {
        "label": "clear#2",
        "spec": "sub/tiny.py:Tiny",
        "params": {"bands": 4},
        "position": 5,
        "trace": None,
    }
    again = _through_json(plan)
    assert again == plan
    assert (
        isinstance(again.output, Path)
        and isinstance(again.size, tuple)
        and isinstance(again.config.size, tuple)
    )
    assert again.config.params == (("clear", "bands", "3"), ("triangle", "speed", 0.5))
    assert again.entries[2].cls is ClearScene
    for zones in (True, False, "passes"):  # zones is bool | str: JSON keeps which
        plan_zones = dataclasses.replace(plan, config=dataclasses.replace(plan.config, zones=zones))
        assert _through_json(plan_zones).config.zones == zones
        assert type(_through_json(plan_zones).config.zones) is type(zones)
    bare = dataclasses.replace(
        plan, config=RunConfig(scenes=("clear",)), frames=None, screenshot_dir=None
    )
    assert _through_json(bare) == bare


def test_a_plan_that_is_not_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a katra3d RunPlan"):
        decode(RunPlan, {"config": {"scenes": []}}, _classes)
    data = encode(_full_plan())
    data["size"] = [48, 32, 1]
    with pytest.raises(ConfigError, match="not a katra3d RunPlan"):
        decode(RunPlan, data, _classes)


def test_the_plan_decides_counting_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--measure is decided in plan_run: its options checked, valgrind found (once) and carried by
    the plan; a time run never looks for valgrind."""
    looked: list[int] = []
    monkeypatch.setattr(valgrind, "find_valgrind", lambda: looked.append(1) or ("/opt/vg", "9.9.9"))
    timed = plan_run(RunConfig(scenes=("clear",), output=str(tmp_path / "t.katra")))
    assert timed.counting is None and looked == []
    plan = plan_run(
        RunConfig(scenes=("clear",), measure="cycles", output=str(tmp_path / "c.katra"))
    )
    assert plan.counting == Counting("cycles", "/opt/vg", "9.9.9") and looked == [1]
    assert _through_json(plan).counting == plan.counting
    # the options are checked before valgrind is looked for
    with pytest.raises(ConfigError, match="--warmup >= 1"):
        plan_run(
            RunConfig(
                scenes=("clear",), measure="cycles", warmup=0, output=str(tmp_path / "c.katra")
            )
        )
    assert looked == [1]


def test_the_child_order_round_trips_and_says_what_the_header_records(tmp_path: Path) -> None:
    # built-in scenes, found by name
    plan = dataclasses.replace(_full_plan(), entries=_full_plan().entries[:2])
    order = ChildOrder(
        plan,
        tmp_path,
        ("valgrind", "--tool=callgrind"),
        True,
        {"a.py:A": "/abs/a.py:A"},
        ("/opt/lib",),
    )
    protocol.write_order(order)
    import_path = list(sys.path)
    try:
        again = protocol.read_order(tmp_path)
        assert sys.path[0] == "/opt/lib"
    finally:
        sys.path[:] = import_path
    assert again == order
    facts = again.measure_options().as_dict()
    assert list(facts) == [
        "mode",
        "valgrind",
        "command",
        "env",
        "frame_boundary",
        "pinned",
        "output",
    ]
    assert (facts["mode"], facts["valgrind"], facts["command"]) == (
        "instructions",
        "3.99.0",
        ["valgrind", "--tool=callgrind"],
    )
    assert (
        facts["frame_boundary"] == measure.frame_boundary(True)
        and facts["env"] == measure.PINNED_ENV
    )
    assert facts["output"] == str(plan.output)
    # what a child is told: the user's strings as stand-ins of one length, the rest of the plan
    child = protocol.child_plan(plan)
    assert (str(child.output), child.config.output, child.config.notes) == (
        protocol.STAND_INS.output,
        protocol.STAND_INS.requested,
        protocol.STAND_INS.notes,
    )
    assert (
        dataclasses.replace(
            child, config=plan.config, output=plan.output, screenshot_dir=plan.screenshot_dir
        )
        == plan
    )
    assert protocol.run_strings(plan) == RunStrings(
        str(plan.output), plan.config.output, plan.config.notes
    )
    assert again.dump_base == tmp_path / "cg.out" and again.trace == tmp_path / "trace.katra"
    (tmp_path / "args.json").write_text(json.dumps({"plan": {}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a katra3d ChildOrder"):
        protocol.read_order(tmp_path)
    protocol.write_order(dataclasses.replace(order, plan=dataclasses.replace(plan, counting=None)))
    with pytest.raises(ConfigError, match="does not count"):
        protocol.read_order(tmp_path)
    # a message of another protocol version, or another type, is refused whole
    envelope = json.loads((tmp_path / "args.json").read_text(encoding="utf-8"))
    for changed in ({"katra3d_protocol": protocol.VERSION + 1}, {"type": "ChildResult"}):
        (tmp_path / "args.json").write_text(json.dumps({**envelope, **changed}), encoding="utf-8")
        with pytest.raises(ConfigError, match="parent and child must be one version"):
            protocol.read_order(tmp_path)


def test_file_scenes_are_imported_from_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    plan = _full_plan()
    imports, path = measure.scene_imports(plan)
    assert imports == {"sub/tiny.py:Tiny": f"{tmp_path}/sub/tiny.py:Tiny"} and path == []
    module_scene = SceneEntry("m", "mypkg.scenes:Mine", ClearScene, {})
    _, path = measure.scene_imports(
        dataclasses.replace(plan, entries=(*plan.entries, module_scene))
    )
    # a package.module:Class spec needs this directory on the child's import path
    assert path == [str(tmp_path)]
    # the user's PYTHONPATH reaches the child's import path (made absolute: the child runs
    # elsewhere), not its environment, whose length moves the counts
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([".", "/opt/lib"]))
    _, path = measure.scene_imports(plan)
    assert path == [str(tmp_path), "/opt/lib"] and "PYTHONPATH" not in measure.child_env(tmp_path)


def test_child_results_round_trip_through_json(tmp_path: Path) -> None:
    scenes = [
        SceneResult(
            "clear",
            "ok",
            frames=2,
            warmup=1,
            setup_ms=1.5,
            clock="instructions",
            stats={"n": 2, "median": 123456.0, "min": 123000.0, "max": 124000.0, "spread_pct": 0.8},
            checksum="abc",
            reason="why",
            pixels=None,
            params={"bands": 3},
        ),
        SceneResult("tiny", "skipped", reason="needs GL 4.6"),
    ]
    result = RunResult(
        Path("x.katra"), "interrupted", "instructions", "counted", scenes, "SIGTERM", size=(16, 16)
    )
    protocol.hand_back(tmp_path, ChildResult(result))
    data = json.loads((tmp_path / measure.RESULTS_FILE).read_text(encoding="utf-8"))
    assert all("pixels" not in s for s in data["body"]["run"]["scenes"])
    assert protocol.handed_back(tmp_path) == ChildResult(result)
    failed = ChildResult(error="scene 'x' failed", exit_code=2, traceback="tb")
    protocol.hand_back(tmp_path, failed)
    assert protocol.handed_back(tmp_path) == failed and failed.failed
    (tmp_path / measure.RESULTS_FILE).write_text("{", encoding="utf-8")  # a child killed mid-write
    assert protocol.handed_back(tmp_path) is None


def _run(katra_cli: Any, *args: str) -> dict[str, Any]:
    res = katra_cli("run", *args, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""  # --quiet: the counted child is quiet too
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.mark.gl
@pytest.mark.slow
def test_counted_run_records_the_options_of_a_time_run(katra_cli: Any, tmp_path: Path) -> None:
    """One counted run and one time run with the same options: the same capture options in the
    header (but for what counting changes), the user's relative -o, and the child's results handed
    back."""
    if not HAVE_VALGRIND:
        pytest.skip("valgrind is not installed (ci/system-deps.sh test installs it)")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "tiny.py").write_text(TINY_SCENE)
    (tmp_path / "traces").mkdir()
    args = [
        "clear",
        "sub/tiny.py:Tiny",
        "--frames",
        "2",
        "--warmup",
        "1",
        "--size",
        "16x16",
        "--samples",
        "2",
        "--timing",
        "sync",
        "--backend",
        "egl",
        "--seed",
        "7",
        "--param",
        "clear.bands=3",
        "--param",
        "tiny.bands=2",
        "--note",
        "same options",
        "--zones",
        "draws",
        "--max-draw-zones",
        "8",
        "--codec",
        "none",
        "--reference-every",
        "2",
        "--screenshot",
        "shots",
        "-o",
        "traces/run.katra",
        "--force",
        "--json",
        "--quiet",
    ]
    timed = _run(katra_cli, *args)
    time_options = open_trace(tmp_path / "traces" / "run.katra").header.as_dict()["capture_options"]
    shutil.rmtree(tmp_path / "shots")
    # replaces the time run's trace (--force)
    counted = _run(katra_cli, *args, "--measure", "instructions")
    trace = open_trace(tmp_path / "traces" / "run.katra")
    options = trace.header.as_dict()["capture_options"]

    assert (
        options["output"] == "traces/run.katra"
        and options["resolved"]["output"] == "traces/run.katra"
    )
    assert options["measure"]["mode"] == "instructions" and time_options["measure"] == {
        "mode": "time"
    }
    assert options["resolved"]["scenes"][1]["spec"] == "sub/tiny.py:Tiny"  # as the user gave it
    assert {k: v for k, v in options.items() if k not in COUNT_ONLY_OPTIONS} == {
        k: v for k, v in time_options.items() if k not in COUNT_ONLY_OPTIONS
    }
    assert set(options) == set(time_options)
    assert sorted(p.name for p in (tmp_path / "shots").iterdir()) == ["clear.png", "tiny.png"]

    # the child's per-scene results, handed back as data: what the parent prints
    assert counted["trace"] == "traces/run.katra" and counted["status"] == "complete"
    assert counted["timing_mode"] == "instructions" and timed["timing_mode"] == "sync"
    rows = {row["scene"]: row for row in counted["scenes"]}
    assert set(rows) == {"clear", "tiny"}
    for label, bands in (("clear", 3), ("tiny", 2)):
        assert rows[label]["status"] == "ok" and rows[label]["frames"] == 2
        assert rows[label]["clock"] == "instructions" and rows[label]["params"] == {"bands": bands}
        assert rows[label]["median"] > 10_000  # a real frame of work
    summary = {row["scene"]: row for row in trace.summary.user["scenes"]}
    assert summary["clear"]["median"] == rows["clear"]["median"]
    assert not os.environ.get(measure.CHILD_ENV)


def test_a_run_reports_its_result_only_where_asked_and_never_over_a_file_of_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = ChildResult(error="unknown scene 'x'", exit_code=2)
    monkeypatch.delenv(protocol.RESULT_ENV, raising=False)
    protocol.report_run(result)  # not asked: nothing written anywhere
    theirs = tmp_path / "notes.txt"
    theirs.write_text("the user's file\n")
    monkeypatch.setenv(protocol.RESULT_ENV, str(theirs))
    protocol.report_run(result)
    assert theirs.read_text() == "the user's file\n"
    asked = tmp_path / "result.json"
    monkeypatch.setenv(protocol.RESULT_ENV, str(asked))
    protocol.report_run(result)
    assert protocol.handed_result(asked) == result
    protocol.report_run(ChildResult(error="a later run", exit_code=3))  # the last run wins
    assert protocol.handed_result(asked) == ChildResult(error="a later run", exit_code=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "result.json"]
