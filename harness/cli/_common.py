"""Helpers shared by the CLI subcommands (no GL imports here)."""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

from katra_trace import Trace, TraceRecoveryWarning, open_trace


def load_trace_quietly(path: str, events: bool = True) -> Trace:
    """open_trace, with the recovery warning left to the caller (it reads ``trace.truncated``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        return open_trace(path, events=events)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
