"""The ``katra3d`` command line.

One module per subcommand; each defines ``register(subparsers)``, which adds
its parser and sets ``func`` (``args -> exit code``) as the parser default.
Subcommand modules are imported only to build the parser; GL modules are
imported only inside the commands that render.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings
from collections.abc import Sequence

from katra_trace.errors import KatraError

#: (subcommand module under harness.cli, in help order)
COMMANDS: tuple[str, ...] = (
    "run",
    "doctor",
    "info",
    "validate",
    "stats",
    "compare",
    "ab",
    "scenes",
)


def _version() -> str:
    from katra_trace import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="katra3d",
        description="Run 3D scenes headless, time frames and draws, and inspect the traces.",
    )
    parser.add_argument("--version", action="version", version=f"katra3d {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"harness.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = int(args.func(args))
        for w in caught:
            print(f"katra3d: warning: {w.message}", file=sys.stderr)
        return code
    except KatraError as err:
        print(f"katra3d: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("katra3d: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
