"""The structure-aware fuzzer drives every consumer (issue 22, deliverable 4).

tests/test_fuzz_trace.py mutates the decoded content of valid traces and re-seals them; here the
same mutations, started from its bases *and* from the extreme traces of tests/extreme_traces.py
(which ``validate`` passes: ids at 2^32-1, times at the int64 limits, long and hostile strings,
NaN in the header), feed every consumer: stats, compare, export in all four formats, report and
history add. Each extreme trace runs once unmutated first.

The outcome rule, for every run: the command's ``main(argv)`` (in this process, for speed)
returns 0, 1 or 2, raises nothing, prints no traceback, ends within :data:`RUN_TIMEOUT_S`, and
the process's peak RSS grows by no more than the memory promise (10x the largest file + 64 MiB)
over a first run on the small valid trace; a Chrome export that succeeds is valid JSON (checked up
to 4 MiB: parsing a bigger one would be this test's memory, not the command's).
(tests/test_consumer_memory.py measures the memory bound per command in subprocesses.)

Bounded: about KATRA3D_FUZZ_SECONDS seconds per consumer (default 2) in ``make test``;
``make fuzz`` runs longer (KATRA3D_FUZZ_SECONDS=60). A failure names the iteration's seed:
``tests.test_fuzz_trace.reproduce(seed)`` rebuilds a mutated file (with these bases, see
:func:`bases`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from katra3d.harness.cli import main as cli_main
from tests.extreme_traces import write_all, write_base
from tests.test_fuzz_trace import _base_traces, build

FUZZ_SECONDS = float(os.environ.get("KATRA3D_FUZZ_SECONDS", "2"))
#: A run that takes longer has hung (a fuzzed trace is a few KB; every consumer needs well under 1 s).
RUN_TIMEOUT_S = 30
MIB = 1 << 20

#: consumer -> argv template ({t}: the fuzzed trace, {b}: the small valid trace, {d}: scratch, {i}: run).
CONSUMERS: dict[str, str] = {
    "stats": "stats {t}",
    "stats-json": "stats --format json --zones {t}",
    "compare": "compare {b} {t}",
    "export-csv": "export {t} --to csv -o {d}/o.csv --force --quiet",
    "export-parquet": "export {t} --to parquet -o {d}/o.parquet --force --quiet",
    "export-perfetto": "export {t} --to perfetto -o {d}/o.pftrace --force --quiet",
    "export-chrome": "export {t} --to chrome -o {d}/o.json --force --quiet",
    "report": "report {t} -o {d}/r.html --force",
    "history-add": "history add {t} --label v{i} --db {d}/h.duckdb",
}


class Hang(Exception):
    """A run went past RUN_TIMEOUT_S."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hang(f"no exit within {RUN_TIMEOUT_S} s")


@contextlib.contextmanager
def _deadline() -> Iterator[None]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, RUN_TIMEOUT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run(argv: list[str]) -> tuple[int, str]:
    """``katra3d argv`` in this process with a deadline; stdout/stderr refuse unencodable text like a
    terminal. Returns the exit code and stderr."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    with _deadline(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as exc:  # argparse's own exits
            rc = exc.code if isinstance(exc.code, int) else 2
        out.flush()
        err.flush()
    assert isinstance(err.buffer, io.BytesIO)
    return rc, err.buffer.getvalue().decode("utf-8", "replace")


def bases(tmp: Path) -> tuple[list[bytes], dict[str, Path]]:
    """What the mutations start from: the reader fuzzer's bases and the extreme traces; and the extreme
    traces' paths."""
    extreme = write_all(tmp / "extreme")
    return _base_traces(tmp) + [p.read_bytes() for p in extreme.values()], extreme


#: Consumers run under an address-space cap (:func:`_capped`): a regression that sizes an allocation by an
#: id then fails as a MemoryError instead of taking the machine. Not the ones whose libraries reserve
#: address space per thread and core (DuckDB, pyarrow): the subprocess memory test covers those.
CAPPED = ("stats", "stats-json", "compare", "export-csv", "export-perfetto", "export-chrome", "report")
#: Address space allowed beyond what the process has mapped when the fuzzing starts.
CAP_HEADROOM = 2 << 30


@contextlib.contextmanager
def _capped(on: bool) -> Iterator[None]:
    """RLIMIT_AS (soft) at the process's current size + :data:`CAP_HEADROOM` while the block runs; the
    previous soft limit is restored after (the hard limit is never touched)."""
    status = Path("/proc/self/status")
    if not on or not status.exists():
        yield
        return
    vm = next(int(line.split()[1]) * 1024 for line in status.read_text().splitlines() if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + CAP_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_fuzz_every_consumer(consumer: str, tmp_path: Path) -> None:
    base = tmp_path / "small.katra"
    write_base(base)
    mutated_bases, extreme = bases(tmp_path)
    template = CONSUMERS[consumer]
    scratch = tmp_path / "out"
    scratch.mkdir()

    def argv(trace: Path, i: int) -> list[str]:
        return template.format(t=trace, b=base, d=scratch, i=i).split(" ")

    rc, err = run(argv(base, 0))  # the baseline: lazy imports and caches are not the fuzzed runs' memory
    assert rc == 0, err
    baseline = _peak()
    failures: list[str] = []
    largest = 0
    path = tmp_path / "fuzz.katra"
    seed = int(os.environ.get("KATRA3D_FUZZ_SEED", "0"))
    cases = [(name, p) for name, p in extreme.items()]
    deadline = time.monotonic() + FUZZ_SECONDS
    iterations = 0
    while cases or time.monotonic() < deadline or iterations < len(extreme) + 10:
        if cases:
            what, trace = cases.pop(0)
        else:
            data, what = build(seed, mutated_bases)
            path.write_bytes(data)
            trace = path
            seed += 1
        largest = max(largest, trace.stat().st_size)
        iterations += 1
        args = argv(trace, iterations)
        try:
            with _capped(consumer in CAPPED):
                rc, err = run(args)
        except Exception as exc:  # noqa: BLE001 - the finding (Hang and MemoryError included)
            failures.append(f"{what}: katra3d {' '.join(args[:3])}: {type(exc).__name__}: {exc}")
            continue
        if rc not in (0, 1, 2) or "Traceback" in err:
            failures.append(f"{what}: katra3d {' '.join(args[:3])}: exit {rc}: {err.strip()[-300:]}")
        elif consumer == "export-chrome" and rc == 0 and (scratch / "o.json").stat().st_size < 4 * MIB:
            try:
                json.loads((scratch / "o.json").read_text(encoding="utf-8"),
                           parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError as exc:
                failures.append(f"{what}: chrome export is not valid JSON: {exc}")
    growth = _peak() - baseline
    allowed = 10 * largest + 64 * MIB
    print(f"fuzz {consumer}: {iterations} runs in {FUZZ_SECONDS:g} s, {len(failures)} failures, "
          f"peak RSS +{growth / MIB:.1f} MiB")
    if growth > allowed:
        failures.append(f"peak RSS grew {growth / MIB:.1f} MiB over the baseline run, allowed {allowed / MIB:.1f} MiB")
    assert not failures, "\n".join(failures[:20])
