"""TraceWriter claims its output atomically: no capture destroys an existing file or another
capture, and a crashed capture's prefix stays in ``<path>.part`` (katra_trace/io/claim.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from katra_trace import (
    Clock,
    Kind,
    OutputBusyError,
    OutputExistsError,
    TraceRecoveryWarning,
    TraceWriter,
    open_trace,
)
from tests.trace_helpers import frame_zone_stream, write_trace

REPO = Path(__file__).resolve().parent.parent
STRINGS = ["", "scene", "frame", "a", "b", "c"]


def _existing(path: Path, frames: int = 20) -> bytes:
    write_trace(path, frame_zone_stream(frames), STRINGS)
    return path.read_bytes()


def test_an_existing_trace_is_never_replaced_without_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "keep.katra"
    data = _existing(path)
    with pytest.raises(
        OutputExistsError,
        match=r"already exists; give --force \(overwrite=True in Python\) to replace it, or choose "
        r"another -o",
    ):
        TraceWriter(path)
    assert path.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == [
        "keep.katra"
    ]


@pytest.mark.parametrize("how", ["exception", "interrupt", "status"])
def test_a_failed_capture_with_no_events_keeps_the_existing_file_even_with_overwrite(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "keep.katra"
    data = _existing(path)
    if how == "status":
        TraceWriter(path, overwrite=True).finish({"error": "setup raised"}, status="aborted")
    else:
        exc: BaseException = (
            RuntimeError("setup raised") if how == "exception" else KeyboardInterrupt()
        )
        with pytest.raises(type(exc)):
            with TraceWriter(path, overwrite=True):
                raise exc
    assert path.read_bytes() == data  # still the old 80 events
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.katra"]  # and no .part left behind


def test_overwrite_replaces_with_a_capture_that_recorded_events(tmp_path: Path) -> None:
    path = tmp_path / "t.katra"
    _existing(path)
    with pytest.raises(RuntimeError):
        with TraceWriter(path, overwrite=True) as w:
            w.append(Kind.FRAME, Clock.WALL, 0, w.intern("frame"), 0, 0, 0, 5)
            raise RuntimeError("scene failed after one frame")
    t = open_trace(path, strict=True)
    assert t.status == "aborted" and len(t.events) == 1
    w = TraceWriter(path, overwrite=True)
    w.finish()  # a complete capture replaces, even with no events: the user asked for it
    assert open_trace(path, strict=True).status == "complete" and len(open_trace(path).events) == 0


def test_the_part_file_is_where_the_capture_lives_until_finish(tmp_path: Path) -> None:
    path = tmp_path / "t.katra"
    w = TraceWriter(path, batch_events=8)
    assert w.final_path == path and w.part_path == tmp_path / "t.katra.part"
    assert w.part_path.exists() and not path.exists()
    w.append_array(frame_zone_stream(5))
    w.finish()
    assert (
        path.exists()
        and not w.part_path.exists()
        and len(open_trace(path, strict=True).events) == 20
    )


def test_a_file_that_appears_meanwhile_is_kept_and_the_capture_stays_in_the_part(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.katra"
    w = TraceWriter(path, batch_events=8)
    w.append_array(frame_zone_stream(5))
    path.write_bytes(b"somebody else's file")
    with pytest.raises(
        OutputExistsError, match=r"appeared while this capture ran .* kept in .*t\.katra\.part"
    ) as info:
        w.finish()
    assert info.value.part_path == str(w.part_path)
    assert path.read_bytes() == b"somebody else's file"
    # complete, under its temporary name
    assert len(open_trace(w.part_path, strict=True).events) == 20


HOLD_SCRIPT = textwrap.dedent("""
    import sys
    from katra_trace import TraceWriter, Kind, Clock
    w = TraceWriter(sys.argv[1], batch_events=100)
    name = w.intern("frame")
    for i in range(250):
        w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500)
    w.flush()
    print("ready", flush=True)
    sys.stdin.readline()  # hold the claim until told
    w.finish()
    print("done", flush=True)
""")

TRY_SCRIPT = textwrap.dedent("""
    import json, sys
    from katra_trace import TraceWriter, KatraError
    try:
        w = TraceWriter(sys.argv[1])
    except KatraError as err:
        print(json.dumps([type(err).__name__, err.exit_code, str(err)]))
    else:
        w.finish()
        print(json.dumps(["ok", 0, ""]))
""")


def _try(path: Path) -> list:  # type: ignore[type-arg]
    import json

    r = subprocess.run(
        [sys.executable, "-c", TRY_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_live_writer_holds_its_path_against_another_process(tmp_path: Path) -> None:
    path = tmp_path / "same.katra"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_SCRIPT, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "ready"
        kind, code, message = _try(path)
        assert kind == "OutputBusyError" and code == 2
        assert (
            f"another katra3d run (pid {holder.pid}) is writing" in message and "\n" not in message
        )
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "done"
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert holder.returncode == 0
    t = open_trace(path, strict=True)
    assert len(t.events) == 250 and t.header.pid == holder.pid
    assert _try(path)[0] == "OutputExistsError"


RACE_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from katra_trace import TraceWriter, KatraError, Kind, Clock
    path, go = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        w = TraceWriter(path, batch_events=64)
    except KatraError as err:
        print(json.dumps([type(err).__name__, err.exit_code]))
        sys.exit(0)
    name = w.intern("frame")
    for i in range(300):
        w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500, value=float(os.getpid()))
    w.finish()
    print(json.dumps(["ok", 0]))
""")


