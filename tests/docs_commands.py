"""The shell commands shown in README.md and docs/*.md, made small enough to run in a test.

Conventions (README.md and every docs/*.md):

* A fenced block whose info string is ``sh`` holds commands a reader can type;
  tests/test_docs.py runs every one of them. A ``python run`` block is a
  whole program; the test runs it with the venv's Python. Other fences
  (``python``, ``toml``, plain ```````) are fragments or output and are not run.
* ``sh no-run: REASON`` marks a block that cannot run inside the test suite
  (e.g. ``make test`` itself); the reason is required. Keep these rare.
* A ``python file=NAME`` block is a file the reader saves as NAME (a pytest test file, say): the
  test writes it into the directory the commands run in, before the commands after it.
* A command ends at the end of a line not ending in ``\\``. A trailing
  comment ``# exit N`` (or ``# exit N or M``) says which exit codes the
  command may end with; without one it must exit 0.
* The blocks of one file run in order, in one fresh temporary directory, so
  a later block may read what an earlier one wrote. Each command runs in its
  own ``bash`` with ``PATH`` starting at the test's venv, so ``katra3d`` is
  the venv's; files carry over between commands, shell state (``cd``,
  ``export``) does not.
* Before running, :func:`small` rewrites each command with :data:`REWRITES`
  (tiny sizes, few frames, few rounds), so the docs can show realistic sizes
  and the test still takes seconds. The rewrites change only how much work a
  command does, never which options it uses. A command whose ``# exit``
  marker does not allow 0 (one that shows an error) runs as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The info string of a fenced block whose commands are run.
RUN_LANG = "sh"
#: The info string of a fenced Python block that is run as a program.
PYTHON_RUN = ("python", "run")

_FENCE_RE = re.compile(r"^```\s*(?P<lang>[\w+-]*)(?P<rest>.*)$")
_NO_RUN_RE = re.compile(r"^no-run:\s*(?P<reason>\S.*)$")
_FILE_RE = re.compile(r"^file=(?P<name>[\w.-]+)$")
_EXIT_RE = re.compile(r"#\s*exit\s+(?P<codes>\d+(?:\s*(?:,|or|\|)\s*\d+)*)")

#: (pattern, replacement, why). Applied in order to every command of a run block.
#: ``katra3d run`` gets small defaults first; any size, frame count, duration,
#: warmup or suite the command names itself is then shrunk too (argparse keeps the
#: last value of an option, so both are needed).
REWRITES: tuple[tuple[str, str, str], ...] = (
    (
        r"\bkatra3d run\b(?![^\"']*--duration)",
        "katra3d run --size 32x32 --warmup 1 --frames 5",
        "every run: 32x32 pixels, 1 warmup + 5 measured frames per scene",
    ),
    (
        r"\bkatra3d run\b(?=[^\"']*--duration)",
        "katra3d run --size 32x32 --warmup 1",
        "a run by duration: 32x32 pixels, 1 warmup frame",
    ),
    (r"--frames[ =]\d+", "--frames 5", "5 measured frames"),
    (r"--duration[ =][\d.]+s?", "--duration 0.2", "0.2 s per scene"),
    (r"--warmup[ =]\d+", "--warmup 1", "1 warmup frame"),
    (r"--size[ =]\d+x\d+", "--size 32x32", "32x32 pixels"),
    (r"--suite[ =](default|stress)\b", "--suite ci", "the small suite"),
    (
        r"(\bkatra3d bisect\b.*-a \")(?![^\"]*--frames)",
        r"\1--frames 20 --warmup 1 ",
        "a time bisection's captures: 20 measured frames (the fewest a time verdict takes), 1 "
        "warmup",
    ),
    (
        r"--until-decided --rounds[ =]\d+",
        "--until-decided --rounds 3",
        "an A/B that stops when decided: a cap of 3",
    ),
    (r"(?<!--until-decided )--rounds[ =]\d+", "--rounds 2", "2 A/B rounds"),
)


def small(command: str) -> str:
    """``command`` with :data:`REWRITES` applied."""
    for pattern, replacement, _why in REWRITES:
        command = re.sub(pattern, replacement, command)
    return command


@dataclass(frozen=True)
class Command:
    """One command of a run block, as the reader sees it (continuation lines joined)."""

    path: Path
    line: int
    text: str
    exit_codes: tuple[int, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def shell_text(self) -> str:
        """What the test runs: :func:`small` of the text, or the text itself when it must fail."""
        return small(self.text) if 0 in self.exit_codes else self.text


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, first line, body and (for ``sh``) why it is not run."""

    path: Path
    line: int
    lang: str
    body: str
    no_run_reason: str | None

    marker: str = ""

    @property
    def runs(self) -> bool:
        return (
            (self.lang == RUN_LANG and self.no_run_reason is None)
            or self.is_program
            or bool(self.file_name)
        )

    @property
    def file_name(self) -> str | None:
        """A ``python file=NAME`` block: the name it is saved under, else None."""
        found = _FILE_RE.match(self.marker) if self.lang == "python" else None
        return found["name"] if found else None

    @property
    def is_program(self) -> bool:
        """A ``python run`` block: a whole program, run as a file."""
        return (self.lang, self.marker) == PYTHON_RUN

    def commands(self) -> list[Command]:
        return split_commands(self.body, self.path, self.line + 1)


def split_commands(body: str, path: Path, first_line: int) -> list[Command]:
    """The commands in a block body: one per line, ``\\`` continues a line; blank and comment lines
    skipped.
    """
    out: list[Command] = []
    pending: list[str] = []
    start = first_line
    for offset, raw in enumerate(body.splitlines()):
        line = raw.rstrip()
        if not pending:
            start = first_line + offset
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        text = " ".join(part.strip() for part in pending)
        pending = []
        match = _EXIT_RE.search(text)
        codes = tuple(int(c) for c in re.findall(r"\d+", match["codes"])) if match else (0,)
        out.append(Command(path, start, text, codes))
    if pending:
        raise ValueError(f"{path}:{start}: command ends with a line continuation")
    return out


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE_RE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start = i + 1  # 1-based line of the opening fence
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start}: fenced block is never closed")
        i += 1
        lang, rest = fence["lang"], fence["rest"].strip()
        reason: str | None = None
        if lang == RUN_LANG and rest:
            no_run = _NO_RUN_RE.match(rest)
            if no_run is None:
                raise ValueError(
                    f"{path}:{start}: unknown marker {rest!r} after ```sh "
                    "(the only one is 'no-run: REASON')"
                )
            reason = no_run["reason"]
        if lang == "python" and rest.startswith("file") and _FILE_RE.match(rest) is None:
            raise ValueError(
                f"{path}:{start}: ```python {rest}: a file block is 'file=NAME' (letters, digits, "
                ". _ -)"
            )
        out.append(Block(path, start, lang, "\n".join(body), reason, rest))
    return out


def doc_files() -> list[Path]:
    """README.md and docs/*.md, in a stable order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
