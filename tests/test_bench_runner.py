"""The bench runner (``python -m bench``): table on stdout, results.json, exit codes.

Benches run at --quick sizes; nothing here asserts on a time or a ratio's value.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import BenchContext, Row, _core, at_least, at_most, interleave, median_iqr, pair_ratios
from bench.__main__ import main
from katra_trace.errors import BackendUnavailable

REPO = Path(__file__).resolve().parent.parent


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_quick_run_prints_table_and_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = _bench("--quick", "trace-append", "trace-size", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    # The table is on stdout (no -s needed), one line per row, with its target.
    assert "katra3d bench" in done.stdout
    assert "append per event" in done.stdout and "bytes per event (zstd)" in done.stdout
    assert ">= 0.333" in done.stdout and "<= 16 bytes/event" in done.stdout
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["quick"] is True
    assert record["git"]["commit"] is None or len(record["git"]["commit"]) == 40
    assert record["machine"]["cpu_count"] >= 1
    assert [b["name"] for b in record["benches"]] == ["trace-append", "trace-size"]
    rows = record["rows"]
    assert [(r["bench"], r["name"]) for r in rows] == [
        ("trace-append", "append per event"),
        ("trace-size", "bytes per event (zstd)"),
    ]
    append, size = rows
    assert append["unit"] == "ratio" and append["value"] > 0 and append["spread"]["n"] == 3
    assert append["spread"]["q1"] <= append["value"] <= append["spread"]["q3"]
    assert append["target"] == {"op": ">=", "bound": pytest.approx(1 / 3)}
    assert size["unit"] == "bytes/event" and size["spread"]["n"] == 1
    for row in rows:
        assert row["status"] in ("pass", "miss")


def test_unknown_bench_is_bad_input(tmp_path: Path) -> None:
    done = _bench("no-such-bench", "--out", str(tmp_path / "r.json"))
    assert done.returncode == 2
    assert "unknown bench 'no-such-bench'" in done.stderr and "trace-read" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_list_names_every_bench() -> None:
    done = _bench("--list")
    assert done.returncode == 0
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert {
        "overhead",
        "overhead-capture",
        "trace-append",
        "trace-write",
        "trace-read",
        "trace-size",
    } <= set(lines)
    # the studies of bench/experiments/ are listed too, marked, and run only when named
    for name in ("noise", "image-tolerance", "zones-draws"):
        assert "[experiment]" in lines[name]
    assert "[experiment]" not in lines["overhead"]


def test_benches_named_in_the_docs_exist() -> None:
    """Every `python -m bench NAME...` that README.md, docs/ and the Makefile show names a bench
    that exists, and every `python -m bench.MODULE` they show imports."""
    import fnmatch
    import importlib
    import re

    from bench.__main__ import load_benches

    benches = load_benches()
    commands = [
        found.groups()
        for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for found in re.finditer(r"`python -m (bench[\w.]*)([^`]*)`", path.read_text("utf-8"))
    ]
    commands += re.findall(
        r"(?:python|\$\(PY\)) -m (bench[\w.]*)([^\n;)]*)", (REPO / "Makefile").read_text("utf-8")
    )
    named: set[str] = set()
    modules: set[str] = set()
    for module, rest in commands:
        if module != "bench":
            modules.add(module)
            continue
        words = rest.split()
        named.update(
            w for i, w in enumerate(words) if w[0] != "-" and (i == 0 or words[i - 1] != "--out")
        )
    assert {"overhead", "noise"} <= named and modules, "the patterns find nothing"
    unknown = sorted(n for n in named if not fnmatch.filter(benches, n))
    assert not unknown, f"the docs name benches that do not exist: {unknown}"
    for module in sorted(modules):
        importlib.import_module(module)


@pytest.fixture
def temp_benches() -> Iterator[list[str]]:
    """Benches registered for one test and removed afterwards (names listed in the yielded list)."""
    names: list[str] = []
    yield names
    for name in names:
        _core._REGISTRY.pop(name, None)


def _register(names: list[str], name: str, rows: Iterable[Row] | Exception) -> None:
    def fn(ctx: BenchContext) -> Iterable[Row]:
        if isinstance(rows, Exception):
            raise rows
        return rows

    _core.bench(name, about="test")(fn)
    names.append(name)


def test_exit_codes_strict_failures(
    tmp_path: Path, temp_benches: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    _register(temp_benches, "t-miss", [Row("slow thing", "a / b", 2.0, target=at_most(1.5))])
    _register(temp_benches, "t-pass", [Row("fast thing", "a / b", 1.0, target=at_least(0.5))])
    assert main(["-q", "t-miss", "t-pass", "--out", str(out)]) == 0  # a miss is shown, not an error
    assert main(["-q", "t-miss", "t-pass", "--strict", "--out", str(out)]) == 1
    assert main(["-q", "t-pass", "--strict", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "MISS" in table and "pass" in table

    _register(temp_benches, "t-nogl", BackendUnavailable("no EGL here"))
    assert main(["-q", "t-nogl", "t-pass", "--out", str(out)]) == 3
    record = json.loads(out.read_text(encoding="utf-8"))
    assert [r["name"] for r in record["rows"]] == ["fast thing"]  # the other bench still ran
    failures = {b["name"]: b["failure"] for b in record["benches"]}
    assert failures == {
        "t-pass": None,
        "t-nogl": {"bench": "t-nogl", "kind": "unavailable", "message": "no EGL here"},
    }

    _register(temp_benches, "t-bug", ZeroDivisionError("division by zero"))
    assert main(["-q", "t-bug", "t-nogl", "--out", str(out)]) == 2
    table = capsys.readouterr().out
    assert "ERROR" in table and "ZeroDivisionError" in table and "UNAVAILABLE" in table


def test_selection_order() -> None:
    from bench.__main__ import load_benches, select

    benches = load_benches()
    chosen = [b.name for b in select(benches, ["trace-*"])]
    assert chosen == ["trace-append", "trace-write", "trace-read", "trace-size"]
    chosen = [b.name for b in select(benches, ["trace-size", "trace-*", "overhead"])]
    assert chosen == ["trace-size", "trace-append", "trace-write", "trace-read", "overhead"]
    assert all(b.default and not b.experiment for b in select(benches, []))
    assert [b.name for b in select(benches, ["noise"])] == ["noise"]
    with pytest.raises(ValueError, match="unknown bench 'nope'"):
        select(benches, ["trace-read", "nope"])


def test_interleave_rotates_order_and_pairs_rounds() -> None:
    calls: list[str] = []
    counter = iter(range(1, 1000))

    def variant(name: str) -> Callable[[], float]:
        def fn() -> float:
            calls.append(name)
            return float(next(counter))

        return fn

    samples = interleave(
        {"a": variant("a"), "b": variant("b"), "c": variant("c")}, rounds=6, warmup=1
    )
    rounds = [tuple(calls[i : i + 3]) for i in range(0, len(calls), 3)]
    assert len(rounds) == 7
    assert set(rounds[1:]) == {
        ("a", "b", "c"),
        ("a", "c", "b"),
        ("b", "a", "c"),
        ("b", "c", "a"),
        # every order once: no position bias
        ("c", "a", "b"),
        ("c", "b", "a"),
    }
    # Sample i of each variant comes from round i (the warmup round is dropped).
    for i in range(6):
        values = sorted(samples[n][i] for n in "abc")
        assert values == [3 * (i + 1) + 1, 3 * (i + 1) + 2, 3 * (i + 1) + 3]
    assert pair_ratios({"x": [2.0, 3.0], "y": [1.0, 2.0]}, "x", "y") == [2.0, 1.5]


def test_median_iqr_and_targets() -> None:
    assert median_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, 2.0, 4.0)
    assert median_iqr([7.0]) == (7.0, 7.0, 7.0)
    assert at_most(1.02).met(1.02) and not at_most(1.02).met(1.03)
    assert at_least(0.5).met(0.5) and not at_least(0.5).met(float("nan"))
    assert Row("r", "w", 1.0).status == "info"


def test_interrupt_prints_what_finished(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "trace-size", "trace-append", "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    # trace-append (full size) runs for seconds: interrupt it once it started
    for line in proc.stderr:
        seen.append(line)
        if "[2/2] trace-append" in line:
            proc.send_signal(signal.SIGINT)
            break
    stdout, rest = proc.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert "bytes per event (zstd)" in stdout and "append per event" not in stdout
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["interrupted"] is True
    assert [r["bench"] for r in record["rows"]] == ["trace-size"]


_LOST_INTERRUPT = textwrap.dedent("""
    import os, signal, sys
    from bench import __main__ as runner
    from bench._core import Row, bench

    class Lost:
        def __del__(self):
            # Ctrl-C while the garbage collector runs a finalizer: its KeyboardInterrupt is raised
            # in here, printed as "Exception ignored" and lost
            os.kill(os.getpid(), signal.SIGINT)

    @bench("lost-interrupt", about="Ctrl-C lands in a finalizer")
    def lost(ctx):
        Lost()
        return [Row("after the lost interrupt", "a row the bench would have", 1.0)]

    sys.exit(runner.main(["lost-interrupt", "--out", sys.argv[1]]))
