"""A counted run's children: every scene counted in its own valgrind child, up to ``--jobs`` at
once.

What a process ran before moves its counts (``clear`` counted 491,121 instructions a frame as the
second scene of a child and 504,586 alone), so every scene is counted in a child of its own, with a
one-scene plan (:func:`scene_plan`), whatever ``--jobs`` is: its counts are then the same with
``--jobs 1`` as with any other. Counts do not depend on what runs beside them, so up to
``plan.jobs`` children run at once (:mod:`katra3d.harness.run.jobs` decides how many). Each child
writes the trace of its scene (a part, in its dump directory) and hands back its results; the parent
joins the parts into the run's one trace in the run's order of scenes
(:func:`katra3d.harness.run.parts.join`) and the results into one.

Progress shows every child (:func:`katra3d.harness.run.progress.lane`). A stop signal (Ctrl-C)
reaches every child's process group: each finishes its trace as interrupted, no new child starts,
and the run's trace keeps every scene counted so far. A scene that fails ends the run as it would
serially: no new child starts, the running children of later scenes are killed, those of earlier
scenes finish, and the trace (set aside, as a failed run's) holds the scenes counted up to the
failed one. The dump directories are removed whatever happens; no child outlives the run
(:mod:`katra3d.harness.run.lifetime`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from katra3d.harness.engine.results import Progress
from katra3d.harness.run import lifetime, measure
from katra3d.harness.run.config import RunPlan
from katra3d.harness.run.parts import join
from katra3d.harness.run.placeholders import placeholder_plan, restore_strings
from katra3d.harness.run.progress import Relay, lane
from katra3d.scenes.suites import scene_cost
from katra_trace.errors import ConfigError, ToolUnavailable, child_ended
from katra_trace.io import claim as claim_mod
from katra_trace.profile.callgrind import Folder, profiles_on


def scene_plan(plan: RunPlan, index: int) -> RunPlan:
    """The plan the counted child of ``plan``'s ``index``-th scene (from 0) runs: that scene alone,
    the user's strings replaced by placeholders
    (:func:`katra3d.harness.run.placeholders.placeholder_plan`) and ``--jobs`` left out, so the
    child's plan, and with it its counts, is the same whatever ``--jobs`` is."""
    one = placeholder_plan(plan)
    return dataclasses.replace(
        one,
        entries=(plan.entries[index],),
        jobs=1,
        config=dataclasses.replace(one.config, jobs=None),
    )


def start_order(plan: RunPlan) -> list[int]:
    """The order the children of ``plan``'s scenes (indices from 0) start in: the run's order with
    one job; with more, the costliest first (:func:`katra3d.scenes.suites.scene_cost`'s estimate,
    ties in the run's order), so that no long scene starts last and runs alone at the end. The trace
    keeps the run's order."""
    if plan.jobs <= 1:
        return list(range(len(plan.entries)))
    frames = (plan.frames or 1) + plan.warmup
    cost = [
        scene_cost(str(getattr(e.cls, "name", "") or e.spec), e.params, plan.size, frames)
        for e in plan.entries
    ]
    return sorted(range(len(plan.entries)), key=lambda i: -cost[i])


@dataclasses.dataclass
class _Child:
    """One scene's counted child: ``index`` (from 0) in the run, its dump directory, process and
    relay.
    """

    index: int
    label: str
    dump_dir: Path
    relay: Relay
    progress: Any
    proc: subprocess.Popen[bytes] | None = None
    code: int | None = None
    handed: dict[str, Any] | None = None
    profile: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    folder: Folder = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.folder = Folder(self.dump_dir)

    @property
    def part(self) -> Path | None:
        """The child's trace: finished, else the prefix a killed child left, else None."""
        trace = self.dump_dir / measure.CHILD_TRACE
        partial = trace.with_name(trace.name + ".part")
        return trace if trace.is_file() else partial if partial.is_file() else None

    @property
    def failed(self) -> bool:
        """Whether the child ended with an error or without results (a scene failure, a crash)."""
        return self.handed is None or "error" in self.handed


