"""The bench table (stdout), bench/results.json (machine, date, commit, rows), and tables written
into docs between markers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

from bench._core import Row

#: Version of the results.json layout.
RESULTS_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Failure:
    """A bench that produced no rows: ``kind`` is ``error`` (exit 2) or ``unavailable`` (exit 3)."""

    bench: str
    kind: str
    message: str

    @property
    def exit_code(self) -> int:
        return 3 if self.kind == "unavailable" else 2


@dataclasses.dataclass(frozen=True)
class BenchRun:
    """One bench's outcome: its rows (or a failure), how long it took, facts it recorded."""

    name: str
    about: str
    rows: list[Row]
    duration_s: float
    facts: dict[str, Any]
    failure: Failure | None = None


def _fmt(x: float | None, unit: str) -> str:
    if x is None or math.isnan(x):
        return "-"
    if unit == "ratio":
        return f"{x:.3f}"
    return f"{x:.4g}"


def print_table(
    runs: list[BenchRun],
    stream: TextIO | None = None,
    *,
    total_s: float | None = None,
    quick: bool = False,
) -> None:
    """Print every row (and every failure) as one table on ``stream`` (stdout by default)."""
    from rich.console import Console
    from rich.table import Table

    out = stream or sys.stdout
    tty = bool(getattr(out, "isatty", lambda: False)())
    width = shutil.get_terminal_size((220, 24)).columns if tty else 220
    title = "katra3d bench" + (" (--quick: smoke-test sizes, not measurements)" if quick else "")
    if total_s is not None:
        title += f", {total_s:.0f} s"
    table = Table(title=title, title_justify="left")
    right = {"value", "95% CI", "IQR", "n", "target"}
    for col in (
        "bench",
        "row",
        "value",
        "95% CI",
        "IQR",
        "n",
        "target",
        "status",
        "measures",
        "notes",
    ):
        table.add_column(
            col,
            justify="right" if col in right else "left",
            no_wrap=col != "notes",
            overflow="fold",
        )
    for i, run in enumerate(runs):
        if i:
            table.add_section()
        if run.failure is not None:
            table.add_row(
                run.name,
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                run.failure.kind.upper(),
                "",
                run.failure.message,
            )
            continue
        for j, row in enumerate(run.rows):
            unit = "" if row.unit == "ratio" else f" {row.unit}"
            iqr = "-" if row.n < 2 else f"{_fmt(row.q1, row.unit)}..{_fmt(row.q3, row.unit)}"
            ci = (
                "-"
                if row.ci_low is None
                else f"{_fmt(row.ci_low, row.unit)}..{_fmt(row.ci_high, row.unit)}"
            )
            target = "-" if row.target is None else f"{row.target}{unit}"
            status = {"pass": "pass", "miss": "MISS", "info": "info"}[row.status]
            table.add_row(
                run.name if j == 0 else "",
                row.name,
                _fmt(row.value, row.unit) + unit,
                ci,
                iqr,
                str(row.n),
                target,
                status,
                row.what,
                row.notes,
            )
    console = Console(file=out, width=width, highlight=False, color_system="auto" if tty else None)
    console.print(table)
    out.flush()


def git_facts(root: Path) -> dict[str, Any]:
    """The commit benchmarked and whether tracked files differed from it (None
    when git is absent)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_facts() -> dict[str, Any]:
    """What the numbers were measured on (ratios travel between machines
    better than times; still)."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": list(load) if load else None,
    }


def results_record(
    runs: list[BenchRun],
    *,
    started: dt.datetime,
    total_s: float,
    quick: bool,
    strict: bool,
    argv: list[str],
    machine: dict[str, Any],
    git: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document written to results.json."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "schema": RESULTS_SCHEMA,
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round(total_s, 2),
        "argv": argv,
        "quick": quick,
        "strict": strict,
        "git": git,
        "machine": {**machine, "loadavg_at_end": list(load) if load else None},
        "benches": [
            {
                "name": r.name,
                "about": r.about,
                "duration_s": round(r.duration_s, 2),
                "facts": r.facts,
                "failure": None if r.failure is None else dataclasses.asdict(r.failure),
            }
            for r in runs
        ],
        "rows": [row.as_dict() for r in runs for row in r.rows],
    }


def write_results(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` to ``path`` atomically (a torn results.json never replaces a good one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_doc(markdown: str, doc: Path, marks: tuple[str, str]) -> None:
    """Replace what lies between the two ``marks`` of ``doc`` with ``markdown`` (ValueError when
    they are missing). Every bench whose table lives in a doc writes it through this."""
    start_mark, end_mark = marks
    text = doc.read_text(encoding="utf-8")
    start = text.find(start_mark)
    end = text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"{doc} lacks the markers {start_mark} ... {end_mark}")
    head = text[: start + len(start_mark)]
    doc.write_text(f"{head}\n{markdown}\n{text[end:]}", encoding="utf-8")


__all__ = [
    "BenchRun",
    "Failure",
    "git_facts",
    "machine_facts",
    "print_table",
    "results_record",
    "write_doc",
    "write_results",
]
