"""A counted run: each scene in its own valgrind child (what a process ran before moves its
counts), up to ``--jobs`` at once; a failed scene kills later scenes' children."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from katra3d.harness.engine.results import ProgressSink
from katra3d.harness.run import lifetime, measure, protocol
from katra3d.harness.run.config import RunPlan
from katra3d.harness.run.parts import join
from katra3d.harness.run.progress import Relay, lane
from katra3d.harness.run.protocol import ChildResult
from katra3d.harness.supervisor import Group, Supervisor
from katra3d.scenes.suites import scene_cost
from katra_trace.errors import ConfigError, ToolUnavailable, TraceIOError, child_ended
from katra_trace.io import claim as claim_mod
from katra_trace.profile.callgrind import Folder, profiles_on
from katra_trace.profile.model import ProfileRecord


def scene_plan(plan: RunPlan, index: int) -> RunPlan:
    """The ``index``-th scene alone, with stand-in strings and no ``--jobs``."""
    one = protocol.child_plan(plan)
    return dataclasses.replace(
        one,
        entries=(plan.entries[index],),
        jobs=1,
        config=dataclasses.replace(one.config, jobs=None),
    )


def start_order(plan: RunPlan) -> list[int]:
    """The run's order with one job, else costliest first (no long scene alone at the end)."""
    if plan.jobs <= 1:
        return list(range(len(plan.entries)))
    frames = (plan.frames or 1) + plan.warmup
    cost = [scene_cost(e.name, e.params, plan.size, frames) for e in plan.entries]
    return sorted(range(len(plan.entries)), key=lambda i: -cost[i])


@dataclasses.dataclass
class _Child:
    index: int
    label: str
    dump_dir: Path
    relay: Relay
    progress: Any
    proc: subprocess.Popen[bytes] | None = None
    group: Group | None = None
    code: int | None = None
    handed: ChildResult | None = None
    profile: list[ProfileRecord] = dataclasses.field(default_factory=list)
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
        return self.handed is None or self.handed.failed