def start_child(
    plan: RunPlan,
    index: int,
    *,
    progress: Progress,
    quiet: bool,
    imports: dict[str, str],
    sys_path: list[str],
    deferred: bool,
) -> _Child:
    """Start the counted child of ``plan``'s ``index``-th scene (from 0) in a new dump directory;
    its progress goes to ``progress`` (a lane of the run's display). ToolUnavailable when valgrind
    cannot be started."""
    counting = plan.counting
    if counting is None:
        raise ConfigError(
            f"--measure {plan.config.measure} does not count: nothing to run under valgrind"
        )
    dump_dir = lifetime.make_dump_dir()
    cmd = measure.child_command(
        counting.valgrind, dump_dir / measure.DUMP_BASE, counting.mode, deferred=deferred
    )
    measure.write_order(
        measure.ChildOrder(
            scene_plan(plan, index), dump_dir, tuple(cmd), deferred, imports, tuple(sys_path)
        )
    )
    relay = Relay(
        dump_dir / measure.PROGRESS_FILE,
        progress,
        None if quiet else (dump_dir / measure.STDERR_FILE, sys.stderr),
    )
    child = _Child(index, plan.entries[index].label, dump_dir, relay, progress)
    progress.phase("starting valgrind, then Python and katra3d in it (not counted)", None)
    # the child's stdin, stdout and stderr are the same kind of file whatever the parent's are (a
    # terminal, a pipe, /dev/null with --quiet): measured, each kind moved every frame's count (by
    # up to 188 of 275,000 instructions of a 16x16 clear frame); its stderr is relayed from a file
    try:
        with open(dump_dir / measure.STDERR_FILE, "wb") as err:
            child.proc = subprocess.Popen(
                cmd,
                env=measure.child_env(dump_dir),
                cwd=dump_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                preexec_fn=lifetime.die_with_parent(),
            )
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(dump_dir, ignore_errors=True)
        raise ToolUnavailable(f"cannot start valgrind: {exc}") from None
    return child


def run_counted(
    plan: RunPlan, *, progress: Progress, quiet: bool
) -> tuple[int, dict[str, Any] | None, int]:
    """Count every scene of ``plan`` in its own child, up to ``plan.jobs`` at once, and write the
    run's trace at ``plan.output`` (claimed first, as any capture does; a failed run's is set
    aside).

    Returns the children's exit code (0, or the first other in the run's order), what they handed
    back joined (:func:`katra3d.harness.run.measure.result_as_dict`'s fields, or ``{"error",
    "exit_code", ...}`` of the first failed scene; None when no child handed anything back), and the
    first stop signal this process got (0: none).
    """
    target = claim_mod.claim(plan.output, plan.config.force)
    lifetime.remove_stale_dump_dirs()
    procs: list[subprocess.Popen[bytes]] = []
    # pid -> the child's relay: it is ready once it has reported through it
    ready: dict[int, Relay] = {}
    received: list[int] = []
    children: list[_Child] = []
    published = False
    # the handlers come first: a Ctrl-C while a child is being started is noted, never lost in the
    # code it interrupted (it was: inside fork's at-fork handlers, as an 'Exception ignored')
    with lifetime.forward_signals(
        procs, lambda p: p.pid in ready and ready[p.pid].calls > 0, received
    ):
        try:
            imports, sys_path = measure.scene_imports(plan)
            measure.compile_sources(imports.values())
            deferred = measure.instrumentation_deferred()
            failed_at = len(plan.entries)
            running: list[_Child] = []
            upcoming = iter(start_order(plan))
            while True:
                while (
                    len(running) < max(1, plan.jobs)
                    and not received
                    and failed_at == len(plan.entries)
                ):
                    index = next(upcoming, None)
                    if index is None:
                        break
                    shown = lane(progress, index + 1, len(plan.entries), plan.entries[index].label)
                    child = start_child(
                        plan,
                        index,
                        progress=shown,
                        quiet=quiet,
                        imports=imports,
                        sys_path=sys_path,
                        deferred=deferred,
                    )
                    assert child.proc is not None
                    children.append(child)
                    running.append(child)
                    ready[child.proc.pid] = child.relay
                    procs.append(child.proc)
                    # stopped while the child was being started: it has counted nothing
                    if received:
                        lifetime.signal_group(child.proc, signal.SIGKILL)
                if not running:
                    break
                _wait_a_while(running)
                for child in list(running):
                    child.relay.poll()
                    if profiles_on():
                        child.folder.fold()  # the kept dumps read as they come: few on disk
                    assert child.proc is not None
                    if child.proc.poll() is None:
                        continue
                    _ended(child)
                    running.remove(child)
                    if child.failed and not received and child.index < failed_at:
                        failed_at = child.index
                        for later in running:  # serially, the scenes after a failed one never run
                            if later.index > failed_at and later.proc is not None:
                                lifetime.signal_group(later.proc, signal.SIGKILL)
            kept = sorted((c for c in children if c.index <= failed_at), key=lambda c: c.index)
            failed = failed_at < len(plan.entries) and not received
            handed = _handed(kept, failed, received)
            parts = [c.part for c in kept if c.part is not None]
            status = (
                "aborted"
                if failed
                else "interrupted"
                if received or len(kept) < len(plan.entries)
                else "complete"
            )
            if parts:
                with os.fdopen(os.dup(target.fd), "wb") as dst:
                    joined = join(
                        parts,
                        dst,
                        status=status,
                        codec=plan.config.codec,
                        update=_update(plan),
                        profiles={c.part: c.profile for c in kept if c.part is not None},
                    )
                if joined.parts:
                    at = claim_mod.place(target, empty_failure=False, aside=failed)[1]
                    published = True
                    if failed and handed is not None:
                        handed["kept"] = None if at is None else str(at)
            code = next((c.code for c in kept if c.code), 0) or 0
            return code, handed, received[0] if received else 0
        finally:
            for child in children:
                # torn down: leave no child behind
                if child.proc is not None and child.proc.poll() is None:
                    lifetime.signal_group(child.proc, signal.SIGKILL)
                    child.proc.wait()
                with contextlib.suppress(AttributeError):
                    child.progress.close()
                shutil.rmtree(child.dump_dir, ignore_errors=True)
            if not published:
                claim_mod.discard(target)
            else:
                with contextlib.suppress(OSError):
                    os.close(target.fd)