""")


def test_an_interrupt_lost_in_a_finalizer_still_stops_the_benches(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-c", _LOST_INTERRUPT, str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the interrupt was raised in the finalizer, as on a real Ctrl-C
    assert "Exception ignored" in done.stderr
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr and "after the lost interrupt" not in done.stdout
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["interrupted"] is True and record["rows"] == []


@pytest.mark.slow
@pytest.mark.gl
def test_overhead_benches_run_quick(tmp_path: Path) -> None:
    """The GL benches drive the public entry points (run, capture); --quick keeps it to seconds."""
    out = tmp_path / "r.json"
    done = _bench("--quick", "overhead*", "zones-draws", "--out", str(out))
    if done.returncode == 3:
        pytest.skip(f"no OpenGL context: {done.stdout[-300:]}")
    assert done.returncode == 0, done.stderr + done.stdout
    record = json.loads(out.read_text(encoding="utf-8"))
    by_bench: dict[str, list[dict[str, Any]]] = {}
    for r in record["rows"]:
        by_bench.setdefault(r["bench"], []).append(r)
    assert list(by_bench) == [
        "overhead",
        "overhead-capture",
        "overhead-cost",
        "overhead-reference",
        "zones-draws",
    ]
    # the harness's own cost in microseconds, a frame and a zone: the frame's against its target,
    # the rest reported
    cost = by_bench["overhead-cost"]
    # with the frame's cost broken down by interleaved runs that leave one part out
    assert [r["name"].strip() for r in cost] == [
        "harness per frame",
        "of which the process-clock read",
        "of which the GL error check",
        "of which the rest",
        "katra3d.capture per frame",
        "harness per zone",
    ]
    for row in cost:
        assert row["unit"] == "us" and row["spread"]["n"] == 3 and math.isfinite(row["value"])
        assert row["target"] == (
            {"op": "<=", "bound": 3.0} if row["name"] == "harness per frame" else None
        )
    rows = by_bench["overhead"] + by_bench["overhead-capture"]
    names = [r["name"] for r in rows]
    assert names == [
        f"{who} triangle 160x90 zones {z}"
        for who in ("run", "capture")
        for z in ("off", "on", "cost")
    ]
    for row in rows:
        assert row["unit"] == "ratio" and row["value"] > 0
        assert (row["target"] is not None) == row["name"].endswith("zones off")
    # the reference draw: frame wall (target) and frame-loop wall, both ratios every 4 / off
    assert [r["name"] for r in by_bench["overhead-reference"]] == [
        "reference triangle 160x90 frame",
        "reference triangle 160x90 run",
    ]
    assert [r["target"] is not None for r in by_bench["overhead-reference"]] == [True, False]
    # --zones draws / passes vs off per timing mode; gpu rows only on a hardware renderer, else one
    # skip row
    draws = {r["name"]: r for r in by_bench["zones-draws"]}
    renderer = next(
        b["facts"]["gl_renderer"] for b in record["benches"] if b["name"] == "zones-draws"
    )
    assert {"drawcalls count=100 sync zones draws", "drawcalls count=100 sync zones passes"} <= set(
        draws
    )
    for name in ("drawcalls count=100 sync zones draws", "drawcalls count=100 sync zones passes"):
        assert draws[name]["unit"] == "ratio" and draws[name]["value"] > 0
    skipped = [r for r in draws.values() if "skipped" in r["notes"]]
    if "llvmpipe" in renderer:
        # NaN: no gpu timing on a software renderer
        assert len(skipped) == 1 and skipped[0]["value"] is None
    else:
        assert "drawcalls count=100 gpu zones draws" in draws and not skipped


def test_noise_table_goes_between_the_markers_only(tmp_path: Path) -> None:
    from bench._report import write_doc
    from bench.experiments.noise import END_MARK, START_MARK
    from bench.experiments.noise import main as noise_main

    doc = tmp_path / "stats.md"
    doc.write_text(
        f"# Title\n\nbefore\n{START_MARK}\nold table\n{END_MARK}\nafter\n", encoding="utf-8"
    )
    write_doc("| new | table |", doc, (START_MARK, END_MARK))
    assert (
        doc.read_text(encoding="utf-8")
        == f"# Title\n\nbefore\n{START_MARK}\n| new | table |\n{END_MARK}\nafter\n"
    )
    write_doc("| newer |", doc, (START_MARK, END_MARK))  # regenerating replaces, never appends
    assert "| new | table |" not in doc.read_text(
        encoding="utf-8"
    ) and "| newer |" in doc.read_text(encoding="utf-8")

    bare = tmp_path / "bare.md"
    bare.write_text("no markers here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks the markers"):
        write_doc("x", bare, (START_MARK, END_MARK))
    assert bare.read_text(encoding="utf-8") == "no markers here\n"

    results = tmp_path / "r.json"
    record = {"quick": True, "benches": [{"name": "noise", "facts": {"markdown": "| quick |"}}]}
    results.write_text(json.dumps(record), encoding="utf-8")
    # a --quick table is never published
    assert noise_main(["--write-doc", str(results), str(doc)]) == 2
    assert "| quick |" not in doc.read_text(encoding="utf-8")
    record["quick"] = False
    results.write_text(json.dumps(record), encoding="utf-8")
    assert noise_main(["--write-doc", str(results), str(doc)]) == 0
    assert "| quick |" in doc.read_text(encoding="utf-8")
    assert noise_main(["--write-doc", str(tmp_path / "missing.json"), str(doc)]) == 2


def test_measure_bench_helpers() -> None:
    from bench.experiments.noise import _smallest
    from bench.measure import spearman

    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # ties share their rank
    assert spearman([1.0, 2.0, 3.0], [1.0, 1.0, 2.0]) == pytest.approx(0.8660254)
    # the smallest level caught in >= 90 % with every larger level caught too
    assert _smallest([(5.0, 0.2), (10.0, 0.95), (20.0, 1.0)]) == "+10.0 %"
    assert _smallest([(5.0, 0.95), (10.0, 0.5), (20.0, 1.0)]) == "+20.0 %"
    assert _smallest([(5.0, 0.1), (10.0, 0.5)]) == "> +10.0 %"
