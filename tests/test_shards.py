"""Shards: ``run --shard I/N`` runs a cost-balanced share of a run, ``merge``
joins the shards into one trace that compare, report and history take, and the ci/ examples run what
docs/ci.md runs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from katra3d.scenes.suites import SUITES, scene_cost, shard_indices
from katra_trace.analysis.compare import compare_traces
from katra_trace.errors import ConfigError
from katra_trace.history.rows import RunFacts, trace_rows
from katra_trace.io.format import FORMAT_MAJOR, FORMAT_MINOR
from katra_trace.io.images import frame_record
from katra_trace.io.merge import merge_shards, parse_shard
from katra_trace.io.reader import open_trace
from tests.cli_helpers import katra, katra_main
from tests.docs_commands import REPO, blocks
from tests.trace_helpers import copy_with_header, wall_frames, write_trace

KEY = {
    "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)",
    "mesa": "22.3.6",
    "llvm": "15.0.6",
    "vector_bits": "256",
}


# --- the split
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_shards_cover_every_scene_once_and_balance(suite: str) -> None:
    s = SUITES[suite]
    costs = [scene_cost(name, params, s.size, s.frames + s.warmup) for name, params in s.entries]
    for n in range(1, len(costs) + 1):
        shares = [shard_indices(costs, i, n) for i in range(1, n + 1)]
        assert sorted(p for share in shares for p in share) == list(range(len(costs)))
        assert all(share and list(share) == sorted(share) for share in shares)  # run order kept
        loads = [sum(costs[p] for p in share) for share in shares]
        assert max(loads) - min(loads) <= max(costs)  # longest first: no share is a scene too heavy
        assert shares == [shard_indices(costs, i, n) for i in range(1, n + 1)]  # deterministic
    with pytest.raises(ConfigError, match=rf"this run has {len(costs)} scene\(s\), so at most"):
        shard_indices(costs, 1, len(costs) + 1)


def test_scene_cost_is_an_estimate_from_params_and_size() -> None:
    small = scene_cost("fillrate", {"layers": 4}, (320, 180), 65)
    assert scene_cost("fillrate", {"layers": 8}, (320, 180), 65) > small
    assert scene_cost("fillrate", {"layers": 4}, (1280, 720), 65) > small
    assert scene_cost("fillrate", {"layers": 4}, (320, 180), 130) > small
    assert scene_cost("instancing", {"count": 10000}, (320, 180), 65) > scene_cost(
        "triangle", {}, (320, 180), 65
    )
    assert scene_cost("my.py:Mine", {}, (320, 180), 65) == scene_cost("other", {"x": 1}, (9, 9), 65)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0/2", "I must be in 1..2"),
        ("3/2", "I must be in 1..2"),
        ("1/0", "N must be in 1..1000"),
        ("a/b", "expected I/N"),
        ("2", "expected I/N"),
        ("-1/2", "expected I/N"),
    ],
)
def test_bad_shard_values(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_shard(text)
    assert parse_shard(" 2 / 3 ") == (2, 3)


# --- merge, on written traces (no GL)
# ---------------------------------------------------------------------


def _shard(
    path: Path,
    shard: str,
    scenes: list[str],
    *,
    suite: str = "ci",
    seed: int = 0,
    renderer: str = KEY["renderer"],
    positions: list[int] | None = None,
) -> Path:
    events, strings = wall_frames(scenes, 20, seed=len(scenes) + seed)
    rng = np.random.default_rng(7)
    images = [
        frame_record(s, 21, 21 / 60, rng.integers(0, 255, (4, 6, 4), dtype=np.uint8), KEY)
        for s in scenes
    ]
    options = {
        "suite": suite,
        "scenes": [],
        "seed": seed,
        "shard": shard,
        "output": str(path),
        "size": [32, 32],
        "timing_mode": "sync",
        "resolved": {
            "scenes": [
                {"label": s, "spec": s, "params": {}}
                | ({} if positions is None else {"position": positions[k]})
                for k, s in enumerate(scenes)
            ],
            "output": str(path),
            "size": [32, 32],
        },
    }
    host = {
        "gl": {"renderer": renderer, "software_renderer": True},
        "system": {"cpu_model": "test cpu"},
    }
    write_trace(
        path,
        events,
        strings,
        header={"workload": suite, "capture_options": options, "host_info": host},
        summary={"scenes": [{"scene": s} for s in scenes]},
        images=images,
        annotations=[
            {"type": "reference", "steps": 8},
            *({"type": "scene", "scene": s} for s in scenes),
        ],
    )
    return path


def _trace_shard(path: Path, shard: str, scenes: list[str], api: str = "glx") -> Path:
    """A shard of ``katra3d run app.trace other.trace --shard I/N``: its traces in ``replay``, its
    workload its scenes' (plan_run names a scene run by the shard's scenes)."""

    def edit(header: dict[str, Any]) -> None:
        options = header["capture_options"]
        options.update(suite=None, scenes=["app.trace", "other.trace"])
        for entry in options["resolved"]["scenes"]:
            entry["spec"] = f"{entry['label']}.trace"
        options["replay"] = {
            "traces": {s: {"path": f"/t/{s}.trace", "api": api} for s in scenes},
            "replayers": {api: {"path": "/usr/bin/glretrace", "version": "11", "api": api}},
            "options": {api: ["--pframe-times"]},
        }
        header["workload"] = "+".join(scenes)

    return _edited(_shard(path.with_suffix(".tmp"), shard, scenes), path, edit)


def _edited(src: Path, dst: Path, edit: Any) -> Path:
    def update(header: dict[str, Any]) -> dict[str, Any]:
        edit(header)
        return header

    with open(src, "rb") as f, open(dst, "wb") as out:
        assert copy_with_header(f, out, update)
    return dst


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    return (
        _shard(tmp_path / "s1.katra", "1/2", ["a", "c"]),
        _shard(tmp_path / "s2.katra", "2/2", ["b"]),
    )


def test_merge_keeps_every_scene_its_frames_images_and_host(
    tmp_path: Path, shards: tuple[Path, Path]
) -> None:
    s1, s2 = shards
    result = merge_shards([s2, s1], tmp_path / "m.katra")  # any order in, shard order out
    merged = open_trace(tmp_path / "m.katra", strict=True)
    parts = [open_trace(s1), open_trace(s2)]
    assert merged.version == (FORMAT_MAJOR, FORMAT_MINOR) and merged.status == "complete"
    assert result.scenes == ("a", "c", "b") and [s.shard for s in merged.header.shards or ()] == [
        "1/2",
        "2/2",
    ]
    assert merged.header.capture_options.shard is None and merged.header.shards[1].scenes == ("b",)
    assert [e["label"] for e in merged.header.capture_options.resolved.scenes or ()] == [
        "a",
        "c",
        "b",
    ]
    for part in parts:  # the same events, scene by scene, and the same kept frames, byte for byte
        for scene in part.kept_frames:
            mine = merged.events[merged.events["scene"] == merged.strings.index(scene)]
            theirs = part.events[part.events["scene"] == part.strings.index(scene)]
            assert np.array_equal(mine["dur_ns"], theirs["dur_ns"]) and np.array_equal(
                mine["flags"], theirs["flags"]
            )
            assert merged.kept_frames[scene].png == part.kept_frames[scene].png
            assert merged.kept_frames[scene].sha256 == part.kept_frames[scene].sha256
    assert len(merged.events) == sum(len(p.events) for p in parts) and result.images == 3
    # alike in every shard: once
    assert [a.get("type") for a in merged.annotations].count("reference") == 1
    assert [r["scene"] for r in merged.summary.user["scenes"]] == ["a", "c", "b"]
    offset = merged.header.shards[1].offset_ns
    b = merged.strings.index("b")
    assert offset is not None and offset >= 0
    assert np.array_equal(
        merged.events[merged.events["scene"] == b]["start_ns"] - offset,
        parts[1].events[parts[1].events["scene"] == parts[1].strings.index("b")]["start_ns"],
    )


def test_a_merged_trace_lists_its_scenes_in_the_runs_order(tmp_path: Path) -> None:
    """Shards that ran every other scene of the run merge back into the run's order: events, kept
    frames, scene notes, the header's scenes and the summary's rows, each scene's events whole."""
    from katra_trace.analysis.stats import scene_labels

    parts = [
        _shard(tmp_path / "s1.katra", "1/2", ["d", "b"], positions=[3, 1]),
        _shard(tmp_path / "s2.katra", "2/2", ["c", "a"], positions=[2, 0]),
    ]
    result = merge_shards(parts, tmp_path / "m.katra")
    merged = open_trace(tmp_path / "m.katra", strict=True)
    order = ["a", "b", "c", "d"]
    assert list(result.scenes) == order
    assert list(scene_labels(merged.events, merged.strings).values()) == order
    assert [e["label"] for e in merged.header.capture_options.resolved.scenes or ()] == order
    assert [r["scene"] for r in merged.summary.user["scenes"]] == order
    assert [a["scene"] for a in merged.annotations if a.get("type") == "scene"] == order
    assert list(merged.kept_frames) == order
    assert [a.get("type") for a in merged.annotations].count("reference") == 1
    opened = [open_trace(p) for p in parts]
    for scene in order:
        mine = merged.events[merged.events["scene"] == merged.strings.index(scene)]
        part = next(p for p in opened if scene in p.strings)
        theirs = part.events[part.events["scene"] == part.strings.index(scene)]
        assert np.array_equal(mine["dur_ns"], theirs["dur_ns"]), scene
    assert len(merged.events) == sum(len(p.events) for p in opened)


