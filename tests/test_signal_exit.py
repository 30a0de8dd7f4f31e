"""The exit code of a signal (128 + its number) has one definition, katra_trace.errors: a recorded
stop signal's name and a killed child's return code go through it, and no other module computes
it."""

from __future__ import annotations

import ast
import signal
from pathlib import Path

from katra_trace.errors import child_ended, signal_exit_code, stopped_exit_code

ROOT = Path(__file__).resolve().parent.parent
#: The one definition, and the import-time Ctrl-C handler of ``katra3d``, which runs before any
#: katra3d module may be imported (katra3d/__init__.py: the window in which a Ctrl-C could print a
#: traceback stays small).
ALLOWED = {"katra_trace/errors.py", "katra3d/__init__.py"}


def test_a_recorded_stop_signal_and_a_killed_child_exit_by_the_one_rule() -> None:
    assert stopped_exit_code("SIGTERM") == signal_exit_code(signal.SIGTERM) == 143
    assert stopped_exit_code("SIGHUP") == 129
    # as Ctrl-C
    assert stopped_exit_code("") == stopped_exit_code(None) == stopped_exit_code("SIGNOPE") == 130
    assert child_ended(-signal.SIGKILL) == ("was killed by SIGKILL", 137)
    assert child_ended(5) == ("ended with exit code 5", 2)
    assert child_ended(-1000) == ("ended with exit code -1000", 2)


def test_no_module_computes_128_plus_a_signal_itself() -> None:
    found = []
    for package in ("katra3d", "harness", "katra_trace", "scenes"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), name)):
                if (
                    isinstance(node, ast.BinOp)
                    and isinstance(node.op, (ast.Add, ast.Sub))
                    and any(
                        isinstance(side, ast.Constant) and side.value == 128
                        for side in (node.left, node.right)
                    )
                ):
                    found.append(f"{name}:{node.lineno}")
    assert not found, (
        f"128 +/- a signal outside katra_trace.errors (signal_exit_code, stopped_exit_code, "
        f"child_ended): {found}"
    )
