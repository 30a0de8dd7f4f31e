"""``katra3d compare``: did NEW make frames worse? An ab directory pairs its runs by round;
the rule is in docs/stats.md."""

from __future__ import annotations

import argparse

from katra3d.harness.cli._compare import add_compare_options, compare_and_print


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "compare",
        help="compare frame times (or counts) of two traces or two directories of runs",
        description="Per scene: ratio NEW/BASE of the runs' medians with a t interval, a one-sided "
        "p-value (Holm-corrected across scenes) and a verdict; >= 3 runs a side are "
        "needed for a verdict on a time metric. Instructions and cycles: one run a "
        "side, per scene and per zone. Exit 0 no regression, 1 regression, "
        "2 bad input or nothing comparable.",
    )
    p.add_argument(
        "base",
        metavar="BASE",
        help="a .katra trace, a directory of traces (one per run), or the "
        "output directory of 'katra3d ab' (then without NEW)",
    )
    p.add_argument(
        "new",
        metavar="NEW",
        nargs="?",
        default=None,
        help="a .katra trace, or a directory of traces (one per run)",
    )
    p.add_argument(
        "--unpaired",
        action="store_true",
        help="ignore the round pairing recorded by 'katra3d ab' (ab.json)",
    )
    add_compare_options(p)
    p.add_argument(
        "--image-diff",
        metavar="DIR",
        help="write DIR/<scene>.base.png, .new.png and .flip.png (the FLIP error map) for every "
        "scene "
        "whose last frame is not identical (docs/images.md)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="counted runs: per changed scene and zone, where the instructions went (group, "
        "object, function), largest change first; JSON: each scene's profile_delta "
        "(docs/profile.md)",
    )
    p.add_argument(
        "--profile-out",
        metavar="DIR",
        help="write DIR/<scene>.profile.svg, a differential flame graph of every profiled scene "
        "and zone (docs/profile.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return compare_and_print(args.base, args.new, args)