def start_child(
    plan: RunPlan,
    index: int,
    *,
    sup: Supervisor,
    progress: ProgressSink,
    quiet: bool,
    imports: dict[str, str],
    sys_path: list[str],
    deferred: bool,
) -> _Child:
    """Start the ``index``-th scene's child; ToolUnavailable when valgrind cannot start."""
    counting = plan.counting
    if counting is None:
        raise ConfigError(
            f"--measure {plan.config.measure} does not count: nothing to run under valgrind"
        )
    dump_dir = lifetime.make_dump_dir()
    cmd = measure.child_command(
        counting.valgrind, dump_dir / measure.DUMP_BASE, counting.mode, deferred=deferred
    )
    protocol.write_order(
        protocol.ChildOrder(
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
    # the same kind of stdio whatever the parent's (each kind moves counts)
    try:
        with open(dump_dir / measure.STDERR_FILE, "wb") as err:
            child.group = sup.start(
                cmd,
                policy="signals",
                ready=lambda: relay.calls > 0,
                env=measure.child_env(dump_dir),
                cwd=dump_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
            child.proc = child.group.proc
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(dump_dir, ignore_errors=True)
        raise ToolUnavailable(f"cannot start valgrind: {exc}") from None
    return child


def run_counted(
    plan: RunPlan, target: claim_mod.Claim, *, progress: ProgressSink, quiet: bool
) -> tuple[int, ChildResult | None, int]:
    """Count every scene in its own child and join their traces into ``target`` (the claimed
    ``plan.output``). Returns the first non-zero exit code, the results joined (None: nothing came
    back), and the first stop signal (0: none)."""
    lifetime.remove_stale_dump_dirs()
    children: dict[int, _Child] = {}
    published = False
    n = len(plan.entries)
    # handlers first: a Ctrl-C during a child's start is not lost
    with Supervisor() as sup:
        try:
            imports, sys_path = measure.scene_imports(plan)
            measure.compile_sources(imports.values())
            deferred = measure.instrumentation_deferred()

            def begin(index: int) -> None:
                shown = lane(progress, index + 1, n, plan.entries[index].label)
                children[index] = start_child(
                    plan,
                    index,
                    sup=sup,
                    progress=shown,
                    quiet=quiet,
                    imports=imports,
                    sys_path=sys_path,
                    deferred=deferred,
                )

            def ended(_index: int, child: _Child) -> bool:
                _ended(child)
                return child.failed and not sup.received

            def relay() -> None:
                for child in children.values():
                    if child.code is None:
                        child.relay.poll()

            failed_at = n
            tasks = [functools.partial(_wait_for, children, i) for i in range(n)]
            for index, child in sup.pool(
                tasks,
                max(1, plan.jobs),
                order=start_order(plan),
                before=begin,
                failed=ended,
                idle=relay,
            ):
                if child.failed and not sup.received:
                    failed_at = min(failed_at, index)
            received = sup.received
            kept = sorted(
                (c for c in children.values() if c.index <= failed_at), key=lambda c: c.index
            )
            failed = failed_at < n and not received
            handed = _handed(kept, failed, received)
            parts = [c.part for c in kept if c.part is not None]
            status = (
                "aborted" if failed else "interrupted" if received or len(kept) < n else "complete"
            )
            if parts:
                try:
                    with os.fdopen(os.dup(target.fd), "wb") as dst:
                        joined = join(
                            parts,
                            dst,
                            status=status,
                            codec=plan.config.codec,
                            strings=protocol.run_strings(plan),
                            profiles={c.part: c.profile for c in kept if c.part is not None},
                        )
                except OSError as exc:  # the file is a descriptor here: name it
                    raise TraceIOError(
                        f"cannot write {str(target.part_path)!r}: {claim_mod.describe(exc)}"
                    ) from None
                if joined.parts:
                    at = claim_mod.place(target, empty_failure=False, aside=failed)[1]
                    published = True
                    if failed and handed is not None:
                        handed = dataclasses.replace(handed, kept=None if at is None else str(at))
            code = next((c.code for c in kept if c.code), 0) or 0
            return code, handed, received[0] if received else 0
        finally:
            for child in children.values():
                if child.group is not None:
                    child.group.end(0.0)
                with contextlib.suppress(AttributeError):
                    child.progress.close()
                shutil.rmtree(child.dump_dir, ignore_errors=True)
            if not published:
                claim_mod.discard(target)
            else:
                with contextlib.suppress(OSError):
                    os.close(target.fd)


def _wait_for(children: dict[int, _Child], index: int) -> _Child:
    child = children[index]
    assert child.proc is not None
    child.proc.wait()
    return child


def _ended(child: _Child) -> None:
    assert child.proc is not None
    child.code = child.proc.wait()
    child.relay.poll()
    child.handed = protocol.handed_back(child.dump_dir)
    if profiles_on():
        child.profile = child.folder.records(child.label)
    if child.handed is None:
        how, exit_code = child_ended(child.code)
        child.handed = ChildResult(
            error=f"scene '{child.label}': its child {how}; it handed back no results",
            exit_code=exit_code,
        )


def _handed(kept: list[_Child], failed: bool, received: list[int]) -> ChildResult | None:
    """The results joined in the run's order, or the first failed one's error."""
    if failed:
        return next(c.handed for c in kept if c.failed)
    runs = [c.handed.run for c in kept if c.handed is not None and c.handed.run is not None]
    if not runs:
        return None if received or not kept else kept[0].handed
    run = dataclasses.replace(runs[0], scenes=[scene for r in runs for scene in r.scenes])
    stopped = next((r for r in runs if r.status == "interrupted"), None)
    if stopped is not None or received:
        run.status = "interrupted"
        run.signal_name = (stopped.signal_name if stopped else "") or signal.Signals(
            received[0]
        ).name
    return ChildResult(run)


__all__ = ["run_counted", "scene_plan", "start_child", "start_order"]