def test_each_scene_is_judged_by_its_own_shards_host(
    tmp_path: Path, shards: tuple[Path, Path]
) -> None:
    s1, s2 = shards
    other = _edited(
        s2,
        tmp_path / "s2-other.katra",
        lambda h: h["host_info"]["gl"].update(renderer="another renderer"),
    )
    merge_shards([s1, other], tmp_path / "m.katra")
    merged = open_trace(tmp_path / "m.katra")
    assert merged.header.host_info.renderer == KEY["renderer"]  # the first shard's
    assert merged.header.host_of("b").renderer == "another renderer"
    baseline = _shard(tmp_path / "whole.katra", "1/1", ["a", "c", "b"])
    verdicts = {s.scene: s for s in compare_traces([open_trace(baseline)], [merged]).scenes}
    assert (
        verdicts["b"].verdict.value == "incomparable"
        and "different renderer" in verdicts["b"].reason
    )
    assert (
        verdicts["a"].verdict.value != "incomparable"
        and verdicts["c"].verdict.value != "incomparable"
    )
    rows = trace_rows(merged, "0" * 64, RunFacts(label="x"))
    assert {r.scene: r.renderer for r in rows} == {
        "a": KEY["renderer"],
        "c": KEY["renderer"],
        "b": "another renderer",
    }


