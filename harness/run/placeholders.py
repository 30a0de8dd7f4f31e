"""What the counted child is told in place of the user's strings, and how the parent puts them back.

A counted child's counts depend on its heap: strings of another length allocate other blocks, and
every later object lands elsewhere (measured: output names 1 to 7 characters long moved a 32x32
``triangle`` frame by up to 47 instructions, docs/measure.md). So the child gets fixed-length
placeholders for the output path and the note, writes them into its trace's header, and the parent
replaces them with the real strings when it moves the trace into place
(:func:`katra_trace.io.blockfile.copy_with_header`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from katra3d.harness.run.config import RunPlan

#: What the counted child is told in place of the user's output path and note: strings of one fixed
#: length, so that the child's heap, and with it every count, does not depend on how long the user's
#: strings are (a 4-character longer ``-o`` moved a 32x32 frame by ~50 instructions). The parent
#: puts the real strings into the trace's header when it moves the trace into place
#: (:func:`restore_strings`).
OUTPUT_PLACEHOLDER = "katra3d-counted-run-output.katra"
#: ... and in place of ``-o`` as the user gave it (the run's request, recorded beside the resolved
#: path)
REQUESTED_OUTPUT_PLACEHOLDER = "katra3d-counted-run-requested.katra"
NOTES_PLACEHOLDER = "katra3d counted run note"


def placeholder_plan(plan: RunPlan) -> RunPlan:
    """``plan`` as the counted child gets it: the output path (resolved and as requested) and the
    note replaced by fixed-length placeholders, the screenshot folder made absolute."""
    shots = plan.screenshot_dir
    config = dataclasses.replace(plan.config, notes=NOTES_PLACEHOLDER)
    if config.output is not None:
        config = dataclasses.replace(config, output=REQUESTED_OUTPUT_PLACEHOLDER)
    return dataclasses.replace(
        plan,
        output=Path(OUTPUT_PLACEHOLDER),
        config=config,
        screenshot_dir=Path(os.path.abspath(shots)) if shots else None,
    )


def restore_strings(plan: RunPlan) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The header update that puts ``plan``'s output path and note back where the child wrote their
    placeholders.
    """
    real = {OUTPUT_PLACEHOLDER: str(plan.output), NOTES_PLACEHOLDER: plan.config.notes}
    if plan.config.output is not None:
        real[REQUESTED_OUTPUT_PLACEHOLDER] = plan.config.output

    def restore(value: Any) -> Any:
        if isinstance(value, str):
            return real.get(value, value)
        if isinstance(value, dict):
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore


__all__ = [
    "NOTES_PLACEHOLDER",
    "OUTPUT_PLACEHOLDER",
    "REQUESTED_OUTPUT_PLACEHOLDER",
    "placeholder_plan",
    "restore_strings",
]
