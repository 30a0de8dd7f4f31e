"""The one output check (katra_trace.io.claim.check_output): its messages, "never an input", and the
commands that use it (run -o, export -o, report -o, ab -o DIR); export's writing through links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from katra3d.harness.run.config import check_output as run_check_output
from katra_trace.errors import ConfigError, OutputExistsError, TraceIOError
from katra_trace.io.claim import check_output, check_output_dir, move_into_place, open_output
from tests.cli_helpers import katra_main
from tests.export_helpers import write_rich


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", r"empty -o/--output path: give a file name, e\.g\. -o run\.katra"),
        ("newdir/", r"names a directory \(it ends with '/'\)"),
        (
            ".",
            r"names a directory \(it is a directory, not a file\); give a file path, e\.g\. "
            r"run\.katra",
        ),
        ("missing/x.katra", r"output directory 'missing' does not exist"),
    ],
)
def test_bad_paths_get_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        check_output(name)
    assert list(tmp_path.iterdir()) == []


def test_special_files_are_refused_whatever_force_says(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for force in (False, True):
        with pytest.raises(
            ConfigError, match=r"exists and is not a regular file \(it is a pipe or FIFO\)"
        ):
            check_output(fifo, force=force)
        with pytest.raises(ConfigError, match=r"not a regular file \(it is a character device\)"):
            check_output("/dev/null", force=force)


def test_an_existing_file_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    out.write_text("keep")
    with pytest.raises(
        OutputExistsError,
        match=r"already exists; give --force \(overwrite=True in Python\) to "
        r"replace it, or choose another -o",
    ):
        check_output(out, option="-o")
    assert check_output(out, force=True) == out
    assert out.read_text() == "keep"


def test_an_input_is_never_the_output_even_with_force(tmp_path: Path) -> None:
    trace = tmp_path / "run.katra"
    trace.write_text("a trace")
    link = tmp_path / "link.katra"
    link.symlink_to(trace)
    for out in (trace, link, tmp_path / "." / "run.katra"):
        with pytest.raises(ConfigError, match="is one of this command's inputs"):
            check_output(out, force=True, inputs=[trace])
    assert (
        check_output(tmp_path / "other.katra", force=True, inputs=[trace])
        == tmp_path / "other.katra"
    )


def test_run_refuses_a_part_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "x.katra.part").write_text("a killed run's prefix")
    with pytest.raises(
        ConfigError, match=r"x\.katra\.part' exists: another katra3d run is writing"
    ):
        run_check_output(str(tmp_path / "x.katra"))
    # only the capture cares about .part
    assert check_output(tmp_path / "x.katra") == tmp_path / "x.katra"


def test_ab_output_dir_must_not_be_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        check_output_dir(afile, option="-o")
    with pytest.raises(ConfigError, match="empty -o path"):
        check_output_dir(" ", option="-o")
    assert check_output_dir(tmp_path / "new") == tmp_path / "new"


def test_export_writes_through_a_link_and_keeps_it(tmp_path: Path) -> None:
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    with open_output(link, force=True) as f:
        f.write(b"new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]


def test_the_replace_never_swaps_out_a_special_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    new = tmp_path / "new"
    new.write_text("new")
    with pytest.raises(TraceIOError, match="not a regular file"):
        move_into_place(new, fifo, replace=True)
    move_into_place(new, tmp_path / "absent", replace=True)  # nothing there: nothing to refuse


def test_export_and_report_never_overwrite_their_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.katra"
    write_rich(trace)
    before = trace.read_bytes()
    code, _, err = katra_main(
        capsys, "export", str(trace), "--to", "csv", "-o", str(trace), "--force"
    )
    assert code == 2 and len(err.splitlines()) == 1 and "is one of this command's inputs" in err, (
        err
    )
    pytest.importorskip("plotly", reason="pip install 'katra3d[export]'")
    code, _, err = katra_main(capsys, "report", str(trace), "-o", str(trace), "--force")
    assert code == 2 and len(err.splitlines()) == 1 and "is one of this command's inputs" in err, (
        err
    )
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.katra"]


def test_export_reports_a_bad_output_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the trace does not exist: the output's message comes first, as the output is checked first
    code, _, err = katra_main(
        capsys,
        "export",
        str(tmp_path / "none.katra"),
        "--to",
        "csv",
        "-o",
        str(tmp_path / "no" / "x.csv"),
    )
    assert code == 2 and "output directory" in err and "does not exist" in err, err


def test_history_parquet_output_must_not_be_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb", reason="pip install 'katra3d[history]'")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for args in (
        ["history", "add", str(tmp_path), "--label", "v1", "--parquet", str(afile)],
        ["history", "export", "--db", str(tmp_path / "h.duckdb"), "--parquet", str(afile)],
    ):
        code, _, err = katra_main(capsys, *args)
        assert (
            code == 2 and len(err.splitlines()) == 1 and "exists and is not a directory" in err
        ), err
    assert afile.read_text() == "x"
