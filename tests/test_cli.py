"""The CLI's usage errors: one line, exit 2, no usage dump, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args",
    [
        ("bogus",),
        (),
        ("run", "--bogus"),
        ("info",),
        ("validate", "a", "b"),
        ("stats",),
        ("compare", "onlyone"),
    ],
)
def test_usage_errors_are_one_line(katra_cli, args: tuple[str, ...]) -> None:  # noqa: ANN001
    r = katra_cli(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("katra3d: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "usage:" not in r.stderr and "Traceback" not in r.stderr


def test_version(katra_cli) -> None:  # noqa: ANN001
    from katra_trace import __version__

    r = katra_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"katra3d {__version__}"


def test_unknown_option_points_at_the_subcommands_help() -> None:
    import subprocess
    import sys
    from pathlib import Path

    katra3d = str(Path(sys.executable).with_name("katra3d"))
    for args, helper in (
        (["run", "--bogus"], "katra3d run --help"),
        (["history", "show", "--bogus"], "katra3d history show --help"),
    ):
        res = subprocess.run([katra3d, *args], capture_output=True, text=True, check=False)
        assert res.returncode == 2
        assert res.stderr.strip().splitlines() == [
            f"katra3d: error: {' '.join(args[:-1])}: unrecognized arguments: --bogus (see "
            f"'{helper}')"
        ]


@pytest.mark.parametrize(
    ("args", "example"),
    [
        (("--frames", "10", "run", "triangle"), "katra3d run --frames 10 triangle"),
        (
            ("--traceback", "--size=8x8", "stats", "t.katra"),
            "katra3d stats --traceback --size=8x8 t.katra",
        ),
        (("--frames", "10"), "katra3d COMMAND --frames 10"),
    ],
)
def test_a_commands_option_before_the_command_says_where_it_goes(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], example: str
) -> None:
    from tests.cli_helpers import katra_main

    code, _, err = katra_main(capsys, *args)
    assert (code, err) == (
        2,
        f"katra3d: error: options follow the command: {example} (see 'katra3d --help')\n",
    )


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no thread on one core")
def test_the_command_starts_no_openblas_threads_and_passes_on_no_setting() -> None:
    """The command imports numpy with one OpenBLAS thread (its threads, started at the import, cost
    every command CPU); a program that imports katra3d keeps its own, and no child inherits it."""
    probe = (
        "import os, sys; sys.argv[0] = {argv0!r}; import katra3d, numpy; "
        "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    counts = {}
    for argv0 in ("/usr/local/bin/katra3d", "app.py"):
        out = subprocess.run(
            [sys.executable, "-c", probe.format(argv0=argv0)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout.split()
        counts[argv0] = int(out[0])
        assert out[1] == "False"
    assert counts["/usr/local/bin/katra3d"] == 1 < counts["app.py"]