def _wait_a_while(running: list[_Child]) -> None:
    """Wait until the first running child ends, or :data:`katra3d.harness.run.measure.POLL_S`
    seconds.
    """
    proc = running[0].proc
    if proc is None:
        time.sleep(measure.POLL_S)
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=measure.POLL_S)


def _ended(child: _Child) -> None:
    """Take in what an ended child left: its exit code, its last progress, what it handed back."""
    assert child.proc is not None
    child.code = child.proc.wait()
    child.relay.poll()
    child.handed = measure.handed_back(child.dump_dir)
    if profiles_on():
        child.profile = child.folder.records(child.label)
    if child.handed is None:  # killed, or crashed before handing anything back
        code = child.code
        how, exit_code = child_ended(code)
        child.handed = {
            "error": f"scene '{child.label}': its child {how}; it handed back no results",
            "exit_code": exit_code,
            "no_results": True,
        }


def _handed(kept: list[_Child], failed: bool, received: list[int]) -> dict[str, Any] | None:
    """The results of the ``kept`` children joined in the run's order, or the first failed one's
    error.
    """
    if failed:
        first = next(c for c in kept if c.failed)
        return dict(first.handed or {})
    results = [c.handed for c in kept if c.handed is not None and "error" not in c.handed]
    if not results:
        return None if received else dict(kept[0].handed or {}) if kept else None
    joined = dict(results[0])
    joined["scenes"] = [scene for r in results for scene in r.get("scenes", [])]
    stopped = next((r for r in results if r.get("status") == "interrupted"), None)
    if stopped is not None or received:
        joined["status"] = "interrupted"
        joined["signal_name"] = (stopped or {}).get("signal_name") or signal.Signals(
            received[0]
        ).name
    return joined


def _update(plan: RunPlan) -> Any:
    """The joined header's update: the user's strings put back where the children wrote
    placeholders.
    """
    return restore_strings(plan)


__all__ = ["run_counted", "scene_plan", "start_child", "start_order"]
