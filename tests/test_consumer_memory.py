"""Every consumer keeps the reader's memory promise on any input.

Beyond the command's own baseline on a small valid trace, a command may use at most
10x the file size + 64 MiB, whatever ids, counts, times or strings the file holds.

Each consumer (validate, info, stats, compare with ``--image-diff``, export in all four formats,
report with a baseline, history add) runs in its own subprocess: first on the small valid trace
(twice: lazy imports and caches belong to the baseline), then on every trace of
tests/extreme_traces.py (kept frames far beyond the reading budget, IMAGE blocks packed with zstd,
300 of them, damaged ones included), calling the command line's ``main(argv)``. The process's peak
RSS (``ru_maxrss``, a high-water mark) is read after each run, so the growth over the baseline
bounds what any one of those runs took. An RLIMIT_AS cap keeps a regression from taking the machine
down with it (it then fails as a MemoryError instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extreme_traces import write_all, write_base

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
#: The reader's promise, as every consumer must keep it: bytes allowed beyond the baseline.
ALLOWED_FACTOR, ALLOWED_SLACK = 10, 64 * MIB
#: Address-space cap of the child (a safety net: far above the bound, far below the machine); with
#: MALLOC_ARENA_MAX=2, so that thread arenas (DuckDB, pyarrow) do not reserve address space per
#: core.
AS_CAP = 3 << 30

#: consumer -> argv for (trace, scratch directory, run index); the output paths differ per run.
CONSUMERS: dict[str, str] = {
    "validate": "validate {t}",
    "info": "info {t}",
    "info-json": "info --json {t}",
    "stats": "stats {t}",
    "stats-slow": "stats --slow --format json --zones {t}",
    "merge": "merge {t} -o {d}/m{i}.katra --quiet",
    "compare": "compare {t} {t}",
    "compare-images": "compare {t} {t} --image-diff {d}/diff{i}",
    "report-images": "report {t} --baseline {t} -o {d}/b{i}.html",
    "export-csv": "export {t} --to csv -o {d}/o{i}.csv --quiet",
    "export-parquet": "export {t} --to parquet -o {d}/o{i}.parquet --quiet",
    "export-perfetto": "export {t} --to perfetto -o {d}/o{i}.pftrace --quiet",
    "export-chrome": "export {t} --to chrome -o {d}/o{i}.json --quiet",
    "report": "report {t} -o {d}/r{i}.html",
    "history-add": "history add {t} --label v{i} --db {d}/h{i}.duckdb",
}

#: The child: runs one consumer over the traces given, printing one JSON line per run.
CHILD = r"""
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from katra3d.harness.cli import main
template, scratch = sys.argv[2], sys.argv[3]
for i, trace in enumerate(sys.argv[4:]):
    argv = template.format(t=trace, d=scratch, i=i).split(" ")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except MemoryError:
            rc = "MemoryError"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps({"trace": trace, "rc": rc, "peak": peak, "err": err.getvalue()[-300:]}),
        flush=True,
    )
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """The small valid trace (the baseline) and every extreme trace."""
    root = tmp_path_factory.mktemp("memory")
    paths = write_all(root / "extreme")
    base = root / "small.katra"
    write_base(base)
    return base, paths


@pytest.mark.slow
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_consumer_memory_is_bounded(
    consumer: str, corpus: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    base, extreme = corpus
    traces = [base, base, *extreme.values()]
    env = {**os.environ, "PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(AS_CAP),
            CONSUMERS[consumer],
            str(tmp_path),
            *map(str, traces),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(runs) == len(traces)
    baseline = runs[1]["peak"]
    problems = []
    biggest = 0
    for run in runs[2:]:
        size = Path(run["trace"]).stat().st_size
        biggest = max(biggest, size)
        growth = run["peak"] - baseline
        allowed = ALLOWED_FACTOR * biggest + ALLOWED_SLACK
        name = Path(run["trace"]).stem
        if run["rc"] not in (0, 1, 2) or "Traceback" in run["err"]:
            problems.append(f"{name}: exit {run['rc']}: {run['err'].strip()}")
        if growth > allowed:
            problems.append(
                f"{name}: peak RSS {growth / MIB:.1f} MiB over the baseline, allowed "
                f"{allowed / MIB:.1f} MiB ({size} bytes file)"
            )
    print(
        f"{consumer}: baseline {baseline / MIB:.1f} MiB, highest "
        f"{max(r['peak'] for r in runs) / MIB:.1f} MiB"
    )
    assert not problems, "\n".join(problems)
