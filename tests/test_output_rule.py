"""The one output rule (katra_trace.io.claim.open_output / check_output / move_into_place) and the
faults around it: special files and links as outputs, inputs as outputs, paths the
system refuses, bytes that are not UTF-8, a ``history add`` that must never hang on a FIFO or a
device, a damaged history store, and names that would break a one-line error.

Nothing here can damage the machine when the rule breaks: device nodes are only ever reached through
a link inside tmp_path, ``os.replace`` is watched, and every test asserts the device is still a
device.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from katra_trace.errors import ConfigError, OutputExistsError, TraceIOError
from katra_trace.io import claim
from katra_trace.io.claim import check_output, move_into_place, open_output
from katra_trace.text import check_text, escape, shown
from tests.cli_helpers import katra, katra_main
from tests.export_helpers import write_rich

LONG = "x" * 300  # one path component longer than NAME_MAX (255): ENAMETOOLONG


def _trace(path: Path) -> Path:
    write_rich(path)
    return path


def _one_line(code: int, err: str, expected: int = 2) -> str:
    assert code == expected, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("katra3d: error: "), err
    return lines[0]


@pytest.fixture
def watched_replace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every os.replace made by the claim, recorded; one onto anything but a regular file fails the
    test before it happens (so no regression can swap out a device)."""
    calls: list[tuple[str, str]] = []
    real = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append((os.fspath(src), os.fspath(dst)))
        if os.path.lexists(dst):
            mode = os.lstat(dst).st_mode
            assert stat.S_ISREG(mode), f"os.replace onto {dst!r}, which is not a regular file"
        real(src, dst)

    monkeypatch.setattr(claim.os, "replace", replace)
    return calls


# --------------------------------------------------------------------------- defect 3: special
# files and links


def test_forced_output_through_a_link_to_a_device_is_refused(
    tmp_path: Path, watched_replace: list[tuple[str, str]]
) -> None:
    link = tmp_path / "latest.csv"
    link.symlink_to("/dev/null")
    with pytest.raises(ConfigError, match=r"not a regular file \(it is a character device\)"):
        with open_output(link, force=True) as f:
            f.write(b"rows")
    assert stat.S_ISCHR(os.stat(os.path.realpath(link)).st_mode)
    assert link.is_symlink() and watched_replace == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.csv"]


def test_export_force_onto_a_fifo_or_a_device_link_is_one_line_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], watched_replace: list[tuple[str, str]]
) -> None:
    trace = _trace(tmp_path / "run.katra")
    watched_replace.clear()
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    dev = tmp_path / "full.csv"
    dev.symlink_to("/dev/full")
    for target in (fifo, dev):
        code, _, err = katra_main(
            capsys, "export", str(trace), "--to", "csv", "-o", str(target), "--force"
        )
        assert "not a regular file" in _one_line(code, err)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and dev.is_symlink()
    assert stat.S_ISCHR(os.stat(dev).st_mode) and watched_replace == []


def test_a_forced_export_writes_through_a_link_and_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], watched_replace: list[tuple[str, str]]
) -> None:
    trace = _trace(tmp_path / "run.katra")
    watched_replace.clear()
    target = tmp_path / "target.csv"
    target.write_text("old")
    link = tmp_path / "latest.csv"
    link.symlink_to(target.name)
    code, _, err = katra_main(
        capsys, "export", str(trace), "--to", "csv", "-o", str(link), "--force", "--quiet"
    )
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "target.csv"
    assert target.read_text().startswith('"scene","name","kind",')
    # the replace went onto the link's target
    assert [dst for _, dst in watched_replace] == [str(target)]


def test_the_move_refuses_what_is_not_a_regular_file_at_the_last_moment(tmp_path: Path) -> None:
    src = tmp_path / "new"
    src.write_text("new")
    for make in (lambda p: p.symlink_to("/dev/null"), os.mkfifo):
        dst = tmp_path / "dst"
        make(dst)
        with pytest.raises(TraceIOError, match="became something that is not a regular file"):
            move_into_place(src, dst, replace=True)
        assert not stat.S_ISREG(os.lstat(dst).st_mode) and src.read_text() == "new"
        dst.unlink()
    move_into_place(src, tmp_path / "dst", replace=False)
    again = tmp_path / "again"
    again.write_text("again")
    with pytest.raises(OutputExistsError, match="exists; nothing was replaced"):
        move_into_place(again, tmp_path / "dst", replace=False)
    assert (tmp_path / "dst").read_text() == "new" and again.exists()