def test_concurrent_writers_of_one_path_one_wins_the_others_refuse(tmp_path: Path) -> None:
    """Real processes released together: the old writer let 2 of 4 such races corrupt the file."""
    import json

    for trial in range(3):
        path, go = tmp_path / f"race{trial}.katra", tmp_path / f"go{trial}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACE_SCRIPT, str(path), str(go)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            for _ in range(4)
        ]
        go.touch()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            results.append((p.pid, json.loads(out)))
        winners = [pid for pid, r in results if r[0] == "ok"]
        assert len(winners) == 1, results
        assert all(
            r[0] in ("OutputBusyError", "OutputExistsError") and r[1] == 2
            for _, r in results
            if r[0] != "ok"
        )
        t = open_trace(path, strict=True)
        assert len(t.events) == 300 and t.header.pid == winners[0]
        assert set(t.events["value"].tolist()) == {float(winners[0])}
        assert not path.with_name(path.name + ".part").exists()


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from katra_trace import TraceWriter, Kind, Clock
    w = TraceWriter(sys.argv[1], batch_events=100, batch_ms=60_000)
    name = w.intern("frame")
    for i in range(1000):
        w.append(Kind.FRAME, Clock.WALL, 0, name, i, 0, i * 1000, 500)
    w.flush()
    print("flushed", flush=True)
    sys.stdin.readline()
""")


def test_sigkill_leaves_a_readable_part_that_the_next_writer_refuses_to_touch(
    tmp_path: Path,
) -> None:
    path = tmp_path / "k.katra"
    old = _existing(path)  # an earlier trace at the same path, replaced only on success
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILL_SCRIPT.replace("sys.argv[1]", "sys.argv[1], overwrite=True"),
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "flushed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdin.close()
    proc.stdout.close()
    part = tmp_path / "k.katra.part"
    assert path.read_bytes() == old  # the old trace is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRecoveryWarning)
        t = open_trace(part)
    assert len(t.events) == 1000 and t.status == "incomplete"
    data = part.read_bytes()
    with pytest.raises(OutputExistsError):
        TraceWriter(path)
    with pytest.raises(
        OutputBusyError, match=rf"never finished \(pid {proc.pid}; killed or crashed\).*`mv "
    ) as info:
        TraceWriter(path, overwrite=True)
    assert info.value.stale and info.value.pid == proc.pid and "\n" not in str(info.value)
    # nothing deleted, nothing replaced
    assert part.read_bytes() == data and path.read_bytes() == old


def test_a_symlink_is_followed_and_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "real.katra"
    data = _existing(target)
    link = tmp_path / "link.katra"
    link.symlink_to(target)
    with pytest.raises(OutputExistsError, match="real.katra' already exists"):
        TraceWriter(link)
    w = TraceWriter(link, overwrite=True, batch_events=8)
    assert w.final_path == target and w.part_path == tmp_path / "real.katra.part"
    w.append_array(frame_zone_stream(2))
    w.finish()
    assert (
        link.is_symlink()
        and len(open_trace(link, strict=True).events) == 8
        and target.read_bytes() != data
    )


def test_a_name_that_only_its_part_makes_too_long_says_so(tmp_path: Path) -> None:
    from katra_trace import TraceIOError

    with pytest.raises(
        TraceIOError, match=r"ENAMETOOLONG\) \(it is written as .*\.part' until it is complete"
    ):
        TraceWriter(tmp_path / ("n" * 248 + ".katra"))


def test_a_claimed_part_is_locked_from_the_moment_it_has_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created by name and then locked, a second run could find the .part in between, unlocked, and
    call a live capture a dead one's leftover (it happened once to two runs started together). It is
    born locked."""
    import errno
    import fcntl
    import os

    from katra_trace.io import claim as claim_mod

    real_link = os.link
    seen: list[bool] = []

    def link_and_look(src: str, dst: str, **kw: object) -> None:
        real_link(src, dst, **kw)  # type: ignore[arg-type]
        fd = os.open(dst, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            seen.append(False)
        except BlockingIOError:
            seen.append(True)
        finally:
            os.close(fd)

    monkeypatch.setattr(os, "link", link_and_look)
    c = claim_mod.claim(tmp_path / "t.katra", overwrite=False)
    assert seen == [True] and (tmp_path / "t.katra.part").is_file()
    with pytest.raises(claim_mod.OutputBusyError, match="another katra3d run"):
        claim_mod.claim(tmp_path / "t.katra", overwrite=False)
    claim_mod.discard(c)

    def no_link(src: str, dst: str, **kw: object) -> None:
        raise OSError(errno.EPERM, "not here")

    # a file system that cannot link an unnamed file: by name
    monkeypatch.setattr(os, "link", no_link)
    c = claim_mod.claim(tmp_path / "u.katra", overwrite=False)
    with pytest.raises(claim_mod.OutputBusyError, match="another katra3d run"):
        claim_mod.claim(tmp_path / "u.katra", overwrite=False)
    claim_mod.discard(c)