def test_info_lists_a_merged_traces_shards_and_a_shards_share(
    tmp_path: Path, shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    s1, s2 = shards
    other = _edited(
        s2,
        tmp_path / "s2-other.katra",
        lambda h: h["host_info"]["gl"].update(renderer="another renderer"),
    )
    merge_shards([s1, other], tmp_path / "m.katra")
    code, out, _ = katra_main(capsys, "info", "--all", str(tmp_path / "m.katra"))
    lines = [line for line in out.splitlines() if line.startswith("shard ")]
    assert code == 0 and len(lines) == 2, out
    assert lines[0].startswith(f"shard     1/2 {s1}; a, c; ") and lines[0].endswith(
        "; the host above"
    )
    assert lines[1].startswith(f"shard     2/2 {other}; b; ") and "another renderer" in lines[1]
    code, out, _ = katra_main(capsys, "info", str(tmp_path / "m.katra"))
    assert code == 0 and "\nshards " in out and "the host above" in out
    code, out, _ = katra_main(capsys, "info", str(s2))
    assert (
        code == 0
        and "\nshard     2/2 of the run's scenes (katra3d merge joins the shards)\n" in out
    )


def test_merge_refuses_what_is_not_one_run(
    tmp_path: Path, shards: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    s1, s2 = shards
    cases = {
        "version": (
            _edited(s2, tmp_path / "v.katra", lambda h: h.update(tool_version="katra3d 9.9")),
            "shards of different katra3d versions",
        ),
        "suite": (
            _shard(tmp_path / "d.katra", "2/2", ["b"], suite="default"),
            "shards of different runs",
        ),
        "options": (_shard(tmp_path / "o.katra", "2/2", ["b"], seed=3), "differ in seed"),
        "split": (_shard(tmp_path / "n.katra", "2/3", ["b"]), "shards of different splits"),
        "same shard": (_shard(tmp_path / "t.katra", "1/2", ["b"]), "are both shard 1/2"),
        "scene twice": (_shard(tmp_path / "x.katra", "2/2", ["b", "a"]), "scene 'a' is in"),
    }
    for name, (second, message) in cases.items():
        code, out, err = katra_main(
            capsys, "merge", str(s1), str(second), "-o", str(tmp_path / f"{name}.katra")
        )
        assert code == 2 and message in err and err.count("\n") == 1, (name, err)
        assert not (tmp_path / f"{name}.katra").exists()
    for args, message in [
        (["merge", str(s1)], "shard 2/2 of this run is missing"),
        (["merge", str(s1), str(s1)], "is given twice"),
        (["merge", str(s1), str(s2), "-o", str(s1), "--force"], "one of this command's inputs"),
    ]:
        if "-o" not in args:
            args += ["-o", str(tmp_path / "out.katra")]
        code, _, err = katra_main(capsys, *args)
        assert code == 2 and message in err and err.count("\n") == 1, err
    whole = _shard(tmp_path / "w.katra", "1/2", ["a"])
    _edited(whole, tmp_path / "plain.katra", lambda h: h["capture_options"].pop("shard"))
    code, _, err = katra_main(
        capsys, "merge", str(tmp_path / "plain.katra"), "-o", str(tmp_path / "p.katra")
    )
    assert code == 2 and "is not a shard (run it with --shard I/N)" in err
    assert (
        katra_main(capsys, "merge", str(s1), str(s2), "-o", str(tmp_path / "m.katra"), "--quiet")[0]
        == 0
    )
    code, _, err = katra_main(capsys, "merge", str(s1), str(s2), "-o", str(tmp_path / "m.katra"))
    assert code == 2 and "already exists; give --force" in err
    code, out, _ = katra_main(
        capsys, "merge", str(tmp_path / "m.katra"), "-o", str(tmp_path / "mm.katra")
    )
    assert code == 2
    code, out, _ = katra_main(
        capsys,
        "merge",
        str(s1),
        str(s2),
        "-o",
        str(tmp_path / "m.katra"),
        "--force",
        "--json",
        "--quiet",
    )
    assert code == 0 and json.loads(out)["scenes"] == ["a", "c", "b"]
    code, out, err = katra_main(
        capsys, "merge", str(s1), str(s2), "-o", str(tmp_path / "m.katra"), "--force"
    )
    assert (
        code == 0
        and "s2.katra' (1 scene)\n" in err
        and ": 2 shards, 3 scenes, " in out
        and "1 host\n" in out
    )
    torn = tmp_path / "torn.katra"
    torn.write_bytes(s2.read_bytes()[:-40])
    code, _, err = katra_main(capsys, "merge", str(s1), str(torn), "-o", str(tmp_path / "z.katra"))
    assert re.fullmatch(
        r"katra3d: error: '[^']*torn\.katra' is damaged \([^)]*\): a damaged shard is not merged; "
        r"run that shard again\n",
        err,
    ), err
    assert code == 2 and not (tmp_path / "z.katra").exists()


def test_shards_of_a_run_of_traces_merge_with_every_trace_and_the_runs_workload(
    tmp_path: Path,
) -> None:
    """Each shard of a run of several .trace files lists only its own traces: merged, the header
    lists them all, and the workload is the run's (its scenes in the run's order, as an unsharded
    run names it)."""
    s1, s2 = (
        _trace_shard(tmp_path / "t1.katra", "1/2", ["other"]),
        _trace_shard(tmp_path / "t2.katra", "2/2", ["app"]),
    )
    merge_shards([s1, s2], tmp_path / "m.katra")
    merged = open_trace(tmp_path / "m.katra", strict=True)
    assert sorted(merged.header.capture_options.extra["replay"]["traces"]) == ["app", "other"]
    assert merged.header.workload == "app+other"
    egl = _edited(
        s2,
        tmp_path / "e.katra",
        lambda h: h["capture_options"]["replay"].update(
            replayers={"egl": {"path": "/usr/bin/eglretrace", "version": "11", "api": "egl"}},
            options={"egl": ["--headless", "--pframe-times"]},
        ),
    )
    merge_shards([s1, egl], tmp_path / "me.katra")  # an EGL trace's shard: replayers of both kinds
    assert sorted(
        open_trace(tmp_path / "me.katra").header.capture_options.extra["replay"]["replayers"]
    ) == ["egl", "glx"]
    older = _edited(
        s2,
        tmp_path / "o.katra",
        lambda h: h["capture_options"]["replay"]["replayers"]["glx"].update(version="10"),
    )
    with pytest.raises(ConfigError, match=r"differ in replay\.replayers\.glx$"):
        merge_shards([s1, older], tmp_path / "mo.katra")


def test_a_mix_of_traces_and_scenes_is_refused_before_the_shard_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "app.trace").write_bytes(b"not replayed: refused first")
    for shard in ("1/2", "2/2"):
        code, _, err = katra_main(
            capsys,
            "run",
            str(tmp_path / "app.trace"),
            "triangle",
            "--shard",
            shard,
            "--frames",
            "1",
            "--size",
            "16x16",
            "-o",
            str(tmp_path / "s.katra"),
        )
        assert (
            code == 2
            and "a run replays traces or renders scenes, not both" in err
            and err.count("\n") == 1
        )
        assert not (tmp_path / "s.katra").exists()


# --- the whole path, on llvmpipe
# ---------------------------------------------------------------------------

RUN = ("run", "--suite", "ci", "--size", "32x18", "--frames", "3", "--warmup", "1", "--quiet")


@pytest.mark.gl
@pytest.mark.slow
def test_sharded_run_merges_into_what_an_unsharded_run_compares_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--shard 1/2 + --shard 2/2 + merge against an unsharded run: each scene once, compare accepts
    it (exit 0), every kept frame identical."""
    for args, out in [
        ((), "whole.katra"),
        (("--shard", "1/2"), "s1.katra"),
        (("--shard", "2/2"), "s2.katra"),
    ]:
        r = katra(*RUN, *args, "-o", out, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    for value, message in [
        ("3/2", "bad --shard 3/2: I must be in 1..2"),
        ("1/13", "at most 12 shard(s)"),
    ]:
        code, _, err = katra_main(capsys, *RUN, "--shard", value, "-o", str(tmp_path / "bad.katra"))
        assert (
            code == 2
            and err.startswith("katra3d: error: ")
            and message in err
            and err.count("\n") == 1
        )
    whole, s1, s2 = (open_trace(tmp_path / n) for n in ("whole.katra", "s1.katra", "s2.katra"))
    labels = [list(t.kept_frames) for t in (s1, s2)]
    assert sorted(labels[0] + labels[1]) == sorted(whole.kept_frames) and not set(labels[0]) & set(
        labels[1]
    )
    code, _, err = katra_main(
        capsys,
        "merge",
        str(tmp_path / "s2.katra"),
        str(tmp_path / "s1.katra"),
        "-o",
        str(tmp_path / "run.katra"),
    )
    assert code == 0, err
    merged = open_trace(tmp_path / "run.katra", strict=True)
    assert sorted(merged.kept_frames) == sorted(whole.kept_frames) and len(merged.events) == len(
        s1.events
    ) + len(s2.events)
    code, out, err = katra_main(
        capsys,
        "compare",
        str(tmp_path / "whole.katra"),
        str(tmp_path / "run.katra"),
        "--format",
        "json",
    )
    result = json.loads(out)
    assert code == 0, err
    assert sorted(result["scenes"]) == sorted(whole.kept_frames)  # each scene once
    assert not [s for s, row in result["scenes"].items() if row["verdict"] == "incomparable"]
    assert {v["verdict"] for v in result["images"].values()} == {"identical"}


# --- the ci/ examples
# -------------------------------------------------------------------------------------


def _doc_commands() -> set[str]:
    return {
        re.sub(r"\s+#.*$", "", c.text).strip()
        for b in blocks(REPO / "docs" / "ci.md")
        if b.runs
        for c in b.commands()
    }


def test_the_errors_docs_ci_shows_are_the_ones_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run docs/ci.md shows refused (``# exit 2: MESSAGE``) says that message (it is refused
    before any work; test_docs runs every command but checks only its exit code)."""
    monkeypatch.chdir(tmp_path)
    shown = [
        (c.text, m.group(1).strip())
        for b in blocks(REPO / "docs" / "ci.md")
        if b.runs
        for c in b.commands()
        if c.text.startswith("katra3d run ") and (m := re.search(r"#\s*exit 2:\s*(.+)$", c.text))
    ]
    assert shown
    for text, message in shown:
        args = shlex.split(text.split("#")[0])[1:]
        code, _, err = katra_main(capsys, *args)
        assert code == 2 and message in err, (text, err)


def _katra_lines(script: Any) -> list[str]:
    lines = script if isinstance(script, list) else str(script).splitlines()
    return [
        line.strip()
        for line in lines
        if isinstance(line, str) and line.strip().startswith("katra3d ")
    ]


def _as_documented(command: str, variable: str, value: str) -> str:
    """A workflow's command as docs/ci.md runs it: the matrix value put in, and without --measure
    instructions (the docs measure time: counting the suite takes minutes)."""
    return command.replace(variable, value).replace(" --measure instructions", "")


def test_github_actions_matrix_example() -> None:
    flow = yaml.safe_load((REPO / "ci" / "github-actions-shards.yml").read_text())
    jobs = flow["jobs"]
    assert set(jobs) == {"shard", "merge", "gate"} and (True in flow or "on" in flow)
    assert jobs["merge"]["needs"] == "shard" and jobs["gate"]["needs"] == "merge"
    values = [str(v) for v in jobs["shard"]["strategy"]["matrix"]["shard"]]
    run = {
        job: [line for step in jobs[job]["steps"] for line in _katra_lines(step.get("run", ""))]
        for job in jobs
    }
    (shard_cmd,) = run["shard"]
    assert f"/{len(values)} " in shard_cmd and "--measure instructions" in shard_cmd
    documented = _doc_commands()
    for value in values:
        assert _as_documented(shard_cmd, "${{ matrix.shard }}", value) in documented
    assert run["merge"] and all(c in documented for c in run["merge"])
    assert run["gate"] and all(
        c.split(" > ")[0].split(" || ")[0] in documented for c in run["gate"]
    )


def test_gitlab_parallel_matrix_example() -> None:
    pipeline = yaml.safe_load((REPO / "ci" / "gitlab-ci-shards.yml").read_text())
    assert pipeline["stages"] == ["shard", "merge", "gate"]
    assert pipeline["merge"]["needs"] == ["shard"] and pipeline["gate"]["needs"] == ["merge"]
    (matrix,) = pipeline["shard"]["parallel"]["matrix"]
    values = matrix["SHARD"]
    (shard_cmd,) = _katra_lines(pipeline["shard"]["script"])
    assert f"/{len(values)} " in shard_cmd and "--measure instructions" in shard_cmd
    assert pipeline["shard"]["artifacts"]["paths"] == ["shard-$SHARD.katra"]
    documented = _doc_commands()
    for value in values:
        assert _as_documented(shard_cmd, "$SHARD", value) in documented
    for job in ("merge", "gate"):
        commands = _katra_lines(pipeline[job]["script"])
        assert commands and all(c in documented for c in commands), (job, commands)
