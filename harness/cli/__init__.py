# PYTHON_ARGCOMPLETE_OK
"""The ``katra3d`` command line: a module per subcommand whose ``register`` sets ``func`` (args ->
exit code); GL modules load only inside the commands that render."""

from __future__ import annotations

import argparse
import importlib
import io
import os
import shlex
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

import katra3d
from katra3d.harness.run.progress import show_warning
from katra3d.scenes.registry import available_scene_names
from katra3d.scenes.suites import SUITES
from katra_trace.errors import ExitCode, KatraError, signal_exit_code
from katra_trace.io.claim import describe
from katra_trace.text import escape, shown
from katra_trace.version import __version__

#: in help order
COMMANDS: tuple[str, ...] = (
    "run",
    "merge",
    "doctor",
    "info",
    "validate",
    "stats",
    "compare",
    "ab",
    "bisect",
    "scenes",
    "export",
    "report",
    "history",
)


TRACEBACK_HELP = (
    "when a scene fails, print its traceback (its own frames, katra3d's left out) before the "
    "error line; KATRA3D_DEBUG=1 does the same"
)


def show_traceback(args: argparse.Namespace | None) -> bool:
    """``--traceback`` or ``$KATRA3D_DEBUG``."""
    debug = os.environ.get("KATRA3D_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
    return debug or bool(getattr(args, "traceback", False))


def _version() -> str:
    return __version__


class KatraArgumentParser(argparse.ArgumentParser):
    """Usage errors are one line, exit code 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        words = self.prog.split()
        command = " ".join(words[1:])
        where = f"{command}: " if command else ""
        helper = f"katra3d {command} --help" if command else "katra3d --help"
        print(f"katra3d: error: {where}{escape(message)} (see '{helper}')", file=sys.stderr)
        sys.exit(ExitCode.BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = KatraArgumentParser(
        prog="katra3d",
        description="Run 3D scenes headless, time frames and draws, and inspect the traces.",
    )
    parser.add_argument("--version", action="version", version=f"katra3d {_version()}")
    parser.add_argument("--traceback", action="store_true", default=False, help=TRACEBACK_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"katra3d.harness.cli.{name}")
        module.register(sub)
    _remember_parsers(parser)
    return parser


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request; ends the process."""
    # deferred: argcomplete loads only to complete
    import argcomplete

    def scene_names(prefix: str, **_: object) -> list[str]:
        return [n for n in available_scene_names() if n.startswith(prefix)]

    def suite_names(prefix: str, **_: object) -> list[str]:
        return [n for n in SUITES if n.startswith(prefix)]

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                for option in child._actions:
                    if name in ("run", "scenes") and option.dest in ("scenes", "scene"):
                        option.completer = scene_names
                    elif name == "run" and option.dest == "suite":
                        option.completer = suite_names
    argcomplete.autocomplete(parser)


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Tag each (sub)command, so an unknown option is reported by the command it was given to."""
    parser.set_defaults(_katra_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                # --traceback after the command too; SUPPRESS keeps the top's value
                child.add_argument(
                    "--traceback",
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                )
                _remember_parsers(child)


def _check_order(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """Say where an option given before its command goes, not "invalid choice"."""
    at = next((i for i, w in enumerate(words) if w in COMMANDS), len(words))
    if not any(
        w.startswith("-") and w.partition("=")[0] not in parser._option_string_actions
        for w in words[:at]
    ):
        return
    command = words[at : at + 1] or ["COMMAND"]
    example = shlex.join(["katra3d", *command, *words[:at], *words[at + 1 :]])
    parser.error(f"options follow the command: {example}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        if katra3d._COMMAND:
            # a late Ctrl-C must not raise inside a destructor during shutdown
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _quiet_start_ended() -> None:
    """Python's Ctrl-C handler once the command is parsed (before, katra3d's exits quietly)."""
    if getattr(signal.getsignal(signal.SIGINT), "__name__", "") == "_quiet_exit":
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:
        complete(parser)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            # a non-UTF-8 file name is printed escaped, never a traceback
            stream.reconfigure(errors="backslashreplace")
    _check_order(parser, list(sys.argv[1:] if argv is None else argv))
    args, unknown = parser.parse_known_args(argv)
    if (
        unknown
        and isinstance(getattr(args, "scenes", None), list)
        and not any(word.startswith("-") for word in unknown)
    ):
        # scene names after options: argparse leaves them over, in order
        args.scenes += unknown
        unknown = []
    if unknown:
        getattr(args, "_katra_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace | None = None
    try:
        args = _parse(argv)
        _quiet_start_ended()
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show_warning
            return int(args.func(args))
    except KatraError as err:
        if err.scene_traceback and show_traceback(args):
            sys.stderr.write(err.scene_traceback)
        print(f"katra3d: error: {escape(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as exc:
        print("katra3d: interrupted", file=sys.stderr)
        return signal_exit_code(getattr(exc, "signum", signal.SIGINT))
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except OSError as exc:
        # a system refusal no check met first
        where = f"{shown(exc.filename)}: " if exc.filename is not None else ""
        print(f"katra3d: error: {where}{describe(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
