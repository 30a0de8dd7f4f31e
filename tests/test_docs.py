"""The documentation tells the truth about the command line.

* Every ``sh`` block in README.md and docs/*.md runs, at a small size, and
  ends with the exit code it shows. The conventions (``sh no-run: REASON``,
  ``# exit N``, the rewrite table that shrinks sizes and frame counts) are in
  tests/docs_commands.py.
* docs/cli.md has a section for every subcommand registered in
  ``katra3d.harness.cli.COMMANDS`` and names every option of its parser.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs_commands import (
    REPO,
    REWRITES,
    Block,
    Command,
    blocks,
    doc_files,
    small,
    split_commands,
)

#: Seconds one documented command may take at the small size before the test gives up on it.
COMMAND_TIMEOUT_S = 180
CLI_MD = REPO / "docs" / "cli.md"


def _runnable(path: Path) -> bool:
    try:
        return any(b.runs for b in blocks(path))
    except ValueError:
        return True  # let the test report the parse error


def _doc_id(path: Path) -> str:
    return str(path.relative_to(REPO))


RUN_FILES = [p for p in doc_files() if _runnable(p)]


# --- the extractor itself --------------------------------------------------------------------


def test_every_doc_parses() -> None:
    """Fences close, and ```sh carries no marker but 'no-run: REASON'."""
    for path in doc_files():
        blocks(path)


def test_fence_markers(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(
        "text\n```sh\nkatra3d scenes\n```\n```sh no-run: needs a real GPU\nkatra3d run x\n```\n"
        "```python\nprint(1)\n```\n```\nplain\n```\n```python run\nprint(2)\n```\n"
    )
    found = blocks(doc)
    assert [(b.lang, b.line, b.runs, b.no_run_reason) for b in found] == [
        ("sh", 2, True, None),
        ("sh", 5, False, "needs a real GPU"),
        ("python", 8, False, None),
        ("", 11, False, None),
        ("python", 14, True, None),
    ]
    assert [b.is_program for b in found] == [False, False, False, False, True]
    doc.write_text(
        "```python file=test_mine.py\ndef test_x():\n    pass\n```\n```python\nx = 1\n```\n"
    )
    saved, fragment = blocks(doc)
    assert (saved.file_name, saved.runs, saved.is_program) == ("test_mine.py", True, False)
    assert (fragment.file_name, fragment.runs) == (None, False)
    doc.write_text("```python file=../x.py\npass\n```\n")
    with pytest.raises(ValueError, match="file=NAME"):
        blocks(doc)
    doc.write_text("```sh skip\nkatra3d scenes\n```\n")
    with pytest.raises(ValueError, match="unknown marker 'skip'"):
        blocks(doc)
    doc.write_text("```sh no-run:\nkatra3d scenes\n```\n")
    with pytest.raises(ValueError, match="unknown marker"):
        blocks(doc)
    doc.write_text("```sh\nkatra3d scenes\n")
    with pytest.raises(ValueError, match="never closed"):
        blocks(doc)


def test_split_commands() -> None:
    body = (
        "# a comment line\n\nkatra3d doctor   # --json for scripts\n"
        'katra3d ab --base "a {out}" \\\n   --new "b {out}"   # exit 0 or 1\n'
        "katra3d validate bad.katra  # exit 2\n"
    )
    cmds = split_commands(body, REPO / "x.md", 10)
    assert [(c.line, c.exit_codes) for c in cmds] == [(12, (0,)), (13, (0, 1)), (15, (2,))]
    assert cmds[1].text == 'katra3d ab --base "a {out}" --new "b {out}"   # exit 0 or 1'
    with pytest.raises(ValueError, match="continuation"):
        split_commands("katra3d run \\\n", REPO / "x.md", 1)


def test_small_rewrites() -> None:
    assert small("katra3d run geometry --frames 200 --zones --size 1280x720 -o t.katra") == (
        "katra3d run --size 32x32 --warmup 1 --frames 5 geometry --frames 5 --zones --size 32x32 "
        "-o t.katra"
    )
    assert (
        small("katra3d run --suite default")
        == "katra3d run --size 32x32 --warmup 1 --frames 5 --suite ci"
    )
    assert small("katra3d run triangle --duration 10") == (
        "katra3d run --size 32x32 --warmup 1 triangle --duration 0.2"
    )
    ab = small(
        'katra3d ab --base "katra3d run a --frames 300 -o {out}" --new "katra3d run a --duration 3 '
        '-o {out}" --rounds 6'
    )
    assert ab == (
        'katra3d ab --base "katra3d run --size 32x32 --warmup 1 --frames 5 a --frames 5 -o {out}" '
        '--new "katra3d run --size 32x32 --warmup 1 a --duration 0.2 -o {out}" --rounds 2'
    )
    assert small("katra3d stats t.katra --zones") == "katra3d stats t.katra --zones"
    assert all(why for _p, _r, why in REWRITES)


def test_failing_commands_run_as_written() -> None:
    bad, good = split_commands(
        "katra3d run geometry --size 0x5  # exit 2\nkatra3d run geometry --size 640x360\n",
        REPO / "x.md",
        1,
    )
    assert bad.shell_text == bad.text
    assert good.shell_text == "katra3d run --size 32x32 --warmup 1 --frames 5 geometry --size 32x32"


