"""The structure-aware fuzzer drives every consumer.

tests/test_fuzz_trace.py mutates the decoded content of valid traces and re-seals them (kept frames
included: hostile PNGs and records, large all-zero frames, many IMAGE blocks, IMAGE blocks packed
with zstd); here the same mutations, started from its bases *and* from the extreme traces of
tests/extreme_traces.py (ids at 2^32-1, times at the int64 limits, long and hostile strings, NaN in
the header, kept frames too large for the reading budget or damaged), feed every consumer: validate,
info, stats (``--zones``, ``--slow``), merge, compare (with ``--image-diff``), export in all four
formats, report (with a baseline: the image section) and history add. Each extreme trace runs once
unmutated first. Reference image folders, the input of ``run --expect-images``, are fuzzed through
that command's check the same way (:func:`test_fuzz_reference_files`).

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
import random
import resource
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from katra3d.harness.cli import main as cli_main
from katra_trace.io.images import key_id
from tests.extreme_traces import write_all, write_base
from tests.hostile_images import (
    KEY,
    join_image,
    mutate_image,
    picture_frame,
    split_image,
    write_frames_trace,
)
from tests.test_fuzz_trace import _base_traces, _mutate_json, build

FUZZ_SECONDS = float(os.environ.get("KATRA3D_FUZZ_SECONDS", "2"))
#: A run that takes longer has hung (a fuzzed trace is a few KB; every consumer needs well under 1
#: s).
RUN_TIMEOUT_S = 30
MIB = 1 << 20

#: consumer -> argv template ({t}: the fuzzed trace, {b}: the small valid trace, {k}: a small valid
#: trace that keeps frames, {d}: scratch, {i}: run).
CONSUMERS: dict[str, str] = {
    "validate": "validate {t}",
    "info": "info {t}",
    "info-json": "info --json {t}",
    "compare-images": "compare {k} {t} --image-diff {d}/diff{i}",
    "report-images": "report {t} --baseline {k} -o {d}/r.html --force",
    "stats": "stats {t}",
    "stats-json": "stats --format json --zones {t}",
    "stats-slow": "stats --slow --zones {t}",
    "stats-slow-json": "stats --slow --format json {t}",
    "merge": "merge {t} -o {d}/m{i}.katra --quiet",
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
    """``katra3d argv`` in this process with a deadline; stdout/stderr refuse unencodable text like
    a terminal. Returns the exit code and stderr."""
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
    """What the mutations start from: the reader fuzzer's bases and the extreme traces; and the
    extreme traces' paths."""
    extreme = write_all(tmp / "extreme")
    return _base_traces(tmp) + [p.read_bytes() for p in extreme.values()], extreme


#: Consumers run under an address-space cap (:func:`_capped`): a regression that sizes an allocation
#: by an id then fails as a MemoryError instead of taking the machine. Not the ones whose libraries
#: reserve address space per thread and core (DuckDB, pyarrow): the subprocess memory test covers
#: those.
CAPPED = (
    "validate",
    "info",
    "info-json",
    "compare-images",
    "report-images",
    "stats",
    "stats-json",
    "stats-slow",
    "stats-slow-json",
    "merge",
    "compare",
    "export-csv",
    "export-perfetto",
    "export-chrome",
    "report",
)
#: Address space allowed beyond what the process has mapped when the fuzzing starts.
CAP_HEADROOM = 2 << 30


@contextlib.contextmanager
def _capped(on: bool) -> Iterator[None]:
    """RLIMIT_AS (soft) at the process's current size + :data:`CAP_HEADROOM` while the block runs;
    the previous soft limit is restored after (the hard limit is never touched)."""
    status = Path("/proc/self/status")
    if not on or not status.exists():
        yield
        return
    vm = next(
        int(line.split()[1]) * 1024
        for line in status.read_text().splitlines()
        if line.startswith("VmSize:")
    )
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
    kept = write_frames_trace(
        tmp_path / "kept-base.katra", {"s": picture_frame("s", 1), "t": picture_frame("t", 2)}
    )
    mutated_bases, extreme = bases(tmp_path)
    template = CONSUMERS[consumer]
    scratch = tmp_path / "out"
    scratch.mkdir()

    def argv(trace: Path, i: int) -> list[str]:
        return template.format(t=trace, b=base, k=kept, d=scratch, i=i).split(" ")

    # the baseline: lazy imports and caches are not the fuzzed runs' memory
    first = kept if "{k}" in template else extreme["shard"] if consumer == "merge" else base
    rc, err = run(argv(first, 0))
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
            failures.append(
                f"{what}: katra3d {' '.join(args[:3])}: exit {rc}: {err.strip()[-300:]}"
            )
        elif (
            consumer == "export-chrome"
            and rc == 0
            and (scratch / "o.json").stat().st_size < 4 * MIB
        ):
            try:
                json.loads(
                    (scratch / "o.json").read_text(encoding="utf-8"),
                    parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)),
                )
            except ValueError as exc:
                failures.append(f"{what}: chrome export is not valid JSON: {exc}")
    growth = _peak() - baseline
    allowed = 10 * largest + 64 * MIB
    print(
        f"fuzz {consumer}: {iterations} runs in {FUZZ_SECONDS:g} s, {len(failures)} failures, "
        f"peak RSS +{growth / MIB:.1f} MiB"
    )
    if growth > allowed:
        failures.append(
            f"peak RSS grew {growth / MIB:.1f} MiB over the baseline run, allowed "
            f"{allowed / MIB:.1f} MiB"
        )
    assert not failures, "\n".join(failures[:20])