def test_one_exists_message_for_every_writer(tmp_path: Path) -> None:
    out = tmp_path / "x.katra"
    out.write_text("keep")
    with pytest.raises(OutputExistsError) as checked:
        check_output(out, option="-o")
    with pytest.raises(OutputExistsError) as claimed:
        claim.claim(out, overwrite=False)
    assert str(checked.value) == str(claimed.value)
    assert "already exists; give --force" in str(claimed.value) and out.read_text() == "keep"


# --------------------------------------------------------------------------- defect 4: the input is
# never the output


def test_a_trace_inside_an_input_directory_is_never_the_report(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    trace = _trace(runs / "a.katra")
    with pytest.raises(ConfigError, match="is one of this command's inputs"):
        check_output(trace, force=True, inputs=[runs])
    other = runs / "notes.txt"
    other.write_text("not a trace")
    # a file that is no trace may be replaced
    assert check_output(other, force=True, inputs=[runs]) == other


def test_report_and_parquet_export_never_overwrite_their_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    trace = _trace(runs / "t.katra")
    before = trace.read_bytes()
    pytest.importorskip("plotly", reason="pip install 'katra3d[export]'")
    code, _, err = katra_main(capsys, "report", str(runs), "-o", str(trace), "--force")
    assert "is one of this command's inputs" in _one_line(code, err)
    pytest.importorskip("pyarrow", reason="pip install 'katra3d[export]'")
    code, _, err = katra_main(
        capsys, "export", str(trace), "--to", "parquet", "-o", str(trace), "--force"
    )
    assert "is one of this command's inputs" in _one_line(code, err)
    assert trace.read_bytes() == before


# --------------------------------------------------------------------------- defect 13: directories
# and empty paths


def test_a_trailing_slash_or_an_empty_output_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _trace(tmp_path / "run.katra")
    monkeypatch.chdir(tmp_path)
    code, _, err = katra_main(capsys, "export", str(trace), "--to", "csv", "-o", "newdir/")
    assert "names a directory (it ends with '/')" in _one_line(code, err)
    code, _, err = katra_main(capsys, "export", str(trace), "--to", "csv", "-o", "")
    assert "empty -o path" in _one_line(code, err)
    pytest.importorskip("plotly", reason="pip install 'katra3d[export]'")
    code, _, err = katra_main(capsys, "report", str(trace), "-o", "")
    line = _one_line(code, err)
    assert "empty -o path" in line and "already exists" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.katra"]


def test_history_db_with_a_trailing_slash_or_a_missing_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb", reason="pip install 'katra3d[history]'")
    trace = _trace(tmp_path / "run.katra")
    code, _, err = katra_main(
        capsys, "history", "add", str(trace), "--label", "v1", "--db", f"{tmp_path}/newdb/"
    )
    assert "names a directory (it ends with '/')" in _one_line(code, err)
    code, _, err = katra_main(
        capsys,
        "history",
        "add",
        str(trace),
        "--label",
        "v1",
        "--db",
        str(tmp_path / "no" / "h.duckdb"),
    )
    assert "does not exist" in _one_line(code, err)
    before = trace.read_bytes()
    code, _, err = katra_main(
        capsys, "history", "add", str(trace), "--label", "v1", "--db", str(trace)
    )
    assert "is one of this command's inputs" in _one_line(code, err)
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.katra"]


# --------------------------------------------------------------------------- defect 6: paths the
# system refuses


def test_a_name_too_long_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "run.katra")
    long = str(tmp_path / LONG)
    commands = [
        ["export", str(trace), "--to", "csv", "-o", long],
        ["export", str(trace), "--to", "csv", "-o", long + "/x.csv"],
        ["stats", long],
        ["compare", long, str(trace)],
        ["info", long],
    ]
    if _have("plotly"):
        commands.append(["report", long, "-o", str(tmp_path / "r.html")])
    if _have("duckdb"):
        commands += [
            ["history", "add", long, "--label", "v1", "--db", str(tmp_path / "h.duckdb")],
            ["history", "add", str(trace), "--label", "v1", "--db", long],
            ["history", "show", "--db", long],
        ]
    for args in commands:
        code, _, err = katra_main(capsys, *args)
        assert "File name too long" in _one_line(code, err), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.katra"]