# --- the documented commands run -------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KATRA3D_BACKEND", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _run(
    command: Command, cwd: Path, env: dict[str, str], program: Block | None = None
) -> str | None:
    """Run one documented command (or a ``python run`` program, or save a ``python file=NAME``
    block); what went wrong, or None."""
    if program is not None and program.file_name:
        (cwd / program.file_name).write_text(program.body + "\n", encoding="utf-8")
        return None
    if program is None:
        shell_text = command.shell_text
        argv = ["bash", "-c", shell_text]
    else:
        script = cwd / f"doc_program_line{program.line}.py"
        script.write_text(program.body + "\n", encoding="utf-8")
        shell_text = f"python {script.name}"
        argv = [sys.executable, script.name]
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{command.where}: `{shell_text}` did not finish in {COMMAND_TIMEOUT_S} s"
    problems = []
    if proc.returncode not in command.exit_codes:
        problems.append(
            f"exit code {proc.returncode}, the doc allows "
            f"{' or '.join(map(str, command.exit_codes))}"
        )
    if "Traceback (most recent call last)" in proc.stderr + proc.stdout:
        problems.append("printed a traceback")
    if not problems:
        return None
    return (
        f"{command.where}: `{command.text}`\n  ran as: {shell_text}\n  "
        + "; ".join(problems)
        + f"\n  stderr (last 1500 chars): {proc.stderr[-1500:]}\n  stdout (last 800 chars): "
        f"{proc.stdout[-800:]}"
    )


@pytest.mark.gl
@pytest.mark.parametrize("doc", RUN_FILES, ids=_doc_id)
@pytest.mark.slow
def test_documented_commands_run(doc: Path, tmp_path: Path, gl_ctx: Any) -> None:
    """Every command of every ``sh`` block (and every ``python run`` program) of ``doc``, in order,
    in one fresh directory."""
    env = _env()
    steps: list[tuple[Command, Block | None]] = []
    for block in blocks(doc):
        if block.is_program or block.file_name:
            steps.append(
                (Command(block.path, block.line, f"python block at line {block.line}", (0,)), block)
            )
        elif block.runs:
            steps.extend((c, None) for c in block.commands())
    assert steps, f"{_doc_id(doc)}: runnable blocks without commands"
    failures = [f for f in (_run(c, tmp_path, env, program) for c, program in steps) if f]
    assert not failures, "\n\n".join(failures)


def test_no_run_blocks_are_rare() -> None:
    """Blocks kept out of the test: each says why, and they stay few."""
    skipped = [b for p in doc_files() for b in blocks(p) if b.lang == "sh" and not b.runs]
    assert len(skipped) <= 3, [f"{_doc_id(b.path)}:{b.line}: {b.no_run_reason}" for b in skipped]


def test_readme_opens_with_the_two_setup_commands() -> None:
    first = blocks(REPO / "README.md")[0]
    assert [c.text.split("#")[0].strip() for c in first.commands()] == ["make run", "make test"]


# --- docs/cli.md covers the parser -----------------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from katra3d.harness.cli import COMMANDS, build_parser

    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    choices: dict[str, argparse.ArgumentParser] = dict(action.choices)
    assert set(COMMANDS) <= set(choices)
    return {name: choices[name] for name in COMMANDS}


def _cli_sections() -> dict[str, str]:
    """docs/cli.md's ``## `katra3d NAME``` sections: name -> text up to the next ``## ``."""
    text = CLI_MD.read_text(encoding="utf-8")
    heads = list(re.finditer(r"^## `katra3d (\w[\w-]*)`\s*$", text, re.M))
    out: dict[str, str] = {}
    for head in heads:
        nxt = re.compile(r"^## ", re.M).search(text, head.end())
        out[head[1]] = text[head.end() : nxt.start() if nxt else len(text)]
    return out


def test_cli_md_has_a_section_per_command() -> None:
    sections = _cli_sections()
    missing = [name for name in _subparsers() if name not in sections]
    assert not missing, f"docs/cli.md has no '## `katra3d NAME`' section for: {', '.join(missing)}"
    stale = [name for name in sections if name not in _subparsers()]
    assert not stale, f"docs/cli.md documents commands that do not exist: {', '.join(stale)}"


def test_cli_md_names_every_option() -> None:
    """Each option (its long form, or its metavar for a positional) appears in its command's
    section.
    """
    sections = _cli_sections()
    missing: list[str] = []
    for name, sub in _subparsers().items():
        text = sections.get(name, "")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue  # hidden options (kept for old scripts) need no documentation
            if action.option_strings:
                long = [
                    o for o in action.option_strings if o.startswith("--")
                ] or action.option_strings
                found = any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in long)
                label = "/".join(action.option_strings)
            else:
                label = str(action.metavar or action.dest)
                found = re.search(rf"\b{re.escape(label)}\b", text) is not None
            if not found:
                missing.append(f"{name} {label}")
    assert not missing, "docs/cli.md does not mention: " + ", ".join(missing)