def _poison(rng: random.Random, path: Path) -> str:
    """Replace a reference file the way a cloned repository can: a link to a device, a FIFO, a
    folder, nothing, too many bytes; returns what was done."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    what = rng.choice(["dev-zero", "dev-null", "fifo", "folder", "dangling", "missing", "huge"])
    if what == "dev-zero":
        path.symlink_to("/dev/zero")
    elif what == "dev-null":
        path.symlink_to("/dev/null")
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "folder":
        path.mkdir()
    elif what == "dangling":
        path.symlink_to(path.with_name("nowhere"))
    elif what == "huge":
        with path.open("wb") as f:
            f.truncate(rng.choice([70 << 10, 300 << 20]))  # sparse: bytes that are never written
    return what


def _mutate_reference(rng: random.Random, folder: Path) -> str:
    """One change to a recorded reference folder: its facts' JSON, its PNG, or
    either file replaced."""
    png = folder / f"{key_id(KEY)}.png"
    facts = png.with_suffix(".json")
    r = rng.random()
    if not all(p.is_file() and not p.is_symlink() and p.stat().st_size < MIB for p in (png, facts)):
        r = 1.0  # poisoned already (reading it here would be this test's memory): poison again
    if r < 0.35:
        try:
            facts.write_bytes(_mutate_json(rng, facts.read_bytes()))
        except RecursionError:  # nested too deep by an earlier change: leave it so
            pass
        return f"facts {facts.read_bytes()[:80]!r}"
    if r < 0.45:
        facts.write_text(
            rng.choice(
                [
                    '{"frame_index": Infinity}',
                    "[" * 50_000,
                    "",
                    "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
                    '{"a": NaN}',
                ]
            ),
            encoding="latin-1",
        )
        return "facts text"
    if r < 0.7:
        try:
            record = json.loads(facts.read_text(encoding="latin-1"))
        except (ValueError, RecursionError):  # mutated already
            record = {}
        record = record if isinstance(record, dict) else {}
        mutated = split_image(
            mutate_image(
                rng, join_image({**record, "channels": 4, "encoding": "png"}, png.read_bytes())
            )
        )
        if mutated is not None:
            record, data = mutated
            png.write_bytes(data)
            # the facts follow the PNG's claim (a large frame true to its record)
            if rng.random() < 0.5:
                facts.write_text(json.dumps(record))
        return "png"
    return f"{rng.choice(['facts', 'png'])} {_poison(rng, rng.choice([facts, png]))}"


def test_fuzz_reference_files(tmp_path: Path) -> None:
    """``run --expect-images DIR`` (its check, katra3d.harness.cli.run._check_images, without GL) on
    reference folders mutated like traces are: every check ends with an exit code or a KatraError
    (exit 2), never another exception, never a hang, and within the reading budget of the largest
    reference file."""
    from katra3d.harness.cli.run import _check_images
    from katra_trace.errors import KatraError

    trace = write_frames_trace(
        tmp_path / "kept.katra", {"s": picture_frame("s", 1), "t": picture_frame("t", 2)}
    )
    pristine = tmp_path / "pristine"
    with contextlib.redirect_stdout(io.StringIO()):
        assert _check_images(pristine, trace, ["s", "t"], update=True) == 0
        assert _check_images(pristine, trace, ["s", "t"], update=False) == 0  # the baseline
    baseline = _peak()
    rng = random.Random(int(os.environ.get("KATRA3D_FUZZ_SEED", "0")))
    refs = tmp_path / "refs"
    failures: list[str] = []
    deadline = time.monotonic() + FUZZ_SECONDS
    iterations = 0
    while time.monotonic() < deadline or iterations < 30:
        shutil.rmtree(refs, ignore_errors=True)
        shutil.copytree(pristine, refs, symlinks=True)
        done = [
            _mutate_reference(rng, refs / rng.choice(["s", "t"])) for _ in range(rng.randint(1, 2))
        ]
        update = rng.random() < 0.15
        iterations += 1
        try:
            with _deadline(), _capped(True), contextlib.redirect_stdout(io.StringIO()):
                rc = _check_images(refs, trace, ["s", "t"], update=update)
            if rc not in (0, 1, 2):
                failures.append(f"{done}: exit {rc}")
        except KatraError as exc:
            if exc.exit_code != 2 or "\n" in str(exc):
                failures.append(f"{done}: {type(exc).__name__} exit {exc.exit_code}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the finding (Hang and MemoryError included)
            failures.append(f"{done}: {type(exc).__name__}: {exc}")
    growth = _peak() - baseline
    # 10 x the largest file a check reads (under 1 MiB; larger ones are refused)
    allowed = 10 * MIB + 64 * MIB
    print(
        f"fuzz reference files: {iterations} checks in {FUZZ_SECONDS:g} s, {len(failures)} "
        "failures, "
        f"peak RSS +{growth / MIB:.1f} MiB"
    )
    if growth > allowed:
        failures.append(
            f"peak RSS grew {growth / MIB:.1f} MiB over the baseline check, allowed "
            f"{allowed / MIB:.1f}"
        )
    assert not failures, "\n".join(failures[:20])