AS_NOBODY = """
import os, sys
from katra3d.harness.cli import build_parser, main
build_parser()  # every command's module, imported while the interpreter's own files are readable
import csv, io, katra_trace.export, katra_trace.analysis.compare, katra_trace.history.store
try:
    import duckdb
except ImportError:
    pass
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)  # root ignores permissions: drop to nobody
sys.exit(main(sys.argv[1:]))
"""


def test_an_unreadable_directory_is_one_line(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    trace = _trace(closed / "run.katra")
    closed.chmod(0)
    tmp_path.chmod(0o755)
    commands = [
        ["stats", str(closed)],
        ["export", str(trace), "--to", "csv", "-o", str(closed / "x.csv")],
    ]
    if _have("duckdb"):
        commands += [
            ["history", "add", str(closed), "--label", "v1", "--db", str(tmp_path / "h.duckdb")]
        ]
    try:
        for args in commands:
            res = subprocess.run(
                [sys.executable, "-c", AS_NOBODY, *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                cwd="/",
            )
            assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr)
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "Permission denied" in lines[0], (args, res.stderr)
    finally:
        closed.chmod(0o755)


def _have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- defect 8 and 14: names
# in text


def test_the_text_helpers() -> None:
    assert escape("a\nb\x1b[31m\udcff é") == "a\\nb\\x1b[31m\\udcff é"
    assert shown("a\nb") == "'a\\nb'" and shown(b"\xff.katra") == "'\\udcff.katra'"
    assert check_text("v1.2 é", "--label") == "v1.2 é"
    with pytest.raises(ConfigError, match=r"--title '\\udcff' holds bytes that are not UTF-8"):
        check_text("\udcff", "--title")
    with pytest.raises(ConfigError, match="holds control characters"):
        check_text("a\nb", "--label")


def test_text_fields_that_are_not_utf8_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "run.katra")
    if _have("plotly"):
        code, _, err = katra_main(
            capsys, "report", str(trace), "--title", "\udcff", "-o", str(tmp_path / "r.html")
        )
        assert "--title" in _one_line(code, err) and "not UTF-8" in err
    if _have("duckdb"):
        code, _, err = katra_main(
            capsys,
            "history",
            "add",
            str(trace),
            "--label",
            "\udcff",
            "--db",
            str(tmp_path / "h.duckdb"),
        )
        assert "--label" in _one_line(code, err) and "not UTF-8" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.katra"]


def test_a_file_name_that_is_not_utf8_works(tmp_path: Path) -> None:
    name = os.fsdecode(b"\xff.katra")
    write_rich(tmp_path / name)
    res = katra(b"stats", name.encode("utf-8", "surrogateescape"), cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    res = katra("export", name, "--to", "csv", cwd=tmp_path)
    assert res.returncode == 0 and "\\udcff.csv" in res.stdout, res.stderr
    assert (tmp_path / os.fsdecode(b"\xff.csv")).is_file()


def test_a_newline_in_a_name_keeps_the_error_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = katra_main(
        capsys, "export", str(tmp_path / "a\nb.katra"), "--to", "csv", "-o", str(tmp_path / "x.csv")
    )
    assert "a\\nb.katra" in _one_line(code, err)
    code, _, err = katra_main(capsys, "stats", str(tmp_path / "a\nb.katra"))
    assert "a\\nb.katra" in _one_line(code, err)
    code, _, err = katra_main(
        capsys, "run", "triangle", "--size", "1\n2", "-o", str(tmp_path / "x.katra")
    )
    assert "bad size '1\\n2'" in _one_line(code, err)  # a message that quotes a value without repr
    code, _, err = katra_main(capsys, "stats", "--format", "a\nb", str(tmp_path / "x.katra"))
    assert "a\\nb" in _one_line(code, err)  # argparse's own errors too (its exit 2)


def test_an_empty_trace_in_a_directory_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb", reason="pip install 'katra3d[history]'")
    runs = tmp_path / "runs"
    runs.mkdir()
    write_rich(runs / "a.katra")
    (runs / "b.katra").write_bytes(b"")
    code, _, err = katra_main(
        capsys, "history", "add", str(runs), "--label", "v1", "--db", str(tmp_path / "h.duckdb")
    )
    line = _one_line(code, err)
    assert "b.katra" in line and "not a katra3d trace: 0 bytes" in line
