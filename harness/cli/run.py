"""``katra3d run``: render scenes headless, stream a trace. Values are parsed here, not by
argparse, so a bad one is one error line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from katra3d.harness.cli._common import print_json
from katra3d.harness.cli._table import format_table
from katra3d.harness.engine.results import RunResult
from katra3d.harness.run.config import (
    RunConfig,
    parse_int,
    parse_param,
    parse_seconds,
    parse_size,
    plan_run,
)
from katra3d.harness.run.jobs import parse_jobs
from katra3d.harness.run.progress import Progress
from katra3d.harness.run.protocol import ChildResult, report_run
from katra3d.harness.run.runner import run as run_plan
from katra_trace.analysis.images import flip_missing
from katra_trace.analysis.references import check_references, record_references
from katra_trace.errors import ConfigError, ExitCode, KatraError, stopped_exit_code
from katra_trace.io import format as fmt
from katra_trace.io.tracesets import open_quietly


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        help="run scenes (or a suite) headless and write a trace",
        description="Render scenes in a headless GL context, time every frame (and, with --zones, "
        "every pass or draw) and stream the timings into a .katra trace. "
        "docs/timing.md says what each number means.",
    )
    p.add_argument(
        "scenes",
        nargs="*",
        metavar="SCENE",
        help="scene names (see 'katra3d scenes'), path/to/file.py (its one scene class), "
        "path/to/file.py:Class or package.module:Class; before or after the options",
    )
    p.add_argument(
        "--suite",
        metavar="NAME",
        help="run a named suite (ci, default, stress); scenes named "
        "on the command line run after it",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N: a share of the scenes of about equal "
        "estimated cost, the same on every machine (join the shards with 'katra3d merge'; "
        "docs/ci.md)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="trace file to write (default: traces/<UTC timestamp>-<suite or scene>.katra)",
    )
    p.add_argument(
        "--frames", metavar="N", help="measured frames per scene (default: the suite's, else 100)"
    )
    p.add_argument(
        "--duration", metavar="S", help="measure each scene for S seconds instead of N frames"
    )
    p.add_argument(
        "--warmup",
        metavar="N",
        help="warmup frames per scene, recorded and flagged (default: the suite's, else 5)",
    )
    p.add_argument(
        "--size",
        metavar="WxH",
        help="framebuffer size in pixels (default: the suite's, else 640x360)",
    )
    p.add_argument("--samples", metavar="N", default="0", help="MSAA samples (default 0: none)")
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="egl (default), glfw or auto; $KATRA3D_BACKEND sets the default",
    )
    p.add_argument("--device", metavar="N", help="EGL device index (see 'katra3d doctor')")
    p.add_argument(
        "--timing",
        metavar="MODE",
        default="auto",
        help="auto (default: sync on software renderers, gpu elsewhere), gpu or sync",
    )
    p.add_argument(
        "--measure",
        metavar="WHAT",
        default="time",
        help="time (default: the clocks of --timing), instructions or cycles: count each frame's "
        "work under callgrind on a software renderer, deterministic to the instruction "
        "(docs/measure.md)",
    )
    p.add_argument(
        "--jobs",
        metavar="N",
        help="with --measure instructions|cycles: count up to N scenes at once, each in its own "
        "valgrind "
        "child (default: the usable cores, fewer when memory is short); a time run measures one "
        "scene at a time (docs/measure.md)",
    )
    p.add_argument(
        "--reference-every",
        metavar="K",
        help="time a small fixed reference draw after every K-th measured frame, for "
        "'compare --normalize' (sync timing; default 4, 0 = off)",
    )
    p.add_argument(
        "--zones",
        nargs="?",
        const="passes",
        default="off",
        metavar="MODE",
        help="off (default), passes (the scene's zones; --zones alone) or draws (every draw, "
        "dispatch, "
        "clear and blit too, named <pass>/<label>#<k>); zones add KHR_debug groups",
    )
    p.add_argument(
        "--max-draw-zones",
        metavar="N",
        help="with --zones draws: time at most N draws a frame (the rest are counted as untimed)",
    )
    p.add_argument(
        "--param",
        metavar="[SCENE.]KEY=VALUE",
        action="append",
        default=[],
        help="set a scene parameter (repeatable); KEY=VALUE without SCENE. when one scene runs",
    )
    p.add_argument(
        "--seed", metavar="N", default="0", help="seed of the scenes' random numbers (default 0)"
    )
    p.add_argument(
        "--note", metavar="TEXT", default="", help="free text stored in the trace header"
    )
    p.add_argument(
        "--screenshot", metavar="DIR", help="save each scene's last frame as DIR/<scene>.png"
    )
    p.add_argument(
        "--no-keep-image",
        dest="keep_image",
        action="store_false",
        help="do not keep each scene's last measured frame in the trace (kept by default in "
        "--frames "
        "runs, for image checks: docs/images.md)",
    )
    p.add_argument(
        "--expect-images",
        metavar="DIR",
        help="check each scene's last frame against DIR's reference for this device (a device "
        "without one is skipped with a notice); a changed image exits 1",
    )
    p.add_argument(
        "--update-images",
        action="store_true",
        help="with --expect-images DIR: record this run's frames as DIR's references for this "
        "device",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing output file (only once the new capture has recorded something)",
    )
    p.add_argument(
        "--codec",
        metavar="NAME",
        help="how the trace's events are compressed: zstd (default), blosc2 (needs python-blosc2) "
        "or none",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--json", action="store_true", help="print the end table as one JSON object instead"
    )
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> Any:
    """A RunConfig from the arguments (ConfigError on bad values)."""
    if args.frames is not None and args.duration is not None:
        raise ConfigError("give --frames or --duration, not both")
    return RunConfig(
        scenes=tuple(args.scenes),
        suite=args.suite,
        frames=parse_int(args.frames, "--frames", 1),
        duration_s=parse_seconds(args.duration, "--duration"),
        warmup=parse_int(args.warmup, "--warmup", 0),
        size=parse_size(args.size) if args.size is not None else None,
        samples=parse_int(args.samples, "--samples", 0) or 0,
        backend=args.backend.strip().lower() if args.backend else None,
        device=parse_int(args.device, "--device", 0),
        timing=args.timing.strip().lower(),
        zones=args.zones,
        max_draw_zones=parse_int(args.max_draw_zones, "--max-draw-zones", 1),
        seed=parse_int(args.seed, "--seed", 0) or 0,
        params=tuple(parse_param(p) for p in args.param),
        output=args.output,
        notes=args.note,
        screenshot_dir=args.screenshot,
        measure=args.measure.strip().lower(),
        reference_every=parse_int(args.reference_every, "--reference-every", 0),
        force=bool(args.force),
        codec=_codec(args.codec),
        keep_image=bool(args.keep_image),
        expect_images=args.expect_images,
        update_images=bool(args.update_images),
        shard=args.shard,
        jobs=parse_jobs(args.jobs),
    )


def _codec(text: str | None) -> str | None:
    if text is None:
        return None
    codec = text.strip().lower()
    if codec not in fmt.CODEC_NAMES:
        raise ConfigError(
            f"--codec: unknown codec {text!r}; choose one of: {', '.join(fmt.CODEC_NAMES)}"
        )
    if codec == "blosc2":
        fmt.load_blosc2("--codec blosc2")
    return codec


def run(args: argparse.Namespace) -> int:
    """The run, its result handed to a capture command's parent (ab, bisect) when it asks."""
    try:
        result, code = _run(args)
    except KatraError as err:
        report_run(ChildResult(error=str(err), exit_code=err.exit_code))
        raise
    report_run(ChildResult(result, exit_code=code))
    return code


def _run(args: argparse.Namespace) -> tuple[RunResult, int]:
    config = config_from_args(args)
    plan = plan_run(config)
    progress = Progress(len(plan.entries), quiet=args.quiet, phase_lines=plan.counting is not None)
    result = run_plan(config, plan=plan, progress=progress)
    if args.json:
        print_json(result.as_dict())
    else:
        print(format_table(result))
    if result.status == "interrupted":
        return result, stopped_exit_code(result.signal_name)
    if plan.expect_images is not None:
        return result, _check_images(
            plan.expect_images,
            result.path,
            [r.label for r in result.scenes],
            update=bool(args.update_images),
        )
    return result, ExitCode.OK


def _check_images(directory: Path, trace: Path, scenes: list[str], *, update: bool) -> int:
    """--expect-images / --update-images: a line a scene; exit 1 on a change, 2 if a check
    could not be made."""
    images = open_quietly(str(trace)).kept_frames
    checks = (
        record_references(directory, images)
        if update
        else check_references(directory, images, scenes)
    )
    for check in checks:
        print(check.line)
    missing = flip_missing()
    if missing is not None and any(
        c.verdict is not None and c.verdict.checksum_only for c in checks
    ):
        print(f"katra3d: notice: image checks by checksum only: {missing}", file=sys.stderr)
    if any(c.regression for c in checks):
        return ExitCode.REGRESSION
    return ExitCode.BAD_INPUT if any(c.error for c in checks) else ExitCode.OK
